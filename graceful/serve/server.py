"""The single-process server: ``graceful serve module:app`` (Werkzeug's request handling).

One process serves the app on a bounded pool of threads and runs the whole
shutdown timeline itself::

    start-up    bind; check the budget (bad GRACEFUL_* values stop us here);
                install the signal trap; start serving; run post-start hooks
    SIGTERM     /readyz fails; keep serving, every response with
                "Connection: close"; pre-shutdown hooks run
    stop        default mode: drop new handshakes, accept what the kernel
                already queued, close the listener and idle keep-alive
                connections (new connections are refused, queued ones are
                served, not reset); send_retry_after mode: keep listening,
                new requests get 429 until drained, then stop the same way
    drain       wait for the in-flight requests (the middleware's wait group:
                request threads are daemons, nothing else waits for them)
    cleanup     cleanup tasks; the shutdown record (graceful.process.termination),
                then exit 0; a second signal exits 1 at once

Threads, and what runs on each:

``MainThread``
    :func:`serve`: binds, installs the :class:`~graceful.process.trap.SignalTrap`,
    starts the others, runs the post-start hooks, waits for CleanupFinished.
``graceful-serve``
    :meth:`GracefulServer.serve_forever`: one selector over the listener and
    every connection waiting for a request (new or idle keep-alive); accepts,
    hands connections that have a request to the pool, closes idle ones.
``graceful-worker-N``
    ``threads`` of them; each serves one request at a time with
    :class:`~graceful.serve.connection.RequestHandler` (Werkzeug's ``WSGIRequestHandler`` for parsing and
    the WSGI environ), so an idle keep-alive connection holds no thread.
``graceful-signals``, ``graceful-shutdown``
    the trap's thread and the lifecycle's timeline; the shutdown thread calls
    :meth:`GracefulServer.stop_listening`.
``graceful-health``, ``graceful-health-port``
    with ``health_bind`` (``--health-bind``, ``GRACEFUL_HEALTH_BIND``): the
    health port, answering probes while every request thread is busy
    (:mod:`graceful.healthport.local`); it answers until :func:`serve` returns.

Keep-alive: HTTP/1.1 connections stay open between requests for
``keep_alive`` seconds (0 turns keep-alive off). Once ShutdownInitiated has
fired, every response carries ``Connection: close`` and the connection is
closed after it; the app never sets hop-by-hop headers (PEP 3333), the
server does.

This module holds :func:`serve` (start-up, the wait for CleanupFinished,
exit) and :class:`GracefulServer` (the selector loop, the worker pool and
the stop: the lifecycle's ServerAdapter). Loading and wrapping the app is in
:mod:`graceful.serve.loading`; reading one request and writing its response, in
:mod:`graceful.serve.connection`. Their public names are importable from here.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING

from werkzeug.serving import BaseWSGIServer

from graceful.core.config import ConfigError
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import part_of, record_of
from graceful.healthport.address import HealthAddress, parse_address
from graceful.healthport.local import LocalHealth
from graceful.process.sockets import close_after_queue_drains
from graceful.process.termination import leave_record
from graceful.process.trap import SignalTrap
from graceful.serve.connection import IO_TIMEOUT, Connection, RequestHandler
from graceful.serve.loading import AppImportError, load_app, wrap_app
from graceful.wsgi.middleware import find_middleware

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

__all__ = [
    "DEFAULT_KEEP_ALIVE",
    "DEFAULT_THREADS",
    "AppImportError",
    "GracefulServer",
    "RequestHandler",
    "display_host",
    "health_address",
    "leave_server_record",
    "load_app",
    "serve",
    "wrap_app",
]

logger = logging.getLogger(__name__)

#: Request threads in the pool unless told otherwise.
DEFAULT_THREADS = 8
#: Seconds an idle keep-alive connection stays open unless told otherwise.
DEFAULT_KEEP_ALIVE = 5.0

# Bound (s) on waiting for the kernel's accept queue to empty at the stop.
_QUEUE_DRAIN_TIMEOUT = 1.0
# Seconds a connection accepted before the stop, still silent, may take to send its request.
_NEW_CONNECTION_GRACE = 1.0
# Bound (s) on waiting, at the stop, until every accepted request is counted in the drain.
_STOP_TIMEOUT = 5.0
# Seconds the main thread gives responses still being written (health probes, 429s) before exiting.
_EXIT_GRACE = 1.0
# How often the main thread looks at the server loop while it waits for the shutdown.
_MAIN_WAIT = 1.0
# Messages to graceful-serve.
_STOP = "stop"
_CLOSE = "close"
_LISTENER = "listener"
_WAKEUP = "wakeup"


# -- the server --------------------------------------------------------------------


class GracefulServer(BaseWSGIServer):
    """A threaded WSGI server with a bounded pool, keep-alive, and a graceful stop.

    It is the :class:`~graceful.core.lifecycle.ServerAdapter` of its lifecycle
    (:meth:`stop_listening`). Build it on the main thread (it binds at once;
    Werkzeug prints the error and exits 1 when the address is taken), then
    :meth:`start` it. ``port`` 0 binds a free port (see ``server.port``).
    """

    multithread = True

    def __init__(
        self,
        host: str,
        port: int,
        app: WSGIApplication,
        lifecycle: Lifecycle,
        *,
        threads: int = DEFAULT_THREADS,
        keep_alive: float = DEFAULT_KEEP_ALIVE,
        access_log: bool = True,
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads={threads!r} is not allowed: expected a whole number >= 1")
        if not keep_alive >= 0:
            raise ValueError(f"keep_alive={keep_alive!r} is not allowed: expected seconds >= 0")
        self.lifecycle = lifecycle
        self.threads = threads
        self.keep_alive = keep_alive
        self.access_log = access_log
        #: True once close() began: responses end their connections.
        self.closing = False
        #: True when graceful-serve died of an unexpected error.
        self.failed = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._connections: set[Connection] = set()  # guarded by _lock
        self._unadmitted = 0  # connections whose request is not admitted yet; guarded by _lock
        self._serving: set[Connection] = set()  # connections a worker is serving; guarded by _lock
        self._stop_done = False  # graceful-serve closed the listener; guarded by _lock
        self._work: queue.SimpleQueue[Connection | None] = queue.SimpleQueue()
        self._inbox: queue.SimpleQueue[Connection | str] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._loop: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        # Binds at once (Werkzeug prints the error and exits 1 when it cannot).
        super().__init__(host, port, app, handler=RequestHandler)
        # Owned by graceful-serve alone:
        self._waiting: set[Connection] = set()
        self._listening = True
        self._accept_paused_until = 0.0

    # -- main thread ----------------------------------------------------------------

    def start(self) -> None:
        """Main thread: start graceful-serve and the worker threads; serving begins."""
        for number in range(1, self.threads + 1):
            worker = threading.Thread(target=self._work_loop, name=f"graceful-worker-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._loop = threading.Thread(target=self._run_loop, name="graceful-serve", daemon=True)
        self._loop.start()

    @property
    def serving(self) -> bool:
        """True while graceful-serve runs."""
        return self._loop is not None and self._loop.is_alive()

    def close(self, timeout: float = _EXIT_GRACE) -> None:
        """Main thread, after CleanupFinished: stop graceful-serve, give responses still being
        written up to ``timeout`` seconds, close every socket and stop the workers."""
        deadline = time.monotonic() + timeout
        self.closing = True
        self._post(_CLOSE)
        if self._loop is not None:
            self._loop.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._changed.wait_for(lambda: not self._serving, max(0.0, deadline - time.monotonic()))
            idle = self._connections - self._serving
        for conn in idle:  # waiting for a request, or queued for a worker that will not take it
            self._close_connection(conn)
        for _ in self._workers:
            self._work.put(None)
        self.server_close()
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def server_close(self) -> None:
        """Close the listening socket (once graceful-serve no longer watches it)."""
        if self.serving and self._listening:
            return  # graceful-serve owns it until the stop
        self.socket.close()

    # -- graceful-shutdown thread --------------------------------------------------------

    def stop_listening(self) -> None:
        """Shutdown thread: stop listening without resetting the connections the kernel queued.

        1. Drop new handshakes and wait (bounded) until the accept queue is
           empty while graceful-serve keeps accepting (graceful.process.sockets).
        2. graceful-serve closes the listener: new connections are refused.
           It serves idle keep-alive connections whose next request is already
           there and closes the rest; connections still silent get
           ``_NEW_CONNECTION_GRACE`` seconds to send their request.
        3. Wait (bounded) until every accepted request has been admitted by
           the middleware (so the drain counts it) or answered.
        """
        if self.serving:
            close_after_queue_drains([self.socket], _QUEUE_DRAIN_TIMEOUT)
            self._post(_STOP)
        else:
            self.socket.close()
            with self._lock:
                self._stop_done = True
        with self._lock:
            settled = self._changed.wait_for(
                lambda: (self._stop_done or not self.serving) and self._unadmitted == 0, _STOP_TIMEOUT
            )
            unadmitted = self._unadmitted
        if not settled:
            logger.warning(
                "graceful: %d accepted request(s) not yet admitted after %gs; the drain may refuse them",
                unadmitted,
                _STOP_TIMEOUT,
            )

    # -- bookkeeping, any thread ------------------------------------------------------------

    def settle(self, conn: Connection) -> None:
        """The request on ``conn`` was admitted by the middleware, or ended: the stop need not wait for it."""
        if conn.admitted:
            return
        with self._lock:
            if conn.admitted:
                return
            conn.admitted = True
            self._unadmitted -= 1
            if not self._unadmitted:
                self._changed.notify_all()

    def _expect_request(self, conn: Connection) -> None:
        with self._lock:
            if conn.admitted:
                conn.admitted = False
                self._unadmitted += 1

    def _dispatch(self, conn: Connection) -> None:
        """Hand a connection with a request (or an EOF) waiting to the pool."""
        self._expect_request(conn)
        self._work.put(conn)

    def _post(self, message: Connection | str) -> None:
        """Send graceful-serve a message and wake it."""
        self._inbox.put(message)
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):  # a wake-up is pending already, or we are closed
            return

    def _close_connection(self, conn: Connection) -> None:
        self.settle(conn)
        with self._lock:
            if conn not in self._connections:
                return
            self._connections.discard(conn)
        conn.close()

    # -- graceful-worker-N threads -------------------------------------------------------------

    def _work_loop(self) -> None:
        """Worker thread: serve one request at a time from the pool's queue, until told to stop."""
        while True:
            conn = self._work.get()  # a None from close() ends the thread
            if conn is None:
                return
            self._serve_one(conn)

    def _serve_one(self, conn: Connection) -> None:
        """Serve the request waiting on ``conn``, then keep the connection or close it."""
        with self._lock:
            closing = self.closing
            if not closing:
                self._serving.add(conn)
        if closing:  # the process is exiting
            self._close_connection(conn)
            return
        try:
            keep = False
            try:
                conn.sock.settimeout(IO_TIMEOUT)
                keep = not RequestHandler(conn, self, self).close_connection
            except Exception:
                logger.exception("graceful: error serving a connection from %s", conn.address)
            finally:
                self.settle(conn)
            if keep and not self.closing:
                self._keep(conn)
            else:
                self._close_connection(conn)
        finally:
            with self._lock:
                self._serving.discard(conn)
                if not self._serving:
                    self._changed.notify_all()

    def _keep(self, conn: Connection) -> None:
        """After a kept-alive response: serve a request already buffered, else watch the connection."""
        conn.requests += 1
        try:
            conn.sock.settimeout(0.0)
            pending = conn.rfile.peek(1)
        except OSError:
            self._close_connection(conn)
            return
        if pending:
            self._dispatch(conn)  # pipelined: the next request is here already
            return
        conn.deadline = time.monotonic() + self.keep_alive
        self._post(conn)

    # -- graceful-serve thread -------------------------------------------------------------------

    def _run_loop(self) -> None:
        try:
            self.serve_forever()
        except Exception:
            self.failed = True
            logger.exception("graceful: the server loop failed; shutting down")
            self.lifecycle.request_shutdown()
        finally:
            with self._lock:
                self._changed.notify_all()

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """graceful-serve: accept, watch waiting connections, hand readable ones to the pool.

        ``poll_interval`` is ignored: the loop sleeps until a socket is ready,
        a message arrives or the earliest connection deadline.
        """
        selector = selectors.DefaultSelector()
        self.socket.setblocking(False)
        selector.register(self.socket, selectors.EVENT_READ, _LISTENER)
        selector.register(self._wake_r, selectors.EVENT_READ, _WAKEUP)
        try:
            while not self.closing:
                for key, _ in selector.select(self._next_timeout()):
                    if key.data == _LISTENER:
                        if self._listening:
                            self._accept(selector)
                    elif key.data == _WAKEUP:
                        self._read_inbox(selector)
                    elif key.data in self._waiting:  # not handled earlier in this round
                        self._unwatch(selector, key.data)
                        self._dispatch(key.data)
                self._expire(selector)
        finally:
            for conn in list(self._waiting):
                self._unwatch(selector, conn)
                self._close_connection(conn)
            selector.close()

    def _next_timeout(self) -> float | None:
        deadlines = [conn.deadline for conn in self._waiting]
        if self._accept_paused_until:
            deadlines.append(self._accept_paused_until)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _watch(self, selector: selectors.BaseSelector, conn: Connection) -> None:
        selector.register(conn.sock, selectors.EVENT_READ, conn)
        self._waiting.add(conn)

    def _unwatch(self, selector: selectors.BaseSelector, conn: Connection) -> None:
        selector.unregister(conn.sock)
        self._waiting.discard(conn)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        """Accept every connection the kernel has queued; each waits for its request in the selector."""
        for _ in range(256):  # then let the other sockets have a turn
            try:
                sock, address = self.socket.accept()
            except BlockingIOError:
                return
            except ConnectionAbortedError:  # reset by the client while queued
                continue
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.EBADF):  # the stop shut the listener down
                    self._stop_accepting(selector)
                    return
                # Out of file descriptors or similar: pause accepting instead of spinning.
                logger.error("graceful: accept() failed: %s; pausing for 0.5s", exc)
                selector.unregister(self.socket)
                self._accept_paused_until = time.monotonic() + 0.5
                return
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each flush is one whole piece
            conn = Connection(sock, address)
            with self._lock:
                self._connections.add(conn)
            self._expect_request(conn)
            self._watch(selector, conn)

    def _stop_accepting(self, selector: selectors.BaseSelector) -> None:
        if self._listening and not self._accept_paused_until:
            selector.unregister(self.socket)
        self._accept_paused_until = 0.0
        self._listening = False

    def _read_inbox(self, selector: selectors.BaseSelector) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(message, Connection):
                if self._listening:
                    self._watch(selector, message)  # idle keep-alive: wait for its next request
                else:
                    self._close_connection(message)
            elif message == _STOP:
                self._stop(selector)
            elif message == _CLOSE:
                self.closing = True

    def _stop(self, selector: selectors.BaseSelector) -> None:
        """Close the listener; serve idle connections whose request is here, close the other idle ones."""
        self._stop_accepting(selector)
        self.socket.close()
        ready = {key.data for key, _ in selector.select(0) if isinstance(key.data, Connection)}
        grace = time.monotonic() + _NEW_CONNECTION_GRACE
        for conn in list(self._waiting):
            if conn in ready:
                self._unwatch(selector, conn)
                self._dispatch(conn)
            elif conn.requests:  # idle keep-alive
                self._unwatch(selector, conn)
                self._close_connection(conn)
            else:  # accepted before the stop, request not here yet
                conn.deadline = min(conn.deadline, grace)
        with self._lock:
            self._stop_done = True
            self._changed.notify_all()
        logger.info("graceful: stopped listening on %s:%d", self.host, self.port)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            if self._listening:
                selector.register(self.socket, selectors.EVENT_READ, _LISTENER)
        for conn in [conn for conn in self._waiting if conn.deadline <= now]:
            self._unwatch(selector, conn)
            self._close_connection(conn)


# -- running it ----------------------------------------------------------------------------


def serve(
    app: WSGIApplication,
    host: str,
    port: int,
    *,
    threads: int = DEFAULT_THREADS,
    lifecycle: Lifecycle | None = None,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    access_log: bool = True,
    health_bind: str | None = None,
) -> int:
    """Serve ``app`` until a SIGTERM/SIGINT shutdown completes; return the exit status (0).

    Main thread only (it installs the signal trap, and restores the previous
    handlers on return). ``app`` is wrapped as :func:`wrap_app` says; the
    lifecycle's config and budget are checked before binding and raise
    :class:`graceful.ConfigError`. Returns 0 once CleanupFinished fired, 1 if
    the server loop failed or the shutdown overran ``grace_period``. A second
    signal ends the process with status 1 at once. Call
    ``lifecycle.exit(status)`` afterwards to end the process without waiting
    for hung hook threads.

    ``health_bind`` (default: the config's ``health_bind``,
    ``GRACEFUL_HEALTH_BIND``) adds the health port on that address; a bad one
    raises :class:`graceful.ConfigError`, one that cannot be bound is logged
    and returns 1.
    """
    app, lifecycle = wrap_app(app, lifecycle)
    lifecycle.check_budget()  # reads the config: a bad GRACEFUL_* value raises here
    address = health_address(health_bind, lifecycle)
    server = GracefulServer(host, port, app, lifecycle, threads=threads, keep_alive=keep_alive, access_log=access_log)
    lifecycle.adapter = server
    lifecycle.server, lifecycle.worker_class = "graceful serve", "threads"
    health = None
    if address is not None:
        middleware = find_middleware(app, lifecycle)
        assert middleware is not None, "wrap_app wrapped it"
        health = LocalHealth(lifecycle, (middleware.inner or middleware).health, address)
        try:
            health.start()
        except OSError as exc:
            logger.error("graceful: cannot listen on the health port %s: %s", address, exc)
            health.close()
            server.server_close()
            return 1
    trap = SignalTrap(lambda _signum: lifecycle.request_shutdown()).install()
    try:
        server.start()
        logger.info(
            "graceful: listening on http://%s:%d with %d threads (pid %d)",
            display_host(server.host),
            server.port,
            threads,
            os.getpid(),
        )
        lifecycle.run_post_start_hooks()
        status = _wait_for_cleanup(server, lifecycle)
        if lifecycle.cleanup_finished.is_set():
            leave_server_record(lifecycle)
        server.close()
        return status
    finally:
        trap.uninstall()
        if health is not None:
            health.close()


def health_address(health_bind: str | None, lifecycle: Lifecycle) -> HealthAddress | None:
    """``health_bind`` parsed (raises ConfigError), else the config's; None: no health port."""
    if health_bind is None:
        return lifecycle.config.health_address
    try:
        return parse_address("health_bind", health_bind)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _wait_for_cleanup(server: GracefulServer, lifecycle: Lifecycle) -> int:
    """Main thread: wait for CleanupFinished; 1 if the loop failed or the shutdown overran its budget."""
    # A signal's waiters wake before its listeners run: wait for ours, subscribed after the app's.
    announced = threading.Event()
    lifecycle.subscribe(lambda name, _at: announced.set() if name == lifecycle.cleanup_finished.name else None)
    while not lifecycle.wait_finished(_MAIN_WAIT):
        if not server.serving and not lifecycle.shutdown_initiated.is_set():
            logger.error("graceful: the server loop stopped; shutting down")
            server.failed = True
            lifecycle.request_shutdown()
        started = lifecycle.shutdown_initiated.fired_at
        if started is not None and lifecycle.clock.now() - started > lifecycle.config.grace_period:
            logger.error(
                "graceful: shutdown did not finish within GRACEFUL_GRACE_PERIOD %gs; exiting",
                lifecycle.config.grace_period,
            )
            return 1
    announced.wait(_EXIT_GRACE)
    return 1 if server.failed else 0


def leave_server_record(lifecycle: Lifecycle) -> None:
    """Main thread, after CleanupFinished: this one process's record (log line, report file, termination log).

    Also the Uvicorn server's (:mod:`graceful.uvicorn.server`).
    """
    from graceful import __version__

    try:
        record = record_of(lifecycle, [part_of(lifecycle, os.getpid())], __version__)
        leave_record(record, lifecycle.config)
    except Exception:  # logged: the record must never change how the server exits
        logger.exception("graceful: could not build the shutdown record")


def display_host(host: str) -> str:
    """``host`` as a URL shows it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host
