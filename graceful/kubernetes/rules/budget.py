"""GC005, GC009, GC010: the whole shutdown against the time the pod has.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.settings import startup_refusal
from graceful.kubernetes.subject import Subject

__all__ = ["budget", "budget_text", "grace_period", "startup_budget"]


def budget_text(c: Subject) -> tuple[float, str]:
    """Return the pod's whole shutdown budget and how it adds up."""
    terms = c.settings.config.budget()
    text = (
        f"max(shutdown_delay {terms['shutdown_delay']:g}s, pre-shutdown hook"
        f" {terms['longest pre-shutdown hook']:g}s) + drain_timeout {terms['drain_timeout']:g}s"
        f" + cleanup {terms['longest cleanup task']:g}s + margin {terms['margin']:g}s"
    )
    if c.pre_stop_sleep:
        text = f"preStop sleep {c.pre_stop_sleep:g}s + {text}"
    return c.pre_stop_sleep + terms["total"], text


def budget(c: Subject) -> Iterator[Finding]:
    """GC005: the shutdown does not fit terminationGracePeriodSeconds; SIGKILL ends the drain."""
    total, text = budget_text(c)
    if total <= c.grace_period:
        return
    yield c.finding(
        "error",
        "GC005",
        f"{text} = {total:g}s > terminationGracePeriodSeconds {c.grace_period}: the pod is killed mid-drain",
        f"set terminationGracePeriodSeconds: {math.ceil(total)} (and GRACEFUL_GRACE_PERIOD="
        f"{math.ceil(total) - c.pre_stop_sleep:g}),"
        " or lower GRACEFUL_SHUTDOWN_DELAY, GRACEFUL_DRAIN_TIMEOUT or GRACEFUL_HOOK_TIMEOUT",
    )


def startup_budget(c: Subject) -> Iterator[Finding]:
    """GC009: the budget is over graceful's own grace period, so graceful refuses to start."""
    if c.settings.refused:  # graceful stops at the first bad value (GC008); the budget is moot
        return
    refusal = startup_refusal(c.settings)
    if refusal is not None:
        total, _ = budget_text(c)
        need = math.ceil(total - c.pre_stop_sleep)
        yield c.finding(
            "error",
            "GC009",
            f"graceful refuses to start: {refusal}",
            f"set GRACEFUL_GRACE_PERIOD={need} (and terminationGracePeriodSeconds to at least"
            f" {math.ceil(total)}), or lower the budget",
        )


def grace_period(c: Subject) -> Iterator[Finding]:
    """GC010: graceful's GRACEFUL_GRACE_PERIOD disagrees with the time the pod really has."""
    ours = c.settings.config.grace_period
    available = c.grace_period - c.pre_stop_sleep
    if ours == available:
        return
    origin = "GRACEFUL_GRACE_PERIOD" if "GRACEFUL_GRACE_PERIOD" in c.settings.env else "graceful's default"
    has = f"terminationGracePeriodSeconds {c.grace_period}"
    if c.pre_stop_sleep:
        has += f" - preStop sleep {c.pre_stop_sleep:g}s = {available:g}s"
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
