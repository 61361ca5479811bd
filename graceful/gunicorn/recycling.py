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

The Gunicorn internals each step uses, and how they differ between
releases, are :mod:`graceful.gunicorn.adapter.gthread`'s, probed once
(:meth:`GthreadStop.install`): a release without one of them gets Gunicorn's
own stop, with one warning.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from graceful.gunicorn.adapter.gthread import GthreadLoop, probe_gthread

__all__ = ["GthreadStop"]

#: Seconds between two looks at the worker's open connections while they finish:
#: Gunicorn offers no event for "no connection left".
CONNECTIONS_POLL = 0.01


class GthreadStop:
    """One gthread worker's stop (see the module docstring); made by :meth:`install`."""

    def __init__(self, loop: GthreadLoop) -> None:
        self._loop = loop
        #: The limit Gunicorn chose for this worker (max_requests plus its jitter; sys.maxsize if none).
        # Gunicorn's own count must never stop the worker: graceful's does.
        self.max_requests = loop.take_over_max_requests()
        self._served = itertools.count(1)

    @classmethod
    def install(cls, worker: Any) -> GthreadStop | None:
        """``post_worker_init`` (main thread): take the stop over, or None (warned) if an internal is missing."""
        loop = probe_gthread(worker)
        return None if loop is None else cls(loop)

    def count(self) -> bool:
        """``pre_request`` (request thread): count one request; True for the one that reaches max_requests."""
        # itertools.count's next() is one C call: no two threads get the same number.
        return next(self._served) == self.max_requests

    def open_connections(self) -> int:
        """How many connections the worker holds now. Any thread."""
        return self._loop.open_connections()

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
        loop = self._loop
        loop.stop_accepting()
        pause = threading.Event()
        loop.wait_for_late_accepts(deadline, pause)
        while loop.open_connections() > 0 and time.monotonic() < deadline:
            pause.wait(CONNECTIONS_POLL)
        left = loop.open_connections()
        loop.bound_gunicorn_drain(deadline - time.monotonic())
        gunicorn_term(signal.SIGTERM, None)
        loop.wake()
        return left
