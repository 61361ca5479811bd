"""Tests for graceful.kubernetes.rules.budget: GC005, GC009 and GC010."""

from __future__ import annotations

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import codes_of, container, env, findings_in, pod


class TestBudget:
    """GC005: the shutdown does not fit terminationGracePeriodSeconds."""

    def test_manifest(self) -> None:
        """Budget 26s > grace period 20: GC005 (error) with the sum, and GC010 (graceful assumes 30)."""
        findings = findings_in("gc005-budget-over-grace-period.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC005", "error"), ("GC010", "warning")]
        assert "= 26s > terminationGracePeriodSeconds 20" in findings[0].message
        assert "terminationGracePeriodSeconds: 26" in findings[0].fix

    def test_default_grace_period_is_30(self) -> None:
        """Without terminationGracePeriodSeconds the pod has 30s; a 31s budget is over it."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="5", GRACEFUL_DRAIN_TIMEOUT="20", GRACEFUL_GRACE_PERIOD="31")
        found = codes_of(pod(container(env=values)))
        assert found == ["GC005", "GC010"]

    def test_pre_stop_sleep_counts(self) -> None:
        """A preStop sleep is spent from the grace period before graceful starts."""
        hook = {"preStop": {"exec": {"command": ["sleep", "10"]}}}
        (budget, *_) = check_documents([pod(container(lifecycle=hook))], "test")
        assert budget.code == "GC005"
        assert budget.message.startswith("preStop sleep 10s + ")
        assert "= 36s > terminationGracePeriodSeconds 30" in budget.message


class TestGracefulBudget:
    """GC009: the budget is over graceful's own grace period, so it refuses to start."""

    def test_manifest(self) -> None:
        """51s > the default 30s: GC009 (error) with graceful's message, and GC010 (info)."""
        findings = findings_in("gc009-budget-over-graceful-grace-period.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC009", "error"), ("GC010", "info")]
        assert "graceful refuses to start: graceful shutdown does not fit" in findings[0].message
        assert findings[0].fix.startswith("set GRACEFUL_GRACE_PERIOD=51 ")

    def test_not_after_a_refused_value(self) -> None:
        """When a value is refused already, the budget is not reported too."""
        values = env(GRACEFUL_DRAIN_TIMEOUT="40", GRACEFUL_HOOK_TIMEOUT="-1")
        found = codes_of(pod(container(env=values), terminationGracePeriodSeconds=60))
        assert found == ["GC008", "GC010"]


class TestGracePeriodMismatch:
    """GC010: GRACEFUL_GRACE_PERIOD disagrees with the pod's grace period."""

    def test_manifest(self) -> None:
        """GRACEFUL_GRACE_PERIOD=60 over a 30s pod is GC010, a warning, with the fix."""
        (finding,) = findings_in("gc010-grace-period-mismatch.yaml")
        assert (finding.code, finding.severity) == ("GC010", "warning")
        assert "GRACEFUL_GRACE_PERIOD grace_period 60s > terminationGracePeriodSeconds 30" in finding.message
        assert finding.fix == "set GRACEFUL_GRACE_PERIOD=30"

    def test_smaller_is_info(self) -> None:
        """A GRACEFUL_GRACE_PERIOD under the pod's is GC010, info only."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="5", GRACEFUL_GRACE_PERIOD="30")
        (finding,) = check_documents([pod(container(env=values), terminationGracePeriodSeconds=45)], "test")
        assert (finding.code, finding.severity) == ("GC010", "info")

    def test_pre_stop_sleep_is_subtracted(self) -> None:
        """The time graceful has is the grace period minus the preStop sleep."""
        hook = {"preStop": {"sleep": {"seconds": 10}}}
        values = env(GRACEFUL_SHUTDOWN_DELAY="0", GRACEFUL_DRAIN_TIMEOUT="5", GRACEFUL_GRACE_PERIOD="30")
        (finding,) = check_documents(
            [pod(container(env=values, lifecycle=hook), terminationGracePeriodSeconds=30)], "test"
        )
        assert finding.code == "GC010"
        assert "- preStop sleep 10s = 20s" in finding.message
        assert finding.fix == "set GRACEFUL_GRACE_PERIOD=20"
