"""Helpers for the checker's tests: a clean container to vary, pods, and the manifests under manifests/."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from graceful.kubernetes import Finding, check_documents
from graceful.kubernetes.command import main

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = Path(__file__).resolve().parent / "manifests"
EXAMPLES = ROOT / "examples" / "kubernetes"
#: The newest Kubernetes whose schemas the manifests must pass: the preStop sleep action is GA
#: there, and lifecycle.stopSignal (GC012) is in its schema.
KUBERNETES_VERSION = "1.34"

CLEAN_CONTAINER: dict[str, Any] = {
    "name": "app",
    "image": "registry.example.com/app:1.0",
    "command": ["gunicorn", "-c", "python:graceful.conf", "--bind", "0.0.0.0:8000", "app:app"],
    "env": [{"name": "GRACEFUL_SHUTDOWN_DELAY", "value": "5"}],
    "readinessProbe": {
        "httpGet": {"path": "/readyz", "port": 8000},
        "periodSeconds": 1,
        "failureThreshold": 2,
        "timeoutSeconds": 1,
    },
    "livenessProbe": {"httpGet": {"path": "/livez", "port": 8000}},
}


def container(**changes: Any) -> dict[str, Any]:
    """Return a copy of the clean container with some fields replaced (``None`` removes one)."""
    result = copy.deepcopy(CLEAN_CONTAINER)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """Return a Pod named web, labelled app: web, holding the containers, with extra pod spec fields."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"containers": list(containers), **spec},
    }


def deployment(*containers: dict[str, Any], replicas: int | None = 2, **spec: Any) -> dict[str, Any]:
    """Return a Deployment named web of pods labelled app: web, with extra Deployment spec fields."""
    result: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": list(containers)}},
            **spec,
        },
    }
    if replicas is not None:
        result["spec"]["replicas"] = replicas
    return result


def service(name: str = "web", *, selector: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    """Return a Service selecting app: web (or ``selector``), with annotations given as keyword pairs."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "annotations": dict(annotations)},
        "spec": {"selector": {"app": "web"} if selector is None else selector, "ports": [{"port": 80}]},
    }


def ingress(service_name: str = "web", *, class_name: str | None = None, **annotations: str) -> dict[str, Any]:
    """Return an Ingress whose one rule routes to a Service, with a class and annotations."""
    backend = {"service": {"name": service_name, "port": {"number": 80}}}
    spec: dict[str, Any] = {"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]}
    if class_name is not None:
        spec["ingressClassName"] = class_name
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "web", "annotations": dict(annotations)},
        "spec": spec,
    }


def env(**values: str) -> list[dict[str, str]]:
    """Return an env list from keyword arguments."""
    return [{"name": name, "value": value} for name, value in values.items()]


def codes_of(*docs: Any, traffic: str | None = None) -> list[str]:
    """Return the codes found in some parsed documents, in order."""
    return [finding.code for finding in check_documents(docs, "test", traffic=traffic)]


def findings_in(name: str, *, traffic: str | None = None) -> list[Finding]:
    """Return the findings of a manifest under tests/kubernetes/manifests/."""
    path = MANIFESTS / name
    return check_documents(yaml.safe_load_all(path.read_text(encoding="utf-8")), str(path), traffic=traffic)


def codes_in(name: str) -> list[str]:
    """Return the codes found in a manifest under tests/kubernetes/manifests/."""
    return [finding.code for finding in findings_in(name)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``main`` and return its exit status, standard output and standard error."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


class Terminal(io.StringIO):
    """Standard input that claims to be a terminal."""

    def isatty(self) -> bool:
        """Say yes, like an interactive shell's standard input."""
        return True
