"""Tests for graceful.kubernetes.rules.probes: GC001-GC003."""

from __future__ import annotations

import copy

import pytest

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import CLEAN_CONTAINER, codes_of, container, findings_in, pod


class TestNoReadinessProbe:
    """GC001: a graceful container without a readiness probe."""

    def test_manifest(self) -> None:
        """The GC001 manifest has exactly GC001, an error."""
        findings = findings_in("gc001-no-readiness-probe.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC001", "error")]

    def test_no_delay_finding_without_a_probe(self) -> None:
        """Without a probe to size it from, the delay is not reported too (GC004)."""
        assert codes_of(pod(container(readinessProbe=None))) == ["GC001"]


class TestReadinessProbeNotOnReadyz:
    """GC002: a readiness probe that keeps passing during shutdown."""

    def test_manifest_other_path(self) -> None:
        """A readiness probe on /healthz is GC002, a warning naming the path."""
        (finding,) = findings_in("gc002-readiness-path.yaml")
        assert (finding.code, finding.severity) == ("GC002", "warning")
        assert "/healthz" in finding.message

    def test_manifest_tcp_socket(self) -> None:
        """A tcpSocket readiness probe is GC002, naming the probe type."""
        (finding,) = findings_in("gc002-readiness-tcp.yaml")
        assert finding.code == "GC002"
        assert "tcpSocket" in finding.message

    def test_exec_probe(self) -> None:
        """An exec readiness probe is GC002."""
        probe = {"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 2}
        assert codes_of(pod(container(readinessProbe=probe))) == ["GC002"]

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
