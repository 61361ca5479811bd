"""Tests for graceful.kubernetes.rules.sidecars: GC013 and GC014."""

from __future__ import annotations

from typing import Any

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import codes_of, container, env, findings_in, pod

ISTIO = "docker.io/istio/proxyv2:1.27.0"


def native(name: str = "istio-proxy", image: str = ISTIO, **fields: Any) -> dict[str, Any]:
    """Return a native sidecar: an init container with restartPolicy: Always."""
    return {"name": name, "image": image, "restartPolicy": "Always", **fields}


class TestNativeSidecars:
    """GC013: native sidecars stop after the app, with what is left of the grace period."""

    def test_manifest(self) -> None:
        """The GC013 manifest: 5s of Istio drain after a 26s budget in 30s is GC013 (and GC010), warnings."""
        findings = findings_in("gc013-native-sidecar.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC010", "warning"), ("GC013", "warning")]
        gc013 = findings[1]
        assert "need 5s (istio-proxy: Istio's default terminationDrainDuration 5s)" in gc013.message
        assert "the app may take 26s of terminationGracePeriodSeconds 30, leaving 4s" in gc013.message
        assert gc013.fix.startswith("set terminationGracePeriodSeconds: 31 and GRACEFUL_GRACE_PERIOD=26")
        assert "- native sidecars' drain (istio-proxy: Istio's default" in findings[0].message
        assert findings[0].fix == "set GRACEFUL_GRACE_PERIOD=25"

    def test_fits_manifest(self) -> None:
        """A grace period of budget + drain, and GRACEFUL_GRACE_PERIOD of the budget: no finding."""
        assert findings_in("gc013-native-sidecar-fits.yaml") == []

    def test_drains_add_up(self) -> None:
        """Native sidecars stop one at a time: their drains add up (a graceful sidecar's own budget counts)."""
        graceful_sidecar = native("metrics", "registry.example.com/metrics:1", env=env(GRACEFUL_DRAIN_TIMEOUT="2"))
        doc = pod(container(), initContainers=[native(), graceful_sidecar], terminationGracePeriodSeconds=40)
        (finding,) = [f for f in check_documents([doc], "test") if f.code == "GC013"]
        assert "need 18s (metrics: its own graceful budget 13s, istio-proxy: Istio's default" in finding.message

    def test_log_shipper_prestop_manifest(self) -> None:
        """A log shipper's 5s preStop sleep after an app budget of 26s in a 27s grace period is GC013 (KEP-753)."""
        findings = findings_in("gc013-log-shipper-prestop.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC010", "warning"), ("GC013", "warning")]
        gc013 = findings[1]
        assert "get their preStop and SIGTERM only after the app has exited" in gc013.message
        assert "need 5s (log-shipper: preStop sleep 5s)" in gc013.message
        assert "the app may take 26s of terminationGracePeriodSeconds 27, leaving 1s" in gc013.message
        assert gc013.fix.startswith("set terminationGracePeriodSeconds: 31 and GRACEFUL_GRACE_PERIOD=26")

    def test_prestop_sleep_adds_to_a_known_drain(self) -> None:
        """A native proxy's preStop sleep runs after the app too, before its own drain: both count."""
        sleeping = native(lifecycle={"preStop": {"sleep": {"seconds": 3}}})
        doc = pod(container(), initContainers=[sleeping], terminationGracePeriodSeconds=30)
        (finding,) = [f for f in check_documents([doc], "test") if f.code == "GC013"]
        assert "need 8s (istio-proxy: preStop sleep 3s, then Istio's default terminationDrainDuration 5s)" in (
            finding.message
        )

    def test_unknown_drain_is_not_counted(self) -> None:
        """A native sidecar whose drain the manifest does not show is not guessed at."""
        doc = pod(container(), initContainers=[native("log-shipper", "fluent/fluent-bit:3")])
        assert codes_of(doc) == []

    def test_plain_init_containers_are_not_sidecars(self) -> None:
        """An init container without restartPolicy: Always has finished before the app starts."""
        doc = pod(container(), initContainers=[{"name": "istio-init", "image": ISTIO}])
        assert codes_of(doc) == []

    def test_annotation_sets_the_drain(self) -> None:
        """proxy.istio.io/config on the pod template sets the native proxy's drain too."""
        doc = pod(container(), initContainers=[native()], terminationGracePeriodSeconds=60)
        doc["metadata"]["annotations"] = {"proxy.istio.io/config": "terminationDrainDuration: 40s"}
        (finding,) = [f for f in check_documents([doc], "test") if f.code == "GC013"]
        assert "terminationDrainDuration 40s from annotation proxy.istio.io/config" in finding.message


class TestProxySidecars:
    """GC014: a classic proxy sidecar stops carrying traffic while the app still serves or drains."""

    def test_manifest(self) -> None:
        """The GC014 manifest: Istio's default 5s < the app's 5s + 15s is GC014, an error, with the fix."""
        (finding,) = findings_in("gc014-istio-classic.yaml")
        assert (finding.code, finding.severity) == ("GC014", "error")
        assert "istio-proxy gets SIGTERM with the app and carries its traffic for 5s" in finding.message
        assert "shutdown_delay 5s + drain_timeout 15s = 20s" in finding.message
        assert "proxy.istio.io/config: '{terminationDrainDuration: 20s}'" in finding.fix

    def test_long_enough_manifest(self) -> None:
        """terminationDrainDuration 20s from the annotation covers the app's 20s: no finding."""
        assert findings_in("gc014-istio-drain-long-enough.yaml") == []

    def test_injected_env(self) -> None:
        """An injected proxy's TERMINATION_DRAIN_DURATION_SECONDS or PROXY_CONFIG sets its drain."""
        seconds = {"name": "istio-proxy", "image": ISTIO, "env": env(TERMINATION_DRAIN_DURATION_SECONDS="25")}
        assert codes_of(pod(container(), seconds)) == []
        config = {"name": "istio-proxy", "image": ISTIO, "env": env(PROXY_CONFIG='{"terminationDrainDuration":"1m"}')}
        assert codes_of(pod(container(), config)) == []
        short = {"name": "istio-proxy", "image": ISTIO, "env": env(PROXY_CONFIG='{"terminationDrainDuration":"9s"}')}
        (finding,) = check_documents([pod(container(), short)], "test")
        assert "terminationDrainDuration 9s from PROXY_CONFIG" in finding.message

    def test_unreadable_duration_is_the_default(self) -> None:
        """A duration that is not a Go duration leaves Istio's default of 5s."""
        proxy = {"name": "istio-proxy", "image": ISTIO}
        doc = pod(container(), proxy)
        doc["metadata"]["annotations"] = {"proxy.istio.io/config": "terminationDrainDuration: soon"}
        (finding,) = check_documents([doc], "test")
        assert "Istio's default terminationDrainDuration 5s" in finding.message

    def test_plain_envoy(self) -> None:
        """Envoy exits on SIGTERM without draining; a preStop sleep long enough keeps it up."""
        envoy = {"name": "proxy", "image": "envoyproxy/envoy:v1.31-latest"}
        (finding,) = check_documents([pod(container(), envoy)], "test")
        assert "proxy gets SIGTERM with the app and carries its traffic for 0s" in finding.message
        assert "give proxy a preStop sleep of 20s" in finding.fix
        envoy["lifecycle"] = {"preStop": {"sleep": {"seconds": 20}}}
        assert codes_of(pod(container(), envoy)) == []

    def test_registry_port_is_not_envoy(self) -> None:
        """A registry with a port is not read as a tag: registry.local:5000/envoy-app is Envoy, :5000/web is not."""
        assert codes_of(pod(container(), {"name": "side", "image": "registry.local:5000/web:1"})) == []
        assert codes_of(pod(container(), {"name": "side", "image": "registry.local:5000/envoy-app:1"})) == ["GC014"]

    def test_native_proxy_is_not_classic(self) -> None:
        """A proxy run as a native sidecar stops after the app: GC013's business, not GC014's."""
        doc = pod(container(), initContainers=[native()], terminationGracePeriodSeconds=31)
        assert "GC014" not in codes_of(doc)
