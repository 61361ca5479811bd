"""Tests for graceful.kubernetes.rules.delay's GC017: the adaptive delay's floor against each traffic source."""

from __future__ import annotations

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import codes_of, container, env, findings_in, pod, service


def adaptive(**values: str) -> dict[str, object]:
    """The clean container with an adaptive delay (a 10 s maximum and the budget's grace period to fit)."""
    return container(env=env(GRACEFUL_SHUTDOWN_DELAY="10", GRACEFUL_GRACE_PERIOD="31", **values))


class TestAdaptiveFloor:
    """GC017: the floor must outlast what the pod cannot observe, per traffic source."""

    def test_manifest(self) -> None:
        """Behind kube-proxy a 0.5s floor is GC017, a warning, advising 2s."""
        (finding,) = findings_in("gc017-adaptive-floor.yaml")
        assert (finding.code, finding.severity) == ("GC017", "warning")
        assert finding.message.startswith("shutdown_delay_min 0.5s < 2s: in-cluster routing (Service/gc017")
        assert "acts on the deletion up to 2s after it (kube-proxy's 1 s minSyncPeriod" in finding.message
        assert "longer than the derived quiet period before then ends the adaptive delay early" in finding.message
        assert finding.fix == "set GRACEFUL_SHUTDOWN_DELAY_MIN=2"

    def test_in_cluster_floor_that_covers(self) -> None:
        """A 2s floor in-cluster has no finding."""
        doc = pod(adaptive(GRACEFUL_SHUTDOWN_DELAY_MIN="2"), terminationGracePeriodSeconds=31)
        assert codes_of(doc) == []

    def test_fixed_delay_is_not_judged(self) -> None:
        """Without GRACEFUL_SHUTDOWN_DELAY_MIN there is no floor to advise on."""
        assert codes_of(pod(container())) == []

    def test_probing_balancer_needs_its_detection_time(self) -> None:
        """A balancer that probes /readyz acts only after its check fails: the floor must cover that."""
        values = adaptive(GRACEFUL_SHUTDOWN_DELAY_MIN="1", GRACEFUL_QUIET_PERIOD="0.5")
        docs = [pod(values, terminationGracePeriodSeconds=31)]
        (finding,) = [f for f in check_documents(docs, "test", traffic="probe") if f.code == "GC017"]
        assert finding.severity == "warning"
        assert "shutdown_delay_min 1s < 5s: a balancer that probes /readyz itself" in finding.message
        assert "longer than quiet_period 0.5s" in finding.message
        assert finding.fix == "set GRACEFUL_SHUTDOWN_DELAY_MIN=5"

    def test_cloud_balancer_is_information(self) -> None:
        """Behind an NLB in IP mode the pod cannot know when it stops: an info finding on the traffic's pauses."""
        values = container(
            env=env(GRACEFUL_SHUTDOWN_DELAY="120", GRACEFUL_SHUTDOWN_DELAY_MIN="2", GRACEFUL_GRACE_PERIOD="141")
        )
        nlb = service(**{"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip"})
        docs = [pod(values, terminationGracePeriodSeconds=141), nlb]
        (finding,) = [f for f in check_documents(docs, "test") if f.code == "GC017"]
        assert finding.severity == "info"
        assert "shutdown_delay_min 2s < 120s: an AWS load balancer targets the pod IP" in finding.message
        assert "on a schedule the pod cannot see" in finding.message
        assert "GRACEFUL_SHUTDOWN_DELAY_MIN=120, or GRACEFUL_QUIET_PERIOD above" in finding.fix

    def test_measured_propagation_is_the_floor(self) -> None:
        """--propagation gives the bound for any source."""
        docs = [pod(adaptive(GRACEFUL_SHUTDOWN_DELAY_MIN="2"), terminationGracePeriodSeconds=31)]
        (finding,) = [f for f in check_documents(docs, "test", propagation=3) if f.code == "GC017"]
        assert "shutdown_delay_min 2s < 3s" in finding.message


class TestAdaptiveSettings:
    """graceful check reads the adaptive settings together, as graceful does at start-up."""

    def test_floor_with_its_maximum_in_the_same_container(self) -> None:
        """A floor above graceful's default delay but under the container's own maximum is accepted."""
        doc = pod(adaptive(GRACEFUL_SHUTDOWN_DELAY_MIN="8"), terminationGracePeriodSeconds=31)
        assert codes_of(doc) == []

    def test_floor_above_the_maximum_is_refused(self) -> None:
        """A floor above the maximum is GC008, naming both, as graceful's start-up refusal would."""
        doc = pod(adaptive(GRACEFUL_SHUTDOWN_DELAY_MIN="12"), terminationGracePeriodSeconds=31)
        (finding,) = [f for f in check_documents([doc], "test") if f.code == "GC008"]
        assert "GRACEFUL_SHUTDOWN_DELAY_MIN=12 is not allowed: expected at most GRACEFUL_SHUTDOWN_DELAY (10)" in (
            finding.message
        )

    def test_quiet_period_without_a_floor_is_refused(self) -> None:
        """A quiet period without a floor is GC008: graceful would refuse to start."""
        doc = pod(adaptive(GRACEFUL_QUIET_PERIOD="2"), terminationGracePeriodSeconds=31)
        (finding,) = [f for f in check_documents([doc], "test") if f.code == "GC008"]
        assert "GRACEFUL_QUIET_PERIOD=2 is not allowed without GRACEFUL_SHUTDOWN_DELAY_MIN" in finding.message
