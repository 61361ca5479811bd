"""Where a pod's traffic comes from, and how long new requests keep arriving after it is deleted.

When a pod is deleted, the EndpointSlice controller marks its endpoints
``ready: false, terminating: true`` at once, whatever the readiness probe
says (KEP-1672: "any terminating pod must have condition.ready = false").
So the readiness probe is *not* what takes a deleted pod out of a Service;
``serving`` (the probe) only matters for kube-proxy's fallback to terminating
endpoints when no ready one is left (KEP-1669), and for balancers that probe
the pod themselves. What graceful's ``shutdown_delay`` must cover is the time
until every router has acted on the deletion, which depends on the router:

``in-cluster`` (kube-proxy, EndpointSlice-based ingress controllers), 5 s:
    kube-proxy applies an EndpointSlice change at most once per
    ``minSyncPeriod`` (1 s by default, kubernetes/kubernetes #92836) after the
    watch delivers it; ingress-nginx rate-limits its syncs to 0.3 per second
    (``--sync-rate-limit``, so up to about 3.3 s apart during a rollout) and its
    Lua balancer picks the new backends up within ``BACKENDS_SYNC_INTERVAL``
    (1 s). 5 s covers both on a healthy cluster, and is graceful's default delay.
``aws`` (AWS load balancers that target pod IPs), 120 s:
    an NLB or ALB in IP mode keeps opening new connections to a target for
    about two minutes after the load balancer controller deregisters it,
    whatever its ``deregistration_delay`` (aws-load-balancer-controller #3270
    "the deregistering process takes about 2 minutes", #2366 "deregistration
    takes at least 2 minutes regardless of the deregistration delay setting").
``gce`` (GCE load balancers with network endpoint groups), 60 s:
    container-native load balancing programs the NEG change into the
    load balancer with a delay; a rolling restart gives 502s for about a
    minute without a delay that covers it (ingress-gce #2222), and GKE's
    documentation asks for ``terminationGracePeriodSeconds`` of 60 s or more
    (quoted in ingress-gce #1072).
``probe`` (a balancer that health-checks ``/readyz`` itself, such as HAProxy), 2 s:
    it stops when its own check has failed, so the delay must cover that
    check's detection time (taken to be the readiness probe's
    ``periodSeconds x failureThreshold + timeoutSeconds``, the only timing in
    the manifest) plus 2 s for the balancer to act.

The case is read from the Services, Ingresses and TargetGroupBindings in the
same input that route to the pod; ``--traffic`` states it when the input does
not show it, and ``--propagation`` replaces the case's figure with a measured
one. Established keep-alive connections keep sending after removal in every
case: that is what graceful's ``Connection: close`` during the delay is for.

The adaptive delay (``GRACEFUL_SHUTDOWN_DELAY_MIN``, :mod:`graceful.core.delay`)
ends once nothing has arrived for its quiet period; its floor must cover what
the pod cannot observe: a pause in the traffic before the router has acted.
Per case (:meth:`Traffic.floor`):

``in-cluster``, 2 s:
    kube-proxy applies the deletion within its 1 s ``minSyncPeriod`` after the
    watch delivers it (about 1-2 s; the kube-proxy model of
    tests/test_adaptive_delay.py removes endpoints 0.5-2 s after SIGTERM).
    ingress-nginx's slower syncs keep sending, which the quiet period sees.
``probe``, the check's detection time plus 2 s (as ``needed``):
    the balancer cannot act before its own check fails, whatever the traffic.
``aws``, ``gce``: none the pod can know:
    the load balancer deregisters on its own schedule, for up to its whole
    figure; the adaptive delay (its maximum covering that figure) leaves once
    the traffic stops, and a floor below the figure relies on the traffic
    never pausing longer than the quiet period before then (an info finding).

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

from graceful.kubernetes.manifests import Ingress, Inventory, Probe, Service, TargetGroupBinding, Workload

__all__ = ["ALLOWANCES", "AWS", "CASES", "FLOORS", "GCE", "IN_CLUSTER", "PROBE", "Routing", "Traffic"]

IN_CLUSTER, PROBE, AWS, GCE = "in-cluster", "probe", "aws", "gce"
CASES = (IN_CLUSTER, PROBE, AWS, GCE)

#: Seconds new requests may keep arriving once the router has been told, per case (see above).
#: For ``probe`` it is the time to act after the balancer's own check has failed.
ALLOWANCES: Mapping[str, float] = {IN_CLUSTER: 5.0, PROBE: 2.0, AWS: 120.0, GCE: 60.0}

#: The adaptive delay's floor (s) advised where the router's action has a known bound (see above).
FLOORS: Mapping[str, float] = {IN_CLUSTER: 2.0}

#: Where each figure comes from, for the findings.
_SOURCES: Mapping[str, str] = {
    IN_CLUSTER: "kube-proxy's 1 s minSyncPeriod plus the watch, ingress-nginx's 0.3/s syncs plus its 1 s backend sync",
    PROBE: "the balancer's check, assumed to run as the readinessProbe does, plus 2 s to act",
    AWS: "aws-load-balancer-controller #3270: deregistration takes about 2 minutes",
    GCE: "ingress-gce #2222: about a minute of 502s after a rolling restart",
}

_AWS_TYPE = "service.beta.kubernetes.io/aws-load-balancer-type"
_AWS_NLB_TARGET = "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"
_ALB_TARGET = "alb.ingress.kubernetes.io/target-type"
_GCE_NEG = "cloud.google.com/neg"
_GCE_NEG_STATUS = "cloud.google.com/neg-status"
_GCE_CLASSES = frozenset({"gce", "gce-internal"})


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Where a workload's traffic comes from, and what says so."""

    case: str  # one of CASES
    allowance: float  # seconds, see ALLOWANCES
    why: str  # the object and annotation that show it, or the command-line option
    measured: bool = False  # the allowance came from --propagation

    def needed(self, readiness: Probe | None) -> float | None:
        """Return the seconds the pod must keep serving after SIGTERM; ``None`` when it cannot be known.

        For ``probe`` it is the readiness probe's detection time plus the
        allowance, and unknown without a readiness probe (GC001 says so).
        """
        if self.case != PROBE:
            return self.allowance
        if readiness is None:
            return None
        return readiness.period * readiness.threshold + readiness.timeout + self.allowance

    def floor(self, readiness: Probe | None) -> float | None:
        """The adaptive delay's floor advised (s): the time before which the router cannot have acted.

        ``None`` when the pod cannot know it (a cloud load balancer that targets
        pod IPs, or a probing balancer without a readiness probe to time).
        A measured propagation (``--propagation``) is that bound for any case.
        """
        if self.measured:
            return self.allowance
        if self.case == PROBE:
            return self.needed(readiness)
        return FLOORS.get(self.case)

    def explain_floor(self, readiness: Probe | None) -> str:
        """Return, in words and figures, why the router cannot have acted before :meth:`floor` seconds."""
        if self.case == IN_CLUSTER and not self.measured:
            return (
                f"in-cluster routing ({self.why}) acts on the deletion up to {FLOORS[IN_CLUSTER]:g}s after it"
                " (kube-proxy's 1 s minSyncPeriod plus the watch)"
            )
        return self.explain(readiness)

    def explain(self, readiness: Probe | None) -> str:
        """Return, in words and figures, why new requests keep arriving for :meth:`needed` seconds."""
        if self.measured:
            figure = f"{self.allowance:g}s from --propagation"
        else:
            figure = f"{self.allowance:g}s, {_SOURCES[self.case]}"
        if self.case == IN_CLUSTER:
            return f"in-cluster routing ({self.why}) sends new requests until the deletion reaches it ({figure})"
        if self.case == AWS:
            return (
                f"an AWS load balancer targets the pod IP ({self.why}) and opens new connections while it"
                f" deregisters it ({figure})"
            )
        if self.case == GCE:
            return (
                f"a GCE load balancer routes to the pod through a network endpoint group ({self.why}) and sends"
                f" requests after its removal ({figure})"
            )
        timing = ""
        if readiness is not None:
            timing = (
                f"readiness periodSeconds {readiness.period} x failureThreshold {readiness.threshold}"
                f" + timeoutSeconds {readiness.timeout} + "
            )
        return f"a balancer that probes /readyz itself ({self.why}) stops after {timing}{self.allowance:g}s ({figure})"


class Routing:
    """Where the traffic of each workload of an inventory comes from.

    The Services, Ingresses and TargetGroupBindings are indexed once, so that
    an input of many workloads and many Services is read in linear time.
    """

    def __init__(self, inventory: Inventory, *, case: str | None = None, propagation: float | None = None) -> None:
        """``case`` states the traffic for every workload; ``propagation`` replaces the figure of any case."""
        self._case, self._propagation = case, propagation
        self._services: dict[tuple[str, str], list[Service]] = {}
        for service in inventory.services:
            for item in list(service.selector.items())[:1]:  # a Service selects only pods with all its labels
                self._services.setdefault(item, []).append(service)
        self._ingresses: dict[str, list[Ingress]] = {}
        for ingress in inventory.ingresses:
            for name in dict.fromkeys(ingress.services):
                self._ingresses.setdefault(name, []).append(ingress)
        self._bindings: dict[str, list[TargetGroupBinding]] = {}
        for binding in inventory.target_group_bindings:
            self._bindings.setdefault(binding.service, []).append(binding)

    def traffic(self, workload: Workload) -> Traffic:
        """Return where the workload's traffic comes from: the stated case, else what the input shows.

        The slowest router wins when several route to the pods.
        """
        if self._case is not None:
            found = Traffic(self._case, ALLOWANCES[self._case], f"--traffic {self._case}")
        else:
            found = self._detect(workload)
        if self._propagation is not None:
            found = dataclasses.replace(found, allowance=self._propagation, measured=True)
        return found

    def _detect(self, workload: Workload) -> Traffic:
        """Read the case from the objects that route to the workload."""
        candidates = (service for item in workload.labels.items() for service in self._services.get(item, ()))
        unique = {id(service): service for service in candidates}  # a Service indexed once, found once
        services = [service for service in unique.values() if service.selects(workload)]
        found: list[Traffic] = []
        for service in services:
            found.extend(_service_cases(service))
            for ingress in self._ingresses.get(service.name, ()):
                case = _ingress_case(ingress, service) if ingress.routes_to(service) else None
                if case is not None:
                    found.append(case)
            found.extend(
                Traffic(AWS, ALLOWANCES[AWS], f"TargetGroupBinding/{binding.name} targetType: ip")
                for binding in self._bindings.get(service.name, ())
                if binding.binds(service) and binding.target_type == "ip"
            )
        if found:
            return max(found, key=lambda traffic: traffic.allowance)
        if services:
            names = ", ".join(f"Service/{service.name}" for service in services[:2])
            return Traffic(IN_CLUSTER, ALLOWANCES[IN_CLUSTER], f"{names} through kube-proxy")
        return Traffic(IN_CLUSTER, ALLOWANCES[IN_CLUSTER], "no Service in the input selects its pods; assumed")


def _ingress_case(ingress: Ingress, service: Service) -> Traffic | None:
    """Return the load balancer an Ingress puts in front of a Service, when it targets pod IPs."""
    if ingress.annotations.get(_ALB_TARGET) == "ip":
        return Traffic(AWS, ALLOWANCES[AWS], f"Ingress/{ingress.name} annotation {_ALB_TARGET}: ip")
    if ingress.class_name in _GCE_CLASSES and _neg(service) is not False:
        # GKE uses NEGs for Ingress by default on VPC-native clusters, unless the Service opts out.
        return Traffic(GCE, ALLOWANCES[GCE], f"Ingress/{ingress.name} class {ingress.class_name}, NEGs by default")
    return None


def _service_cases(service: Service) -> Iterable[Traffic]:
    """Yield the load balancers a Service's own annotations ask for."""
    annotations = service.annotations
    if annotations.get(_AWS_NLB_TARGET) == "ip":
        yield Traffic(AWS, ALLOWANCES[AWS], f"Service/{service.name} annotation {_AWS_NLB_TARGET}: ip")
    elif annotations.get(_AWS_TYPE) == "nlb-ip":
        yield Traffic(AWS, ALLOWANCES[AWS], f"Service/{service.name} annotation {_AWS_TYPE}: nlb-ip")
    if annotations.get(_ALB_TARGET) == "ip":  # an ALB Ingress reads this off the Service too
        yield Traffic(AWS, ALLOWANCES[AWS], f"Service/{service.name} annotation {_ALB_TARGET}: ip")
    if _neg(service) or _GCE_NEG_STATUS in annotations:
        yield Traffic(GCE, ALLOWANCES[GCE], f"Service/{service.name} annotation {_GCE_NEG}")


def _neg(service: Service) -> bool | None:
    """Tell whether a Service asks for NEGs (``{"ingress": true}``, exposed ports); ``None``: it does not say."""
    text = service.annotations.get(_GCE_NEG)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON (or nested past the parser): the NEG controller refuses it too
        return None
    if not isinstance(value, dict):
        return None
    return bool(value.get("ingress") is True or value.get("exposed_ports"))
