"""Tests for graceful.kubernetes.rules.delay: GC004 and GC006."""

from __future__ import annotations

from typing import Any

import pytest

from graceful.kubernetes import check_documents
from graceful.kubernetes.traffic import ALLOWANCES, PROBE
from tests.kubernetes.helpers import codes_of, container, env, findings_in, ingress, pod, service


class TestShutdownDelay:
    """GC004: the delay ends while new requests can still arrive, whatever case the traffic is."""

    def test_manifest(self) -> None:
        """In-cluster (no Service says otherwise) needs 5s; a 2s delay is GC004, an error, with the figures."""
        (finding,) = findings_in("gc004-delay-too-short.yaml")
        assert (finding.code, finding.severity) == ("GC004", "error")
        assert finding.message.startswith("shutdown_delay 2s < 5s: in-cluster routing (no Service in the input")
        assert "kube-proxy's 1 s minSyncPeriod" in finding.message
        assert "for up to 3s new requests reach a closed socket" in finding.message
        assert finding.fix.startswith("set GRACEFUL_SHUTDOWN_DELAY=5 ")
        assert "--propagation SECONDS" in finding.fix

    def test_probe_timing_does_not_matter_in_cluster(self) -> None:
        """Kubernetes' default readiness timing (10s x 3) does not lengthen the delay in-cluster: the deletion does."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}}
        assert codes_of(pod(container(readinessProbe=probe))) == []

    def test_exactly_enough(self) -> None:
        """A delay equal to the in-cluster figure is enough."""
        values = env(GRACEFUL_SHUTDOWN_DELAY=str(ALLOWANCES["in-cluster"]))
        assert codes_of(pod(container(env=values))) == []

    def test_service_through_kube_proxy(self) -> None:
        """A plain Service that selects the pods is named as the in-cluster route."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="1")
        (finding,) = check_documents([pod(container(env=values)), service()], "test")
        assert "in-cluster routing (Service/web through kube-proxy)" in finding.message

    def test_aws_manifest(self) -> None:
        """An NLB in IP mode (Service annotation) needs 120s: GC004 names the annotation and the issue."""
        (finding,) = findings_in("gc004-aws-nlb-ip.yaml")
        assert (finding.code, finding.severity) == ("GC004", "error")
        assert "shutdown_delay 5s < 120s: an AWS load balancer targets the pod IP" in finding.message
        assert "aws-load-balancer-nlb-target-type: ip" in finding.message
        assert "aws-load-balancer-controller #3270" in finding.message
        assert finding.fix.startswith("set GRACEFUL_SHUTDOWN_DELAY=120 ")

    def test_aws_delay_that_covers(self) -> None:
        """An ALB Ingress in IP mode with a 120s delay and a grace period to fit has no finding."""
        assert findings_in("gc004-aws-delay-covers.yaml") == []

    def test_aws_delay_too_short_behind_the_alb(self) -> None:
        """The same ALB Ingress with graceful's default delay is GC004, naming the Ingress annotation."""
        docs = [
            pod(container()),
            service(),
            ingress(class_name="alb", **{"alb.ingress.kubernetes.io/target-type": "ip"}),
        ]
        (finding,) = check_documents(docs, "test")
        assert "Ingress/web annotation alb.ingress.kubernetes.io/target-type: ip" in finding.message

    def test_gce_manifest(self) -> None:
        """A GKE Ingress through NEGs needs 60s: GC004 names the Service annotation and the issue."""
        (finding,) = findings_in("gc004-gce-neg.yaml")
        assert (finding.code, finding.severity) == ("GC004", "error")
        assert "shutdown_delay 30s < 60s: a GCE load balancer" in finding.message
        assert "Service/web annotation cloud.google.com/neg" in finding.message
        assert "ingress-gce #2222" in finding.message

    def test_probe_case(self) -> None:
        """--traffic probe: the readiness timing counts, 10 x 3 + 1 + 2 = 33s for Kubernetes' defaults."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}}
        (finding,) = check_documents([pod(container(readinessProbe=probe))], "test", traffic=PROBE)
        assert "shutdown_delay 5s < 33s: a balancer that probes /readyz itself (--traffic probe)" in finding.message
        assert "periodSeconds 10 x failureThreshold 3 + timeoutSeconds 1 + 2s" in finding.message
        assert "for up to 28s" in finding.message
        assert "GRACEFUL_SHUTDOWN_DELAY=33" in finding.fix
        assert "probe faster (periodSeconds: 1, failureThreshold: 2, timeoutSeconds: 1 needs 5s)" in finding.fix

    def test_probe_case_exactly_enough(self) -> None:
        """In the probe case a delay equal to the probe time plus the allowance is enough."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}, "periodSeconds": 2, "failureThreshold": 3}
        values = env(GRACEFUL_SHUTDOWN_DELAY=str(2 * 3 + 1 + ALLOWANCES[PROBE]))
        assert codes_of(pod(container(readinessProbe=probe, env=values)), traffic=PROBE) == []

    def test_probe_case_without_a_probe(self) -> None:
        """In the probe case without a readiness probe there is nothing to time: GC001 alone."""
        assert codes_of(pod(container(readinessProbe=None)), traffic=PROBE) == ["GC001"]

    def test_zero_probe_fields_are_defaults(self) -> None:
        """periodSeconds: 0 is defaulted to 10 by the API server, and counted so."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}, "periodSeconds": 0, "failureThreshold": 1}
        (finding,) = check_documents([pod(container(readinessProbe=probe))], "test", traffic=PROBE)
        assert "periodSeconds 10 x failureThreshold 1" in finding.message

    def test_retry_after_mode(self) -> None:
        """With send_retry_after, late requests get 429 instead of a closed socket."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="1", GRACEFUL_SEND_RETRY_AFTER="true")
        (finding,) = check_documents([pod(container(env=values))], "test")
        assert finding.code == "GC004"
        assert "get 429" in finding.message

    def test_pre_stop_sleep_counts(self) -> None:
        """A preStop sleep serves before SIGTERM, so it counts towards the delay (GC006 instead)."""
        hook = {"preStop": {"sleep": {"seconds": 30}}}
        doc = pod(container(lifecycle=hook), terminationGracePeriodSeconds=60)
        found = codes_of(doc, service(**{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb-ip"}))
        assert "GC004" in found  # 30 + 5 < 120 behind an NLB in IP mode
        found = codes_of(doc)
        assert "GC004" not in found
        assert "GC006" in found

    def test_propagation_allowance(self) -> None:
        """--propagation replaces the case's figure, and the finding says it came from there."""
        doc = pod(container())
        assert check_documents([doc], "test", propagation=5.0) == []
        (finding,) = check_documents([doc], "test", propagation=6.0)
        assert finding.code == "GC004"
        assert "shutdown_delay 5s < 6s" in finding.message
        assert "(6s from --propagation)" in finding.message
        assert "--propagation" not in finding.fix

    def test_stated_case_beats_the_input(self) -> None:
        """--traffic in-cluster overrides an NLB annotation in the input."""
        docs = [pod(container()), service(**{"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip"})]
        assert codes_of(*docs) == ["GC004"]
        assert codes_of(*docs, traffic="in-cluster") == []


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
