"""GC005, GC009, GC010: the whole shutdown against the time the pod has.

GC005 **error**, preStop sleep + graceful's budget (``graceful.core.budget``) over
``terminationGracePeriodSeconds``: the kubelet sends SIGKILL before the drain
and the cleanup are done. Loses the requests still in flight.

GC009 **error**, the budget over graceful's own ``GRACEFUL_GRACE_PERIOD``:
graceful refuses to start (its start-up check), so the container never serves.

GC010 **warning** when ``GRACEFUL_GRACE_PERIOD`` is above the time the pod
really gives graceful (``terminationGracePeriodSeconds`` minus a preStop
sleep, minus the drain of the native sidecars that stop after it): graceful's
start-up check then passes budgets the pod cannot keep, which is probably
wrong. **info** when it is below: the check is only stricter than needed.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.manifests import INT64_MAX
from graceful.kubernetes.subject import Subject

__all__ = ["app_time", "budget", "grace_period", "sidecar_time", "startup_budget", "whole_seconds"]


def whole_seconds(seconds: float) -> int | None:
    """Return ``seconds`` rounded up, ``None`` when no Kubernetes duration field can hold it."""
    return math.ceil(seconds) if math.isfinite(seconds) and seconds <= INT64_MAX else None


def app_time(c: Subject) -> tuple[float, str]:
    """Return how long the container may take to stop (preStop sleep + graceful's budget), and how it adds up."""
    text = c.budget.describe()
    if c.pre_stop_sleep:
        text = f"preStop sleep {c.pre_stop_sleep:g}s + {text}"
    return c.pre_stop_sleep + c.budget.total, text


def sidecar_time(c: Subject) -> tuple[float, str]:
    """Return the seconds the native sidecars need after the app has exited, and a list of them."""
    drains = c.sidecar_drains
    text = ", ".join(f"{sidecar.name}: {drain.why}" for sidecar, drain in drains)
    return sum(drain.seconds for _, drain in drains), text


def budget(c: Subject) -> Iterator[Finding]:
    """GC005: the shutdown does not fit terminationGracePeriodSeconds; SIGKILL ends the drain."""
    total, text = app_time(c)
    if total <= c.grace_period:
        return
    sidecars, _ = sidecar_time(c)
    pod = whole_seconds(total + sidecars)
    if pod is None:
        fix = "lower GRACEFUL_SHUTDOWN_DELAY, GRACEFUL_DRAIN_TIMEOUT or GRACEFUL_HOOK_TIMEOUT: no grace period fits"
    else:
        ours = pod - c.pre_stop_sleep - sidecars
        fix = (
            f"set terminationGracePeriodSeconds: {pod} (and GRACEFUL_GRACE_PERIOD={ours:g}),"
            " or lower GRACEFUL_SHUTDOWN_DELAY, GRACEFUL_DRAIN_TIMEOUT or GRACEFUL_HOOK_TIMEOUT"
        )
    yield c.finding(
        "error",
        "GC005",
        f"{text} = {total:g}s > terminationGracePeriodSeconds {c.grace_period}: the pod is killed mid-drain",
        fix,
    )


def startup_budget(c: Subject) -> Iterator[Finding]:
    """GC009: the budget is over graceful's own grace period, so graceful refuses to start."""
    if c.settings.refused:  # graceful stops at the first bad value (GC008); the budget is moot
        return
    refusal = c.settings.startup_refusal
    if refusal is None:
        return
    total, _ = app_time(c)
    sidecars, _ = sidecar_time(c)
    need, pod = whole_seconds(total - c.pre_stop_sleep), whole_seconds(total + sidecars)
    if need is None or pod is None:
        fix = "lower the budget: no grace period fits it"
    else:
        fix = (
            f"set GRACEFUL_GRACE_PERIOD={need} (and terminationGracePeriodSeconds to at least {pod}),"
            " or lower the budget"
        )
    yield c.finding("error", "GC009", f"graceful refuses to start: {refusal}", fix)


def grace_period(c: Subject) -> Iterator[Finding]:
    """GC010: graceful's GRACEFUL_GRACE_PERIOD disagrees with the time the pod really gives it."""
    ours = c.settings.config.grace_period
    sidecars, names = sidecar_time(c)
    available = c.grace_period - c.pre_stop_sleep - sidecars
    if ours == available:
        return
    origin = "GRACEFUL_GRACE_PERIOD" if "GRACEFUL_GRACE_PERIOD" in c.settings.env else "graceful's default"
    has = f"terminationGracePeriodSeconds {c.grace_period}"
    if c.pre_stop_sleep:
        has += f" - preStop sleep {c.pre_stop_sleep:g}s"
    if sidecars:
        has += f" - native sidecars' drain ({names})"
    if c.pre_stop_sleep or sidecars:
        has += f" = {available:g}s"
    if ours > available:
        yield c.finding(
            "warning",
            "GC010",
            f"{origin} grace_period {ours:g}s > {has}: graceful's start-up budget check passes"
            " budgets the pod cannot keep",
            f"set GRACEFUL_GRACE_PERIOD={available:g}",
        )
    else:
        yield c.finding(
            "info",
            "GC010",
            f"{origin} grace_period {ours:g}s < {has}: graceful's start-up budget check is stricter than the pod",
            f"set GRACEFUL_GRACE_PERIOD={available:g}",
        )
