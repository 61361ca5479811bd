"""The gthread worker's stop, driven by graceful so that no keep-alive client is reset; Gunicorn 22-27.

Runs in a gthread worker process: set up in ``post_worker_init`` (main
thread), counted in ``pre_request`` (request threads), carried out by the
worker's ``graceful-stop`` thread.

Why: once a gthread worker sets ``alive = False`` (SIGTERM, or its own
``max_requests`` count), Gunicorn 22-26 close keep-alive connections whose
last response said ``Connection: keep-alive``: the client, sending its next
request on it at once, gets a reset or "remote end closed connection
without response". 22 and 23 also drop the connections still in the poller
(idle, or accepted but not yet read). 27.0.1 keeps such connections two
seconds more and answers them with ``Connection: close``. Forcing
``Connection: close`` on requests already running does not help: their
headers may be out already, and a close after a keep-alive response is the
very race.

So graceful takes the stop over, on every release alike:

1. ``max_requests``: Gunicorn's own counter is switched off
   (``worker.max_requests`` = ``sys.maxsize``, after keeping the jittered
   limit it chose); ``pre_request`` counts, and the request that reaches the
   limit gets ``Connection: close`` and starts the stop.
2. SIGTERM does not reach Gunicorn's handler at once: the worker's
   ``graceful-stop`` thread carries out the stop and calls it at the end.
3. The stop: every request from now on gets ``Connection: close``
   (``pre_request``); the worker stops accepting (24+: ``worker_connections
   = 0``, and its main loop takes the listeners out of its poller itself;
   22/23: the listeners leave the poller under the worker's lock, as
   Gunicorn registers connections from other threads); while ``alive``
   stays True Gunicorn serves every kept-alive connection's next request,
   closing it after, and closes idle ones at their keep-alive timeout, as in
   normal operation; once the main loop has finished the accepts it may
   have begun before (:meth:`GthreadStop.stop`) and no connection is left
   (``nr_conns == 0``), or the drain's deadline has come, Gunicorn's SIGTERM
   handler runs and its main loop is woken (24+: its method queue; 22/23: a
   pipe of ours in its poller), and it stops with nothing left to lose.

Each Gunicorn internal used here is looked for first (:meth:`GthreadStop.install`):
a release without one of them gets Gunicorn's own stop, with one warning.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import selectors
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["GthreadStop", "stop_accepting_22"]

logger = logging.getLogger(__name__)

#: Seconds between two looks at the worker's open connections while they finish:
#: Gunicorn offers no event for "no connection left".
CONNECTIONS_POLL = 0.01


def _nothing() -> None:
    """A callback that only wakes the main loop (Gunicorn 24+'s method queue)."""


def stop_accepting_22(worker: Any) -> None:
    """Gunicorn 22/23 gthread: take the listeners out of the worker's poller, under its lock.

    Any thread. The sockets stay open (another process may serve them).
    Twice, or a listener already gone, is harmless.
    """
    with worker._lock:
        for sock in worker.sockets:
            with contextlib.suppress(KeyError, ValueError, OSError):  # not registered, or closed
                worker.poller.unregister(sock)


class _MainLoop24:
    """Gunicorn 24-27: the main loop stops accepting by itself once ``nr_conns >= worker_connections``."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def stop_accepting(self) -> None:
        # The loop compares the two on its own thread and then unregisters the listeners there.
        self.worker.worker_connections = 0
        self.wake()

    def wake(self) -> None:
        self.worker.method_queue.defer(_nothing)

    def wait_for_late_accepts(self, deadline: float, pause: threading.Event) -> None:
        """Nothing to wait for: a connection 24+'s loop accepts late is served by its own stop.

        After its loop, Gunicorn 24+ keeps dispatching events until
        ``nr_conns`` is 0 (bounded by ``graceful_timeout``), so a connection
        its ``select()`` found just before the listeners left is served there.
        """


class _MainLoop22:
    """Gunicorn 22/23: listeners leave the poller by hand; a pipe of ours in the poller wakes the loop."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        #: Turns of the main loop that read our pipe; written by its thread only.
        self.turns = 0
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        with worker._lock:  # 22/23 register with the poller from request threads under this lock
            worker.poller.register(self._read, selectors.EVENT_READ, self._woken)

    def _woken(self, _fileobj: object) -> None:
        # Worker main thread, called by the poller: the byte ends its select(), and the turn is counted.
        with contextlib.suppress(OSError):
            os.read(self._read, 64)
        self.turns += 1

    def stop_accepting(self) -> None:
        stop_accepting_22(self.worker)

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe wakes it as well
            os.write(self._write, b"x")

    def wait_for_late_accepts(self, deadline: float, pause: threading.Event) -> None:
        """Return once the main loop has done every accept it may have begun before it stopped accepting.

        Its ``select()`` may have found a listener readable just before the
        listeners left its poller: it accepts that connection after, and
        ``nr_conns`` reads 0 until it does. Handing over then would lose it:
        22/23's stop closes the poller with the connection waiting in it,
        unread. The turn of the loop that reads our pipe may be the very turn
        that began before (the pipe appears once per turn); the next one that
        reads it began after, so two are waited for, each bounded by ``deadline``.
        """
        for _ in range(2):
            turn = self.turns + 1
            self.wake()
            while self.turns < turn and time.monotonic() < deadline:
                pause.wait(CONNECTIONS_POLL)


def _missing(worker: Any) -> str | None:
    """The first Gunicorn internal the takeover needs that ``worker`` lacks, or None."""
    for name in ("nr_conns", "max_requests"):
        if not isinstance(getattr(worker, name, None), int):
            return name
    if _is_24(worker) or _is_22(worker):
        return None
    return "set_accept_enabled, worker_connections and method_queue (24+), or poller and _lock (22/23)"


def _is_24(worker: Any) -> bool:
    return (
        callable(getattr(worker, "set_accept_enabled", None))
        and isinstance(getattr(worker, "worker_connections", None), int)
        and callable(getattr(getattr(worker, "method_queue", None), "defer", None))
    )


def _is_22(worker: Any) -> bool:
    poller = getattr(worker, "poller", None)
    lock = getattr(worker, "_lock", None)
    return (
        callable(getattr(poller, "register", None))
        and callable(getattr(poller, "unregister", None))
        and hasattr(lock, "__enter__")
        and isinstance(getattr(worker, "sockets", None), list)
    )


class GthreadStop:
    """One gthread worker's stop (see the module docstring); made by :meth:`install`."""

    def __init__(self, worker: Any, loop: _MainLoop24 | _MainLoop22) -> None:
        self.worker = worker
        self._loop = loop
        #: The limit Gunicorn chose for this worker (max_requests plus its jitter; sys.maxsize if none).
        self.max_requests: int = worker.max_requests
        # Gunicorn's own count must never stop the worker: graceful's does.
        worker.max_requests = sys.maxsize
        self._served = itertools.count(1)

    @classmethod
    def install(cls, worker: Any) -> GthreadStop | None:
        """``post_worker_init`` (main thread): take the stop over, or None (warned) if an internal is missing."""
        missing = _missing(worker)
        if missing is not None:
            logger.warning(
                "graceful: worker %d: this Gunicorn's gthread worker has no %s: it recycles and stops as"
                " Gunicorn does, and keep-alive clients may see resets when it does",
                os.getpid(),
                missing,
            )
            return None
        return cls(worker, _MainLoop24(worker) if _is_24(worker) else _MainLoop22(worker))

    def count(self) -> bool:
        """``pre_request`` (request thread): count one request; True for the one that reaches max_requests."""
        # itertools.count's next() is one C call: no two threads get the same number.
        return next(self._served) == self.max_requests

    def stop_accepting(self) -> None:
        """Stop taking new connections on the worker's listeners, leaving them open. Any thread."""
        self._loop.stop_accepting()

    def stop(self, deadline: float, gunicorn_term: Callable[[int, Any], object]) -> int:
        """``graceful-stop`` thread: stop accepting, let every connection finish, then Gunicorn's stop.

        Waits until the worker has no connection left, or until ``deadline``
        (monotonic). Gunicorn's own drain after that is bounded by what is
        left of it (this worker's copy of ``graceful_timeout``). Returns how
        many connections were still open when Gunicorn's stop began.
        """
        worker = self.worker
        self.stop_accepting()
        pause = threading.Event()
        self._loop.wait_for_late_accepts(deadline, pause)
        while worker.nr_conns > 0 and time.monotonic() < deadline:
            pause.wait(CONNECTIONS_POLL)
        left = int(worker.nr_conns)
        # Gunicorn's cfg.set validates a positive whole number of seconds.
        worker.cfg.set("graceful_timeout", max(1, math.ceil(deadline - time.monotonic())))
        gunicorn_term(signal.SIGTERM, None)
        self._loop.wake()
        return left
