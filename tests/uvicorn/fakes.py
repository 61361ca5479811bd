"""A fake ``uvicorn`` module for the unit tests: the parts of Uvicorn's Server graceful touches, nothing else.

:class:`FakeServer` runs a real asyncio loop (``run``: ``startup``, then
until ``should_exit``, then ``shutdown``) without sockets or protocols of
its own; it records what happened in ``events`` (shared by the test).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar


class FakeAsyncioServer:
    """What ``loop.create_server`` returns, as far as graceful uses it."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.closed = False
        #: Its listening sockets (none here: the fake loop has no readers to take away).
        self.sockets: list[socket.socket] = []

    def close(self) -> None:
        self.closed = True
        self.events.append("listener closed")


class FakeCycle:
    """An HTTP protocol's request cycle."""

    def __init__(self, response_complete: bool) -> None:
        self.response_complete = response_complete
        self.keep_alive = True


class FakeHTTP:
    """An HTTP connection: ``cycle`` None before its first request."""

    def __init__(self, cycle: FakeCycle | None) -> None:
        self.cycle = cycle
        self.shut_down = False

    def shutdown(self) -> None:
        self.shut_down = True
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False


class FakeWebSocket:
    """A WebSocket connection: Uvicorn's shutdown() of one sends 1012."""

    def __init__(self) -> None:
        self.shut_down = False

    def shutdown(self) -> None:
        self.shut_down = True


class FakeConfig:
    """uvicorn.Config: keeps its keyword arguments."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.app = kwargs.get("app")
        self.lifespan = kwargs.get("lifespan", "auto")
        self.timeout_keep_alive = kwargs.get("timeout_keep_alive", 5)
        self.timeout_graceful_shutdown = kwargs.get("timeout_graceful_shutdown")
        self.ws_protocol_class: type = FakeWebSocket


class FakeServerState:
    def __init__(self) -> None:
        self.connections: set[Any] = set()
        self.tasks: set[Any] = set()


class FakeServer:
    """uvicorn.Server: startup, a main loop until ``should_exit``, shutdown; on a real asyncio loop."""

    events: ClassVar[list[str]] = []
    #: Called at the end of the fake shutdown (the app's lifespan shutdown, say).
    on_shutdown: Callable[[], None] | None = None

    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self.server_state = FakeServerState()
        self.started = False
        self._should_exit = False
        self._exit: asyncio.Event | None = None

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value and self._exit is not None:
            self._exit.set()

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.run(self.serve(sockets=sockets))

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        with self.capture_signals():
            self._exit = asyncio.Event()
            await self.startup(sockets=sockets)
            await self.main_loop()
            await self.shutdown(sockets=sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.servers = [FakeAsyncioServer(self.events)]
        self.started = True
        self.events.append("startup")

    async def main_loop(self) -> None:
        assert self._exit is not None
        await self._exit.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.events.append(f"uvicorn shutdown (timeout_graceful_shutdown {self.config.timeout_graceful_shutdown:.2f})")
        if self.on_shutdown is not None:
            self.on_shutdown()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        self.events.append("uvicorn's signal handlers")
        yield


def fake_uvicorn(version: str = "0.55.0", server: type = FakeServer, config: type = FakeConfig) -> types.ModuleType:
    """A module that looks like ``uvicorn`` of ``version`` to the probe."""
    module = types.ModuleType("uvicorn")
    module.__version__ = version  # type: ignore[attr-defined]
    module.Server = server  # type: ignore[attr-defined]
    module.Config = config  # type: ignore[attr-defined]
    return module
