"""The lifecycle's signals: named one-shot facts that remember when they fired.

Each is kube-apiserver's ``lifecycleSignal``: ``fire()`` is idempotent,
``wait(timeout)`` is bounded, ``name`` says which fact it is. The owner
(:class:`graceful.Lifecycle`) gives each signal its clock and an ``on_fire``
callback, which it uses to log the line and tell its subscribers; a signal
knows nothing else of its owner.

Thread-safe. Never fire one from an OS signal handler (``fire`` takes a
lock): :mod:`graceful.process.trap` queues instead.

Under gevent's monkey-patching (a Gunicorn ``-k gevent`` worker) an event or
lock made before the patch is a real OS primitive: a greenlet waiting on one
would block the whole hub. :meth:`LifecycleSignal.renew_after_patch` gives
the signal ones of the kind ``threading`` makes once patched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from graceful.core.clock import Clock

__all__ = ["LifecycleSignal"]


class LifecycleSignal:
    """A named one-shot fact: fires once, remembers when (on its clock), can be waited on.

    ``on_fire(signal)`` runs on the firing thread, once, after the time is
    recorded and before the event is set.
    """

    def __init__(self, name: str, clock: Clock, on_fire: Callable[[LifecycleSignal], object] | None = None) -> None:
        self.name = name
        self._clock = clock
        self._on_fire = on_fire
        #: The underlying event (set once fired). An attribute, not a property: the request
        #: hot path reads it on every request (``environ["graceful.shutting_down"]``), and
        #: :meth:`renew_after_patch` may replace it.
        self.event = threading.Event()
        self._lock = threading.Lock()
        #: Monotonic time it fired, or None.
        self.fired_at: float | None = None
        #: True when it fired in another process and this one learned it (:meth:`fire`'s ``at``).
        self.learned = False

    def __repr__(self) -> str:
        return f"<LifecycleSignal {self.name} fired_at={self.fired_at}>"

    def is_set(self) -> bool:
        """True once fired: from the moment ``fire()`` records the time, before ``on_fire`` runs.

        So whoever learns of the signal from ``on_fire`` (a log line, a systemd
        status, a broadcast) finds it set. ``wait()`` and ``event`` waiters
        return only after ``on_fire``, as ``fire()`` says.
        """
        return self.fired_at is not None

    def fire(self, at: float | None = None) -> bool:
        """Fire the signal; return True for the call that fired it, False if it had fired.

        The time is recorded and ``on_fire`` called before the event is set, so
        whoever waits on it sees ``on_fire`` done. ``at``: the monotonic time
        another process fired it (a Gunicorn worker learning its master's
        fact, ``CLOCK_MONOTONIC`` being the machine's), marked :attr:`learned`;
        else now, on the signal's clock.
        """
        with self._lock:
            if self.fired_at is not None:
                return False
            self.learned = at is not None
            self.fired_at = self._clock.now() if at is None else at
        try:
            if self._on_fire is not None:
                self._on_fire(self)
        finally:
            self.event.set()
        return True

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds (on the signal's clock); return whether fired."""
        return self._clock.wait(self.event, timeout)

    def reinit_after_fork(self) -> None:
        """Replace the lock and renew the event's own lock in a forked child.

        A parent thread may have been inside ``Event.set()`` at the fork. The
        event object stays the same (whoever holds it keeps a working one);
        only its internal lock is renewed.
        """
        self._lock = threading.Lock()
        reinit = getattr(self.event, "_at_fork_reinit", None)  # CPython 3.9+, as threading uses it
        if reinit is not None:
            reinit()
        if self.fired_at is not None:
            self.event.set()

    def renew_after_patch(self) -> None:
        """Replace the event and the lock with new ones of the kind ``threading`` makes now.

        For a process that was monkey-patched (gevent) after the signal was
        made: the new event is cooperative, and set if the signal fired.
        Call it before any other thread (greenlet) uses the signal; whoever
        holds the old event keeps a stale one, so read :attr:`event` when
        needed rather than keeping it.
        """
        self._lock = threading.Lock()
        event = threading.Event()
        if self.fired_at is not None:
            event.set()
        self.event = event
