"""The shutdown budget: the one formula for how long a shutdown may take, and its messages.

A shutdown must fit the orchestrator's grace period (Kubernetes'
``terminationGracePeriodSeconds``, systemd's ``TimeoutStopSec``)::

    max(shutdown_delay, longest pre-shutdown hook)    hooks run alongside the delay
      + drain_timeout                                 in-flight requests finish
      + longest cleanup task                          cleanup tasks run concurrently
      + BUDGET_MARGIN                                 process exit, signal delivery
      <= grace_period

Under Gunicorn the master waits ``graceful_timeout`` for its workers after the
first half; that wait must cover a worker's drain and cleanup
(:func:`graceful_timeout_problem`) and still end inside the grace period
(:meth:`Budget.graceful_timeout_overrun`). Gunicorn 27's dirty pool stops
after them and gets what is left (:func:`derived_dirty_graceful_timeout`).
Both are derived when the user leaves them unset. Every value is in seconds.

Pure functions of numbers: used by :class:`graceful.Config` at start-up, by
the lifecycle with the hooks it has registered, by the Gunicorn wing in the
master and in each worker, and by ``graceful check`` against a pod's spec.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection

__all__ = [
    "BUDGET_MARGIN",
    "MIN_DIRTY_GRACEFUL_TIMEOUT",
    "Budget",
    "derived_dirty_graceful_timeout",
    "derived_graceful_timeout",
    "graceful_timeout_problem",
    "seconds_left",
]

#: Seconds the budget keeps spare for process exit and signal delivery.
BUDGET_MARGIN = 1.0

#: The least ``dirty_graceful_timeout`` (s) graceful accepts or derives: Gunicorn's dirty workers get
#: a TERM and this long to finish their task and exit before its dirty arbiter kills them.
MIN_DIRTY_GRACEFUL_TIMEOUT = 1.0


@dataclasses.dataclass(frozen=True)
class Budget:
    """The terms of one shutdown's budget, in seconds."""

    shutdown_delay: float
    longest_pre_shutdown_hook: float
    drain_timeout: float
    longest_cleanup_task: float
    margin: float = BUDGET_MARGIN

    @property
    def first_half(self) -> float:
        """Seconds from ShutdownInitiated to NotAcceptingNewRequests: the delay and the hooks, side by side."""
        return max(self.shutdown_delay, self.longest_pre_shutdown_hook)

    @property
    def total(self) -> float:
        """The whole shutdown, margin included."""
        return self.first_half + self.drain_timeout + self.longest_cleanup_task + self.margin

    def terms(self) -> dict[str, float]:
        """Each term by name, and their ``total``."""
        return {
            "shutdown_delay": self.shutdown_delay,
            "longest pre-shutdown hook": self.longest_pre_shutdown_hook,
            "drain_timeout": self.drain_timeout,
            "longest cleanup task": self.longest_cleanup_task,
            "margin": self.margin,
            "total": self.total,
        }

    def describe(self) -> str:
        """The formula with this budget's figures, as every message shows it."""
        return (
            f"max(shutdown_delay {self.shutdown_delay:g}s, longest pre-shutdown hook"
            f" {self.longest_pre_shutdown_hook:g}s) + drain_timeout {self.drain_timeout:g}s"
            f" + longest cleanup task {self.longest_cleanup_task:g}s + margin {self.margin:g}s"
        )

    def overrun(self, grace_period: float) -> str | None:
        """Why this budget cannot fit ``grace_period``, or None when it fits."""
        if self.total <= grace_period:
            return None
        return (
            f"graceful shutdown does not fit GRACEFUL_GRACE_PERIOD: {self.describe()} = {self.total:g}s"
            f" > grace_period {grace_period:g}s; raise GRACEFUL_GRACE_PERIOD (and"
            " terminationGracePeriodSeconds) or lower the others"
        )

    def room_after(self, graceful_timeout: float, grace_period: float) -> float:
        """Seconds ``grace_period`` leaves after the first half and Gunicorn's wait for its HTTP workers.

        What is left for Gunicorn 27's dirty pool, stopped after those workers
        (see :func:`derived_dirty_graceful_timeout`); negative when nothing is.
        """
        return grace_period - self.first_half - graceful_timeout

    def graceful_timeout_overrun(
        self,
        graceful_timeout: float,
        grace_period: float,
        dirty_graceful_timeout: float | None = None,
        *,
        derived: Collection[str] = (),
    ) -> str | None:
        """Why Gunicorn's waits after the first half would end past ``grace_period``, or None.

        ``dirty_graceful_timeout``: Gunicorn 27's dirty pool, stopped after the
        HTTP workers (None: no dirty pool); it needs at least
        :data:`MIN_DIRTY_GRACEFUL_TIMEOUT`. ``derived`` names the values
        graceful derived (``"graceful_timeout"``, ``"dirty_graceful_timeout"``):
        the message advises changing only what the user set, and never to
        leave unset what already is.
        """
        dirty = dirty_graceful_timeout
        end = self.first_half + graceful_timeout + (dirty or 0.0)
        if end <= grace_period and (dirty is None or dirty >= MIN_DIRTY_GRACEFUL_TIMEOUT):
            return None
        gt_derived = "graceful_timeout" in derived
        first = f"max(shutdown_delay, longest pre-shutdown hook) {self.first_half:g}s"
        waits = f"Gunicorn's graceful_timeout {graceful_timeout:g}s" + (
            " (derived: drain_timeout + longest cleanup task + margin)" if gt_derived else ""
        )
        room = self.room_after(graceful_timeout, grace_period)
        if dirty is None:
            what = f"{first} + {waits} = {end:g}s > GRACEFUL_GRACE_PERIOD {grace_period:g}s"
        elif "dirty_graceful_timeout" in derived:
            what = (
                f"Gunicorn's dirty pool gets what GRACEFUL_GRACE_PERIOD {grace_period:g}s leaves after {first} +"
                f" {waits}: {max(room, 0.0):g}s, less than the {MIN_DIRTY_GRACEFUL_TIMEOUT:g}s its"
                " dirty_graceful_timeout needs"
            )
        else:
            what = (
                f"{first} + {waits} + dirty_graceful_timeout {dirty:g}s = {end:g}s > GRACEFUL_GRACE_PERIOD"
                f" {grace_period:g}s"
            )
        fixes = []
        if not gt_derived:
            fixes.append("lower graceful_timeout (or leave it unset: graceful derives it)")
        if dirty is not None and "dirty_graceful_timeout" not in derived:
            fits = f" to {math.floor(room):d}s or less" if room >= MIN_DIRTY_GRACEFUL_TIMEOUT else ""
            fixes.append(f"lower dirty_graceful_timeout{fits} (or leave it unset: graceful gives it what is left)")
        if gt_derived:
            fixes.append("lower GRACEFUL_SHUTDOWN_DELAY, GRACEFUL_DRAIN_TIMEOUT or GRACEFUL_HOOK_TIMEOUT")
        fixes.append("raise GRACEFUL_GRACE_PERIOD (and terminationGracePeriodSeconds)")
        return f"graceful: {what}: {', or '.join(fixes)}"


def derived_graceful_timeout(drain_timeout: float, longest_cleanup: float) -> int:
    """Gunicorn's ``graceful_timeout`` when the user leaves it unset: a worker's drain and cleanup, and the margin.

    ``longest_cleanup``: the longest cleanup task the master knows of, at least
    ``hook_timeout`` (what a task a worker registers later gets by default).
    """
    return math.ceil(drain_timeout + longest_cleanup + BUDGET_MARGIN)


def derived_dirty_graceful_timeout(room: float) -> int:
    """Gunicorn 27's ``dirty_graceful_timeout`` when the user leaves it unset: the whole seconds in ``room``.

    ``room`` is :meth:`Budget.room_after` Gunicorn's ``graceful_timeout``: the
    dirty pool stops after the HTTP workers, when the requests that used it
    are done, so it gets what the grace period has left (0 when nothing is:
    :meth:`Budget.graceful_timeout_overrun` refuses that).
    """
    return max(0, math.floor(room))


def graceful_timeout_problem(graceful_timeout: float, drain_timeout: float, longest_cleanup: float) -> str | None:
    """Why Gunicorn would kill a worker mid-drain or mid-cleanup with this ``graceful_timeout``, or None."""
    needed = drain_timeout + longest_cleanup
    if graceful_timeout >= needed:
        return None
    return (
        f"graceful: Gunicorn's graceful_timeout {graceful_timeout:g}s is shorter than drain_timeout"
        f" {drain_timeout:g}s + longest cleanup task {longest_cleanup:g}s = {needed:g}s: workers would be"
        " killed mid-drain; raise graceful_timeout (or leave it unset) or lower them"
    )


def seconds_left(started: float | None, grace_period: float, now: float, cap: float) -> float:
    """Seconds (at most ``cap``, at least 0) before ``grace_period`` from ``started``, less the margin, runs out.

    ``started`` is the monotonic time of ShutdownInitiated; None (not shutting
    down) leaves the whole ``cap``.
    """
    if started is None:
        return cap
    return max(0.0, min(cap, started + grace_period - BUDGET_MARGIN - now))
