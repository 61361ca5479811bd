"""Tests for graceful.kubernetes.checker: the rules over an inventory, and random documents that never crash it."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import hypothesis
import yaml
from hypothesis import strategies as st

from graceful.kubernetes import ManifestError, check_documents
from graceful.kubernetes.command import main
from tests.kubernetes.helpers import codes_of, container, deployment, env, pod, service

#: Field names of the objects the checker reads, so that random documents reach its rules.
_KEYS = [
    "kind", "metadata", "name", "namespace", "labels", "annotations", "spec", "template", "jobTemplate",
    "containers", "initContainers", "restartPolicy", "image", "command", "args", "env", "value", "valueFrom",
    "envFrom", "configMapRef", "ports", "containerPort", "readinessProbe", "livenessProbe", "httpGet", "path",
    "port", "tcpSocket", "exec", "periodSeconds", "failureThreshold", "timeoutSeconds", "lifecycle", "preStop",
    "sleep", "seconds", "stopSignal", "terminationGracePeriodSeconds", "replicas", "strategy", "updateStrategy",
    "type", "rollingUpdate", "maxSurge", "maxUnavailable", "selector", "items", "rules", "http", "paths",
    "backend", "service", "defaultBackend", "ingressClassName", "serviceRef", "targetType", "scaleTargetRef",
    "minReplicas", "<<",
]  # fmt: skip
_KINDS = [
    "Pod", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "PodTemplate", "List", "DeploymentList",
    "Service", "Ingress", "TargetGroupBinding", "HorizontalPodAutoscaler", "ConfigMap",
]  # fmt: skip
_WORDS = [
    "gunicorn", "-c", "python:graceful.conf", "sh", "-c", "exec gunicorn app:app", "sleep", "5", "5s", "SIGINT",
    "SIGTERM", "Always", "Recreate", "25%", "ip", "nlb-ip", "alb", "gce", "/readyz", "/livez", "http",
    "istio-proxy", "docker.io/istio/proxyv2:1.27.0", "envoyproxy/envoy:v1", "GRACEFUL_SHUTDOWN_DELAY",
    "GRACEFUL_DRAIN_TIMEOUT", "GRACEFUL_HEALTH_BIND", "GRACEFUL_GRACE_PERIOD", "TERMINATION_DRAIN_DURATION_SECONDS",
    "PROXY_CONFIG", '{"terminationDrainDuration": "9s"}', "terminationDrainDuration: 1h", '{"ingress": true}',
    "0.0.0.0:9000", "$(DELAY)", "1e308", "-1", "inf", "nan", "",
]  # fmt: skip

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(_WORDS + _KINDS),
    st.text(max_size=8),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(_KEYS), children, max_size=5),
    ),
    max_leaves=12,
)
#: A container that runs graceful, with random values in the fields the rules read.
_CONTAINER = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["app", "istio-proxy", "envoy"]),
        "command": st.just(["gunicorn", "-c", "python:graceful.conf"]),
    },
    optional={
        key: _VALUES
        for key in ("env", "ports", "readinessProbe", "livenessProbe", "lifecycle", "image", "args", "restartPolicy")
    },
)
_ENV_ENTRY = st.fixed_dictionaries({"name": st.sampled_from(_WORDS[24:32]), "value": _SCALARS})


def _workload(containers: list[Any], sidecars: list[Any], extra: dict[str, Any], kind: str) -> dict[str, Any]:
    """Return a workload of the given kind with the containers and random extra spec fields."""
    pod_spec: dict[str, Any] = {"containers": containers, "initContainers": sidecars, **extra}
    if kind == "Pod":
        return {"kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}}, "spec": pod_spec}
    template = {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec}
    return {"kind": kind, "metadata": {"name": "web"}, "spec": {"template": template, **extra}}


_WORKLOADS = st.builds(
    _workload,
    st.lists(
        st.one_of(_CONTAINER, st.builds(lambda c, e: {**c, "env": e}, _CONTAINER, st.lists(_ENV_ENTRY, max_size=4))),
        min_size=1,
        max_size=3,
    ),
    st.lists(_CONTAINER, max_size=2),
    st.dictionaries(
        st.sampled_from(["terminationGracePeriodSeconds", "replicas", "strategy", "os"]), _VALUES, max_size=3
    ),
    st.sampled_from(["Pod", "Deployment", "StatefulSet"]),
)
_DOCUMENTS = st.lists(
    st.one_of(
        _WORKLOADS,
        st.builds(
            lambda kind, rest: {"kind": kind, **rest},
            st.sampled_from(_KINDS),
            st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=5),
        ),
        _VALUES,
    ),
    max_size=4,
)


class TestCheck:
    """The rules run over everything the inputs hold, in input order."""

    def test_counts_every_graceful_container(self) -> None:
        """Two graceful containers in one pod are two subjects; a plain one is none."""
        plain = {"name": "sidecar", "image": "busybox", "command": ["sleep", "1d"]}
        doc = pod(container(readinessProbe=None), container(name="second", readinessProbe=None), plain)
        assert [f.container for f in check_documents([doc], "test")] == ["app", "second"]

    def test_service_in_another_document(self) -> None:
        """A Service after the workload still decides where its traffic comes from."""
        nlb = service(**{"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip"})
        assert codes_of(deployment(container()), nlb) == ["GC004"]
        assert codes_of(nlb, deployment(container())) == ["GC004"]

    def test_same_env_validated_once_but_reported_each_time(self) -> None:
        """Identical containers share their validated settings, and each still gets its own finding."""
        bad = container(env=env(GRACEFUL_DRAIN_TIMEOUT="soon"))
        docs = [pod(bad), deployment(bad)]
        assert [(f.kind, f.code) for f in check_documents(docs, "test")] == [("Pod", "GC008"), ("Deployment", "GC008")]


class TestRandomDocuments:
    """Random nested documents never crash the checker: findings, a ManifestError, or exit 0, 1 or 2."""

    @hypothesis.settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large],
    )
    @hypothesis.given(_DOCUMENTS)
    def test_check_documents(self, docs: list[Any]) -> None:
        """check_documents returns findings with every field a string, or raises ManifestError alone."""
        try:
            findings = check_documents(docs, "random")
        except ManifestError as exc:
            assert "outside what Kubernetes accepts" in str(exc)
            assert "\n" not in str(exc)
            return
        for finding in findings:
            assert finding.severity in ("error", "warning", "info")
            assert "\n" not in finding.line()

    @hypothesis.settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[
            hypothesis.HealthCheck.too_slow,
            hypothesis.HealthCheck.data_too_large,
            hypothesis.HealthCheck.function_scoped_fixture,  # tmp_path: each example overwrites one file
        ],
    )
    @hypothesis.given(docs=_DOCUMENTS)
    def test_command(self, tmp_path: Path, docs: list[Any]) -> None:
        """The same documents written as YAML: graceful check exits 0, 1 or 2 with one line on standard error."""
        path = tmp_path / "random.yaml"
        path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main([str(path)])
        assert status in (0, 1, 2)
        (line,) = err.getvalue().splitlines()
        assert line.startswith("graceful check: ")
        if status == 2:
            assert out.getvalue() == ""
            assert line.startswith(f"graceful check: {path}: ")

    def test_strategy_reaches_the_rules(self) -> None:
        """The strategy is not vacuous: it builds workloads that the rules find errors in."""
        found = hypothesis.find(
            _WORKLOADS,
            lambda doc: _errors(doc) > 0,
            settings=hypothesis.settings(max_examples=500, database=None),
        )
        assert _errors(found) > 0


def _errors(doc: Any) -> int:
    """Return how many error findings a document has (0 when it is refused)."""
    try:
        return sum(f.severity == "error" for f in check_documents([doc], "random"))
    except ManifestError:
        return 0
