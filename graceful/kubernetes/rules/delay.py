"""GC004, GC006: how long the pod keeps serving after it is told to stop.

GC004 **error**, ``shutdown_delay`` (plus any preStop sleep) shorter than the
time new requests keep arriving after the pod is deleted. That time depends
on where the traffic comes from (:mod:`graceful.kubernetes.traffic`): the
propagation of the deletion in-cluster, the deregistration of load balancers
that target pod IPs, or, for a balancer that probes ``/readyz`` itself, its
check's detection time. The finding says which case applied, why, and the
figures. Requests that arrive after the delay reach a closed socket (or a
429 in retry-after mode): loses requests.

GC017 **warning**, the adaptive delay's floor (``GRACEFUL_SHUTDOWN_DELAY_MIN``)
shorter than the time before which the router cannot have acted
(:meth:`graceful.kubernetes.traffic.Traffic.floor`): a pause in the traffic
longer than the quiet period before then ends the delay early, and what
arrives after it reaches a closed socket. A warning, not an error: steady
traffic never pauses that long, and the manifest does not show the traffic.
**info** behind a cloud load balancer that targets pod IPs, whose schedule
the pod cannot know: the floor then relies on the traffic alone.

GC006 **warning**, a preStop sleep on top of graceful's own delay: the wait is
counted twice and spends the grace period before graceful has started.
Probably wrong (it loses nothing while the budget still fits, which GC005
checks).

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.rules.probes import FAST_PROBE, FAST_TIMING
from graceful.kubernetes.subject import Subject
from graceful.kubernetes.traffic import PROBE

__all__ = ["adaptive_floor", "pre_stop_sleep", "shutdown_delay"]


def shutdown_delay(c: Subject) -> Iterator[Finding]:
    """GC004: the delay ends while new requests can still arrive."""
    readiness = c.container.readiness
    needed = c.traffic.needed(readiness)
    if needed is None:  # a probing balancer, but no readiness probe to time it by: GC001 says so
        return
    delay = c.settings.config.shutdown_delay
    serving = c.pre_stop_sleep + delay
    if serving >= needed:
        return
    where = f"preStop sleep {c.pre_stop_sleep:g}s + " if c.pre_stop_sleep else ""
    outcome = "get 429" if c.settings.config.send_retry_after else "reach a closed socket"
    fix = f"set GRACEFUL_SHUTDOWN_DELAY={needed - c.pre_stop_sleep:g} (and terminationGracePeriodSeconds to fit)"
    if c.traffic.case == PROBE:
        period, threshold, timeout = FAST_TIMING
        fast = period * threshold + timeout + c.traffic.allowance
        fix += f", or probe faster ({FAST_PROBE} needs {fast:g}s)"
    elif not c.traffic.measured:
        fix += ", or measure how long yours takes and pass --propagation SECONDS"
    yield c.finding(
        "error",
        "GC004",
        f"{where}shutdown_delay {delay:g}s < {needed:g}s: {c.traffic.explain(readiness)}; for up to"
        f" {needed - serving:g}s new requests {outcome}",
        fix,
    )


def pre_stop_sleep(c: Subject) -> Iterator[Finding]:
    """GC006: a preStop sleep before graceful's own delay waits twice."""
    delay = c.settings.config.shutdown_delay
    if c.pre_stop_sleep and delay:
        yield c.finding(
            "warning",
            "GC006",
            f"preStop sleep {c.pre_stop_sleep:g}s runs before SIGTERM, then graceful keeps serving for"
            f" shutdown_delay {delay:g}s: the delay is counted twice ({c.pre_stop_sleep + delay:g}s)",
            "remove the preStop hook and size GRACEFUL_SHUTDOWN_DELAY alone"
            " (graceful fails /readyz and keeps serving during it)",
        )


def adaptive_floor(c: Subject) -> Iterator[Finding]:
    """GC017: the adaptive delay may end in a pause of the traffic before the router has acted."""
    config = c.settings.config
    floor = config.shutdown_delay_min
    if floor is None:
        return
    readiness = c.container.readiness
    quiet = "the derived quiet period" if config.quiet_period is None else f"quiet_period {config.quiet_period:g}s"
    advised = c.traffic.floor(readiness)
    serving = c.pre_stop_sleep + floor
    where = f"preStop sleep {c.pre_stop_sleep:g}s + " if c.pre_stop_sleep else ""
    if advised is None:
        needed = c.traffic.needed(readiness)
        if needed is None or serving >= needed:
            return
        yield c.finding(
            "info",
            "GC017",
            f"{where}shutdown_delay_min {floor:g}s < {needed:g}s: {c.traffic.explain(readiness)}, on a schedule"
            f" the pod cannot see; the adaptive delay leaves once nothing arrived for {quiet}, so a pause in"
            " the traffic before the load balancer stops ends it early",
            f"with light or bursty traffic set GRACEFUL_SHUTDOWN_DELAY_MIN={needed - c.pre_stop_sleep:g}, or"
            " GRACEFUL_QUIET_PERIOD above the traffic's longest pause",
        )
        return
    if serving >= advised:
        return
    yield c.finding(
        "warning",
        "GC017",
        f"{where}shutdown_delay_min {floor:g}s < {advised:g}s: {c.traffic.explain_floor(readiness)}; a pause in the"
        f" traffic longer than {quiet} before then ends the adaptive delay early, and new requests"
        " reach a closed socket",
        f"set GRACEFUL_SHUTDOWN_DELAY_MIN={advised - c.pre_stop_sleep:g}",
    )
