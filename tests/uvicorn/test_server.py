"""Unit tests of graceful.uvicorn.server: the timeline around a fake Uvicorn, on a real loop, with a fake clock.

The fake Uvicorn (tests/uvicorn/fakes.py) records its startup, the
listener's close and its shutdown beside the lifecycle's signals, so each
test reads the order things happened in. No Uvicorn, no HTTP, no sleeps.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from graceful.asgi import GracefulASGIMiddleware
from graceful.asgi.lifespan import Lifespan
from graceful.core.config import Config
from graceful.core.hooks import Outcome
from graceful.core.lifecycle import Lifecycle
from graceful.testing import FakeClock
from graceful.uvicorn.server import SHUTDOWN_TASK, UvicornMissing, UvicornServer, serve_asgi, wrap_asgi_app
from tests.uvicorn.fakes import FakeServer, fake_uvicorn

SOON = 10.0  # real seconds: a bound for a loaded machine, never reached when things work


async def app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app the fake never calls."""


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    yield listener
    listener.close()


def recording(events: list[str], **attributes: Any) -> type:
    """A FakeServer class that records into ``events``."""
    return type("Recording", (FakeServer,), {"events": events, **attributes})


def lifecycle_recording(events: list[str], **settings: Any) -> Lifecycle:
    config = Config(
        **{"shutdown_delay": 1.0, "drain_timeout": 5.0, "hook_timeout": 4.0, "grace_period": 30.0, **settings}
    )
    lifecycle = Lifecycle(config, clock=FakeClock())
    lifecycle.subscribe(lambda name, _at: events.append(name))
    return lifecycle


def finished(lifecycle: Lifecycle) -> bool:
    """Wait, in real time, for CleanupFinished (the fake clock would jump a wait of its own to its deadline)."""
    return lifecycle.cleanup_finished.event.wait(SOON)


def cleanup_results(lifecycle: Lifecycle) -> list[Any]:
    return [result for result in lifecycle.hook_results() if result.kind == "cleanup task"]


def server_of(lifecycle: Lifecycle, sock: socket.socket, server_class: type) -> UvicornServer:
    server = UvicornServer(app, sock, lifecycle, uvicorn_module=fake_uvicorn(server=server_class))
    lifecycle.adapter = server
    return server


class TestTimeline:
    def test_graceful_owns_the_timeline_and_uvicorns_shutdown_comes_after_the_drain(self, sock: socket.socket) -> None:
        """startup, T0 .. listener closed on the loop .. drained, then Uvicorn's shutdown (bounded), CleanupFinished."""
        events: list[str] = []
        lifecycle = lifecycle_recording(events)
        server = server_of(lifecycle, sock, recording(events))
        lifecycle.post_start_hook("begin the shutdown")(lifecycle.request_shutdown)
        server.run()
        assert finished(lifecycle)
        assert events == [
            "startup",
            "ShutdownInitiated",
            "PreShutdownHooksStopped",
            "AfterShutdownDelayDuration",
            "NotAcceptingNewRequests",
            "listener closed",
            "HTTPServerStoppedListening",
            "InFlightRequestsDrained",
            "uvicorn shutdown (timeout_graceful_shutdown 1.98)",  # half of hook_timeout 4 less the task's margin
            "CleanupFinished",
        ]
        assert "uvicorn's signal handlers" not in events
        assert [(r.name, r.outcome) for r in cleanup_results(lifecycle)] == [(SHUTDOWN_TASK, Outcome.OK)]

    def test_a_request_that_never_ends_is_given_up_at_drain_timeout_and_uvicorn_still_stops(
        self, sock: socket.socket
    ) -> None:
        """In flight at the stop and never done: the drain ends at drain_timeout, Uvicorn's shutdown follows."""
        events: list[str] = []
        lifecycle = lifecycle_recording(events, drain_timeout=3.0)
        server = server_of(lifecycle, sock, recording(events))

        @lifecycle.post_start_hook("a request, then the shutdown")
        def begin() -> None:
            lifecycle.in_flight.add()  # never released
            lifecycle.request_shutdown()

        server.run()
        assert finished(lifecycle)
        assert events.index("InFlightRequestsDrained") < events.index(
            next(e for e in events if "uvicorn shutdown" in e)
        )
        drain = lifecycle.stats.drain
        assert drain is not None and drain.abandoned == 1

    def test_a_failed_lifespan_shutdown_fails_the_task_in_the_record(self, sock: socket.socket) -> None:
        """The app's lifespan shutdown failed: the task 'uvicorn shutdown' says so; the shutdown still finishes."""
        events: list[str] = []
        lifecycle = lifecycle_recording(events)

        def lifespan_failed() -> None:
            Lifespan.of(lifecycle).shutdown = "failed: boom"

        server = server_of(lifecycle, sock, recording(events, on_shutdown=staticmethod(lifespan_failed)))
        lifecycle.post_start_hook("begin the shutdown")(lifecycle.request_shutdown)
        server.run()
        assert finished(lifecycle)
        (result,) = cleanup_results(lifecycle)
        assert (result.name, result.outcome) == (SHUTDOWN_TASK, Outcome.FAILED)
        assert result.error is not None and "the app's lifespan shutdown failed: boom" in result.error

    def test_a_uvicorn_shutdown_that_never_ends_is_bounded_by_hook_timeout(self, sock: socket.socket) -> None:
        """Uvicorn's shutdown hangs: the task fails within its hook_timeout and CleanupFinished fires anyway."""
        events: list[str] = []
        lifecycle = lifecycle_recording(events)
        release = threading.Event()

        class Hanging(recording(events)):  # type: ignore[misc]
            async def shutdown(self, sockets: Any = None) -> None:
                import asyncio

                while not release.is_set():  # until the test lets it go: a shutdown that never ends
                    await asyncio.sleep(0.01)

        server = server_of(lifecycle, sock, Hanging)
        lifecycle.post_start_hook("begin the shutdown")(lifecycle.request_shutdown)
        runner = threading.Thread(target=server.run, daemon=True)
        runner.start()
        try:
            assert finished(lifecycle)
            (result,) = cleanup_results(lifecycle)
            assert result.outcome is Outcome.FAILED
            assert result.error is not None and "Uvicorn's shutdown did not end within 3.95s" in result.error
        finally:
            release.set()
            runner.join(SOON)

    def test_a_sigterm_during_the_lifespan_startup_stops_uvicorn_once_it_ends(self, sock: socket.socket) -> None:
        """The whole timeline runs during Uvicorn's startup: when it ends, the listener closes and Uvicorn stops."""
        events: list[str] = []
        lifecycle = lifecycle_recording(events)

        class SlowStartup(recording(events)):  # type: ignore[misc]
            async def startup(self, sockets: Any = None) -> None:
                lifecycle.request_shutdown()
                assert finished(lifecycle)  # blocks this fake's loop: nothing of the timeline needs it yet
                await super().startup(sockets=sockets)

        server = server_of(lifecycle, sock, SlowStartup)
        server.run()
        assert events[-4:] == [
            "CleanupFinished",
            "startup",
            "listener closed",
            "uvicorn shutdown (timeout_graceful_shutdown 4.00)",
        ]

    def test_readiness_waits_for_uvicorns_startup(self, sock: socket.socket) -> None:
        """The readiness check 'uvicorn' fails until Uvicorn's startup has ended."""
        events: list[str] = []
        lifecycle = lifecycle_recording(events)
        server = server_of(lifecycle, sock, recording(events))
        seen: list[bool] = [server.serving()]

        @lifecycle.post_start_hook("look, then stop")
        def look() -> None:
            seen.append(server.serving())
            lifecycle.request_shutdown()

        server.run()
        assert finished(lifecycle)
        assert seen == [False, True]


class TestStartUpFailure:
    def test_a_failed_lifespan_startup_exits_1_with_the_apps_reason(self, caplog: pytest.LogCaptureFixture) -> None:
        """Uvicorn exits during its startup (the app's lifespan startup failed): status 1, one line saying why."""
        lifecycle = lifecycle_recording([])

        class Failing(recording([])):  # type: ignore[misc]
            async def startup(self, sockets: Any = None) -> None:
                Lifespan.of(lifecycle).waiting = "the app's lifespan startup failed: no database"
                raise SystemExit(3)  # what Uvicorn does then

        uvicorn = fake_uvicorn(server=Failing)
        assert serve_asgi(app, "127.0.0.1", 0, lifecycle=lifecycle, uvicorn_module=uvicorn) == 1
        assert (
            "graceful: Uvicorn stopped during its startup (its status 3): the app's lifespan startup failed:"
            " no database" in caplog.text
        )
        assert not lifecycle.shutdown_initiated.is_set()


class TestWrap:
    def test_a_plain_app_is_wrapped_with_the_lifecycle(self) -> None:
        """A bare ASGI app gets the middleware of the lifecycle given."""
        lifecycle = Lifecycle(Config())
        wrapped, chosen = wrap_asgi_app(app, lifecycle)
        assert isinstance(wrapped, GracefulASGIMiddleware) and wrapped.app is app and chosen is lifecycle

    def test_an_app_with_the_middleware_is_served_as_it_is(self) -> None:
        """Wrapped already (with this lifecycle): not wrapped twice."""
        lifecycle = Lifecycle(Config())
        wrapped = GracefulASGIMiddleware(app, lifecycle)
        assert wrap_asgi_app(wrapped, lifecycle) == (wrapped, lifecycle)

    def test_the_middlewares_own_lifecycle_is_used(self) -> None:
        """Wrapped with a lifecycle of its own and none given: served with that one."""
        lifecycle = Lifecycle(Config())
        wrapped = GracefulASGIMiddleware(app, lifecycle)
        assert wrap_asgi_app(wrapped) == (wrapped, lifecycle)

    def test_a_starlette_app_declaring_the_middleware_is_served_as_it_is(self) -> None:
        """add_middleware(GracefulASGIMiddleware) (the stack not built yet): the default lifecycle, no second one."""
        from starlette.applications import Starlette

        from graceful.core import default

        starlette = Starlette()
        starlette.add_middleware(GracefulASGIMiddleware)
        assert wrap_asgi_app(starlette) == (starlette, default.default_lifecycle)


class TestServeAsgi:
    def test_without_uvicorn_it_stops_before_binding(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """No Uvicorn: UvicornMissing (one line) and no socket left bound."""
        monkeypatch.setitem(sys.modules, "uvicorn", None)
        taken = socket.create_server(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        taken.close()
        with pytest.raises(UvicornMissing):
            serve_asgi(app, "127.0.0.1", port, lifecycle=Lifecycle(Config()))
        socket.create_server(("127.0.0.1", port)).close()  # free again
