"""Tests for graceful.kubernetes.traffic: where a pod's traffic comes from, read from the input."""

from __future__ import annotations

from typing import Any

import pytest

from graceful.kubernetes.manifests import Inventory, Probe
from graceful.kubernetes.traffic import ALLOWANCES, AWS, GCE, IN_CLUSTER, PROBE, Routing, Traffic
from tests.kubernetes.helpers import container, deployment, ingress, service


def traffic(*docs: Any, case: str | None = None, propagation: float | None = None) -> Traffic:
    """Return the traffic of the one workload among the documents."""
    inventory = Inventory()
    for doc in docs:
        inventory.add(doc, "test")
    (workload,) = inventory.workloads
    return Routing(inventory, case=case, propagation=propagation).traffic(workload)


NLB_IP = {"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip"}


class TestRouting:
    """The case is read from the Services, Ingresses and TargetGroupBindings that route to the pods."""

    def test_nothing_in_the_input(self) -> None:
        """No Service selects the pods: in-cluster, and the reason says it is assumed."""
        found = traffic(deployment(container()))
        assert (found.case, found.allowance) == (IN_CLUSTER, 5.0)
        assert found.why == "no Service in the input selects its pods; assumed"

    @pytest.mark.parametrize(
        ("annotations", "case"),
        [
            (NLB_IP, AWS),
            ({"service.beta.kubernetes.io/aws-load-balancer-type": "nlb-ip"}, AWS),
            ({"alb.ingress.kubernetes.io/target-type": "ip"}, AWS),
            ({"cloud.google.com/neg": '{"ingress": true}'}, GCE),
            ({"cloud.google.com/neg": '{"exposed_ports": {"80": {}}}'}, GCE),
            ({"cloud.google.com/neg-status": '{"network_endpoint_groups": {}}'}, GCE),
            # instance mode: the load balancer targets nodes, kube-proxy routes to the pods
            ({"service.beta.kubernetes.io/aws-load-balancer-type": "external"}, IN_CLUSTER),
            ({"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "instance"}, IN_CLUSTER),
            ({"cloud.google.com/neg": '{"ingress": false}'}, IN_CLUSTER),
            ({"cloud.google.com/neg": "not json"}, IN_CLUSTER),
            ({"cloud.google.com/neg": "[" * 100_000}, IN_CLUSTER),
        ],
    )
    def test_service_annotations(self, annotations: dict[str, str], case: str) -> None:
        """Each Service annotation that makes a load balancer target pod IPs picks its case; the others do not."""
        found = traffic(deployment(container()), service(**annotations))
        assert found.case == case
        assert found.allowance == ALLOWANCES[case]

    def test_ingress_alb_ip(self) -> None:
        """An ALB Ingress in IP mode in front of the Service is AWS; an ALB Ingress in instance mode is not."""
        ip = ingress(class_name="alb", **{"alb.ingress.kubernetes.io/target-type": "ip"})
        assert traffic(deployment(container()), service(), ip).case == AWS
        assert traffic(deployment(container()), service(), ingress(class_name="alb")).case == IN_CLUSTER

    @pytest.mark.parametrize("class_name", ["gce", "gce-internal"])
    def test_ingress_gce(self, class_name: str) -> None:
        """A GKE Ingress uses NEGs by default; a Service that opts out with ingress: false is in-cluster."""
        assert traffic(deployment(container()), service(), ingress(class_name=class_name)).case == GCE
        opted_out = service(**{"cloud.google.com/neg": '{"ingress": false}'})
        assert traffic(deployment(container()), opted_out, ingress(class_name=class_name)).case == IN_CLUSTER

    def test_ingress_class_annotation(self) -> None:
        """The older kubernetes.io/ingress.class annotation names the class too."""
        legacy = ingress(**{"kubernetes.io/ingress.class": "gce"})
        assert traffic(deployment(container()), service(), legacy).case == GCE

    def test_target_group_binding(self) -> None:
        """A TargetGroupBinding with targetType ip registers the pods themselves: AWS."""
        binding = {
            "apiVersion": "elbv2.k8s.aws/v1beta1",
            "kind": "TargetGroupBinding",
            "metadata": {"name": "web"},
            "spec": {"serviceRef": {"name": "web", "port": 80}, "targetType": "ip", "targetGroupARN": "arn:x"},
        }
        found = traffic(deployment(container()), service(), binding)
        assert (found.case, found.why) == (AWS, "TargetGroupBinding/web targetType: ip")

    def test_only_services_that_select_the_pods(self) -> None:
        """A Service for other pods, or in another namespace, says nothing about these."""
        other = service(selector={"app": "other"}, **NLB_IP)
        assert traffic(deployment(container()), other).case == IN_CLUSTER
        elsewhere = service(**NLB_IP)
        elsewhere["metadata"]["namespace"] = "prod"
        workload = deployment(container())
        workload["metadata"]["namespace"] = "staging"
        assert traffic(workload, elsewhere).case == IN_CLUSTER

    def test_selector_needs_every_label(self) -> None:
        """A Service selects only pods with all its labels."""
        picky = service(selector={"app": "web", "tier": "front"}, **NLB_IP)
        assert traffic(deployment(container()), picky).case == IN_CLUSTER

    def test_slowest_router_wins(self) -> None:
        """An NLB and a NEG both in front of the pods: the delay must cover the slower, AWS's 120 s."""
        neg = service("neg", **{"cloud.google.com/neg": '{"ingress": true}'})
        assert traffic(deployment(container()), neg, service("nlb", **NLB_IP)).case == AWS

    def test_stated_case_and_measured_figure(self) -> None:
        """--traffic replaces what the input shows; --propagation replaces the figure and is marked measured."""
        stated = traffic(deployment(container()), service(**NLB_IP), case=IN_CLUSTER)
        assert (stated.case, stated.why, stated.measured) == (IN_CLUSTER, "--traffic in-cluster", False)
        measured = traffic(deployment(container()), service(**NLB_IP), propagation=30.0)
        assert (measured.case, measured.allowance, measured.measured) == (AWS, 30.0, True)


class TestTraffic:
    """How long the pod must keep serving, and the words that say why."""

    READINESS = Probe("httpGet", "/readyz", 8000, period=2, threshold=3, timeout=1)

    def test_needed_outside_the_probe_case_ignores_the_probe(self) -> None:
        """In-cluster and behind load balancers the delay is the allowance, whatever the readiness probe."""
        assert Traffic(IN_CLUSTER, 5.0, "x").needed(self.READINESS) == 5.0
        assert Traffic(GCE, 60.0, "x").needed(None) == 60.0

    def test_needed_in_the_probe_case(self) -> None:
        """A probing balancer: period x threshold + timeout + allowance; unknown without a probe."""
        assert Traffic(PROBE, 2.0, "x").needed(self.READINESS) == 2 * 3 + 1 + 2.0
        assert Traffic(PROBE, 2.0, "x").needed(None) is None

    @pytest.mark.parametrize(
        ("case", "words"),
        [
            (IN_CLUSTER, "in-cluster routing (why) sends new requests until the deletion reaches it (5s, kube-proxy"),
            (AWS, "an AWS load balancer targets the pod IP (why) and opens new connections while it deregisters"),
            (GCE, "a GCE load balancer routes to the pod through a network endpoint group (why)"),
            (PROBE, "a balancer that probes /readyz itself (why) stops after readiness periodSeconds 2"),
        ],
    )
    def test_explain(self, case: str, words: str) -> None:
        """Each case explains itself with the reason and its figure's source."""
        assert Traffic(case, ALLOWANCES[case], "why").explain(self.READINESS).startswith(words)

    def test_explain_measured(self) -> None:
        """A measured figure is credited to --propagation, not to the issue threads."""
        assert "(7s from --propagation)" in Traffic(AWS, 7.0, "why", measured=True).explain(None)
