"""Each Gunicorn worker's steps of the shutdown; their order is :mod:`graceful.core.sequences`'s.

Runs in a worker process (sync, gthread, gevent; Gunicorn 22-27; the ASGI
workers ``-k asgi`` and Uvicorn's: :mod:`.asgi_stop`), forked
from the master with a copy of ``graceful.default_lifecycle``:

* ``post_fork`` (worker main thread): the lifecycle becomes a worker's
  (``Lifecycle.become_worker``): fresh locks; pre-shutdown hooks belong
  to the master, so registering one here fails with the fix in the message;
* ``post_worker_init`` (worker main thread, app loaded; under gevent after
  its monkey-patching): the budget is checked with the app's own cleanup
  tasks, a gevent worker is prepared (:mod:`.adapter.gevent`), the app is
  wrapped in :class:`GracefulMiddleware` (an ASGI app in
  :class:`~graceful.asgi.GracefulASGIMiddleware`, unless it has one), post-start hooks start, the
  ``graceful-watch`` thread runs :func:`~graceful.core.sequences.worker_watch`
  (the master's facts, read from the worker's channel, :mod:`.channel`,
  set the worker's ShutdownInitiated and NotAcceptingNewRequests at the
  master's time), and the worker's stop is taken over (:mod:`.process_stop`;
  gthread: :mod:`.recycling`);
* ``pre_request`` (a request thread): ``Connection: close`` once shutdown
  began, or once this worker is stopping;
* ``worker_abort`` (inside the SIGABRT handler, the worker's timeout): noted;
* ``worker_exit`` (worker main thread, after Gunicorn stopped accepting, on
  every exit): :func:`~graceful.core.sequences.worker_exit`: wait for the
  in-flight requests (bounded by drain_timeout), run the cleanup tasks,
  send this worker's part of the shutdown record to the master (in a server
  shutdown; a process stop only logs it, at DEBUG), exit. The server's
  shutdown logs the lifecycle's signals; a process stop (recycled, HUP,
  TTOU, upgrade, timeout) logs the worker's own lines. It also runs in the
  master when Gunicorn finds a worker already gone; that call is ignored.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graceful.core.budget import graceful_timeout_problem
from graceful.core.config import ConfigError
from graceful.core.lifecycle import Lifecycle, SignalListener
from graceful.core.record import part_of
from graceful.core.sequences import worker_exit, worker_watch
from graceful.core.signals import LifecycleSignal
from graceful.core.stats import REASON_REFUSED_STREAM
from graceful.gunicorn.adapter.refusal import WorkerRefused
from graceful.gunicorn.adapter.worker import Worker
from graceful.gunicorn.channel import REPORT_TIMEOUT, Kind, WorkerChannel
from graceful.gunicorn.config import refusal
from graceful.gunicorn.ends import in_flight_payload
from graceful.gunicorn.http2 import Http2Drain
from graceful.gunicorn.process_stop import ProcessStop
from graceful.gunicorn.recycling import GthreadStop
from graceful.gunicorn.shared import ArrivalBoard
from graceful.gunicorn.stop_reason import StopReason
from graceful.gunicorn.worker_classes import ASGI_KINDS
from graceful.http.apps import is_asgi_app
from graceful.process.exit import skip_exit_collections
from graceful.process.sockets import close_after_queue_drains
from graceful.wsgi.middleware import GracefulMiddleware

if TYPE_CHECKING:
    from graceful.gunicorn.asgi_stop import AsgiStop

#: Upper bound (s) on waiting for a worker's own accept queue to empty (reuse_port).
QUEUE_DRAIN_TIMEOUT = 5.0
#: How long (s) a worker that stopped accepting lets the connections it has just
#: accepted send their request before it reports (a client sends at once).
ACCEPTED_SETTLE = 0.05

__all__ = ["WorkerShutdown", "app_kind_refusal"]

#: The master's facts a worker learns, by the lifecycle signal each sets.
_FACTS = {"ShutdownInitiated": Kind.SHUTDOWN_INITIATED, "NotAcceptingNewRequests": Kind.NOT_ACCEPTING}

logger = logging.getLogger(__name__)

_IN_WORKER = (
    "a Gunicorn worker: pre-shutdown hooks run once per server, in the master, so register them"
    " in the Gunicorn config file (after `from graceful.conf import *`), or set preload_app = True"
)


def app_kind_refusal(app: object, kind: str | None) -> str | None:
    """Why this worker class (``kind``) must not serve ``app``: an app of the other protocol; None when it fits.

    Gunicorn's sync, gthread and gevent workers call the app as WSGI: an ASGI
    app would answer every request with 500; the ASGI workers (``-k asgi``
    and Uvicorn's) call it as ASGI: a WSGI app would. Worker main thread,
    once, at boot.
    """
    asgi = is_asgi_app(app)
    if kind in ASGI_KINDS and not asgi:
        return (
            f"graceful: the app is a WSGI app, but the {kind} worker class serves ASGI apps (every request would"
            " get a 500): use -k gthread, sync or gevent"
        )
    if kind not in ASGI_KINDS and asgi:
        return (
            f"graceful: the app is an ASGI app, but Gunicorn's {kind} worker class serves WSGI apps (every request"
            " would get a 500): use -k asgi or -k uvicorn_worker.UvicornWorker, or graceful serve module:app"
        )
    return None


class WorkerShutdown:
    """One worker's shutdown; kept on Gunicorn's worker (:func:`graceful.gunicorn.adapter.attach`)."""

    def __init__(
        self,
        worker: Worker,
        lifecycle: Lifecycle,
        channel: WorkerChannel,
        arrivals: ArrivalBoard,
        master_listener: SignalListener,
        own_listeners: bool = False,
        health_port: bool = False,
    ) -> None:
        self.worker = worker
        #: True when the master serves a health port: this worker sends it health and metrics records.
        self.health_port = health_port
        #: True when this worker bound its listeners itself (reuse_port, Gunicorn 24+).
        self.own_listeners = own_listeners
        self.pid = os.getpid()
        self.lifecycle = lifecycle
        #: This worker's end of its channel to the master.
        self.channel = channel
        lifecycle.become_worker(_IN_WORKER)
        # Arrivals during the shutdown go on the server's board too: the master's adaptive delay reads it.
        lifecycle.stats.publish_arrivals(arrivals.slot)
        # The master's reaction to signals (its facts to the workers, systemd) came along in the fork copy.
        lifecycle.unsubscribe(master_listener)
        #: Why and since when this worker stops (see graceful.gunicorn.process_stop).
        self.stop = ProcessStop(worker, channel)
        self.stop.on_begin = self._stop_begins
        #: True while ``pre_request`` has nothing to do: no shutdown, no stop, no max_requests to count
        #: (set in :meth:`start`; taken down, never raised again, by ShutdownInitiated and the stop's start).
        self.requests_unwatched = False
        self.stop.note_early_term()
        #: Set by ``worker_abort`` (inside the SIGABRT handler): the master killed it for its timeout.
        self.timed_out = False
        self.kind = worker.kind
        # True once post_worker_init is done: a worker that failed to boot only cleans up.
        self._booted = False
        #: Called in ``worker_exit`` after the drain and cleanup, before the process ends (its last metrics).
        self.at_exit: list[Callable[[], None]] = []
        # Gunicorn's own drain waits graceful_timeout, as long as the master
        # waits for the worker: bound it by drain_timeout (this worker's
        # copy of the settings only) to leave time for the cleanup tasks.
        self.graceful_timeout = worker.graceful_timeout()  # the master's wait
        #: The server's settings, as the master resolved them (inherited at fork), before the app loads.
        self.server_config = lifecycle.config
        worker.bound_gunicorn_drain(lifecycle.config.drain_timeout)
        # During a shutdown the master hears this worker's in-flight count as it changes: lost if it dies.
        self._reported_in_flight: int | None = None
        lifecycle.on_sample = self._report_in_flight

    def start(self) -> None:
        """``post_worker_init``: check the budget, wrap the app, start hooks, the watch and the stop."""
        lifecycle = self.lifecycle
        try:
            lifecycle.check_budget()
        except ConfigError as exc:
            raise WorkerRefused(f"graceful: {exc}") from None
        # The app may have configured the lifecycle as it loaded: the master must run the same server.
        problem = refusal(self.server_config, lifecycle.config)
        # The master checked with the cleanup tasks it could see; the app has registered its own now.
        problem = problem or graceful_timeout_problem(
            self.graceful_timeout, lifecycle.config.drain_timeout, lifecycle.longest_cleanup_timeout()
        )
        problem = problem or app_kind_refusal(self.worker.app(), self.kind)
        if problem is not None:
            raise WorkerRefused(problem)
        worker = self.worker
        if self.kind == "gevent":
            # First: the lifecycle's events and locks must be cooperative before anything uses them.
            lifecycle.renew_after_patch()
            self.channel.renew_after_patch()
        gevent = worker.gevent_servers()
        asgi = self._start_asgi()
        if asgi is None:
            worker.wrap_app(lambda app: GracefulMiddleware(app, lifecycle))
        lifecycle.resume_after_fork()  # forked during the delay: its sampler, now that threads may start
        loop = worker.gthread_loop()
        # A listener the master shut down: gthread's loop stops accepting (and waits in its poller); sync pauses.
        worker.guard_accept(None if loop is None else loop.stop_accepting)
        gthread = None if loop is None else GthreadStop(loop)
        self.stop.install(lifecycle.config.drain_timeout, gthread, gevent, self._start_http2(), asgi)
        self._unwatch_requests()
        lifecycle.run_post_start_hooks()
        threading.Thread(target=worker_watch, args=(self,), name="graceful-watch", daemon=True).start()
        self._booted = True

    def _start_asgi(self) -> AsgiStop | None:
        """An ASGI worker (``-k asgi``, Uvicorn's): its app wrapped, its stop on its loop (:mod:`.asgi_stop`).

        The app is wrapped in :class:`~graceful.asgi.GracefulASGIMiddleware`
        unless it already has one of this lifecycle. The lifespan shutdown
        must end before the cleanup tasks' share of the master's wait.
        """
        asgi_loop = self.worker.asgi_loop()
        if asgi_loop is None:
            return None
        # Imported here: a WSGI worker loads no asyncio.
        from graceful.asgi import GracefulASGIMiddleware, has_asgi_middleware
        from graceful.gunicorn.asgi_stop import EXIT_MARGIN, AsgiStop

        lifecycle = self.lifecycle
        if not has_asgi_middleware(self.worker.app(), lifecycle):
            self.worker.wrap_app(lambda app: GracefulASGIMiddleware(app, lifecycle))
        lifespan_until = self.graceful_timeout - lifecycle.longest_cleanup_timeout() - EXIT_MARGIN
        asgi = AsgiStop(asgi_loop, lifecycle, lifespan_until)
        asgi_loop.every_tick(self.stop.on_tick)
        return asgi

    def _unwatch_requests(self) -> None:
        """``post_worker_init``: ``pre_request`` does nothing until ShutdownInitiated or the stop's start.

        Unless a max_requests limit is in force (every request is counted).
        Set before the subscription, whose callback takes it down: a signal
        fired meanwhile is seen by the look after it.
        """
        self.requests_unwatched = not self.stop.counts_requests()
        self.lifecycle.subscribe(self._on_signal)
        if self.lifecycle.shutdown_initiated.is_set() or self.stop.stopping:
            self.requests_unwatched = False

    def _on_signal(self, name: str, _at: float) -> None:
        """The thread that fires a lifecycle signal: from ShutdownInitiated on, ``pre_request`` acts."""
        if name == self.lifecycle.shutdown_initiated.name:
            self.requests_unwatched = False

    def _stop_begins(self) -> None:
        """The stop began (the thread that began it): ``pre_request`` acts from now on, and the drain begins."""
        self.requests_unwatched = False
        self._drain_begins()

    def _drain_begins(self) -> None:
        """The stop began (the thread that began it): the requests in flight now are those its drain waits for.

        Gunicorn serves them before ``worker_exit`` (sync finishes its
        request, gthread and gevent their connections), so by then none is
        left to count. Timed on the lifecycle's clock, as the drain's end is.
        """
        lifecycle = self.lifecycle
        lifecycle.stats.drain_began(lifecycle.clock.now(), lifecycle.in_flight.count)

    def _report_in_flight(self, count: int) -> None:
        """The ``graceful-sampler`` thread, each sample of the shutdown: tell the master a new count (never waits)."""
        if count != self._reported_in_flight and self.channel.send(Kind.IN_FLIGHT, in_flight_payload(count)):
            self._reported_in_flight = count

    def _start_http2(self) -> Http2Drain | None:
        """HTTP/2 (Gunicorn 27+ gthread, gevent, ``-k asgi``): GOAWAY from ShutdownInitiated (:mod:`.http2`) or None."""
        stats = self.lifecycle.stats
        drain = Http2Drain(
            self.lifecycle.shutdown_initiated.name, on_refused=lambda: stats.rejected(REASON_REFUSED_STREAM)
        )
        if self.worker.http2(drain) is None:
            return None
        self.lifecycle.subscribe(drain.on_signal)
        self.at_exit.append(lambda: drain.log_counts(self.pid))
        return drain

    # -- graceful-watch thread: the steps of worker_watch --------------------------------------

    def learn(self, signal: LifecycleSignal) -> None:
        """See :meth:`WorkerSide.learn`: the master's fact, at the master's time (this worker's if it sent none)."""
        fact = _FACTS[signal.name]
        while not self.channel.wait_for(fact, timeout=1.0):
            pass  # a daemon thread: waits as long as the worker serves
        signal.fire(at=self.channel.fired_at(fact) or self.lifecycle.clock.now())

    def wait_to_close_listeners(self) -> None:
        """See :meth:`WorkerSide.wait_to_close_listeners`."""
        while not self.channel.wait_for(Kind.CLOSE_LISTENERS, timeout=1.0):
            pass  # the master never says so when it stops the listening itself: this daemon thread waits on

    def stop_listening(self) -> None:
        """See :meth:`WorkerSide.stop_listening`."""
        if self.own_listeners:
            # Nobody else accepts on them: close them once their queues are empty.
            close_after_queue_drains(self.worker.sockets(), QUEUE_DRAIN_TIMEOUT)
        else:
            self.stop.stop_accepting()
            # Let the connections it has just accepted send their request before it reports.
            time.sleep(ACCEPTED_SETTLE)

    def report_drained(self) -> None:
        """See :meth:`WorkerSide.report_drained`."""
        self.channel.send(Kind.DRAINED, timeout=REPORT_TIMEOUT)

    def report_listeners_closed(self) -> None:
        """See :meth:`WorkerSide.report_listeners_closed`."""
        self.channel.send(Kind.LISTENERS_CLOSED, timeout=REPORT_TIMEOUT)

    @property
    def stopping(self) -> bool:
        """True once this worker knows it will exit: its SIGTERM came, or its stop began (max_requests, timeout)."""
        return self.stop.term_at is not None or self.stop.stopping

    def before_request(self, req: Any) -> None:
        """``pre_request`` (request thread): close the connection after this response once shutting down.

        The hook calls it only when :attr:`requests_unwatched` is false; it
        looks again, for a caller that did not.
        """
        if self.requests_unwatched:
            return
        if self.lifecycle.shutdown_initiated.is_set():
            self.worker.force_close(req)
        self.stop.before_request(req)

    def abort(self) -> None:
        """``worker_abort`` (inside the SIGABRT handler): note it; :meth:`exit` acts on it."""
        self.timed_out = True

    def exit(self) -> None:
        """``worker_exit`` (worker main thread): :func:`~graceful.core.sequences.worker_exit`."""
        if os.getpid() != self.pid:  # Gunicorn also calls worker_exit in the master
            return
        worker_exit(self)

    # -- worker main thread, worker_exit: the steps of worker_exit ------------------------------

    @property
    def booted(self) -> bool:
        """See :meth:`WorkerSide.booted`."""
        return self._booted

    @property
    def server_stops(self) -> bool:
        """See :meth:`WorkerSide.server_stops`."""
        return self.stop.server_stop

    def begin_stop(self) -> float:
        """See :meth:`WorkerSide.begin_stop`."""
        stop = self.stop
        if self.timed_out:
            # The hung request is lost anyway and the master SIGKILLs soon: straight to the cleanup.
            stop.begin(StopReason.TIMEOUT)
            return 0.0
        stop.begin(stop.reason_now(), at=stop.term_at)
        return stop.drain_time_left()

    def stop_alone(self, drain_timeout: float) -> None:
        """See :meth:`WorkerSide.stop_alone`."""
        lifecycle = self.lifecycle

        def drained(done: bool) -> None:
            figures = lifecycle.stats.drain
            assert figures is not None and figures.ended_at is not None  # the drain has just ended
            if done and not figures.abandoned:  # else the lifecycle warned of the requests it abandoned
                took = figures.ended_at - figures.started_at
                logger.info(
                    "graceful: worker %d drained %d request(s) after waiting %.3fs", self.pid, figures.in_flight, took
                )

        lifecycle.stop_process(drain_timeout, on_drained=drained)
        assert self.stop.reason is not None  # not the server's stop
        logger.info("graceful: worker %d stopped (%s)", self.pid, self.stop.reason.value)

    def end(self) -> None:
        """See :meth:`WorkerSide.end`."""
        lifecycle = self.lifecycle
        for callback in self.at_exit:
            try:
                callback()
            except Exception:  # logged: never changes how the worker exits
                logger.exception("graceful: worker %d: a callback at exit failed", self.pid)
        if not lifecycle.report.ok:
            logger.warning("graceful: worker %d cleanup: %s", self.pid, lifecycle.report.summary())
        # Done: a later TERM (Gunicorn repeats it to the workers it stops, each pass of its loop) must
        # not turn this exit into a death by SIGTERM as the interpreter resets its handlers; ignored ones stay.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if lifecycle.hung_hooks or lifecycle.in_flight.count or self.kind == "gevent":
            # Interpreter exit would join hung hook threads and gthread's request threads
            # still serving abandoned requests; a gevent worker's takes most of a second more.
            lifecycle.exit(_exit_status())
        # Gunicorn's sys.exit follows: an exit without its collections over this whole heap (30-100 ms).
        skip_exit_collections()

    def leave_part(self) -> None:
        """See :meth:`WorkerSide.leave_part`.

        Sent before the worker exits, waiting (bounded) for room: the master
        reads this worker's channel to its end before it builds the record.
        """
        lifecycle = self.lifecycle
        try:
            part = part_of(lifecycle, self.pid)
        except ValueError:  # never began a shutdown nor drained: nothing to say
            return
        except Exception:  # logged: the record must never change how the worker exits
            logger.exception("graceful: worker %d could not build its part of the shutdown record", self.pid)
            return
        # The server's stop as the stop saw it (the master's fact): the watch thread may not have learned it yet.
        server_stops = self.stop.server_stop or lifecycle.shutdown_initiated.is_set()
        if server_stops or self.channel.fired(Kind.SHUTDOWN_INITIATED):
            if not self.channel.send_json(Kind.PART, part.to_json(), timeout=REPORT_TIMEOUT):
                logger.warning("graceful: worker %d could not send its part of the shutdown record", self.pid)
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("graceful: worker %d stopped on its own: %s", self.pid, json.dumps(part.to_json()))


def _exit_status() -> int:
    """The status Gunicorn is exiting this worker with (``worker_exit`` runs in its ``finally``), else 0."""
    exiting = sys.exc_info()[1]
    if isinstance(exiting, SystemExit) and isinstance(exiting.code, int):
        return exiting.code
    return 0
