"""Tests for graceful.kubernetes.manifests: pod specs out of every kind, List and helm template output."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from graceful.kubernetes import ManifestError, check_documents
from tests.kubernetes.helpers import container, deployment, findings_in, pod


class TestDocuments:
    """Reading pod specs out of every kind, List and helm template output."""

    def test_helm_template(self) -> None:
        """helm template output: separators, comments and empty documents; only GC003 in the StatefulSet."""
        (finding,) = findings_in("helm-template.yaml")
        assert (finding.code, finding.kind, finding.name, finding.container) == (
            "GC003",
            "StatefulSet",
            "release-web-worker",
            "worker",
        )

    def test_list(self) -> None:
        """kind: List items are checked, each under its own kind and name."""
        (finding,) = findings_in("list.yaml")
        assert (finding.code, finding.kind, finding.name, finding.container) == (
            "GC001",
            "Pod",
            "web-7d4b9",
            "web",
        )

    @pytest.mark.parametrize(
        ("kind", "path"),
        [
            ("Deployment", ("spec", "template", "spec")),
            ("StatefulSet", ("spec", "template", "spec")),
            ("DaemonSet", ("spec", "template", "spec")),
            ("Job", ("spec", "template", "spec")),
            ("CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
            ("PodTemplate", ("template", "spec")),
        ],
    )
    def test_pod_templates(self, kind: str, path: tuple[str, ...]) -> None:
        """The pod template of each workload kind is found."""
        spec: dict[str, Any] = {"containers": [container(readinessProbe=None)]}
        for key in reversed(path):
            spec = {key: spec}
        doc = {"kind": kind, "metadata": {"name": "w"}, **spec}
        finding, *others = check_documents([doc], "test")
        assert (finding.code, finding.kind) == ("GC001", kind)
        # A StatefulSet's replicas default to 1, which it cannot roll without a gap (GC015).
        assert [other.code for other in others] == (["GC015"] if kind == "StatefulSet" else [])

    def test_odd_documents_are_skipped(self) -> None:
        """None, scalars, lists, kinds without pods and malformed specs are skipped quietly."""
        docs: list[Any] = [
            None,
            "text",
            [1, 2],
            {"kind": "Service", "spec": {}},
            {"metadata": {}},
            {"kind": "Deployment", "spec": "oops"},
            {"kind": "Pod", "spec": {"containers": "oops"}},
            {"kind": "Pod", "spec": {"containers": ["oops", None]}},
        ]
        assert check_documents(docs, "test") == []

    def test_finding_fields(self) -> None:
        """A finding names its source, object and container; its line form has them all."""
        doc = pod(container(readinessProbe=None))
        del doc["metadata"]
        (finding,) = check_documents([doc], "deploy.yaml")
        assert (finding.source, finding.kind, finding.name, finding.container) == (
            "deploy.yaml",
            "Pod",
            "<unnamed>",
            "app",
        )
        assert finding.line().startswith("deploy.yaml: error GC001 Pod/<unnamed>[app]: no readinessProbe")
        assert "; fix: add readinessProbe" in finding.line()

    def test_findings_are_frozen(self) -> None:
        """A Finding cannot be changed."""
        (finding,) = check_documents([pod(container(readinessProbe=None))], "test")
        with pytest.raises(AttributeError):
            finding.code = "GC999"  # type: ignore[misc]


class TestNumbersKubernetesRefuses:
    """A number Kubernetes would refuse, where the checker needs it, is a ManifestError naming the field."""

    @pytest.mark.parametrize(
        ("changes", "field", "shown"),
        [
            ({"lifecycle": {"preStop": {"sleep": {"seconds": math.inf}}}}, "lifecycle.preStop.sleep.seconds", ".inf"),
            ({"lifecycle": {"preStop": {"sleep": {"seconds": math.nan}}}}, "lifecycle.preStop.sleep.seconds", ".nan"),
            ({"lifecycle": {"preStop": {"sleep": {"seconds": -40}}}}, "lifecycle.preStop.sleep.seconds", "-40"),
            (
                {"lifecycle": {"preStop": {"sleep": {"seconds": 2**63}}}},
                "lifecycle.preStop.sleep.seconds",
                "9223372036854775808",
            ),
            ({"lifecycle": {"preStop": {"sleep": {"seconds": 5.5}}}}, "lifecycle.preStop.sleep.seconds", "5.5"),
            ({"lifecycle": {"preStop": {"sleep": {"seconds": "30"}}}}, "lifecycle.preStop.sleep.seconds", "'30'"),
            (
                {"lifecycle": {"preStop": {"exec": {"command": ["sleep", "9" * 400]}}}},
                "lifecycle.preStop.exec.command",
                "'sleep 9999999999999…(408 characters)",
            ),
            (
                {"readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": -1}},
                "readinessProbe.periodSeconds",
                "-1",
            ),
            (
                {"livenessProbe": {"tcpSocket": {"port": 8000}, "failureThreshold": 2**31}},
                "livenessProbe.failureThreshold",
                "2147483648",
            ),
            ({"readinessProbe": {"httpGet": {"path": "/readyz", "port": 0}}}, "readinessProbe.httpGet.port", "0"),
            ({"ports": [{"name": "http", "containerPort": 70000}]}, "ports[0].containerPort", "70000"),
            ({"env": [{"name": "GRACEFUL_SHUTDOWN_DELAY", "value": ["5"]}]}, "env[0].value", "a list"),
            ({"args": [{"workers": 4}]}, "args[0]", "a mapping"),
        ],
    )
    def test_container_fields(self, changes: dict[str, Any], field: str, shown: str) -> None:
        """Each out-of-range container field is refused, naming the object, the field path and the value."""
        with pytest.raises(ManifestError) as raised:
            check_documents([pod(container(**changes))], "test")
        message = str(raised.value)
        assert message.startswith(f"Pod/web: spec.containers[app].{field} is {shown}")
        assert "outside what Kubernetes accepts" in message

    @pytest.mark.parametrize(
        ("spec", "field"),
        [
            ({"terminationGracePeriodSeconds": -1}, "spec.template.spec.terminationGracePeriodSeconds"),
            ({"terminationGracePeriodSeconds": math.inf}, "spec.template.spec.terminationGracePeriodSeconds"),
            ({"replicas": -1}, "spec.replicas"),
            (
                {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "lots"}}},
                "spec.strategy.rollingUpdate.maxSurge",
            ),
        ],
    )
    def test_workload_fields(self, spec: dict[str, Any], field: str) -> None:
        """Out-of-range workload fields are refused too; the grace period is read in the pod template."""
        doc = deployment(container())
        if "terminationGracePeriodSeconds" in spec:
            doc["spec"]["template"]["spec"].update(spec)
        else:
            doc["spec"].update(spec)
        with pytest.raises(ManifestError, match=rf"^Deployment/web: {re.escape(field)} is "):
            check_documents([doc], "test")

    def test_whole_floats_are_accepted(self) -> None:
        """30.0 is a whole number, as kubectl's YAML to JSON conversion makes it: accepted."""
        doc = pod(container(), terminationGracePeriodSeconds=30.0)
        assert check_documents([doc], "test") == []

    def test_only_fields_the_rules_read(self) -> None:
        """A bad number in a field no rule reads (a ConfigMap, a resource limit) is not the checker's business."""
        config_map = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": math.inf}}
        odd = container(resources={"limits": {"cpu": -1}})
        assert check_documents([config_map, pod(odd)], "test") == []
