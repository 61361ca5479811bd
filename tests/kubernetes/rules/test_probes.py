"""Tests for graceful.kubernetes.rules.probes: GC001-GC003 and GC016."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from graceful.kubernetes import Finding, check_documents
from tests.kubernetes.helpers import CLEAN_CONTAINER, codes_of, container, env, findings_in, pod


class TestNoReadinessProbe:
    """GC001: a graceful container without a readiness probe."""

    def test_manifest(self) -> None:
        """The GC001 manifest has exactly GC001, an error."""
        findings = findings_in("gc001-no-readiness-probe.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC001", "error")]

    def test_message_says_what_is_lost(self) -> None:
        """GC001 says a new pod gets requests before it listens; the fix is a fast /readyz probe."""
        (finding,) = check_documents([pod(container(readinessProbe=None))], "test")
        assert "a new pod gets requests as soon as its container starts, before the server listens" in finding.message
        assert finding.fix.startswith("add readinessProbe: {httpGet: {path: /readyz, port: <port>}, periodSeconds: 1")

    def test_fix_names_the_health_port(self) -> None:
        """With GRACEFUL_HEALTH_BIND, the fix probes the health port."""
        doc = pod(container(readinessProbe=None, env=env(GRACEFUL_HEALTH_BIND="0.0.0.0:9000")))
        (finding,) = [f for f in check_documents([doc], "test") if f.code == "GC001"]
        assert "port: 9000}" in finding.fix

    def test_delay_is_checked_without_a_probe(self) -> None:
        """In-cluster the delay does not depend on the probe: 5s is enough (GC001 alone), 1s is GC004 too."""
        assert codes_of(pod(container(readinessProbe=None))) == ["GC001"]
        values = env(GRACEFUL_SHUTDOWN_DELAY="1")
        assert codes_of(pod(container(readinessProbe=None, env=values))) == ["GC001", "GC004"]


class TestReadinessProbeNotOnReadyz:
    """GC002: a readiness probe that keeps passing during shutdown."""

    def test_manifest_other_path(self) -> None:
        """A readiness probe on /healthz is GC002, a warning naming the path."""
        (finding,) = findings_in("gc002-readiness-path.yaml")
        assert (finding.code, finding.severity) == ("GC002", "warning")
        assert "/healthz" in finding.message

    def test_warning_alone(self) -> None:
        """A probe on another path with Kubernetes' default timing is a warning only: no GC004 follows from it."""
        probe = {"httpGet": {"path": "/healthz", "port": 8000}}
        (finding,) = check_documents([pod(container(readinessProbe=probe))], "test")
        assert (finding.code, finding.severity) == ("GC002", "warning")
        assert "a deleted pod still leaves its Services" in finding.message

    def test_manifest_tcp_socket(self) -> None:
        """A tcpSocket readiness probe is GC002, naming the probe type."""
        (finding,) = findings_in("gc002-readiness-tcp.yaml")
        assert finding.code == "GC002"
        assert "tcpSocket" in finding.message

    def test_exec_probe(self) -> None:
        """An exec readiness probe is GC002."""
        probe = {"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 2}
        assert codes_of(pod(container(readinessProbe=probe))) == ["GC002"]

    @pytest.mark.parametrize(
        "command",
        [
            ["graceful", "probe", "readyz"],
            ["python", "-m", "graceful", "probe", "readyz", "--timeout", "1"],
            ["/usr/local/bin/graceful", "probe", "readyz"],
            ["sh", "-c", "graceful probe readyz --address 127.0.0.1:9000"],
        ],
    )
    def test_graceful_probe_readyz_is_a_readyz_probe(self, command: list[str]) -> None:
        """An exec probe running `graceful probe readyz` asks /readyz on the health port: no GC002."""
        probe = {"exec": {"command": command}, "periodSeconds": 1, "failureThreshold": 2, "timeoutSeconds": 2}
        assert codes_of(pod(container(readinessProbe=probe))) == []

    def test_graceful_probe_livez_for_readiness_is_gc002(self) -> None:
        """`graceful probe livez` as the readiness probe keeps passing during the shutdown: GC002 names /livez."""
        probe = {"exec": {"command": ["graceful", "probe", "livez"]}, "periodSeconds": 1, "failureThreshold": 2}
        [finding] = check_documents([pod(container(readinessProbe=probe))], "test")
        assert finding.code == "GC002" and "on /livez, not /readyz" in finding.message

    def test_excluding_the_shutdown_check(self) -> None:
        """/readyz?exclude=shutdown never fails on shutdown: GC002."""
        probe = copy.deepcopy(CLEAN_CONTAINER["readinessProbe"])
        probe["httpGet"]["path"] = "/readyz?exclude=shutdown"
        assert codes_of(pod(container(readinessProbe=probe))) == ["GC002"]

    @pytest.mark.parametrize("path", ["/readyz", "/readyz?verbose", "/readyz/shutdown", "/readyz/"])
    def test_readyz_variants_pass(self, path: str) -> None:
        """Paths that fail on shutdown (/readyz, ?verbose, /readyz/shutdown) are fine."""
        probe = copy.deepcopy(CLEAN_CONTAINER["readinessProbe"])
        probe["httpGet"]["path"] = path
        assert codes_of(pod(container(readinessProbe=probe))) == []

    def test_missing_path_is_root(self) -> None:
        """An httpGet probe without a path probes / (Kubernetes' default): GC002."""
        probe = copy.deepcopy(CLEAN_CONTAINER["readinessProbe"])
        del probe["httpGet"]["path"]
        (finding,) = check_documents([pod(container(readinessProbe=probe))], "test")
        assert finding.code == "GC002"
        assert "on /," in finding.message


class TestLivenessOnReadyz:
    """GC003: a liveness probe on /readyz restarts the container mid-drain."""

    def test_graceful_probe_readyz_as_liveness(self) -> None:
        """An exec liveness probe running `graceful probe readyz` fails for the whole shutdown: GC003."""
        probe = {"exec": {"command": ["graceful", "probe", "readyz"]}, "periodSeconds": 5, "failureThreshold": 3}
        assert "GC003" in codes_of(pod(container(livenessProbe=probe)))

    def test_manifest(self) -> None:
        """The GC003 manifest has exactly GC003, an error, with the probe's timing."""
        (finding,) = findings_in("gc003-liveness-on-readyz.yaml")
        assert (finding.code, finding.severity) == ("GC003", "error")
        assert "periodSeconds 10 x failureThreshold 3 = 30s" in finding.message

    def test_no_liveness_probe(self) -> None:
        """No liveness probe at all is fine."""
        assert codes_of(pod(container(livenessProbe=None))) == []

    def test_liveness_on_readyz_subpath(self) -> None:
        """/readyz/shutdown fails on shutdown too: GC003."""
        probe = {"httpGet": {"path": "/readyz/shutdown", "port": 8000}}
        assert codes_of(pod(container(livenessProbe=probe))) == ["GC003"]


class TestHealthPortProbes:
    """GC016: GRACEFUL_HEALTH_BIND is set but a probe still goes to the app's port.

    Until graceful itself knows GRACEFUL_HEALTH_BIND (the health port issue), it is
    also refused as an unknown setting (GC008); these tests look at GC016 alone.
    """

    @staticmethod
    def _gc016(*docs: Any) -> list[Finding]:
        """Return the GC016 findings of some documents."""
        return [finding for finding in check_documents(docs, "test") if finding.code == "GC016"]

    def test_manifest(self) -> None:
        """Both probes on the app's port (by name) are one GC016 each, warnings with the fix."""
        readiness, liveness = [f for f in findings_in("gc016-health-port.yaml") if f.code == "GC016"]
        assert (readiness.severity, liveness.severity) == ("warning", "warning")
        assert "answers probes on port 9000, but the readinessProbe is on port 8000 (http)" in readiness.message
        assert readiness.fix == "set readinessProbe.httpGet.port: 9000"
        assert "restarts a container that was only busy" in liveness.message

    def test_probes_on_the_health_port_manifest(self) -> None:
        """Probes on the health port, by name: no GC016."""
        assert [f for f in findings_in("gc016-probes-on-health-port.yaml") if f.code == "GC016"] == []

    @pytest.mark.parametrize("bind", ["9000", ":9000", "0.0.0.0:9000", "[::]:9000"])
    def test_bind_forms(self, bind: str) -> None:
        """host:port, :port, [::]:port and a bare port are all read as port 9000."""
        (finding, _) = self._gc016(pod(container(env=env(GRACEFUL_HEALTH_BIND=bind))))
        assert "answers probes on port 9000, but the readinessProbe is on port 8000" in finding.message

    def test_probe_by_number_on_the_health_port(self) -> None:
        """Probes on the health port by number: no GC016."""
        probe = {"httpGet": {"path": "/readyz", "port": 9000}}
        doc = pod(container(env=env(GRACEFUL_HEALTH_BIND=":9000"), readinessProbe=probe, livenessProbe=None))
        assert self._gc016(doc) == []

    def test_unknown_port_name_is_not_guessed(self) -> None:
        """A probe port name that no containerPort defines cannot be compared: no GC016."""
        probe = {"httpGet": {"path": "/readyz", "port": "web"}}
        doc = pod(container(env=env(GRACEFUL_HEALTH_BIND=":9000"), readinessProbe=probe, livenessProbe=None))
        assert self._gc016(doc) == []

    def test_without_health_bind(self) -> None:
        """Without GRACEFUL_HEALTH_BIND there is no health port to use: no GC016."""
        assert codes_of(pod(container())) == []
