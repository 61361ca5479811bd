"""A wait group for in-flight requests, with Kubernetes ``SafeWaitGroup`` semantics.

``add`` after ``wait`` has begun raises :class:`WaitGroupClosed`, so a request
that arrives after the drain began is refused instead of being silently missed.

The hot path (``add``/``done`` with nobody waiting) takes no lock: a
``collections.deque`` holds one token per request, and its ``append``/``pop``
are atomic. Only a waiter uses an ``Event``, which ``done`` sets when the last
token leaves. Every method is O(1) and safe to call from any thread (under
Gunicorn: a worker's request threads call ``add``/``done``; ``wait`` runs in
the worker's main thread from ``worker_exit``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

__all__ = ["SafeWaitGroup", "WaitGroupClosed"]


class WaitGroupClosed(RuntimeError):
    """``add`` was called after waiting began: the caller must refuse the work."""


class SafeWaitGroup:
    """Counts in-flight work; refuses new work once waiting has begun."""

    def __init__(self) -> None:
        self._tokens: deque[None] = deque()
        self._waiting = False
        self._drained = threading.Event()

    @property
    def count(self) -> int:
        """The number of ``add`` calls not yet matched by ``done``."""
        return len(self._tokens)

    @property
    def waiting(self) -> bool:
        """True once :meth:`wait` has been called; ``add`` raises from then on."""
        return self._waiting

    def add(self) -> None:
        """Count one unit of work; raise :class:`WaitGroupClosed` if waiting began."""
        self._tokens.append(None)
        # Checked after the append: a waiter that set the flag before our append
        # is seen here, one that sets it after sees our token. Either way
        # nothing slips past the drain.
        if self._waiting:
            self._release()
            raise WaitGroupClosed("wait group is draining: no new work accepted")

    def done(self) -> None:
        """Mark one unit of work finished; raise ``ValueError`` if none was added."""
        # _release inlined: this runs once per request.
        try:
            self._tokens.pop()
        except IndexError:
            raise ValueError("SafeWaitGroup.done() called more often than add()") from None
        if self._waiting and not self._tokens:
            self._drained.set()

    def _release(self) -> None:
        self._tokens.pop()
        if self._waiting and not self._tokens:
            self._drained.set()

    def wait(
        self,
        timeout: float,
        waiter: Callable[[threading.Event, float], bool] | None = None,
    ) -> bool:
        """Stop accepting ``add`` and wait up to ``timeout`` seconds for the count to reach 0.

        Returns True when drained, False on timeout. May be called again (for
        example with a longer timeout); ``add`` stays refused. ``waiter`` is a
        clock's ``wait`` (tests pass a fake clock's).
        """
        self._waiting = True
        if not self._tokens:
            self._drained.set()
        if waiter is None:
            return self._drained.wait(max(0.0, timeout))
        return waiter(self._drained, timeout)
