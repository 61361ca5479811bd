"""Time source for every timed wait in graceful.

Deadlines use ``time.monotonic()``; every wait is on an ``Event`` with a
timeout. Injecting another :class:`Clock` (``graceful.testing.FakeClock``)
lets tests run a whole shutdown timeline without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "MonotonicClock", "Waitable", "unix_time"]

# Unix time minus monotonic time, taken once (at import; a Gunicorn worker inherits the master's),
# so that every process converts a monotonic reading to the same wall-clock time.
_UNIX_OFFSET = time.time() - time.monotonic()


class Waitable(Protocol):
    """What a clock waits on: a ``threading.Event``, or a condition polled like one."""

    def is_set(self) -> bool:
        """True once the awaited thing has happened."""

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for it; return whether it happened."""


class Clock(Protocol):
    """What graceful needs from time: a monotonic reading and a bounded wait."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""

    def wait(self, event: Waitable, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``event``; return whether it is set."""


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``Event.wait``. Thread-safe."""

    def now(self) -> float:
        """Return ``time.monotonic()``."""
        return time.monotonic()

    def wait(self, event: Waitable, timeout: float) -> bool:
        """Block on ``event`` for at most ``timeout`` seconds."""
        return event.wait(max(0.0, timeout))


def unix_time(monotonic: float) -> float:
    """The Unix time of a ``time.monotonic()`` reading (for metrics and records; deadlines stay monotonic).

    The offset between the two clocks is taken once, so a wall-clock step
    (NTP) after start-up does not move what was recorded.
    """
    return monotonic + _UNIX_OFFSET
