"""Unit tests of graceful.uvicorn.adapter: the probe's one-line refusals and what it does with Uvicorn's internals."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

import pytest

from graceful.uvicorn.adapter import OLDEST_UVICORN, Uvicorn, UvicornMissing, UvicornRefused
from tests.uvicorn.fakes import FakeConfig, FakeCycle, FakeHTTP, FakeServer, FakeWebSocket, fake_uvicorn


def _ignore(_loop: asyncio.AbstractEventLoop) -> None:
    return None


def probe(module: Any) -> Uvicorn:
    return Uvicorn.probe(_ignore, module=module, app=None)


class TestProbe:
    def test_a_uvicorn_without_capture_signals_is_refused_in_one_line(self) -> None:
        """A release whose Server lacks capture_signals is refused, naming the release and the internal."""

        class Moved(FakeServer):
            capture_signals = None  # type: ignore[assignment]

        with pytest.raises(UvicornRefused) as refused:
            probe(fake_uvicorn("0.99.0", server=Moved))
        assert str(refused.value) == (
            "uvicorn 0.99.0 is not supported: Server.capture_signals; graceful drives uvicorn>=0.29.0"
        )

    def test_an_older_release_is_refused_by_its_version(self) -> None:
        """0.28 and older (signal handlers installed elsewhere) are refused before anything is touched."""
        with pytest.raises(UvicornRefused, match=r"^uvicorn 0\.28\.1 is not supported: older than 0\.29\.0"):
            probe(fake_uvicorn("0.28.1"))

    def test_a_startup_without_sockets_is_refused(self) -> None:
        """graceful hands Uvicorn its socket: a startup() that takes none is an internal that moved."""

        class NoSockets(FakeServer):
            async def startup(self) -> None:  # type: ignore[override]
                return None

        with pytest.raises(UvicornRefused, match=r"Server\.startup\(sockets=\)"):
            probe(fake_uvicorn(server=NoSockets))

    def test_a_server_without_connections_is_refused(self) -> None:
        """A Server whose state has no connections set: refused when built, naming it."""

        class NoConnections(FakeServer):
            def __init__(self, config: FakeConfig) -> None:
                super().__init__(config)
                self.server_state = object()  # type: ignore[assignment]

        with pytest.raises(UvicornRefused, match=r"ServerState\.connections"):
            probe(fake_uvicorn(server=NoConnections))

    def test_a_config_without_timeout_graceful_shutdown_is_refused(self) -> None:
        """The bound graceful puts on Uvicorn's shutdown must exist."""

        class Old(FakeConfig):
            def __init__(self, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                del self.timeout_graceful_shutdown

        with pytest.raises(UvicornRefused, match=r"Config\.timeout_graceful_shutdown"):
            probe(fake_uvicorn(config=Old))

    def test_without_uvicorn_the_error_says_what_to_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No uvicorn installed: one line naming the extra."""
        monkeypatch.setitem(sys.modules, "uvicorn", None)
        with pytest.raises(UvicornMissing) as missing:
            Uvicorn.probe(_ignore, app=None)
        assert "pip install 'graceful-wsgi[asgi]'" in str(missing.value)

    def test_the_installed_uvicorn_passes(self) -> None:
        """The Uvicorn in this environment (the newest supported) has every internal graceful touches."""
        import uvicorn

        adapter = Uvicorn.probe(_ignore, app=None, log_config=None)
        assert adapter.release == uvicorn.__version__
        assert tuple(int(part) for part in uvicorn.__version__.split(".")[:3]) >= OLDEST_UVICORN

    def test_uvicorns_signal_handlers_are_left_out(self) -> None:
        """The real Server's capture_signals, as graceful builds it, installs nothing on the main thread."""
        adapter = Uvicorn.probe(_ignore, app=None, log_config=None)
        before = signal.getsignal(signal.SIGTERM)
        with adapter.server.capture_signals():
            assert signal.getsignal(signal.SIGTERM) is before
        assert signal.getsignal(signal.SIGTERM) is before


class TestConnections:
    def adapter_with(self, *connections: Any) -> Uvicorn:
        adapter = probe(fake_uvicorn())
        adapter.server.server_state.connections.update(connections)
        return adapter

    def test_idle_keep_alive_connections_close_new_ones_and_websockets_stay(self) -> None:
        """At the stop: idle closed, in a request told to close after it, just accepted and WebSockets untouched."""
        idle, busy, new, websocket = (
            FakeHTTP(FakeCycle(True)),
            FakeHTTP(FakeCycle(False)),
            FakeHTTP(None),
            FakeWebSocket(),
        )
        adapter = self.adapter_with(idle, busy, new, websocket)
        assert adapter.new_connections() == 1
        assert adapter.close_idle_connections() == 1
        assert idle.shut_down and busy.shut_down
        assert busy.cycle is not None and busy.cycle.keep_alive is False
        assert not new.shut_down and not websocket.shut_down

    def test_exit_bounds_uvicorns_shutdown(self) -> None:
        """exit(): Uvicorn's wait for connections gets the bound given, and its main loop ends."""
        adapter = probe(fake_uvicorn())
        adapter.exit(2.5)
        assert adapter.config.timeout_graceful_shutdown == 2.5
        assert adapter.server.should_exit is True

    def test_a_startup_that_leaves_no_servers_is_refused(self) -> None:
        """Server.servers, read once Uvicorn started, must be its list of asyncio servers."""

        class NoServers(FakeServer):
            async def startup(self, sockets: Any = None) -> None:
                self.started = True

        adapter = probe(fake_uvicorn(server=NoServers))
        with pytest.raises(UvicornRefused, match=r"Server\.servers after startup\(\)"):
            asyncio.run(adapter.server.startup(sockets=[]))
