"""Uvicorn's internals, touched here and nowhere else: probed once at start-up, a release that moved them refused.

graceful drives Uvicorn's ``Server`` programmatically (``Server.run`` with
the sockets graceful bound) and keeps Uvicorn's own timeline out of the way:

================================  ==============================================================
what graceful touches             why
================================  ==============================================================
``Server.capture_signals``        overridden with a no-op: graceful's
                                  :class:`~graceful.process.trap.SignalTrap` owns SIGTERM and
                                  SIGINT (Uvicorn's handler would start its own shutdown at
                                  once, and re-raise the signal at exit: status -15)
``Server.startup(sockets)``       wrapped: after Uvicorn's startup (the app's lifespan startup,
                                  then the listeners) graceful learns the loop and serving begins
                                  (``Server.started`` False: a failed bind, Uvicorn exits next)
``Server.shutdown(sockets)``      wrapped: graceful learns when Uvicorn's shutdown has ended
``Server.servers``                the asyncio servers: closed on the loop once the kernel's
                                  accept queue is empty (:meth:`Uvicorn.close_listeners`)
``Server.server_state``           its ``connections``: idle keep-alive HTTP connections are
  ``.connections``                closed when the listeners close (a WebSocket is left alone:
                                  Uvicorn's ``shutdown()`` of one sends 1012)
an HTTP protocol's ``cycle``      ``None`` until its first request (a connection just accepted:
  (``.response_complete``)        its request is on the way, never closed here); complete: idle
``Config.ws_protocol_class``      which connections are WebSockets
``Server.should_exit``            set by graceful only, after its drain: Uvicorn's shutdown runs
``Config``                        ``timeout_graceful_shutdown``: set from what is left of the
  ``.timeout_graceful_shutdown``  budget before Uvicorn's shutdown runs, so it never waits
                                  without a bound
================================  ==============================================================

The oldest Uvicorn supported is **0.29.0**: the first release with
``Server.capture_signals`` (0.28 and older install their handlers in
``install_signal_handlers()``, with ``loop.add_signal_handler``, which a
subclass cannot leave out the same way); every other name above is the same
from 0.29.0 to 0.55. A release without one of them is refused in one line
naming it (:class:`UvicornRefused`); without Uvicorn at all,
:class:`UvicornMissing` says what to install.

Threads: :meth:`Uvicorn.probe` and :meth:`Uvicorn.run` on the main thread
(``run`` runs the event loop there until Uvicorn's shutdown ends); the
methods marked *on the loop* only on that loop (graceful's other threads
cross into it with ``asyncio.run_coroutine_threadsafe`` /
``loop.call_soon_threadsafe``: :mod:`graceful.uvicorn.server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import re
import socket
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from graceful.process.aio import close_servers

__all__ = [
    "OLDEST_UVICORN",
    "OLDEST_UVICORN_TEXT",
    "Uvicorn",
    "UvicornMissing",
    "UvicornRefused",
    "close_after_requests",
    "close_idle_connections",
    "missing_internals",
    "signal_free_server_class",
    "uvicorn_release",
]

#: The oldest Uvicorn graceful drives (the first with ``Server.capture_signals``).
OLDEST_UVICORN = (0, 29, 0)
#: The same, as text.
OLDEST_UVICORN_TEXT = ".".join(map(str, OLDEST_UVICORN))

# What the probe asks of uvicorn.Server (methods; startup and shutdown take sockets=).
_SERVER_METHODS = ("run", "serve", "startup", "main_loop", "shutdown", "capture_signals")
_TAKE_SOCKETS = ("run", "startup", "shutdown")
# ... of a Server instance, and of a Config instance.
_SERVER_ATTRIBUTES = ("server_state", "should_exit", "config")
_CONFIG_ATTRIBUTES = ("timeout_graceful_shutdown", "timeout_keep_alive", "lifespan")


class UvicornMissing(ImportError):
    """Uvicorn is not installed; the message (one line) says how to install it."""

    def __init__(self) -> None:
        super().__init__("serving an ASGI app needs Uvicorn, which is not installed: pip install 'graceful-wsgi[asgi]'")


class UvicornRefused(RuntimeError):
    """This Uvicorn lacks an internal graceful relies on (or is too old); the message is one line."""

    def __init__(self, release: str, missing: list[str]) -> None:
        super().__init__(
            f"uvicorn {release} is not supported: {', '.join(missing)}; graceful drives uvicorn>={OLDEST_UVICORN_TEXT}"
        )


def uvicorn_release(module: ModuleType) -> str:
    """The module's ``__version__``, or ``"(unknown)"``."""
    return str(getattr(module, "__version__", "(unknown)"))


def _version_tuple(text: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        return None
    return tuple(int(part or 0) for part in match.groups())


def missing_internals(module: ModuleType) -> list[str]:
    """What ``module`` (uvicorn) lacks of what graceful touches; empty when it has it all.

    Also asked by Gunicorn's Uvicorn worker adapter
    (:mod:`graceful.gunicorn.adapter.uvicorn_worker`): its ``Server`` is this one.
    """
    release = _version_tuple(uvicorn_release(module))
    if release is not None and release < OLDEST_UVICORN:
        return [f"older than {OLDEST_UVICORN_TEXT} (Server.capture_signals)"]
    server = getattr(module, "Server", None)
    if not inspect.isclass(server) or not callable(getattr(module, "Config", None)):
        return ["no uvicorn.Server or uvicorn.Config"]
    missing = [f"Server.{name}" for name in _SERVER_METHODS if not callable(getattr(server, name, None))]
    for name in _TAKE_SOCKETS:
        method = getattr(server, name, None)
        if callable(method) and "sockets" not in inspect.signature(method).parameters:
            missing.append(f"Server.{name}(sockets=)")
    return missing


class Uvicorn:
    """One Uvicorn ``Server``, driven by graceful. Build it with :meth:`probe`.

    ``on_started(loop)`` is called on the loop once Uvicorn's startup has
    ended (the app's lifespan startup completed, the listeners are serving);
    :attr:`finished` is set once Uvicorn's shutdown has ended (or
    :meth:`run` returned).
    """

    def __init__(self, module: ModuleType, config: Any, on_started: Callable[[asyncio.AbstractEventLoop], None]):
        self._module = module
        self._on_started = on_started
        self.config = config
        self.server: Any = _graceful_server_class(module.Server)(config)
        self.server.graceful = self
        missing = [name for name in _SERVER_ATTRIBUTES if not hasattr(self.server, name)]
        missing += [f"Config.{name}" for name in _CONFIG_ATTRIBUTES if not hasattr(config, name)]
        state = getattr(self.server, "server_state", None)
        if state is not None and not isinstance(getattr(state, "connections", None), set):
            missing.append("ServerState.connections")
        if missing:
            raise UvicornRefused(uvicorn_release(module), missing)
        #: Set once Uvicorn's shutdown ended, or :meth:`run` returned without one.
        self.finished = threading.Event()
        #: True once Uvicorn's startup ended and it serves.
        self.started = False

    @classmethod
    def probe(
        cls,
        on_started: Callable[[asyncio.AbstractEventLoop], None],
        module: ModuleType | None = None,
        **config: Any,
    ) -> Uvicorn:
        """Main thread, once: import Uvicorn (or take ``module``), check it, build its ``Config(**config)`` and Server.

        Raises :class:`UvicornMissing` when Uvicorn is not installed,
        :class:`UvicornRefused` when it lacks an internal graceful touches.
        """
        if module is None:
            try:
                module = importlib.import_module("uvicorn")
            except ImportError:
                raise UvicornMissing() from None
        missing = missing_internals(module)
        if missing:
            raise UvicornRefused(uvicorn_release(module), missing)
        return cls(module, module.Config(**config), on_started)

    @property
    def release(self) -> str:
        """Uvicorn's version."""
        return uvicorn_release(self._module)

    # -- main thread -------------------------------------------------------------------------

    def run(self, sock: socket.socket) -> None:
        """Main thread: serve on ``sock`` until Uvicorn's shutdown has ended (:meth:`exit` starts it).

        Uvicorn makes the loop (uvloop when installed), runs the app's
        lifespan startup, serves, and after :meth:`exit` runs its shutdown;
        a lifespan startup that fails raises ``SystemExit`` (Uvicorn's own
        status 3).
        """
        try:
            self.server.run(sockets=[sock])
        finally:
            self.finished.set()

    # -- on the loop --------------------------------------------------------------------------

    def _started(self) -> None:
        """Uvicorn's startup ended (on the loop)."""
        servers = getattr(self.server, "servers", None)
        if not isinstance(servers, list):
            raise UvicornRefused(self.release, ["Server.servers after startup()"])
        self.started = True
        self._on_started(asyncio.get_running_loop())

    def close_listeners_now(self) -> None:
        """On the loop, before anything was accepted (Uvicorn's startup has just ended): close the listeners."""
        for server in self.server.servers:
            server.close()

    async def close_listeners(self) -> None:
        """On the loop: stop serving the listeners and close them (their accept queue is empty by now),
        without dropping what was accepted a moment before (:func:`graceful.process.aio.close_servers`)."""
        await close_servers(list(self.server.servers))

    def new_connections(self) -> int:
        """On the loop: HTTP connections accepted whose first request has not been read yet."""
        return sum(1 for connection in _http_connections(self.server) if _cycle_of(connection) is None)

    def close_idle_connections(self) -> int:
        """On the loop: :func:`close_idle_connections` of this server."""
        return close_idle_connections(self.server)

    def exit(self, timeout: float) -> None:
        """On the loop: start Uvicorn's shutdown, its wait for connections bounded by ``timeout`` s.

        Its shutdown closes what is left (idle connections; a WebSocket still
        open gets Uvicorn's 1012), waits for the connections and tasks up to
        ``timeout`` s (then cancels them), then runs the app's lifespan
        shutdown; :attr:`finished` is set when it has ended.
        """
        self.config.timeout_graceful_shutdown = max(0.0, timeout)
        self.server.should_exit = True


def close_idle_connections(server: Any) -> int:
    """On ``server``'s loop: close its idle keep-alive HTTP connections; those in a request close after its response.

    A connection whose first request has not arrived yet is left open (its
    request is counted when it comes), and so is every WebSocket (told to
    leave with 1001 by graceful's middleware). Returns how many were closed
    at once. ``server``: a started ``uvicorn.Server`` (``graceful serve``'s,
    or the one a Gunicorn Uvicorn worker made).
    """
    closed = 0
    for connection in _http_connections(server):
        cycle = _cycle_of(connection)
        if cycle is None:
            continue
        if getattr(cycle, "response_complete", False):
            closed += 1
        connection.shutdown()  # idle: closed now; in a request: "keep_alive = False", closed after it
    return closed


def close_after_requests(server: Any) -> None:
    """On ``server``'s loop: each HTTP connection in a request closes after its response (``Connection: close``).

    Idle ones are left open (Gunicorn's Uvicorn worker: a keep-alive client
    may be sending its next request on one that moment).
    """
    for connection in _http_connections(server):
        cycle = _cycle_of(connection)
        if cycle is not None and not getattr(cycle, "response_complete", False):
            connection.shutdown()  # in a request: "keep_alive = False", closed after it


def _http_connections(server: Any) -> list[Any]:
    ws_class = getattr(server.config, "ws_protocol_class", None)
    connections = list(server.server_state.connections)
    if inspect.isclass(ws_class):
        return [connection for connection in connections if not isinstance(connection, ws_class)]
    return connections


def _cycle_of(connection: Any) -> Any:
    """An HTTP protocol's current request cycle: None before its first request (or for a protocol without one)."""
    return getattr(connection, "cycle", None)


def signal_free_server_class(base: Any) -> Any:
    """``uvicorn.Server`` (``base``) that captures no signal: graceful's own handler owns SIGTERM and SIGINT.

    Uvicorn's ``capture_signals`` would replace graceful's handler, begin
    Uvicorn's own stop at once (every connection closed, WebSockets 1012)
    and re-raise the signal at exit. Also the base of Gunicorn's Uvicorn
    worker's server (:mod:`graceful.gunicorn.adapter.uvicorn_worker`).
    """

    class SignalFreeServer(base):  # type: ignore[misc]  # Uvicorn's class, known at run time
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # graceful's handler stays: nothing to install, nothing to re-raise.
            yield

    return SignalFreeServer


def _graceful_server_class(base: Any) -> Any:
    """``uvicorn.Server`` with graceful's signal handling and startup/shutdown notices."""

    class GracefulUvicornServer(signal_free_server_class(base)):  # type: ignore[misc]  # known at run time
        graceful: Uvicorn

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if getattr(self, "started", True):  # a failed bind leaves it False (Uvicorn exits next)
                self.graceful._started()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                await super().shutdown(sockets=sockets)
            finally:
                self.graceful.finished.set()

    return GracefulUvicornServer
