"""A wait group for in-flight requests, with Kubernetes ``SafeWaitGroup`` semantics.

``add`` after ``wait`` has begun raises :class:`WaitGroupClosed`, so a request
that arrives after the drain began is refused instead of being silently missed.

A ``collections.deque`` holds one token per unit of work; its ``append`` and
``pop`` are atomic C calls, so counting takes no lock. ``add`` returns the
callable that ends its unit (a :class:`Release`); calling it again does
nothing, so a response closed twice cannot end another request's count.

The request hot path (``GracefulMiddleware``, every request) uses the
unchecked pair :attr:`SafeWaitGroup.enter` / :attr:`SafeWaitGroup.leave`
instead: the deque's own ``append`` and ``pop``, so that no Python code of
ours runs at the end of a Flask request (measured: each frame of ours costs
several times its own weight inside Flask's; see bench/README.md). Such a
release cannot wake a waiter, so ``wait`` looks at the count every
:data:`POLL_INTERVAL` seconds; the drain ends at most that much after the
last request. Every method is safe from any thread (under Gunicorn: a
worker's request threads add and release; ``wait`` runs in the worker's
main thread from ``worker_exit``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graceful.core.clock import Waitable

__all__ = ["POLL_INTERVAL", "ClosesOnce", "Release", "SafeWaitGroup", "WaitGroupClosed"]

#: Seconds between two looks at the count while ``wait`` waits.
POLL_INTERVAL = 0.005


class WaitGroupClosed(RuntimeError):
    """``add`` was called after waiting began: the caller must refuse the work."""


class SafeWaitGroup:
    """Counts in-flight work; refuses new work once waiting has begun.

    ``release = group.add()`` counts one unit, ``release()`` ends it (later
    calls do nothing), ``group.wait(timeout)`` stops new work and waits for
    the count to reach zero.
    """

    def __init__(self) -> None:
        self._tokens: deque[None] = deque()
        #: True once :meth:`wait` has been called; ``add`` raises from then on. Read it, never set it.
        self.waiting = False
        #: The hot path's unchecked ``add``: ``enter(None)`` counts one unit (the deque's own
        #: ``append``: a bound C call; a ``functools.partial`` around it measured 175 more
        #: instructions per request, ``bench/instructions.py``). The caller must then read
        #: :attr:`waiting` and, if it is set (the drain began), call :attr:`leave` at once
        #: and refuse the work; otherwise exactly one ``leave()`` ends the unit later.
        self.enter: Callable[[None], None] = self._tokens.append
        #: Ends one unit counted by :attr:`enter`; the caller guarantees one call per unit.
        self.leave: Callable[[], object] = self._tokens.pop
        self._emptied = _Emptied(self._tokens)

    @property
    def count(self) -> int:
        """The number of units added and not yet released."""
        return len(self._tokens)

    def add(self) -> Callable[[], None]:
        """Count one unit of work and return its release; raise :class:`WaitGroupClosed` if waiting began."""
        self._tokens.append(None)
        # Checked after the append: a waiter that set the flag before our append
        # is seen here, one that sets it after sees our token. Either way
        # nothing slips past the drain.
        if self.waiting:
            self._tokens.pop()
            raise WaitGroupClosed("wait group is draining: no new work accepted")
        return Release(self._tokens.pop)

    def wait(
        self,
        timeout: float,
        waiter: Callable[[Waitable, float], bool] | None = None,
    ) -> bool:
        """Stop accepting ``add`` and wait up to ``timeout`` seconds for the count to reach 0.

        Returns True when drained, False on timeout. May be called again (for
        example with a longer timeout); ``add`` stays refused. ``waiter`` is a
        clock's ``wait`` (tests pass a fake clock's).
        """
        self.waiting = True
        if waiter is None:
            return self._emptied.wait(max(0.0, timeout))
        return waiter(self._emptied, timeout)


class ClosesOnce:
    """Mixin: ``close()`` runs ``_before`` (if any), then ``_release``, the first time only.

    Later calls do nothing, so a response that a server closes twice ends its
    request's count once, and never another request's. Slot-less, so a
    ``list`` or ``itertools.chain`` subclass can mix it in (the middleware's
    response wrappers do); the class that mixes it in provides the two
    attributes, ``_before`` as a class attribute ``None`` where it has none.
    """

    __slots__ = ()
    _before: Callable[[], object] | None
    _release: Callable[[], object] | None

    def close(self) -> None:
        """Run ``_before`` then ``_release``, once; ``_release`` runs even when ``_before`` raises."""
        release = self._release
        if release is None:
            return
        self._release = None  # type: ignore[misc]  # the class that mixes this in has the slot
        try:
            before = self._before
            if before is not None:
                before()
        finally:
            release()


class Release(ClosesOnce):
    """A callable that ends one unit once: ``before()`` first (when given), then ``release()``."""

    __slots__ = ("_before", "_release")

    def __init__(self, release: Callable[[], object], before: Callable[[], object] | None = None) -> None:
        self._release = release
        self._before = before

    def __call__(self) -> None:
        """The same as :meth:`close`."""
        self.close()


class _Emptied:
    """The "nothing in flight" condition, with the ``is_set``/``wait`` of a ``threading.Event``.

    A clock waits on it as on an event (``graceful.core.clock.Clock.wait``); its
    ``wait`` looks at the count every :data:`POLL_INTERVAL` seconds.
    """

    def __init__(self, tokens: deque[None]) -> None:
        self._tokens = tokens

    def is_set(self) -> bool:
        """True when nothing is in flight."""
        return not self._tokens

    def wait(self, timeout: float | None = None) -> bool:
        """Return True as soon as nothing is in flight, False after ``timeout`` seconds."""
        if timeout is None:
            raise ValueError("graceful waits are bounded: pass a timeout")
        deadline = time.monotonic() + timeout
        while self._tokens:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(POLL_INTERVAL, remaining))
        return True
