"""Helpers for testing code that uses graceful: a signal recorder and a fake clock.

    recorder = SignalRecorder(lifecycle)
    lifecycle.request_shutdown()
    lifecycle.wait_finished(timeout=10)
    recorder.assert_order(["ShutdownInitiated", ..., "CleanupFinished"])

:func:`run_shutdown` runs a whole lifecycle under a :class:`FakeClock`, so a
30-second timeline takes a fraction of a second. Nothing here is needed in
production.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from graceful.core.clock import Waitable
from graceful.core.config import Config
from graceful.core.hooks import ShutdownReport
from graceful.core.lifecycle import Lifecycle, ServerAdapter

__all__ = ["FakeClock", "SignalRecorder", "run_shutdown"]


class FakeClock:
    """A clock whose waits do not sleep out their timeouts.

    ``wait(event, timeout)`` gives real threads ``settle`` real seconds at a
    time to set the event (so quick hooks finish as they would). When the
    event stays unset and this wait has the earliest deadline of all pending
    waits, the fake time jumps to that deadline and the wait times out; so
    concurrent waits time out in deadline order, as they would in real time.
    Thread-safe.
    """

    def __init__(self, start: float = 1000.0, settle: float = 0.05) -> None:
        self._now = start
        self._settle = settle
        self._lock = threading.Lock()
        self._pending: dict[object, float] = {}

    def now(self) -> float:
        """The fake monotonic time in seconds."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        with self._lock:
            self._now += seconds

    def wait(self, event: Waitable, timeout: float) -> bool:
        """Return True once ``event`` is set; jump to the deadline when this wait is due first."""
        token = object()
        with self._lock:
            deadline = self._now + max(0.0, timeout)
            self._pending[token] = deadline
        due_checks = 0
        try:
            while True:
                if event.wait(self._settle):
                    return True
                with self._lock:
                    if self._now >= deadline:
                        return event.is_set()
                    # Due first twice in a row, a settle period apart: no other
                    # thread is about to act, so time can jump.
                    due_checks = due_checks + 1 if deadline <= min(self._pending.values()) else 0
                    if due_checks >= 2:
                        self._now = deadline
                        return event.is_set()
        finally:
            with self._lock:
                del self._pending[token]


class SignalRecorder:
    """Records the order lifecycle signals fire in, with their (clock) times."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[str, float]] = []
        lifecycle.subscribe(self._record)

    def _record(self, name: str, at: float) -> None:
        with self._lock:
            self.events.append((name, at))

    @property
    def names(self) -> list[str]:
        """Signal names in firing order."""
        with self._lock:
            return [name for name, _ in self.events]

    def time_of(self, name: str) -> float:
        """When ``name`` fired; ``KeyError`` if it did not."""
        with self._lock:
            for event, at in self.events:
                if event == name:
                    return at
        raise KeyError(name)

    def assert_order(self, expected: Sequence[str]) -> None:
        """Fail with both lists unless the signals fired exactly in ``expected`` order."""
        actual = self.names
        assert actual == list(expected), f"signals fired in order {actual}, expected {list(expected)}"


def run_shutdown(
    lifecycle: Lifecycle | None = None,
    *,
    config: Config | None = None,
    adapter: ServerAdapter | None = None,
    timeout: float = 30.0,
) -> tuple[Lifecycle, SignalRecorder, ShutdownReport]:
    """Request shutdown on ``lifecycle`` (a new one on a :class:`FakeClock` if None) and wait for it.

    Returns the lifecycle, a recorder of its signals and the shutdown report.
    Raises ``AssertionError`` if CleanupFinished does not fire within
    ``timeout`` real seconds.
    """
    if lifecycle is None:
        lifecycle = Lifecycle(config or Config(), clock=FakeClock(), adapter=adapter)
    recorder = SignalRecorder(lifecycle)
    lifecycle.request_shutdown()
    finished = lifecycle.cleanup_finished.event.wait(timeout)
    assert finished, f"shutdown did not finish within {timeout}s; signals so far: {recorder.names}"
    return lifecycle, recorder, lifecycle.report
