"""Unit tests of Gunicorn's ASGI workers under graceful: the adapters' probes and steps, and the stop on the loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import signal
import sys
import types
from collections.abc import Iterator
from typing import Any

import gunicorn
import pytest

from graceful.core.lifecycle import Lifecycle
from graceful.gunicorn.adapter import gasgi, uvicorn_worker
from graceful.gunicorn.adapter.arbiter import ArbiterAdapter
from graceful.gunicorn.adapter.event_loop import guard_accept, is_sleeping_in
from graceful.gunicorn.adapter.refusal import WorkerRefused
from graceful.gunicorn.adapter.release import GunicornMissing
from graceful.gunicorn.adapter.worker import WorkerAdapter
from graceful.gunicorn.asgi_stop import AsgiStop
from graceful.gunicorn.process_stop import ProcessStop
from graceful.gunicorn.stop_reason import StopReason
from graceful.gunicorn.worker_classes import refuse_unsupported, worker_kind
from graceful.process.aio import close_servers
from tests.gunicorn.fakes import FakeWorker

try:
    from gunicorn.workers.gasgi import ASGIWorker
except ImportError:  # Gunicorn before 25.1 (the gunicorn22-25 envs collect this module too)
    ASGIWorker = None

needs_gasgi = pytest.mark.skipif(ASGIWorker is None, reason="-k asgi came with Gunicorn 25.1")

# -- the classes, at start-up -----------------------------------------------------------------------


class Cfg:
    def __init__(self, setting: str) -> None:
        self.worker_class_str = setting


class Server:
    """The parts of Gunicorn's Arbiter the refusal reads."""

    def __init__(self, worker_class: type, setting: str) -> None:
        self.worker_class = worker_class
        self.cfg = Cfg(setting)
        self.pidfile = None


def refusal_of(cls: type, setting: str = "asgi") -> str | None:
    try:
        refuse_unsupported(ArbiterAdapter(Server(cls, setting)))
    except RuntimeError as exc:
        return str(exc)
    return None


def fake_class(module: str, qualname: str, **attributes: Any) -> type:
    """A class whose qualified name is a supported one, with only ``attributes``: a release whose internals moved."""
    cls = type(qualname, (), dict(attributes))
    cls.__module__ = module
    cls.__qualname__ = qualname
    return cls


class TestClasses:
    @needs_gasgi
    def test_the_asgi_kinds(self) -> None:
        """Gunicorn's ASGIWorker is ``asgi``; both UvicornWorkers (and their H11 ones) are ``uvicorn``."""
        import uvicorn_worker as package

        assert worker_kind(ASGIWorker) == "asgi"
        assert worker_kind(package.UvicornWorker) == "uvicorn"
        assert worker_kind(package.UvicornH11Worker) == "uvicorn"
        assert worker_kind(fake_class("uvicorn.workers", "UvicornWorker")) == "uvicorn"

    @needs_gasgi
    def test_this_gunicorns_asgi_and_uvicorn_worker_pass(self) -> None:
        """Gunicorn 27's -k asgi and the installed uvicorn-worker pass the probe at start-up."""
        import uvicorn_worker as package

        assert refusal_of(ASGIWorker) is None
        assert refusal_of(package.UvicornWorker, "uvicorn_worker.UvicornWorker") is None

    @needs_gasgi
    def test_an_asgi_worker_without_its_internals_is_refused_in_one_line(self) -> None:
        """A -k asgi class lacking _serve and _shutdown: one line naming the release and what is missing."""
        cls = fake_class(
            "gunicorn.workers.gasgi", "ASGIWorker", init_signals=lambda: 0, handle_exit_signal=lambda: 0, run=lambda: 0
        )
        problem = refusal_of(cls)
        assert problem is not None and "\n" not in problem
        release = gunicorn.__version__
        assert problem.startswith(f"graceful: Gunicorn {release}'s -k asgi worker has no _serve, _shutdown")

    @needs_gasgi
    def test_gunicorn_before_25_1_is_refused_for_asgi(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Gunicorn 25.0's -k asgi: refused, naming the release and 25.1."""
        monkeypatch.setattr(gunicorn, "__version__", "25.0.3")
        assert refusal_of(ASGIWorker) == (
            "graceful: Gunicorn 25.0.3's -k asgi worker is not supported: graceful supports it from Gunicorn 25.1"
        )

    def test_a_uvicorn_worker_whose_module_has_no_server_is_refused_in_one_line(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """uvicorn.workers without a Server global (moved internals): one line naming the class and Uvicorn."""
        module = types.ModuleType("uvicorn.workers")
        monkeypatch.setitem(sys.modules, "uvicorn.workers", module)
        cls = fake_class("uvicorn.workers", "UvicornWorker", _serve=lambda: 0)
        problem = refusal_of(cls, "uvicorn.workers.UvicornWorker")
        assert problem is not None and "\n" not in problem
        assert problem.startswith("graceful: uvicorn.workers.UvicornWorker (uvicorn ")
        assert "its module uvicorn.workers has no Server" in problem

    def test_an_old_uvicorn_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Uvicorn 0.28 (no Server.capture_signals): refused, naming the oldest supported."""
        import uvicorn
        import uvicorn_worker as package

        monkeypatch.setattr(uvicorn, "__version__", "0.28.1")
        problem = refusal_of(package.UvicornWorker, "uvicorn_worker.UvicornWorker")
        assert problem is not None
        assert "older than 0.29.0" in problem and "on uvicorn 0.29.0+" in problem

    def test_other_classes_stay_refused_naming_the_supported_ones(self) -> None:
        """An unsupported class's line lists every supported -k value, the ASGI ones included."""
        problem = refusal_of(fake_class("gunicorn.workers.gtornado", "TornadoWorker"), "tornado")
        assert problem is not None
        assert problem.endswith(
            "use one of: sync, gthread, gevent, asgi, uvicorn_worker.UvicornWorker, uvicorn.workers.UvicornWorker"
        )


# -- -k asgi, in the worker ---------------------------------------------------------------------------


class FakeLoop:
    def __init__(self) -> None:
        self.removed: list[int] = []
        self.readers_removed: list[int] = []

    def remove_signal_handler(self, signum: int) -> bool:
        self.removed.append(signum)
        return True

    def remove_reader(self, fd: int) -> bool:
        self.readers_removed.append(fd)
        return True

    def _accept_connection(self, protocol_factory: Any, sock: Any, *args: Any) -> Any:
        raise sock.error


class FakeGasgi:
    """What graceful reads on Gunicorn's ASGIWorker."""

    def __init__(self, loop: Any = None) -> None:
        self.loop = loop if loop is not None else FakeLoop()
        self.servers: list[Any] = []
        self.nr_conns = 0
        self.nr = 0
        self.alive = True
        self.max_requests = 50
        self.lifespan: Any = None
        self.cfg = types.SimpleNamespace(graceful_timeout=30, set=lambda name, value: None)
        self._quick_shutdown = False


class TestGasgiProbe:
    def test_a_worker_without_its_internals_is_refused_in_one_line(self) -> None:
        """A worker lacking nr_conns and servers: GunicornMissing naming the release and both."""
        worker = FakeGasgi()
        del worker.nr_conns, worker.servers
        with pytest.raises(GunicornMissing, match=r"^graceful: Gunicorn \S+'s -k asgi worker has no servers, nr_conns"):
            gasgi.GasgiLoop.probe(worker)

    def test_the_worker_adapter_turns_it_into_a_worker_refusal(self) -> None:
        """Through WorkerAdapter.asgi_loop: WorkerRefused (printed as one line, the master stops)."""
        worker: Any = FakeGasgi()
        del worker.lifespan
        adapter = WorkerAdapter(worker)
        adapter.kind = "asgi"
        with pytest.raises(WorkerRefused, match="has no lifespan"):
            adapter.asgi_loop()

    def test_prepared_sigterm_handler_removed_and_accept_guarded(self) -> None:
        """The probe removes the loop's SIGTERM handler (graceful's replaces it) and guards its accept."""
        worker = FakeGasgi()
        original = FakeLoop._accept_connection
        gasgi.GasgiLoop.probe(worker)
        assert worker.loop.removed == [signal.SIGTERM]
        assert worker.loop._accept_connection is not original

    def test_max_requests_taken_over(self) -> None:
        """Gunicorn's own max_requests stop is switched off; the limit is graceful's."""
        worker = FakeGasgi()
        loop = gasgi.GasgiLoop.probe(worker)
        assert loop.take_over_max_requests() == 50
        assert worker.max_requests == sys.maxsize

    def test_force_close_sets_must_close(self) -> None:
        """A -k asgi request (no force_close) is closed after its response through must_close."""
        req = types.SimpleNamespace(must_close=False)
        gasgi.force_close(req)
        assert req.must_close

    def test_lifespan_shutdown_is_run_once_and_taken_from_gunicorn(self) -> None:
        """graceful runs the app's lifespan shutdown; Gunicorn's stop then finds none to run."""
        ran: list[str] = []

        class Lifespan:
            async def shutdown(self) -> None:
                ran.append("shutdown")

        worker = FakeGasgi()
        worker.lifespan = Lifespan()
        loop = gasgi.GasgiLoop.probe(worker)
        assert asyncio.run(loop.lifespan_shutdown(1.0))
        assert ran == ["shutdown"] and worker.lifespan is None

    def test_finish_wakes_serve_from_its_sleep(self) -> None:
        """finish(): alive False, and the task of _serve asleep in asyncio.sleep is cancelled (woken)."""

        class Worker(FakeGasgi):
            async def _serve(self) -> str:
                try:
                    while self.alive:
                        await asyncio.sleep(60)
                except asyncio.CancelledError:
                    return "woken"
                return "ended"

        async def main() -> str:
            worker = Worker(asyncio.get_running_loop())
            adapter = gasgi.GasgiLoop(worker)
            task = asyncio.ensure_future(worker._serve())
            await asyncio.sleep(0)
            assert is_sleeping_in(task, Worker._serve)
            adapter.finish(1.0)
            assert not worker.alive and not worker._quick_shutdown  # time left: Gunicorn's wait stays
            return await asyncio.wait_for(task, 5)

        assert asyncio.run(main()) == "woken"

    def test_finish_past_the_deadline_cuts_at_once(self) -> None:
        """finish() with no time left: Gunicorn's quick stop, not its wait of a whole second or more."""
        worker = FakeGasgi()
        gasgi.GasgiLoop(worker).finish(0.0)
        assert not worker.alive and worker._quick_shutdown


class TestGuardAccept:
    def test_a_listener_shut_down_leaves_the_loop_quietly(self) -> None:
        """accept() failing with EINVAL (the master shut it down): the reader is removed, nothing raised."""
        loop: Any = FakeLoop()
        assert guard_accept(loop)
        sock = types.SimpleNamespace(
            error=OSError(errno.EINVAL, "Invalid argument"), fileno=lambda: 7, getsockname=lambda: "x"
        )
        assert loop._accept_connection(object(), sock) is None
        assert loop.readers_removed == [7]

    def test_other_errors_are_asyncios(self) -> None:
        """Any other accept error propagates as asyncio's loop expects."""
        loop: Any = FakeLoop()
        guard_accept(loop)
        sock = types.SimpleNamespace(error=OSError(errno.EMFILE, "Too many"), fileno=lambda: 7)
        with pytest.raises(OSError, match="Too many"):
            loop._accept_connection(object(), sock)

    def test_a_loop_without_it_is_left_alone(self) -> None:
        """uvloop (no _accept_connection): not guarded."""
        assert not guard_accept(types.SimpleNamespace())  # type: ignore[arg-type]


class TestCloseServers:
    @staticmethod
    def made_after_a_stop_right_after_accept(close: Any) -> bool:
        """A real listener; the stop (``close``) is queued on the loop just before a connection is accepted."""

        async def main() -> bool:
            loop: Any = asyncio.get_running_loop()
            made = asyncio.Event()

            class Protocol(asyncio.Protocol):
                def connection_made(self, transport: Any) -> None:
                    made.set()
                    transport.close()

            accept = loop._accept_connection
            servers: list[Any] = []
            stops: list[asyncio.Task[None]] = []

            def accept_after_the_stop_was_queued(*args: Any, **kwargs: Any) -> Any:
                stops.append(loop.create_task(close(servers[0])))  # its first step runs before the connection's
                return accept(*args, **kwargs)

            loop._accept_connection = accept_after_the_stop_was_queued  # read when the server starts serving
            server = await loop.create_server(Protocol, "127.0.0.1", 0)
            servers.append(server)
            _, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(made.wait(), 1.0)
            writer.close()
            await asyncio.gather(*stops)
            return made.is_set()

        return asyncio.run(main())

    def test_a_connection_accepted_just_before_is_kept(self) -> None:
        """The stop queued as a connection is accepted: its transport is still made (close_servers)."""

        async def close(server: Any) -> None:
            await close_servers([server])

        assert self.made_after_a_stop_right_after_accept(close)

    @pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
    def test_closing_the_server_at_once_drops_it(self) -> None:
        """The same with asyncio's Server.close() at once: the accepted connection is dropped, unclosed (the bug)."""

        async def close(server: Any) -> None:
            server.close()

        made = self.made_after_a_stop_right_after_accept(close)
        gc.collect()  # the dropped transport's warnings now, inside this test's filters
        assert not made


# -- Uvicorn's worker ------------------------------------------------------------------------------------


class FakeUvicornServer:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.servers: list[Any] = []
        self.should_exit = False
        self.server_state = types.SimpleNamespace(connections=set(), total_requests=0)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        raise AssertionError("graceful's subclass must not capture signals")
        yield  # pragma: no cover

    async def serve(self, sockets: Any = None) -> None:
        with self.capture_signals():
            await self.startup(sockets)
            await self.on_tick(0)

    async def startup(self, sockets: Any = None) -> None:
        self.started = True

    async def shutdown(self, sockets: Any = None) -> None:
        pass

    async def on_tick(self, counter: int) -> bool:
        return False


@pytest.fixture
def uvicorn_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("fake_uvicorn_workers")
    module.Server = FakeUvicornServer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_uvicorn_workers", module)
    return module


async def _echo_app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app that answers 200 with no headers."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def fake_uvicorn_worker() -> Any:
    cls = fake_class("fake_uvicorn_workers", "UvicornWorker")

    async def _serve(self: Any) -> None:
        server = sys.modules["fake_uvicorn_workers"].Server(config=self.config)
        self.server = server
        await server.serve(sockets=[])

    cls._serve = _serve  # type: ignore[attr-defined]
    worker = cls()
    worker.config = types.SimpleNamespace(
        limit_max_requests=40, timeout_graceful_shutdown=None, app=None, load=lambda: None, loaded_app=_echo_app
    )
    worker.max_requests = 40
    return worker


class TestUvicornWorker:
    def test_its_server_captures_no_signal_and_reports_its_loop_and_ticks(
        self, uvicorn_module: types.ModuleType
    ) -> None:
        """The module's Server is replaced: no signal captured; startup records the loop; each tick calls graceful."""
        worker = fake_uvicorn_worker()
        adapter = uvicorn_worker.UvicornWorkerLoop.probe(worker)
        ticks: list[int] = []
        adapter.every_tick(lambda: ticks.append(1))
        asyncio.run(worker._serve())
        assert adapter.running_loop() is not None
        assert adapter.server is worker.server
        assert ticks == [1]

    def test_max_requests_taken_over_and_finish_bounded(self, uvicorn_module: types.ModuleType) -> None:
        """Uvicorn's limit_max_requests off; finish sets should_exit with the wait's bound."""
        worker = fake_uvicorn_worker()
        adapter = uvicorn_worker.UvicornWorkerLoop.probe(worker)
        assert adapter.take_over_max_requests() == 40
        assert worker.config.limit_max_requests is None
        asyncio.run(worker._serve())
        adapter.finish(2.5)
        assert worker.server.should_exit and worker.config.timeout_graceful_shutdown == 2.5

    def test_a_config_without_its_settings_is_refused(self, uvicorn_module: types.ModuleType) -> None:
        """A worker whose config has no timeout_graceful_shutdown: ValueError naming it (one line)."""
        worker = fake_uvicorn_worker()
        del worker.config.timeout_graceful_shutdown
        with pytest.raises(ValueError, match=r"it has no config\.timeout_graceful_shutdown"):
            uvicorn_worker.UvicornWorkerLoop.probe(worker)


# -- the stop on the loop ---------------------------------------------------------------------------------


class FakeAsgiLoop:
    """An ASGI worker's loop as the stop sees it; records each step."""

    def __init__(self, served: int = 0, connections: int = 0, max_requests: int = 100) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.served = served
        self.connections = connections
        self.limit = max_requests
        self.steps: list[str] = []

    def running_loop(self) -> asyncio.AbstractEventLoop | None:
        return self.loop

    def take_over_max_requests(self) -> int:
        return self.limit

    def requests_served(self) -> int:
        return self.served

    async def stop_accepting(self) -> None:
        self.steps.append("stop accepting")

    def close_after_response(self) -> None:
        self.steps.append("close after response")

    def open_connections(self) -> int:
        return self.connections

    async def lifespan_shutdown(self, timeout: float) -> bool:
        self.steps.append("lifespan")
        return True

    def finish(self, timeout: float) -> None:
        self.steps.append("finish")

    def every_tick(self, callback: Any) -> None:
        pass


class TestAsgiStop:
    def test_steps_in_order_on_the_loop(self) -> None:
        """Stop accepting, Connection: close from now, (nothing to drain), lifespan, the worker's stop; 0 left."""
        fake = FakeAsgiLoop()
        stop_lifecycle = Lifecycle()
        stop = AsgiStop(fake, stop_lifecycle, lifespan_until=5.0)
        gone: list[str] = []

        async def main() -> int:
            fake.loop = asyncio.get_running_loop()
            return await asyncio.to_thread(stop.stop, _now(), 5.0, lambda: gone.append("gunicorn"))

        assert asyncio.run(main()) == 0
        assert fake.steps == ["stop accepting", "close after response", "lifespan", "finish"]
        assert gone == []
        assert stop_lifecycle.gate.closing  # later responses say Connection: close (the middleware)

    def test_connections_left_at_the_deadline_are_counted(self) -> None:
        """A drain whose deadline has passed: the connections still open are returned, the stop goes on."""
        fake = FakeAsgiLoop(connections=2)
        stop = AsgiStop(fake, Lifecycle(), lifespan_until=0.0)

        async def main() -> int:
            fake.loop = asyncio.get_running_loop()
            return await asyncio.to_thread(stop.stop, _now() - 10.0, 1.0, lambda: None)

        assert asyncio.run(main()) == 2
        assert fake.steps == ["stop accepting", "close after response", "lifespan", "finish"]

    def test_requests_in_flight_at_the_deadline_are_recorded_abandoned_for_good(self) -> None:
        """Requests still running at the drain's deadline are abandoned in the record, though the worker's
        stop then cancels them (their count ends) before worker_exit's own wait, which finds none."""
        lifecycle = Lifecycle()
        tokens = [lifecycle.in_flight.add() for _ in range(2)]
        lifecycle.stats.drain_began(lifecycle.clock.now(), lifecycle.in_flight.count)  # the stop's start
        fake = FakeAsgiLoop()
        stop = AsgiStop(fake, lifecycle, lifespan_until=0.0)

        async def main() -> int:
            fake.loop = asyncio.get_running_loop()
            return await asyncio.to_thread(stop.stop, _now() - 10.0, 1.0, lambda: None)

        asyncio.run(main())
        for release in tokens:  # the worker's stop cancels them: their count ends
            release()
        assert lifecycle.drain(0.5)  # worker_exit's wait: nothing left to wait for
        figures = lifecycle.stats.drain
        assert figures is not None and (figures.in_flight, figures.abandoned) == (2, 2)

    def test_a_drain_with_nothing_left_at_the_deadline_abandons_nothing(self) -> None:
        """The requests ended before the deadline: worker_exit's wait records 0 abandoned."""
        lifecycle = Lifecycle()
        lifecycle.stats.drain_began(lifecycle.clock.now(), 0)
        fake = FakeAsgiLoop()

        async def main() -> int:
            fake.loop = asyncio.get_running_loop()
            return await asyncio.to_thread(AsgiStop(fake, lifecycle, 0.0).stop, _now() - 10.0, 1.0, lambda: None)

        asyncio.run(main())
        assert lifecycle.drain(0.5)
        figures = lifecycle.stats.drain
        assert figures is not None and figures.abandoned == 0

    def test_no_loop_by_the_deadline_hands_over_to_gunicorn(self) -> None:
        """A worker whose loop never ran by the drain's deadline: Gunicorn's own stop."""
        gone: list[str] = []
        AsgiStop(FakeAsgiLoop(), Lifecycle(), 1.0).stop(_now() - 10.0, 1.0, lambda: gone.append("gunicorn"))
        assert gone == ["gunicorn"]

    def test_a_stop_while_the_worker_starts_waits_for_its_loop(self) -> None:
        """The loop not serving yet at the first look (a HUP just after boot): waited for, then the same steps."""
        fake = FakeAsgiLoop()
        looks: list[None] = []
        loop_when_serving = fake.running_loop

        def running_loop() -> asyncio.AbstractEventLoop | None:
            looks.append(None)
            return None if len(looks) == 1 else loop_when_serving()

        fake.running_loop = running_loop  # type: ignore[method-assign]
        stop = AsgiStop(fake, Lifecycle(), lifespan_until=5.0)
        gone: list[str] = []

        async def main() -> int:
            fake.loop = asyncio.get_running_loop()
            return await asyncio.to_thread(stop.stop, _now(), 5.0, lambda: gone.append("gunicorn"))

        assert asyncio.run(main()) == 0
        assert len(looks) >= 2 and gone == []
        assert fake.steps == ["stop accepting", "close after response", "lifespan", "finish"]

    def test_max_requests_counts_the_pending_request(self) -> None:
        """The request that reaches max_requests (served + pending) stops the worker."""
        stop = AsgiStop(FakeAsgiLoop(served=9, max_requests=10), Lifecycle(), 1.0)
        assert stop.reaches_max_requests(pending=1)
        assert not stop.reaches_max_requests(pending=0)


class Request:
    def __init__(self) -> None:
        self.closed = False

    def force_close(self) -> None:
        self.closed = True


class Facts:
    def fired(self, kind: Any) -> bool:
        return False

    def stop_reason(self) -> StopReason:
        return StopReason.RECYCLED


class TestProcessStopOfAnAsgiWorker:
    def test_the_request_reaching_max_requests_closes_and_starts_a_recycled_stop(self) -> None:
        """pre_request of an ASGI worker: the last request gets Connection: close and the stop begins."""
        stop = ProcessStop(FakeWorker("asgi"), Facts())  # type: ignore[arg-type]
        stop.asgi = AsgiStop(FakeAsgiLoop(served=4, max_requests=5), Lifecycle(), 1.0)
        req = Request()
        stop.before_request(req)
        assert req.closed and stop.reason is StopReason.RECYCLED

    def test_uvicorns_tick_starts_the_stop_once_the_limit_is_served(self) -> None:
        """Uvicorn's worker (no pre_request): its tick begins the recycled stop once served >= max_requests."""
        fake = FakeAsgiLoop(served=4, max_requests=5)
        stop = ProcessStop(FakeWorker("uvicorn"), Facts())  # type: ignore[arg-type]
        stop.asgi = AsgiStop(fake, Lifecycle(), 1.0)
        stop.check_max_requests()
        assert not stop.stopping
        fake.served = 5
        stop.check_max_requests()
        assert stop.reason is StopReason.RECYCLED

    def test_uvicorns_tick_starts_the_stop_once_its_master_is_gone(self) -> None:
        """Uvicorn's worker (it never looks at its parent): its tick begins the stop once the parent changed."""
        stop = ProcessStop(FakeWorker("uvicorn"), Facts())  # type: ignore[arg-type]
        stop.asgi = AsgiStop(FakeAsgiLoop(served=0, max_requests=5), Lifecycle(), 1.0)
        stop.on_tick()
        assert not stop.stopping
        stop.forked_by += 1  # as if re-parented: os.getppid() is no longer the master's pid
        stop.on_tick()
        assert stop.stopping and stop.reason is StopReason.BY_MASTER  # no TERM, no ShutdownInitiated


def _now() -> float:
    import time

    return time.monotonic()
