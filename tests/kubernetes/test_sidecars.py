"""Tests for graceful.kubernetes.sidecars: which containers are proxies, and how long sidecars drain."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from graceful.kubernetes.manifests import Container, Inventory, Workload
from graceful.kubernetes.sidecars import ISTIO_DRAIN, drain, is_envoy, is_istio, is_proxy, native_drains
from tests.kubernetes.helpers import container, env, pod


def workload(*containers: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any) -> Workload:
    """Return the workload of a pod with a graceful container first."""
    doc = pod(container(), *containers, **spec)
    if annotations:
        doc["metadata"]["annotations"] = annotations
    inventory = Inventory()
    inventory.add(doc, "test")
    (found,) = inventory.workloads
    return found


def seconds(sidecar: Container, found: Workload) -> float | None:
    """Return a sidecar's drain in seconds, ``None`` when unknown."""
    result = drain(sidecar, found)
    return None if result is None else result.seconds


def proxy_of(found: Workload) -> Container:
    """Return the pod's second container."""
    return found.containers[1]


class TestProxies:
    """Which containers carry the app's traffic."""

    @pytest.mark.parametrize(
        ("name", "image", "istio", "envoy"),
        [
            ("istio-proxy", "anything:1", True, False),
            ("sidecar", "docker.io/istio/proxyv2:1.27.0", True, False),
            ("sidecar", "gcr.io/istio-release/proxyv2:1.20.0-distroless", True, False),
            ("proxy", "envoyproxy/envoy:v1.31-latest", False, True),
            ("proxy", "docker.io/envoyproxy/envoy-distroless:v1.30.1", False, True),
            ("envoy", "registry.local/front:1", False, True),
            ("web", "registry.local:5000/web:1", False, False),
            ("web", "nginx@sha256:0123", False, False),
        ],
    )
    def test_detection(self, name: str, image: str, istio: bool, envoy: bool) -> None:
        """Istio by name or proxyv2 image, Envoy by image path or name; a registry port is not a tag."""
        found = proxy_of(workload({"name": name, "image": image}))
        assert (is_istio(found), is_envoy(found), is_proxy(found)) == (istio, envoy, istio or envoy)


class TestDrain:
    """How long a sidecar keeps working after its SIGTERM, and what says so."""

    ISTIO: ClassVar[dict[str, str]] = {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.27.0"}

    def test_istio_default(self) -> None:
        """Without configuration Istio drains for 5 s."""
        found = workload(self.ISTIO)
        result = drain(proxy_of(found), found)
        assert result is not None
        assert (result.seconds, result.why) == (ISTIO_DRAIN, "Istio's default terminationDrainDuration 5s")

    @pytest.mark.parametrize(
        ("config", "expected"),
        [
            ("terminationDrainDuration: 30s", 30.0),
            ('{"terminationDrainDuration": "1m30s"}', 90.0),
            ("terminationDrainDuration: 500ms", 0.5),
            ("terminationDrainDuration: 1h", 3600.0),
            ("terminationDrainDuration: '0'", 0.0),
            ("terminationDrainDuration: 0", ISTIO_DRAIN),  # a number, not a duration string
            ("terminationDrainDuration: soon", ISTIO_DRAIN),
            ("terminationDrainDuration: 30", ISTIO_DRAIN),  # a Go duration needs its unit
            ("holdApplicationUntilProxyStarts: true", ISTIO_DRAIN),
            ("[unclosed", ISTIO_DRAIN),
            ("a: &a [*a]", ISTIO_DRAIN),
        ],
    )
    def test_annotation(self, config: str, expected: float) -> None:
        """proxy.istio.io/config in YAML or JSON sets the drain; anything unreadable leaves the default."""
        found = workload(self.ISTIO, annotations={"proxy.istio.io/config": config})
        assert seconds(proxy_of(found), found) == expected

    def test_annotation_beats_injected_env(self) -> None:
        """The pod's annotation is what Istio reads first; the injected env comes after it."""
        proxy = {**self.ISTIO, "env": env(TERMINATION_DRAIN_DURATION_SECONDS="45")}
        found = workload(proxy, annotations={"proxy.istio.io/config": "terminationDrainDuration: 20s"})
        assert seconds(proxy_of(found), found) == 20.0
        found = workload(proxy)
        assert seconds(proxy_of(found), found) == 45.0

    def test_envoy_and_graceful_and_unknown(self) -> None:
        """Plain Envoy does not drain; a graceful sidecar takes its budget; others are unknown."""
        found = workload(
            {"name": "proxy", "image": "envoyproxy/envoy:v1"},
            {"name": "second", "image": "app:1", "env": env(GRACEFUL_DRAIN_TIMEOUT="3")},
            {"name": "logs", "image": "fluent/fluent-bit:3"},
        )
        envoy, second, logs = found.containers[1:]
        assert (seconds(envoy, found), seconds(second, found), seconds(logs, found)) == (0.0, 14.0, None)


class TestNativeDrains:
    """The native sidecars whose drain is known, in the order the kubelet stops them."""

    def test_reverse_start_order(self) -> None:
        """Sidecars stop in reverse order of start; unknown ones are left out."""
        sidecars = [
            {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1", "restartPolicy": "Always"},
            {"name": "logs", "image": "fluent/fluent-bit:3", "restartPolicy": "Always"},
            {"name": "envoy", "image": "envoyproxy/envoy:v1", "restartPolicy": "Always"},
            {"name": "migrate", "image": "app:1"},  # a plain init container: done before the app starts
        ]
        found = workload(initContainers=sidecars)
        assert [sidecar.name for sidecar in found.sidecars] == ["istio-proxy", "logs", "envoy"]
        assert [sidecar.name for sidecar, _ in native_drains(found)] == ["envoy", "istio-proxy"]
