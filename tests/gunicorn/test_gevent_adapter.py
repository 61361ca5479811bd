"""The gevent worker's servers (graceful.gunicorn.adapter.gevent), recorded and quieted, with a fake StreamServer.

:func:`record_servers` replaces ``gunicorn.workers.ggevent.StreamServer``; here
that module is a stand-in whose ``StreamServer`` plays gevent's: accepting
switched on and off, and ``do_read`` raising what ``accept()`` raised. No hub,
no socket, no patch of the interpreter.
"""

from __future__ import annotations

import errno
import logging
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from graceful.gunicorn.adapter.gevent import WorkerLoopTicks, record_servers


class StreamServer:
    """gevent's ``StreamServer`` as the recorder subclasses it."""

    def __init__(self, listener: Any, handle: Any = None, spawn: Any = None) -> None:
        self.address = listener
        self.accepting = False
        #: What the next ``accept()`` raises (None: it accepts a connection).
        self.accept_error: OSError | None = None

    def start_accepting(self) -> None:
        self.accepting = True

    def stop_accepting(self) -> None:
        self.accepting = False

    def do_read(self) -> Any:
        if self.accept_error is not None:
            raise self.accept_error
        return ("client socket", ("127.0.0.1", 50000))


@pytest.fixture
def ggevent(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Gunicorn's gevent worker module as record_servers finds it (restored after the test)."""
    module = SimpleNamespace(StreamServer=StreamServer)
    monkeypatch.setitem(sys.modules, "gunicorn.workers.ggevent", module)
    return module


class TestRecordServers:
    def test_the_servers_the_worker_builds_are_recorded(self, ggevent: SimpleNamespace) -> None:
        """After record_servers, each StreamServer Gunicorn's run() builds is recorded, in order, and still gevent's."""
        recorded = record_servers()
        assert recorded is not None
        first = ggevent.StreamServer("127.0.0.1:8000")
        second = ggevent.StreamServer("127.0.0.1:8001")
        assert recorded.servers == [first, second]
        assert isinstance(first, StreamServer)
        assert first.do_read() == ("client socket", ("127.0.0.1", 50000))

    def test_stop_accepting_holds_even_when_gevents_pool_frees_a_slot(self, ggevent: SimpleNamespace) -> None:
        """Stopped for good: gevent's start_accepting (its pool freed a slot) no longer re-arms the server."""
        recorded = record_servers()
        assert recorded is not None
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.start_accepting()
        assert server.accepting
        recorded.stop_accepting()
        assert not server.accepting
        server.start_accepting()
        assert not server.accepting
        recorded.stop_accepting()  # idempotent
        assert not server.accepting

    def test_a_server_not_stopped_re_arms_as_gevent_does(self, ggevent: SimpleNamespace) -> None:
        """Until graceful stops it, a server's start_accepting is gevent's own."""
        record_servers()
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.stop_accepting()
        server.start_accepting()
        assert server.accepting

    def test_a_listener_shut_down_stops_accepting_with_one_info_line(
        self, ggevent: SimpleNamespace, caplog: pytest.LogCaptureFixture
    ) -> None:
        """accept()'s EINVAL (the master shut the listener down): one INFO line, no traceback, no more accepting."""
        record_servers()
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.start_accepting()
        server.accept_error = OSError(errno.EINVAL, "Invalid argument")
        with caplog.at_level(logging.INFO, logger="graceful"):
            assert server.do_read() is None
            assert server.do_read() is None
        assert not server.accepting
        [line] = [record.getMessage() for record in caplog.records]
        assert "listener 127.0.0.1:8000 shut down; stopped accepting" in line

    def test_other_accept_errors_are_gevents_to_handle(self, ggevent: SimpleNamespace) -> None:
        """Any other accept() error goes to gevent as before (it logs and goes on), accepting untouched."""
        record_servers()
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.start_accepting()
        server.accept_error = OSError(errno.EMFILE, "Too many open files")
        with pytest.raises(OSError, match="Too many open files"):
            server.do_read()
        assert server.accepting

    @pytest.mark.parametrize("module", [None, SimpleNamespace(), SimpleNamespace(StreamServer=object)])
    def test_a_gevent_worker_without_a_stream_server_to_record_is_left_alone(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, module: Any
    ) -> None:
        """No StreamServer class with do_read in Gunicorn's gevent module: one warning, None, nothing replaced."""
        monkeypatch.setitem(sys.modules, "gunicorn.workers.ggevent", module)
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert record_servers() is None
        assert sys.modules["gunicorn.workers.ggevent"] is module
        assert module is None or getattr(module, "StreamServer", None) in (None, object)
        [line] = [record.getMessage() for record in caplog.records]
        assert "gevent worker has no StreamServer to record" in line


class FakeGevent:
    """The ``gevent`` module as Gunicorn's gevent worker calls it: ``sleep`` recorded, never slept."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def sleep(self, seconds: float = 0) -> None:
        self.slept.append(seconds)

    def spawn(self, function: Any) -> str:
        return "spawned"


class FakePool:
    """gevent's Pool as the ticks wait on it: ``join(timeout)`` recorded (True: empty)."""

    def __init__(self) -> None:
        self.joined: list[float] = []

    def join(self, timeout: float | None = None) -> bool:
        self.joined.append(timeout if timeout is not None else -1.0)
        return True


class TestWorkerLoopTicks:
    @pytest.fixture
    def worker(self, ggevent: SimpleNamespace) -> SimpleNamespace:
        """A gevent worker's module with its ``gevent``, record_servers installed, one server with a pool."""
        ggevent.gevent = FakeGevent()
        state = SimpleNamespace(alive=True, module=ggevent, real=ggevent.gevent)
        state.recorded = record_servers(lambda: state.alive)
        state.server = ggevent.StreamServer("127.0.0.1:8000")
        state.server.pool = FakePool()
        return state

    def test_record_servers_puts_the_ticks_in_the_workers_gevent_once(self, worker: SimpleNamespace) -> None:
        """The worker module's gevent becomes the ticks (sleep ours, the rest gevent's); a second call wraps nothing."""
        ticks = worker.module.gevent
        assert isinstance(ticks, WorkerLoopTicks)
        assert ticks.spawn(print) == "spawned"
        record_servers(lambda: worker.alive)
        assert worker.module.gevent._gevent is worker.real

    def test_the_serving_tick_ends_when_the_worker_stops(self, ggevent: SimpleNamespace) -> None:
        """alive at the tick; the servers stop accepting and the TERM lands: it ends, no gevent sleep, no pool wait."""
        ggevent.gevent = real = FakeGevent()
        answers = iter([True, False])  # alive when the tick begins; Gunicorn's SIGTERM handler ran when it ends
        recorded = record_servers(lambda: next(answers))
        assert recorded is not None
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.pool = FakePool()
        recorded.stop_accepting()  # before the tick here: its wait ends at once instead of after the set
        ggevent.gevent.sleep(1.0)
        assert real.slept == [] and server.pool.joined == []
        assert next(answers, "both asked") == "both asked"

    def test_a_worker_that_still_serves_after_it_stopped_accepting_ticks_as_before(
        self, worker: SimpleNamespace
    ) -> None:
        """Stopped accepting but alive (sockets another process serves, before its TERM): gevent's own tick, no spin."""
        worker.recorded.stop_accepting()
        worker.module.gevent.sleep(1.0)
        worker.module.gevent.sleep(1.0)
        assert len(worker.real.slept) == 2 and all(0.5 < seconds <= 1.0 for seconds in worker.real.slept)

    def test_the_draining_tick_waits_for_the_pools_to_empty(self, worker: SimpleNamespace) -> None:
        """Not alive (Gunicorn waits for its connections): the tick is a wait for the pools, bounded by it."""
        worker.alive = False
        worker.module.gevent.sleep(1.0)
        assert worker.real.slept == []
        [timeout] = worker.server.pool.joined
        assert 0.5 < timeout <= 1.0
