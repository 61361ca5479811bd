"""The shutdown delay's policy: when to stop serving with ``/readyz`` failing.

Fixed (``GRACEFUL_SHUTDOWN_DELAY_MIN`` unset): the delay is
``shutdown_delay``, as it always was. Adaptive (the floor set): the delay
ends at the first moment when

* the floor (``shutdown_delay_min``) has passed since ShutdownInitiated, and
* nothing has arrived for the quiet period (since the last arrival, or since
  ShutdownInitiated when nothing arrived),

and at the latest at ``shutdown_delay``, the maximum (the budget counts it).

The quiet period, unless ``GRACEFUL_QUIET_PERIOD`` sets it, is derived from
the traffic itself: twice the longest gap between two arrivals observed during
this shutdown, and at least :data:`QUIET_MIN`. Why that holds: until the
balancers have dropped the pod its traffic is the traffic it had before
SIGTERM (propagation is what the delay waits for), so every gap that *ended*
with an arrival is a gap of traffic that was still routed here; a quiet twice
as long as the longest one seen is, for steady traffic, the first sign that
the routing changed rather than a lull. The open gap never counts (it may be
the quiet itself). Heavy traffic observes only short gaps and gets
:data:`QUIET_MIN`; light traffic gets a longer quiet by itself. What it cannot
see is a lull longer than any seen so far before the endpoint is removed:
that is what the floor covers (the README states the trade-off).

Arrivals are requests counted after ShutdownInitiated (:mod:`graceful.core.stats`;
server-wide under Gunicorn through :class:`graceful.gunicorn.shared.ArrivalBoard`).
A new connection without a request is not counted: keep-alive clients get
``Connection: close`` from ShutdownInitiated on, so a connection that still
matters carries a request within milliseconds, and one that never does (a
balancer's TCP check) is not traffic to protect.

Pure policy: :class:`AdaptiveDelay` is told the time and the last arrival and
says how long to wait next; :func:`run_delay` is the loop the lifecycle runs
(under Gunicorn on the master's ``graceful-shutdown`` thread; under
``graceful serve`` on its own). Deadlines on the caller's clock.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable

from graceful.core.clock import Clock

__all__ = [
    "POLL_INTERVAL",
    "QUIET_FACTOR",
    "QUIET_MIN",
    "AdaptiveDelay",
    "DelayEnd",
    "DelayOutcome",
    "run_delay",
]

#: The derived quiet period is never shorter than this (seconds): kube-proxy and
#: EndpointSlice watchers apply a change in batches about a second apart.
QUIET_MIN = 1.0
#: The derived quiet period is this many times the longest gap seen between two arrivals.
QUIET_FACTOR = 2.0
#: Seconds between two looks at the last arrival: arrivals are written without a
#: syscall (no wake-up), so the delay looks. A gap is measured between the
#: arrival times themselves; this only bounds how much several arrivals
#: between two looks can merge into one gap (heavy traffic: gaps <= this).
POLL_INTERVAL = 0.05


class DelayEnd(str, enum.Enum):
    """Why the shutdown delay ended."""

    #: The fixed delay (no floor set) ran out.
    FIXED = "fixed"
    #: The floor had passed and nothing arrived for the quiet period.
    QUIET = "quiet"
    #: The maximum was reached with traffic still arriving.
    MAXIMUM = "maximum"


@dataclasses.dataclass(frozen=True)
class DelayOutcome:
    """How one shutdown delay ended; times in seconds since ShutdownInitiated.

    ``quiet_period`` is the one in force at the end (derived or set; None for
    a fixed delay); ``last_arrival`` the last arrival seen, None if none.
    """

    end: DelayEnd
    ended_at: float
    last_arrival: float | None
    quiet_period: float | None
    floor: float | None
    maximum: float

    def describe(self) -> str:
        """One phrase for logs and the record, e.g. ``quiet for 1.0 s after the last arrival at 1.7 s``."""
        last = "" if self.last_arrival is None else f", the last at {self.last_arrival:.1f} s"
        if self.end is DelayEnd.QUIET:
            assert self.quiet_period is not None
            if self.last_arrival is None:
                return f"quiet for {self.quiet_period:.1f} s: nothing arrived after ShutdownInitiated"
            return f"quiet for {self.quiet_period:.1f} s after the last arrival at {self.last_arrival:.1f} s"
        if self.end is DelayEnd.MAXIMUM and self.last_arrival is None:
            return f"the {self.maximum:g} s maximum reached before a quiet period of {self.quiet_period:.1f} s"
        if self.end is DelayEnd.MAXIMUM:
            return (
                f"the {self.maximum:g} s maximum reached with traffic still arriving{last}:"
                " a load balancer still routes here"
            )
        return f"the fixed {self.maximum:g} s delay{last}"

    def to_json(self) -> dict[str, object]:
        """As JSON for the shutdown record."""
        return {
            "end": self.end.value,
            "ended_s": round(self.ended_at, 6),
            "last_arrival_s": None if self.last_arrival is None else round(self.last_arrival, 6),
            "quiet_period_s": self.quiet_period,
            "floor_s": self.floor,
            "maximum_s": self.maximum,
            "text": self.describe(),
        }


class AdaptiveDelay:
    """The adaptive delay's state for one shutdown starting at ``t0`` (monotonic s).

    ``quiet_period`` None: derived from the gaps observed (see the module
    docstring). Not thread-safe: one thread (the lifecycle's shutdown thread)
    calls :meth:`observe` and :meth:`next_wait`.
    """

    def __init__(self, t0: float, floor: float, maximum: float, quiet_period: float | None = None) -> None:
        self.t0 = t0
        self.floor = floor
        self.maximum = maximum
        self.fixed_quiet = quiet_period
        #: The latest arrival seen (monotonic s), None before the first.
        self.last_arrival: float | None = None
        #: The longest gap (s) that ended with an arrival; the first is measured from ``t0``.
        self.longest_gap = 0.0

    @property
    def quiet_period(self) -> float:
        """The quiet period in force now (s)."""
        if self.fixed_quiet is not None:
            return self.fixed_quiet
        return max(QUIET_MIN, QUIET_FACTOR * self.longest_gap)

    def observe(self, last_arrival: float | None) -> None:
        """Take the latest arrival time (monotonic s) as read now; older or unchanged readings change nothing."""
        if last_arrival is None or last_arrival < self.t0:
            return
        previous = self.t0 if self.last_arrival is None else self.last_arrival
        if self.last_arrival is not None and last_arrival <= self.last_arrival:
            return
        self.longest_gap = max(self.longest_gap, last_arrival - previous)
        self.last_arrival = last_arrival

    def _quiet_end(self) -> float:
        """When the floor and the quiet period are both over (monotonic s), unless something arrives first."""
        quiet_from = self.t0 if self.last_arrival is None else self.last_arrival
        return max(self.t0 + self.floor, quiet_from + self.quiet_period)

    def end_at(self) -> float:
        """When the delay ends (monotonic s) unless something arrives first."""
        return min(self.t0 + self.maximum, self._quiet_end())

    def next_wait(self, now: float) -> float | None:
        """Seconds to wait before looking again, or None: the delay is over at ``now``."""
        left = self.end_at() - now
        if left <= 0:
            return None
        return min(left, POLL_INTERVAL)

    def outcome(self, now: float) -> DelayOutcome:
        """Why the delay ended at ``now``."""
        # Compared as the end was computed (no subtraction): a quiet that ends exactly at the maximum is a quiet end.
        quiet = self._quiet_end() <= self.t0 + self.maximum
        return DelayOutcome(
            end=DelayEnd.QUIET if quiet else DelayEnd.MAXIMUM,
            ended_at=now - self.t0,
            last_arrival=None if self.last_arrival is None else self.last_arrival - self.t0,
            quiet_period=self.quiet_period,
            floor=self.floor,
            maximum=self.maximum,
        )


def run_delay(
    clock: Clock,
    t0: float,
    maximum: float,
    last_arrival: Callable[[], float | None],
    floor: float | None = None,
    quiet_period: float | None = None,
) -> DelayOutcome:
    """Wait out the shutdown delay that began at ``t0`` on ``clock``; return how it ended.

    ``floor`` None: the fixed delay of ``maximum`` seconds. Otherwise the
    adaptive delay, reading ``last_arrival()`` (monotonic s, None if none)
    every :data:`POLL_INTERVAL`. Every wait is bounded; the whole is bounded
    by ``maximum`` on ``clock``. Runs on the calling thread.
    """
    never = threading.Event()  # nothing sets it: the waits are the clock's bounded waits
    if floor is None:
        clock.wait(never, t0 + maximum - clock.now())
        last = last_arrival()
        return DelayOutcome(
            end=DelayEnd.FIXED,
            ended_at=clock.now() - t0,
            last_arrival=None if last is None or last < t0 else last - t0,
            quiet_period=None,
            floor=None,
            maximum=maximum,
        )
    policy = AdaptiveDelay(t0, floor, maximum, quiet_period)
    while True:
        policy.observe(last_arrival())
        now = clock.now()
        wait = policy.next_wait(now)
        if wait is None:
            return policy.outcome(now)
        clock.wait(never, wait)
