"""Tests for graceful.kubernetes.manifests: pod specs out of every kind, List and helm template output."""

from __future__ import annotations

from typing import Any

import pytest

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import container, findings_in, pod


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
