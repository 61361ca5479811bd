"""One Gunicorn worker's stop: why, since when, and the ``graceful-stop`` thread that carries it out.

Runs in a worker process, every supported worker class, Gunicorn 22-27.
A worker stops either with its server (the master's shutdown: its
ShutdownInitiated fact came through the channel before the master's TERM) or on its own,
a *process stop*, while the server goes on serving: recycled
(``max_requests``), replaced on HUP, removed with TTOU, stopped with its
master while a USR2 peer serves, or killed by its timeout. A process stop
never touches the server's readiness; it logs
``graceful: worker PID stopping (REASON)`` (:mod:`.stop_reason`) from the
moment the worker knows, then its drain and its cleanup.

* ``post_worker_init`` (main thread): :meth:`ProcessStop.install` puts a
  SIGTERM handler in front of Gunicorn's and starts the ``graceful-stop``
  thread (a greenlet under gevent). The OS handler only records the time and
  writes a byte to a pipe; for sync and gevent it then calls Gunicorn's
  handler at once (``alive = False``: the worker leaves its loop as
  Gunicorn makes it); for gthread the thread calls it at the end of
  :class:`.recycling.GthreadStop`'s stop.
* ``pre_request`` (request thread): :meth:`ProcessStop.before_request`:
  ``Connection: close`` once stopping, and the ``max_requests`` count.
* the ``graceful-stop`` thread: wakes on the pipe, finds the reason, logs
  it, and stops the worker accepting (gthread: the whole takeover; gevent:
  its servers close at once; sync leaves its loop by itself).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from graceful.gunicorn.adapter.gevent import GeventServers
from graceful.gunicorn.adapter.worker import Worker
from graceful.gunicorn.channel import Kind
from graceful.gunicorn.http2 import Http2Drain
from graceful.gunicorn.recycling import GthreadStop
from graceful.gunicorn.stop_reason import StopReason

if TYPE_CHECKING:
    from graceful.gunicorn.asgi_stop import AsgiStop

__all__ = ["ProcessStop"]

logger = logging.getLogger(__name__)


class MasterFacts(Protocol):
    """What the master told this worker (:class:`~graceful.gunicorn.channel.WorkerChannel`)."""

    def fired(self, kind: Kind) -> bool:
        """True once the master sent the fact ``kind``."""

    def stop_reason(self) -> StopReason:
        """Why the master stops this worker, as it said last."""


class ProcessStop:
    """One worker's stop; made in ``post_fork``, installed in ``post_worker_init``."""

    def __init__(self, worker: Worker, facts: MasterFacts) -> None:
        self.worker = worker
        self.facts = facts
        #: Seconds the drain may take from the stop's start (the config's, once the app is loaded).
        self.drain_timeout = 0.0
        self.pid = os.getpid()
        #: The master that forked this worker (``post_fork``): a parent that changes is a master gone.
        self.forked_by = os.getppid()
        #: Monotonic time of this worker's SIGTERM, set by the OS handler.
        self.term_at: float | None = None
        #: Monotonic time the stop began (SIGTERM, max_requests reached, the timeout's SIGABRT).
        self.started_at: float | None = None
        #: Why, for a process stop; None while not stopping, and for the server's stop.
        self.reason: StopReason | None = None
        #: True once stopping: every response from now on gets ``Connection: close``.
        self.stopping = False
        #: Called once as the stop begins (by the thread that begins it): the worker's drain begins then.
        self.on_begin: Callable[[], object] = _nothing
        self.gthread: GthreadStop | None = None
        self.gevent: GeventServers | None = None
        #: An ASGI worker's stop, on its event loop (:mod:`.asgi_stop`); None for the WSGI classes.
        self.asgi: AsgiStop | None = None
        #: The worker's HTTP/2 draining (GOAWAY from the stop's start); None: it serves no HTTP/2.
        self.http2: Http2Drain | None = None
        self._gunicorn_term: Callable[[int, Any], object] = self._not_alive
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._lock = threading.Lock()

    @property
    def server_stop(self) -> bool:
        """True when this is the server's shutdown (stopping, with no reason of its own)."""
        return self.stopping and self.reason is None

    # -- worker main thread ------------------------------------------------------------

    def note_early_term(self) -> None:
        """``post_fork``: until :meth:`install`, a SIGTERM is noted (and :meth:`install` acts on it).

        Until Gunicorn installs its own handler the worker has the master's,
        which would queue the TERM into the master's (copied) signal queue,
        where nothing reads it: a worker forked just before the master stops
        it would miss its TERM. Gunicorn's ``init_signals`` then installs
        ``worker.handle_exit`` before it loads the app, well before
        ``post_worker_init``: that handler is wrapped here too, so a TERM
        while the app loads (HUP just after a fork) is noted with its reason.
        """
        signal.signal(signal.SIGTERM, self._on_early_term)
        self.worker.before_term_handler(self._on_early_term)

    def _on_early_term(self, _signum: int, _frame: FrameType | None) -> None:
        # Inside the OS signal handler: a plain attribute only.
        if self.term_at is None:
            self.term_at = time.monotonic()

    def install(
        self,
        drain_timeout: float,
        gthread: GthreadStop | None,
        gevent: GeventServers | None,
        http2: Http2Drain | None = None,
        asgi: AsgiStop | None = None,
    ) -> None:
        """``post_worker_init``: take SIGTERM over, start the ``graceful-stop`` thread (after gevent's patch).

        ``drain_timeout`` is the config's now that the app (which may
        configure the lifecycle) is loaded.
        """
        self.drain_timeout = drain_timeout
        self.gthread = gthread
        self.gevent = gevent
        self.http2 = http2
        self.asgi = asgi
        # Made now: under gevent, of the cooperative kind.
        self._lock = threading.Lock()
        handler = signal.getsignal(signal.SIGTERM)
        self._gunicorn_term = handler if callable(handler) else self._not_alive
        signal.signal(signal.SIGTERM, self._on_term)
        # Gunicorn keeps SIGTERM from interrupting system calls; signal.signal() just undid that.
        signal.siginterrupt(signal.SIGTERM, False)
        threading.Thread(target=self._run, name="graceful-stop", daemon=True).start()
        if self.term_at is not None:  # a TERM came while the worker booted
            self._on_term(signal.SIGTERM, None)

    def _not_alive(self, _signum: int, _frame: FrameType | None) -> None:
        # What every Gunicorn worker's SIGTERM handler does, should none be installed.
        self.worker.stop_loop()

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        # Inside the OS signal handler: a plain attribute, a pipe write, then Gunicorn's handler.
        if self.term_at is None:
            self.term_at = time.monotonic()
        self._wake()
        if self.gthread is None and self.http2 is None and self.asgi is None:
            # gthread, gevent serving HTTP/2, the ASGI workers: the graceful-stop thread calls it at the end.
            self._gunicorn_term(signum, frame)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: the thread is being woken already
            os.write(self._wake_write, b"s")

    # -- any thread ----------------------------------------------------------------------

    def begin(self, reason: StopReason | None, at: float | None = None) -> bool:
        """Start the stop once (``reason`` None: the server's); log a process stop's reason. True the first time."""
        with self._lock:
            if self.stopping:
                return False
            self.started_at = time.monotonic() if at is None else at
            self.reason = reason
            self.stopping = True
            self.on_begin()
            if reason is not None:
                # Under the lock: the main thread's own begin() at worker_exit waits for this
                # line, or a worker that has nothing to drain exits before the thread writes it.
                logger.info("graceful: worker %d stopping (%s)", self.pid, reason.value)
        if self.http2 is not None:
            self.http2.stop()  # GOAWAY on every HTTP/2 connection (most had it at ShutdownInitiated)
        return True

    def counts_requests(self) -> bool:
        """After :meth:`install`: True when ``pre_request`` counts requests (a max_requests limit is in force)."""
        if self.gthread is not None:
            limit = self.gthread.max_requests
        elif self.asgi is not None:
            limit = self.asgi.max_requests
        else:
            limit = self.worker.max_requests()
        return limit < sys.maxsize

    def reason_now(self) -> StopReason | None:
        """Why this worker stops, as far as it can tell now: None for the server's shutdown."""
        if self.facts.fired(Kind.SHUTDOWN_INITIATED):
            return None
        if self.term_at is None:  # no TERM: SIGQUIT/SIGINT, or the master is gone
            return StopReason.BY_MASTER
        return self.facts.stop_reason()

    def drain_time_left(self) -> float:
        """Seconds left of ``drain_timeout`` since the stop began (all of it if it has not)."""
        if self.started_at is None:
            return self.drain_timeout
        return max(0.0, self.started_at + self.drain_timeout - time.monotonic())

    def stop_accepting(self) -> None:
        """Stop taking connections on listeners another process also serves; they stay open.

        gthread: its listeners leave the poller; gevent: its servers close;
        an ASGI worker's servers close on its loop; sync serves every
        connection it accepts and leaves its loop at TERM.
        """
        if self.gthread is not None:
            self.gthread.stop_accepting()
        elif self.asgi is not None:
            self.asgi.stop_accepting_soon()
        elif self.gevent is not None:
            self.gevent.stop_accepting()

    # -- request thread ------------------------------------------------------------------

    def before_request(self, req: Any) -> None:
        """``pre_request``: ``Connection: close`` once stopping; the request reaching max_requests stops it."""
        if self.stopping:
            self.worker.force_close(req)
            return
        if self.gthread is not None:
            if self.gthread.count():
                req.force_close()
                self.begin(StopReason.RECYCLED)
                self._wake()
            return
        if self.asgi is not None:
            if self.asgi.reaches_max_requests(pending=1):
                self.worker.force_close(req)
                self.begin(StopReason.RECYCLED)
                self._wake()
            return
        # sync and gevent: Gunicorn counts after pre_request, and stops the worker at its limit itself.
        worker = self.worker
        if worker.requests_served() + 1 >= worker.max_requests():
            self.begin(StopReason.RECYCLED)
            self._wake()

    def on_tick(self) -> None:
        """Uvicorn's worker, on its loop at each tick (every 0.1 s): what Gunicorn's own worker loops look at."""
        self.check_max_requests()
        self.check_master()

    def check_max_requests(self) -> None:
        """Uvicorn's worker (no ``pre_request``), on its loop at each tick: stop once it served its limit."""
        if not self.stopping and self.asgi is not None and self.asgi.reaches_max_requests(pending=0):
            self.begin(StopReason.RECYCLED)
            self._wake()

    def check_master(self) -> None:
        """Uvicorn's worker, on its loop at each tick: stop, as at a TERM, once its master is gone.

        Gunicorn's own workers leave their loop when their parent changes
        ("Parent changed, shutting down"); Uvicorn's never looks, so an
        orphan (its master SIGKILLed) would serve on without a bound, holding
        the listeners. Its stop is the server's when the master had begun
        one, else ``stopped by the master`` (:meth:`reason_now`).
        """
        if not self.stopping and os.getppid() != self.forked_by:
            self.begin(self.reason_now())
            self._wake()

    # -- graceful-stop thread ------------------------------------------------------------

    def _run(self) -> None:
        while not self.stopping:
            readable, _, _ = select.select([self._wake_read], [], [], 1.0)
            if readable:
                with contextlib.suppress(OSError):
                    os.read(self._wake_read, 64)
            if self.term_at is not None:
                self.begin(self.reason_now(), at=self.term_at)
        if self.gthread is not None:
            assert self.started_at is not None
            left = self.gthread.stop(self.started_at + self.drain_timeout, self._term_after_http2)
            if left:
                logger.warning(
                    "graceful: worker %d: %d connection(s) still open at the drain's deadline", self.pid, left
                )
        elif self.gevent is not None:
            self.gevent.stop_accepting()
            if self.http2 is not None:
                self._gevent_http2_stop()
        elif self.asgi is not None:
            assert self.started_at is not None
            gunicorn_stop = lambda: self._gunicorn_term(signal.SIGTERM, None)  # noqa: E731
            http2 = self.http2
            abandoned = _nothing if http2 is None else lambda: http2.abandoned(self.pid)
            self.asgi.stop(self.started_at, self.drain_timeout, gunicorn_stop, abandoned)  # it names what is left

    def _gevent_http2_stop(self) -> None:
        """gevent serving HTTP/2: its connections close after their GOAWAY before Gunicorn's stop cuts them."""
        assert self.http2 is not None and self.started_at is not None
        deadline = self.started_at + self.drain_timeout
        self.http2.wait_for_connections(deadline, threading.Event())
        self.worker.bound_gunicorn_drain(deadline - time.monotonic())
        self._term_after_http2(signal.SIGTERM, None)

    def _term_after_http2(self, signum: int, frame: FrameType | None) -> None:
        # HTTP/2 streams still open now are abandoned (after their GOAWAY): counted and named first.
        if self.http2 is not None:
            self.http2.abandoned(self.pid)
        self._gunicorn_term(signum, frame)


def _nothing() -> None:
    """``ProcessStop.on_begin`` until the worker's part sets its own."""
