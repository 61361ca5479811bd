"""Gunicorn's gthread worker (ThreadWorker) as graceful's stop sees it: the internals of its main loop.

Runs in a gthread worker process. Probed once, in ``post_worker_init``
(main thread, after Gunicorn made its poller and queues), by
:func:`probe_gthread`. The logic of the stop lives in
:mod:`graceful.gunicorn.recycling`; this module only answers its questions
(how many connections are open) and carries out its steps (stop accepting,
wake the loop) the way each release needs:

* 24-27: the main loop stops accepting by itself once ``nr_conns >=
  worker_connections`` (it takes the listeners out of its poller on its own
  thread); a callable deferred on its ``method_queue`` wakes it.
* 22/23: the listeners leave the poller by hand, under the worker's lock
  (request threads register connections there too); a pipe of ours,
  registered in the poller, wakes the loop and counts its turns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import sys
import threading
import time
from typing import Any, Protocol

from graceful.gunicorn.adapter.release import bound_worker_drain, gunicorn_release

__all__ = ["GthreadLoop", "probe_gthread", "stop_accepting_22"]

logger = logging.getLogger(__name__)

#: Seconds between two looks at the main loop's turns while waiting for its late accepts.
TURN_POLL = 0.01


class GthreadLoop(Protocol):
    """What the gthread stop needs from the worker's main loop (any thread unless said)."""

    def take_over_max_requests(self) -> int:
        """Switch Gunicorn's own ``max_requests`` count off; return the limit it chose (with its jitter)."""

    def open_connections(self) -> int:
        """How many connections the worker holds now (accepted, keep-alive, or serving)."""

    def stop_accepting(self) -> None:
        """Stop taking new connections on the worker's listeners, leaving them open."""

    def wake(self) -> None:
        """Wake the main loop from its ``select()``."""

    def wait_for_late_accepts(self, deadline: float, pause: threading.Event) -> None:
        """Return once the loop did every accept it may have begun before it stopped accepting."""

    def bound_gunicorn_drain(self, seconds: float) -> None:
        """Bound Gunicorn's own drain after its SIGTERM handler runs (this worker's ``graceful_timeout``)."""


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


class _Common:
    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def take_over_max_requests(self) -> int:
        limit = int(self.worker.max_requests)
        self.worker.max_requests = sys.maxsize
        return limit

    def open_connections(self) -> int:
        return int(self.worker.nr_conns)

    def bound_gunicorn_drain(self, seconds: float) -> None:
        bound_worker_drain(self.worker, seconds)


class _MainLoop24(_Common):
    """Gunicorn 24-27: the main loop stops accepting by itself once ``nr_conns >= worker_connections``."""

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


class _MainLoop22(_Common):
    """Gunicorn 22/23: listeners leave the poller by hand; a pipe of ours in the poller wakes the loop."""

    def __init__(self, worker: Any) -> None:
        super().__init__(worker)
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
                pause.wait(TURN_POLL)


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


def probe_gthread(worker: Any) -> GthreadLoop | None:
    """``post_worker_init`` (main thread): the worker's main loop, or None (warned once) when it lacks an internal.

    Without them the worker recycles and stops as Gunicorn makes it.
    """
    missing = _missing(worker)
    if missing is not None:
        logger.warning(
            "graceful: worker %d: Gunicorn %s's gthread worker has no %s: it recycles and stops as"
            " Gunicorn does, and keep-alive clients may see resets when it does",
            os.getpid(),
            gunicorn_release(),
            missing,
        )
        return None
    return _MainLoop24(worker) if _is_24(worker) else _MainLoop22(worker)
