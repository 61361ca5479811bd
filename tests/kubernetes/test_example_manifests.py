"""The examples in examples/kubernetes/ pass, and every manifest used here is valid Kubernetes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import EXAMPLES, KUBERNETES_VERSION, MANIFESTS, codes_in, run


class TestCleanManifests:
    """Manifests with every setting right have no finding."""

    def test_clean_manifest(self) -> None:
        """The clean test manifest has no finding."""
        assert codes_in("clean.yaml") == []

    def test_examples_have_no_finding(self) -> None:
        """Every manifest in examples/kubernetes/ has no finding at all, not even info."""
        for path in sorted(EXAMPLES.glob("*.yaml")):
            docs = yaml.safe_load_all(path.read_text(encoding="utf-8"))
            assert check_documents(docs, str(path)) == [], path

    def test_examples_exit_zero(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``graceful check examples/kubernetes/*.yaml`` exits 0 and checks one container."""
        paths = [str(path) for path in sorted(EXAMPLES.glob("*.yaml"))]
        status, out, err = run(capsys, *paths)
        assert (status, out) == (0, "")
        assert "1 container(s) checked: 0 error(s), 0 warning(s), 0 info" in err

    def test_example_budget_matches_grace_period(self) -> None:
        """The example's terminationGracePeriodSeconds equals its budget and GRACEFUL_GRACE_PERIOD."""
        (deployment,) = yaml.safe_load_all((EXAMPLES / "deployment.yaml").read_text(encoding="utf-8"))
        spec = deployment["spec"]["template"]["spec"]
        env = {item["name"]: item["value"] for item in spec["containers"][0]["env"]}
        values = {name: float(env[name]) for name in env if name != "GRACEFUL_HEALTH_BIND"}
        budget = (
            max(values["GRACEFUL_SHUTDOWN_DELAY"], values["GRACEFUL_HOOK_TIMEOUT"])
            + values["GRACEFUL_DRAIN_TIMEOUT"]
            + values["GRACEFUL_HOOK_TIMEOUT"]
            + 1
        )
        assert budget == spec["terminationGracePeriodSeconds"] == values["GRACEFUL_GRACE_PERIOD"]


def _resources(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the Kubernetes objects of a file, List items included."""
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            yield from doc["items"]
        elif isinstance(doc, dict):
            yield doc


class TestKubernetesSchemas:
    """Every manifest is valid Kubernetes, so the findings are about real objects."""

    @pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda path: path.name)
    def test_examples_validate(self, path: Path) -> None:
        """The examples pass kubernetes-validate's strict schemas (no unknown fields)."""
        resources = list(_resources(path))
        assert resources
        for resource in resources:
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)

    @pytest.mark.parametrize(
        "path",
        sorted(path for path in MANIFESTS.glob("*.yaml") if path.name != "invalid.yaml"),
        ids=lambda path: path.name,
    )
    def test_test_manifests_validate(self, path: Path) -> None:
        """The test manifests pass kubernetes-validate's strict schemas too."""
        for resource in _resources(path):
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)

    def test_schemas_catch_mistakes(self) -> None:
        """The validation is real: a misspelt probe field fails it."""
        (deployment,) = _resources(EXAMPLES / "deployment.yaml")
        deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 1
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
