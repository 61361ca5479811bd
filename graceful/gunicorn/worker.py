"""Each Gunicorn worker's part of the timeline: readiness, admission, drain and cleanup.

Runs in a worker process, forked from the master with a copy of
``graceful.default_lifecycle``:

* ``post_fork`` (worker main thread): fresh locks; pre-shutdown hooks belong
  to the master, so registering one here fails with the fix in the message;
* ``post_worker_init`` (worker main thread, app loaded): the budget is
  checked with the app's own cleanup tasks, the app is wrapped in
  :class:`GracefulMiddleware`, post-start hooks start, and the
  ``graceful-watch`` thread waits for the master's broadcasts to fire the
  worker's own ShutdownInitiated and NotAcceptingNewRequests;
* ``pre_request`` (a request thread): ``Connection: close`` once shutdown began;
* ``worker_exit`` (worker main thread, after Gunicorn stopped accepting, on
  every exit: shutdown, HUP, TTOU, max_requests recycling): wait for the
  in-flight requests (bounded by drain_timeout), run the cleanup tasks,
  leave this worker's part of the shutdown record for the master (in a
  server shutdown; a recycled worker only logs it, at DEBUG), exit. It also
  runs in the master when Gunicorn finds a worker already gone; that call is
  ignored.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from graceful.core.budget import graceful_timeout_problem
from graceful.core.lifecycle import Lifecycle, NullAdapter, SignalListener
from graceful.core.record import ROLE_WORKER, part_of
from graceful.core.registry import PRE_SHUTDOWN_HOOK
from graceful.gunicorn.shared import SharedState
from graceful.process.sockets import close_after_queue_drains
from graceful.wsgi.middleware import GracefulMiddleware

#: Upper bound (s) on waiting for a worker's own accept queue to empty (reuse_port).
QUEUE_DRAIN_TIMEOUT = 5.0
#: How long (s) a worker that stopped accepting lets the connections it has just
#: accepted send their request before it reports (a client sends at once).
ACCEPTED_SETTLE = 0.05

__all__ = ["WorkerShutdown"]

logger = logging.getLogger(__name__)

_IN_WORKER = (
    "a Gunicorn worker: pre-shutdown hooks run once per server, in the master, so register them"
    " in the Gunicorn config file (after `from graceful.conf import *`), or set preload_app = True"
)


def _stop_accepting(worker: Any) -> None:
    """Stop ``worker`` accepting on listeners shared with another master, leaving them open.

    Thread ``graceful-watch`` of a worker. Only Gunicorn's gthread worker
    before 24 needs it: when it stops, it drops connections it accepted but
    has not read a request from, and the listeners stay open (the other master
    serves them), so it would accept until its last moment. From 24 gthread
    serves those connections as it stops; sync serves each one it accepts.
    The listeners leave its poller under the worker's own lock, as Gunicorn
    registers connections from other threads.
    """
    poller = getattr(worker, "poller", None)
    lock = getattr(worker, "_lock", None)
    if poller is None or lock is None or hasattr(worker, "set_accept_enabled"):
        return
    with lock:
        for sock in worker.sockets:
            with contextlib.suppress(KeyError, ValueError, OSError):  # not registered, or closed
                poller.unregister(sock)
    time.sleep(ACCEPTED_SETTLE)


class WorkerShutdown:
    """One worker's shutdown; kept on the worker object as ``worker.graceful``."""

    def __init__(
        self,
        worker: Any,
        lifecycle: Lifecycle,
        shared: SharedState,
        master_listener: SignalListener,
        own_listeners: bool = False,
    ) -> None:
        self.worker = worker
        #: True when this worker bound its listeners itself (reuse_port, Gunicorn 24+).
        self.own_listeners = own_listeners
        self.pid = os.getpid()
        self.lifecycle = lifecycle
        self.shared = shared
        lifecycle.reinit_after_fork()
        # The master's reaction to signals (broadcasts, systemd) came along in the fork copy.
        lifecycle.unsubscribe(master_listener)
        lifecycle.run_pre_shutdown_hooks = False
        lifecycle.adapter = NullAdapter()
        lifecycle.registry.close(PRE_SHUTDOWN_HOOK, _IN_WORKER)
        #: Monotonic time of this worker's SIGTERM, set by the signal handler.
        self.term_at: float | None = None
        # Gunicorn's own gthread drain waits graceful_timeout, as long as the
        # master waits for the worker: bound it by drain_timeout (this worker's
        # copy of the settings only) to leave time for the cleanup tasks.
        self.graceful_timeout = float(worker.cfg.graceful_timeout)  # the master's wait
        worker.cfg.set("graceful_timeout", max(1, math.ceil(lifecycle.config.drain_timeout)))

    def start(self) -> None:
        """``post_worker_init``: check the budget, wrap the app, start hooks and the watch thread."""
        lifecycle = self.lifecycle
        lifecycle.check_budget()
        # The master checked with the cleanup tasks it could see; the app has registered its own now.
        problem = graceful_timeout_problem(
            self.graceful_timeout, lifecycle.config.drain_timeout, lifecycle.longest_cleanup_timeout()
        )
        if problem is not None:
            raise RuntimeError(problem)
        self.worker.wsgi = GracefulMiddleware(self.worker.wsgi, lifecycle)
        self._guard_accept()
        self._record_term()
        lifecycle.run_post_start_hooks()
        threading.Thread(target=self._watch, name="graceful-watch", daemon=True).start()

    def _guard_accept(self) -> None:
        """Make ``accept()`` on a listener that was shut down idle briefly instead of crashing the worker.

        The master's TERM follows within milliseconds. Exiting here instead
        would let Gunicorn fork a replacement worker in between.
        """
        original: Callable[..., Any] = self.worker.accept
        pause = threading.Event()

        def accept(*args: Any) -> Any:
            try:
                return original(*args)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # The listener was shut down (this server stopped listening):
                # don't spin on it while waiting for the TERM.
                pause.wait(0.01)
                return None

        self.worker.accept = accept

    def _record_term(self) -> None:
        """Note when this worker gets SIGTERM, so its drain ends within drain_timeout of it."""
        gunicorn_handler = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: FrameType | None) -> None:
            # Inside the OS signal handler: set a plain attribute, then Gunicorn's handler.
            if self.term_at is None:
                self.term_at = time.monotonic()
            if callable(gunicorn_handler):
                gunicorn_handler(signum, frame)

        signal.signal(signal.SIGTERM, on_term)

    def _watch(self) -> None:
        """Thread ``graceful-watch``: mirror the master's broadcasts into this worker's lifecycle."""
        lifecycle = self.lifecycle
        pending = [
            (self.shared.shutdown_initiated, lifecycle.shutdown_initiated),
            (self.shared.not_accepting, lifecycle.not_accepting_new_requests),
        ]
        while pending:
            broadcast, local = pending[0]
            if broadcast.is_fired(timeout=1.0):
                local.fire()
                pending.pop(0)
        if lifecycle.config.send_retry_after:
            # The master keeps the listeners open until every worker says it drained.
            lifecycle.drain_in_flight(lifecycle.config.drain_timeout)
            self.shared.drained.report(self.pid)
        # The master says so when it cannot stop the listening itself (reuse_port, or listeners
        # shared with another master); otherwise it never does, and this daemon thread waits on.
        while not self.shared.close_listeners.is_fired(timeout=1.0):
            pass
        if self.own_listeners:
            # Nobody else accepts on them: close them once their queues are empty.
            close_after_queue_drains(self.worker.sockets, QUEUE_DRAIN_TIMEOUT)
        else:
            _stop_accepting(self.worker)
        self.shared.listeners_closed.report(self.pid)

    def before_request(self, req: Any) -> None:
        """``pre_request`` (request thread): close the connection after this response once shutting down."""
        if self.lifecycle.shutdown_initiated.is_set():
            req.force_close()

    def exit(self) -> None:
        """``worker_exit`` (worker main thread): drain, clean up, and exit."""
        if os.getpid() != self.pid:  # Gunicorn also calls worker_exit in the master
            return
        lifecycle = self.lifecycle
        started = self.term_at if self.term_at is not None else time.monotonic()
        remaining = max(0.0, started + lifecycle.config.drain_timeout - time.monotonic())
        lifecycle.drain_and_clean_up(drain_timeout=remaining)
        self._leave_part()
        if lifecycle.hung_hooks or lifecycle.in_flight.count:
            # Interpreter exit would join hung hook threads, and gthread's
            # request threads still serving abandoned requests.
            lifecycle.exit(0)
        if not self.lifecycle.report.ok:
            logger.warning("graceful: worker %d cleanup: %s", self.pid, self.lifecycle.report.summary())

    def _leave_part(self) -> None:
        """This worker's part of the shutdown record: for the master in a server shutdown, else a DEBUG line."""
        lifecycle = self.lifecycle
        try:
            part = part_of(lifecycle, self.pid, ROLE_WORKER)
        except ValueError:  # never began a shutdown nor drained: nothing to say
            return
        except Exception:  # logged: the record must never change how the worker exits
            logger.exception("graceful: worker %d could not build its part of the shutdown record", self.pid)
            return
        if lifecycle.shutdown_initiated.is_set():
            self.shared.parts.write(self.pid, part)
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("graceful: worker %d stopped on its own: %s", self.pid, json.dumps(part.to_json()))
