"""The single-process ASGI server: ``graceful serve module:app`` of an ASGI app, on Uvicorn.

One Uvicorn process serves the app and runs graceful's whole shutdown
timeline (:func:`graceful.core.sequences.server_shutdown`) instead of
Uvicorn's own::

    start-up    bind; check the budget (bad GRACEFUL_* values stop us here);
                install graceful's signal trap (Uvicorn's handlers are left
                out); Uvicorn's startup: the app's lifespan startup (readiness
                waits for it: the middleware's "lifespan" check and ours,
                "uvicorn"), then serving; post-start hooks
    SIGTERM     T0: /readyz fails; keep serving, every response with
                "Connection: close" (the middleware); WebSockets and streams
                told to leave, spread over the delay; pre-shutdown hooks run
    delay       fixed, or adaptive: the middleware counts each arrival
    stop        drop new handshakes; once the kernel's accept queue is empty
                (Uvicorn accepting meanwhile), close the listener on the loop
                (new connections are refused, none queued is reset); a
                connection accepted whose request is on the way is given a
                moment to be counted; idle keep-alive connections are closed
    drain       wait for the in-flight requests (the middleware's count),
                up to drain_timeout
    cleanup     the cleanup tasks, and beside them one of ours ("uvicorn
                shutdown"), bounded by hook_timeout like them: the long-lived
                connections still open are told to leave (1001) and waited
                for, then Uvicorn's own shutdown (what is left of the
                connections, its timeout_graceful_shutdown set from what is
                left of that bound), ending with the app's lifespan shutdown
    exit        the shutdown record (graceful.process.termination), exit 0;
                a second signal exits 1 at once

Threads and the loop, and what runs on each:

``MainThread``
    :func:`serve_asgi`: binds, installs the
    :class:`~graceful.process.trap.SignalTrap`, then runs Uvicorn's event
    loop (:meth:`UvicornServer.run`) until Uvicorn's shutdown has ended, then
    waits for CleanupFinished and leaves the record.
the event loop (on the main thread)
    Uvicorn's connections and the app; :meth:`UvicornServer._stop` (the
    listener's close) and the goodbyes of :mod:`graceful.asgi.long_lived`.
``graceful-signals``, ``graceful-shutdown``
    the trap's thread and the lifecycle's timeline; the shutdown thread calls
    :meth:`UvicornServer.stop_listening`, which crosses into the loop with
    ``asyncio.run_coroutine_threadsafe`` and waits for it with a timeout.
``graceful-cleanup task`` threads
    :meth:`UvicornServer.shut_down`, beside the app's cleanup tasks.
``graceful-health``, ``graceful-health-port``
    with ``health_bind``: the health port (:mod:`graceful.healthport.local`).

Options of ``graceful serve`` and what they mean here: ``--bind``,
``--health-bind``, ``--keep-alive`` (Uvicorn's ``timeout_keep_alive``),
``--no-access-log`` and ``--log-level`` as for a WSGI app; ``--threads`` does
not apply (one event loop serves every connection). Every Uvicorn internal
graceful touches is in :mod:`graceful.uvicorn.adapter`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import socket
import threading
import time
from types import ModuleType
from typing import Any

from graceful.asgi import GracefulASGIMiddleware, find_asgi_middleware, goodbyes_of, has_asgi_middleware
from graceful.asgi.lifespan import Lifespan
from graceful.core import default as _default
from graceful.core.lifecycle import Lifecycle
from graceful.http.health import HealthChecks
from graceful.process.sockets import wait_for_queues_to_drain
from graceful.process.trap import SignalTrap
from graceful.serve.server import (
    DEFAULT_KEEP_ALIVE,
    display_host,
    health_address,
    leave_server_record,
    start_health_port,
)
from graceful.uvicorn.adapter import Uvicorn, UvicornMissing, UvicornRefused

__all__ = [
    "SERVING_CHECK",
    "SHUTDOWN_TASK",
    "UvicornMissing",
    "UvicornRefused",
    "UvicornServer",
    "serve_asgi",
    "wrap_asgi_app",
]

logger = logging.getLogger(__name__)

#: The readiness check that fails until Uvicorn's startup has ended (the lifespan's startup, the listener).
SERVING_CHECK = "uvicorn"
#: The cleanup task that sees the long-lived connections out and runs Uvicorn's shutdown and the lifespan's.
SHUTDOWN_TASK = "uvicorn shutdown"

# Bound (s) on waiting for the kernel's accept queue to empty at the stop.
_QUEUE_DRAIN_TIMEOUT = 1.0
# Seconds a connection accepted before the stop, its request not read yet, may take to send it.
_NEW_CONNECTION_GRACE = 1.0
# How often the stop looks for those requests: no event says one arrived.
_NEW_CONNECTION_POLL = 0.005
# Bound (s) on waiting for the loop to do what another thread asked of it (beyond the step's own bound).
_CROSSING = 2.0
# Bound (s) on waiting for the long-lived connections told to leave to end (at most a quarter of the task's).
_LEAVE_TIMEOUT = 1.0
# Seconds the shutdown task keeps from its hook_timeout, so it ends before the batch gives up on it.
_TASK_MARGIN = 0.05
# Bound (s) on the main thread's wait for the record's listeners after CleanupFinished.
_EXIT_GRACE = 1.0
_BACKLOG = 2048


def wrap_asgi_app(app: Any, lifecycle: Lifecycle | None = None) -> tuple[Any, Lifecycle]:
    """Return ``app`` behind graceful's ASGI middleware, and the lifecycle that drives it. Main thread.

    An app that has the middleware of ``lifecycle`` already (a Starlette or
    FastAPI app with ``add_middleware(GracefulASGIMiddleware)``) is served
    as it is; one whose middleware has another lifecycle is served with
    that one when it can be found, else ``ValueError`` (one line).
    ``lifecycle`` defaults to ``graceful.default_lifecycle``.
    """
    chosen = lifecycle or _default.default_lifecycle
    if has_asgi_middleware(app, chosen):
        return app, chosen
    if has_asgi_middleware(app):
        found = find_asgi_middleware(app)
        if found is None or lifecycle is not None:
            raise ValueError("the app's GracefulASGIMiddleware has a lifecycle other than the server's")
        return app, found.lifecycle
    return GracefulASGIMiddleware(app, chosen), chosen


class UvicornServer:
    """One Uvicorn serving one ASGI app on ``sock``; the ServerAdapter of its lifecycle (:meth:`stop_listening`).

    Build it on the main thread (it probes Uvicorn: raises
    :class:`UvicornMissing` or :class:`UvicornRefused`), then :meth:`run` it
    there. ``uvicorn_module`` replaces ``import uvicorn`` (tests).
    """

    def __init__(
        self,
        app: Any,
        sock: socket.socket,
        lifecycle: Lifecycle,
        *,
        keep_alive: float = DEFAULT_KEEP_ALIVE,
        access_log: bool = True,
        uvicorn_module: ModuleType | None = None,
    ) -> None:
        if not keep_alive >= 0:
            raise ValueError(f"keep_alive={keep_alive!r} is not allowed: expected seconds >= 0")
        self.sock = sock
        #: The address it listens on (host, port): the socket closes at the stop.
        self.address: tuple[str, int] = sock.getsockname()[:2]
        self.lifecycle = lifecycle
        # The loop once Uvicorn serves; and whether the stop came before that. Guarded by _lock (held briefly,
        # never across a wait: the loop takes it too).
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped_before_serving = False
        self.uvicorn = Uvicorn.probe(
            self._started,
            module=uvicorn_module,
            app=app,
            lifespan="auto",
            timeout_keep_alive=keep_alive,
            access_log=access_log,
            log_config=None,  # graceful serve's logging stays as it is
            # Bounded even if Uvicorn's shutdown came another way; set again before graceful starts it.
            timeout_graceful_shutdown=lifecycle.config.drain_timeout,
        )
        # Registered once per server; the same definition again (a second server in a test) replaces it.
        lifecycle.readiness_check(SERVING_CHECK)(self.serving)
        lifecycle.cleanup_task(SHUTDOWN_TASK)(self.shut_down)

    # -- main thread ----------------------------------------------------------------------------

    def run(self) -> None:
        """Main thread: Uvicorn's event loop, until its shutdown has ended (see :meth:`shut_down`)."""
        self.uvicorn.run(self.sock)

    def serving(self) -> bool:
        """The readiness check ``uvicorn`` (a health check's thread): Uvicorn's startup has ended."""
        return self.uvicorn.started

    # -- the event loop ---------------------------------------------------------------------------

    def _started(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: Uvicorn serves (the app's lifespan startup is done); the post-start hooks start.

        When the shutdown stopped listening already (a SIGTERM during the
        app's lifespan startup), Uvicorn stops at once instead: its listener
        closes, its shutdown (the lifespan's too) runs, bounded by hook_timeout.
        """
        with self._lock:
            self._loop = loop
            stopped = self._stopped_before_serving
        if stopped:
            logger.warning("graceful: Uvicorn's startup ended after the shutdown stopped listening: stopping it")
            self.uvicorn.close_listeners_now()  # nothing was accepted yet: nothing to let in first
            self.uvicorn.exit(self.lifecycle.config.hook_timeout)
            return
        host, port = self.address
        logger.info(
            "graceful: listening on http://%s:%d with Uvicorn %s (pid %d)",
            display_host(host),
            port,
            self.uvicorn.release,
            os.getpid(),
        )
        self.lifecycle.run_post_start_hooks()

    async def _stop(self) -> tuple[int, int]:
        """On the loop: close the listener; count the requests already on their way; close idle connections.

        Returns how many idle connections were closed, and how many accepted
        connections never sent a request within ``_NEW_CONNECTION_GRACE``.
        """
        uvicorn = self.uvicorn
        await uvicorn.close_listeners()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _NEW_CONNECTION_GRACE
        while uvicorn.new_connections() and loop.time() < deadline:
            await asyncio.sleep(_NEW_CONNECTION_POLL)
        # The requests just read start their tasks now: the middleware counts them before the drain begins.
        await asyncio.sleep(0)
        return uvicorn.close_idle_connections(), uvicorn.new_connections()

    # -- graceful-shutdown thread ---------------------------------------------------------------------

    def stop_listening(self) -> None:
        """Shutdown thread: stop listening without resetting the connections the kernel queued.

        1. Drop new handshakes and wait (bounded) until the accept queue is
           empty while Uvicorn keeps accepting (graceful.process.sockets).
        2. On the loop: close the listener (new connections are refused),
           give connections just accepted a moment for their request to be
           counted, close idle keep-alive connections. Waited for with a timeout.
        """
        start = time.monotonic()
        waiting = wait_for_queues_to_drain([self.sock], _QUEUE_DRAIN_TIMEOUT)
        if waiting:
            logger.warning(
                "graceful: %d queued connection(s) still unaccepted after waiting %.1fs; they are reset",
                waiting,
                time.monotonic() - start,
            )
        with self._lock:
            loop = self._loop
            self._stopped_before_serving = loop is None
        if self.uvicorn.finished.is_set():
            self.sock.close()  # Uvicorn stopped serving on its own: nothing else holds it
            return
        if loop is None:  # Uvicorn's startup (the app's lifespan startup) has not ended: _started stops it
            logger.warning("graceful: stopping before Uvicorn's startup ended: it stops as soon as it does")
            return
        try:
            future = asyncio.run_coroutine_threadsafe(self._stop(), loop)
        except RuntimeError:  # the loop closed meanwhile
            self.sock.close()
            return
        try:
            closed, silent = future.result(_NEW_CONNECTION_GRACE + _CROSSING)
        except concurrent.futures.TimeoutError:
            future.cancel()
            logger.warning(
                "graceful: the event loop had not closed the listener after waiting %gs",
                _NEW_CONNECTION_GRACE + _CROSSING,
            )
            return
        logger.info(
            "graceful: stopped listening on %s:%d (%d idle connection(s) closed%s)",
            display_host(self.address[0]),
            self.address[1],
            closed,
            f", {silent} accepted without a request yet" if silent else "",
        )

    # -- a cleanup task's thread ------------------------------------------------------------------------

    def shut_down(self) -> None:
        """The cleanup task ``uvicorn shutdown`` (its own thread, beside the app's tasks), within hook_timeout.

        1. The long-lived connections still open (told to leave with 1001 at
           InFlightRequestsDrained) are told again and waited for, up to a
           quarter of the bound (at most ``_LEAVE_TIMEOUT``).
        2. Uvicorn's shutdown: what is left of the connections (waited for
           up to half of what is left of the bound: its
           ``timeout_graceful_shutdown``), then the app's lifespan shutdown.

        Raises when Uvicorn's shutdown does not end in time or the app's
        lifespan shutdown failed, so the record says so.
        """
        with self._lock:
            loop = self._loop
        if loop is None or self.uvicorn.finished.is_set():
            return  # not serving yet (_started stops it), or no more
        clock = self.lifecycle.clock
        bound = max(0.0, self.lifecycle.config.hook_timeout - _TASK_MARGIN)
        deadline = clock.now() + bound
        leave = min(_LEAVE_TIMEOUT, bound / 4)
        try:
            future = asyncio.run_coroutine_threadsafe(goodbyes_of(self.lifecycle).leave_all(leave), loop)
            future.result(leave + _CROSSING)
            left = max(0.0, deadline - clock.now())
            loop.call_soon_threadsafe(self.uvicorn.exit, left / 2)
        except RuntimeError:  # the loop closed meanwhile: Uvicorn is done
            return
        except concurrent.futures.TimeoutError:
            future.cancel()
            left = max(0.0, deadline - clock.now())
            loop.call_soon_threadsafe(self.uvicorn.exit, left / 2)
        if not clock.wait(self.uvicorn.finished, max(0.0, deadline - clock.now())):
            raise TimeoutError(f"Uvicorn's shutdown did not end within {bound:g}s")
        outcome = Lifespan.of(self.lifecycle).shutdown
        if outcome is not None and outcome not in ("ok", "returned"):
            raise RuntimeError(f"the app's lifespan shutdown {outcome}")


def serve_asgi(
    app: Any,
    host: str,
    port: int,
    *,
    lifecycle: Lifecycle | None = None,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    access_log: bool = True,
    health_bind: str | None = None,
    uvicorn_module: ModuleType | None = None,
) -> int:
    """Serve the ASGI ``app`` on Uvicorn until a SIGTERM/SIGINT shutdown completes; return the exit status.

    Main thread only (the signal trap; the event loop runs here). ``app`` is
    wrapped as :func:`wrap_asgi_app` says; the lifecycle's config and budget
    are checked before binding and raise :class:`graceful.ConfigError`;
    Uvicorn is probed before binding too (:class:`UvicornMissing`,
    :class:`UvicornRefused`). Returns 0 once CleanupFinished fired; 1 when
    the address cannot be bound, the app's lifespan startup failed, Uvicorn
    stopped on its own, or the shutdown overran ``grace_period``. A second
    signal ends the process with status 1 at once. ``health_bind`` as for
    :func:`graceful.serve.server.serve`. Call ``lifecycle.exit(status)``
    afterwards.
    """
    app, lifecycle = wrap_asgi_app(app, lifecycle)
    lifecycle.check_budget()  # reads the config: a bad GRACEFUL_* value raises here
    address = health_address(health_bind, lifecycle)
    try:
        sock = _listen(host, port)
    except OSError as exc:
        logger.error("graceful: cannot listen on %s:%d: %s", display_host(host), port, exc)
        return 1
    try:
        server = UvicornServer(
            app, sock, lifecycle, keep_alive=keep_alive, access_log=access_log, uvicorn_module=uvicorn_module
        )
    except BaseException:
        sock.close()
        raise
    lifecycle.adapter = server
    lifecycle.server, lifecycle.worker_class = "graceful serve", "uvicorn"
    health = None
    if address is not None:
        middleware = find_asgi_middleware(app, lifecycle)
        # A Starlette app builds its middleware stack on its first call: the port gets checks of its own.
        checks = middleware.health if middleware is not None else HealthChecks(lifecycle)
        health = start_health_port(lifecycle, checks, address)
        if health is None:
            sock.close()
            return 1
    trap = SignalTrap(lambda _signum: lifecycle.request_shutdown()).install()
    try:
        status = _run(server, lifecycle)
        if status == 0 and lifecycle.cleanup_finished.is_set():
            leave_server_record(lifecycle)
        return status
    finally:
        trap.uninstall()
        if health is not None:
            health.close()
        sock.close()


def _run(server: UvicornServer, lifecycle: Lifecycle) -> int:
    """Main thread: run Uvicorn, then wait for CleanupFinished; the exit status."""
    # A signal's waiters wake before its listeners run: wait for ours, subscribed after the app's.
    announced = threading.Event()
    lifecycle.subscribe(lambda name, _at: announced.set() if name == lifecycle.cleanup_finished.name else None)
    try:
        server.run()
    except UvicornRefused as exc:
        logger.error("graceful: %s", exc)
        return 1
    except SystemExit as exc:  # Uvicorn's own exit during its startup: the app's lifespan startup failed
        why = Lifespan.of(lifecycle).waiting or "the app's lifespan startup did not complete"
        if "\n" in why:  # the app's message is a traceback (Starlette's): Uvicorn logged it; its last line here
            why = f"{why.partition(': ')[0]}: {why.strip().splitlines()[-1]}"
        logger.error("graceful: Uvicorn stopped during its startup (its status %s): %s", exc.code, why)
        return 1
    started = lifecycle.shutdown_initiated.fired_at
    if started is None:
        logger.error("graceful: Uvicorn stopped serving on its own; exiting")
        return 1
    left = started + lifecycle.config.grace_period - lifecycle.clock.now()
    if not lifecycle.wait_finished(max(0.0, left)):
        logger.error(
            "graceful: shutdown did not finish within GRACEFUL_GRACE_PERIOD %gs; exiting",
            lifecycle.config.grace_period,
        )
        return 1
    announced.wait(_EXIT_GRACE)
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, made with protocol ``IPPROTO_TCP`` (main thread, at start-up).

    asyncio sets ``TCP_NODELAY`` on each accepted connection only when the
    listener says it is TCP; ``socket.create_server`` leaves the protocol 0,
    and then every keep-alive response waited ~40 ms for the client's delayed
    ACK (Nagle's algorithm between Uvicorn's two writes, headers and body).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock
