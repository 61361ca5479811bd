"""GC004, GC006: how long the pod keeps serving after it is told to stop.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.manifests import probe_seconds
from graceful.kubernetes.rules.probes import FAST_PERIOD, FAST_PROBE, FAST_THRESHOLD, FAST_TIMEOUT
from graceful.kubernetes.subject import Subject

__all__ = ["pre_stop_sleep", "shutdown_delay"]


def shutdown_delay(c: Subject) -> Iterator[Finding]:
    """GC004: the delay ends before the endpoint change has reached every node."""
    if c.readiness is None:  # GC001 already; there is no probe to size the delay from
        return
    period = probe_seconds(c.readiness, "periodSeconds")
    threshold = probe_seconds(c.readiness, "failureThreshold")
    timeout = probe_seconds(c.readiness, "timeoutSeconds")
    needed = period * threshold + timeout + c.propagation
    delay = c.settings.config.shutdown_delay
    serving = c.pre_stop_sleep + delay
    if serving >= needed:
        return
    where = f"preStop sleep {c.pre_stop_sleep:g}s + " if c.pre_stop_sleep else ""
    outcome = "get 429" if c.settings.config.send_retry_after else "reach a closed socket"
    fast = FAST_PERIOD * FAST_THRESHOLD + FAST_TIMEOUT + c.propagation
    yield c.finding(
        "error",
        "GC004",
        f"{where}shutdown_delay {delay:g}s < periodSeconds {period} x failureThreshold {threshold}"
        f" + timeoutSeconds {timeout} + endpoint propagation {c.propagation:g}s = {needed:g}s:"
        f" for up to {needed - serving:g}s requests still routed here {outcome}",
        f"set GRACEFUL_SHUTDOWN_DELAY={needed - c.pre_stop_sleep:g} (and terminationGracePeriodSeconds"
        f" to fit), or probe faster ({FAST_PROBE} needs {fast:g}s)",
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
