"""Tests for graceful.kubernetes.rules.delay: GC004 and GC006."""

from __future__ import annotations

from typing import Any

import pytest

from graceful.kubernetes import check_documents
from graceful.kubernetes.checker import ENDPOINT_PROPAGATION
from tests.kubernetes.helpers import codes_of, container, env, findings_in, pod


class TestShutdownDelay:
    """GC004: the delay ends before the readiness failure has reached every node."""

    def test_manifest(self) -> None:
        """Default probe timing needs 10 x 3 + 1 + 2 = 33s; 5s is GC004, an error, with the numbers."""
        (finding,) = findings_in("gc004-delay-too-short.yaml")
        assert (finding.code, finding.severity) == ("GC004", "error")
        assert "= 33s" in finding.message
        assert "for up to 28s" in finding.message
        assert "reach a closed socket" in finding.message
        assert "GRACEFUL_SHUTDOWN_DELAY=33" in finding.fix

    def test_exactly_enough(self) -> None:
        """A delay equal to the probe time plus propagation is enough."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}, "periodSeconds": 2, "failureThreshold": 3}
        values = env(GRACEFUL_SHUTDOWN_DELAY=str(2 * 3 + 1 + ENDPOINT_PROPAGATION))
        assert codes_of(pod(container(readinessProbe=probe, env=values))) == []

    def test_zero_probe_fields_are_defaults(self) -> None:
        """periodSeconds: 0 is defaulted to 10 by the API server, and counted so."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}, "periodSeconds": 0, "failureThreshold": 1}
        (finding,) = check_documents([pod(container(readinessProbe=probe))], "test")
        assert "periodSeconds 10 x failureThreshold 1" in finding.message

    def test_retry_after_mode(self) -> None:
        """With send_retry_after, late requests get 429 instead of a closed socket."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}}
        values = env(GRACEFUL_SHUTDOWN_DELAY="5", GRACEFUL_SEND_RETRY_AFTER="true")
        (finding,) = check_documents([pod(container(readinessProbe=probe, env=values))], "test")
        assert finding.code == "GC004"
        assert "get 429" in finding.message

    def test_pre_stop_sleep_counts(self) -> None:
        """A preStop sleep serves before SIGTERM, so it counts towards the delay (GC006 instead)."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}}
        hook = {"preStop": {"sleep": {"seconds": 30}}}
        found = codes_of(pod(container(readinessProbe=probe, lifecycle=hook), terminationGracePeriodSeconds=60))
        assert "GC004" not in found
        assert "GC006" in found

    def test_propagation_allowance(self) -> None:
        """A larger propagation allowance makes a delay that was enough too short."""
        doc = pod(container())
        assert check_documents([doc], "test", propagation=2.0) == []
        (finding,) = check_documents([doc], "test", propagation=3.0)
        assert finding.code == "GC004"
        assert "endpoint propagation 3s = 6s" in finding.message


class TestPreStopSleep:
    """GC006: a preStop sleep on top of graceful's own delay."""

    def test_manifest(self) -> None:
        """The GC006 manifest has exactly GC006, a warning, with both numbers."""
        (finding,) = findings_in("gc006-prestop-sleep.yaml")
        assert (finding.code, finding.severity) == ("GC006", "warning")
        assert "counted twice (10s)" in finding.message

    @pytest.mark.parametrize(
        ("pre_stop", "seconds"),
        [
            ({"sleep": {"seconds": 5}}, "5s"),
            ({"exec": {"command": ["/bin/sleep", "5"]}}, "5s"),
            ({"exec": {"command": ["sh", "-c", "echo bye; sleep 5s"]}}, "5s"),
            ({"exec": {"command": ["/bin/bash", "-ec", "sleep 0.5m && echo done"]}}, "30s"),
        ],
    )
    def test_sleep_forms(self, pre_stop: dict[str, Any], seconds: str) -> None:
        """The sleep action, a sleep command and a sleep in a shell script are all read, with units."""
        hook = {"preStop": pre_stop}
        doc = pod(container(lifecycle=hook), terminationGracePeriodSeconds=120)
        gc006 = [f for f in check_documents([doc], "test") if f.code == "GC006"]
        assert len(gc006) == 1
        assert f"preStop sleep {seconds} runs before SIGTERM" in gc006[0].message

    def test_no_delay_no_finding(self) -> None:
        """A preStop sleep with GRACEFUL_SHUTDOWN_DELAY=0 waits once: no GC006."""
        hook = {"preStop": {"sleep": {"seconds": 5}}}
        values = env(GRACEFUL_SHUTDOWN_DELAY="0", GRACEFUL_DRAIN_TIMEOUT="10", GRACEFUL_GRACE_PERIOD="25")
        assert codes_of(pod(container(lifecycle=hook, env=values))) == []

    def test_other_pre_stop_hooks(self) -> None:
        """A preStop hook that does not sleep is not a sleep."""
        hook = {"preStop": {"httpGet": {"path": "/drain", "port": 8000}}}
        assert codes_of(pod(container(lifecycle=hook))) == []
