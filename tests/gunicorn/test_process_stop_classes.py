"""A worker's stop (graceful.gunicorn.process_stop) per worker class: what it stops, what it waits for, then Gunicorn's.

The ``graceful-stop`` thread's work once the stop has begun is run on the
test's thread (``_run`` with the stop already begun: it waits for nothing
first); the worker is :class:`tests.gunicorn.fakes.FakeWorker`, gthread's
loop :class:`~tests.gunicorn.fakes.FakeGthreadLoop`, the HTTP/2
connections a fake whose streams the test sets. Deadlines that must pass
are set in the past: nothing waits.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from graceful.gunicorn.adapter.gevent import GeventServers
from graceful.gunicorn.http2 import Http2Drain
from graceful.gunicorn.process_stop import ProcessStop
from graceful.gunicorn.recycling import GthreadStop
from graceful.gunicorn.stop_reason import StopReason
from tests.gunicorn.fakes import FakeGthreadLoop, FakeWorker
from tests.gunicorn.test_http2 import FakeServer
from tests.gunicorn.test_process_stop import Shared


class RecordedServer:
    """A gevent StreamServer as :class:`GeventServers` holds it."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def stop_accepting_for_good(self) -> None:
        self.calls.append("server stops accepting")


def stop_for(worker: FakeWorker, drain_timeout: float = 5.0) -> ProcessStop:
    stop = ProcessStop(worker, Shared())  # type: ignore[arg-type]  # the parts of SharedState it reads
    stop.drain_timeout = drain_timeout  # what install() sets from the config
    return stop


def gevent_servers(calls: list[str]) -> GeventServers:
    servers = GeventServers()
    servers.servers.append(RecordedServer(calls))
    return servers


class TestStopAccepting:
    def test_each_class_stops_accepting_its_own_way(self) -> None:
        """gthread: its loop's listeners leave the poller; gevent: its servers; sync: nothing to do."""
        loop, calls = FakeGthreadLoop(), list[str]()
        gthread, gevent, sync = stop_for(FakeWorker("gthread")), stop_for(FakeWorker("gevent")), stop_for(FakeWorker())
        gthread.gthread = GthreadStop(loop)
        gevent.gevent = gevent_servers(calls)
        for stop in (gthread, gevent, sync):
            stop.stop_accepting()
        assert loop.calls == ["take over max_requests", "stop accepting"]
        assert calls == ["server stops accepting"]


class TestGthreadCount:
    def test_open_connections_are_the_loops(self) -> None:
        """gthread's stop counts the connections its loop holds now, as the loop reports them."""
        loop = FakeGthreadLoop(connections=3)
        stop = GthreadStop(loop)
        assert stop.open_connections() == 3
        loop.connections = 0
        assert stop.open_connections() == 0


class TestGunicornsTerm:
    def test_with_no_handler_of_gunicorns_a_term_still_leaves_the_loop(self) -> None:
        """No callable SIGTERM handler to chain to: the TERM (the OS handler's body) leaves the worker's loop."""
        worker = FakeWorker()
        stop = stop_for(worker)
        stop._on_term(signal.SIGTERM, None)
        assert stop.term_at is not None
        assert worker.calls == ["stop loop"] and not worker.is_alive()


class TestGthread:
    def test_connections_open_at_the_deadline_are_named_in_one_warning(self, caplog: pytest.LogCaptureFixture) -> None:
        """gthread: the drain's deadline passed with 2 connections open: one warning, then Gunicorn's stop."""
        worker, loop = FakeWorker("gthread"), FakeGthreadLoop(connections=2)
        stop = stop_for(worker)
        stop.gthread = GthreadStop(loop)
        stop.begin(StopReason.RELOAD, at=time.monotonic() - stop.drain_timeout - 1.0)
        with caplog.at_level(logging.WARNING, logger="graceful"):
            stop._run()
        assert loop.calls[-3:] == ["late accepts", "bound drain", "wake"]
        assert worker.calls == ["stop loop"]  # Gunicorn's TERM, after the wait
        assert [r.getMessage() for r in caplog.records] == [
            f"graceful: worker {os.getpid()}: 2 connection(s) still open at the drain's deadline"
        ]


class TestGevent:
    def test_without_http2_the_servers_stop_accepting_and_gunicorn_stops_the_worker(self) -> None:
        """gevent serving HTTP/1.1: its servers stop accepting; Gunicorn's own TERM handler already ran."""
        worker, calls = FakeWorker("gevent"), list[str]()
        stop = stop_for(worker)
        stop.gevent = gevent_servers(calls)
        stop.begin(StopReason.SCALE_IN)
        stop._run()
        assert calls == ["server stops accepting"]
        assert worker.drain_bound is None and worker.calls == []

    def test_serving_http2_its_connections_close_before_gunicorns_stop(self) -> None:
        """gevent serving HTTP/2, none left open: servers stop, Gunicorn's drain is bounded by what is left, TERM."""
        worker, calls = FakeWorker("gevent"), list[str]()
        stop = stop_for(worker, drain_timeout=5.0)
        stop.gevent = gevent_servers(calls)
        stop.http2 = Http2Drain("ShutdownInitiated")
        stop.http2.attach(FakeServer())
        stop.begin(StopReason.RECYCLED)
        stop._run()
        assert calls == ["server stops accepting"]
        assert worker.drain_bound is not None and 0 < worker.drain_bound <= 5.0
        assert worker.calls == ["stop loop"]
        assert stop.http2.counts.abandoned == 0

    def test_streams_open_at_the_deadline_are_abandoned_before_gunicorns_term(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """gevent serving HTTP/2, the deadline passed: the open streams are counted and named, then the TERM."""
        worker, calls = FakeWorker("gevent"), list[str]()
        stop = stop_for(worker, drain_timeout=5.0)
        stop.gevent = gevent_servers(calls)
        order: list[str] = []
        drain = Http2Drain("ShutdownInitiated")
        drain.attach(FakeServer({"127.0.0.1:40001": [1, 3]}))
        stop.http2 = drain
        stop._gunicorn_term = lambda _signum, _frame: order.append(f"term after {drain.counts.abandoned}")
        stop.begin(StopReason.RELOAD, at=time.monotonic() - stop.drain_timeout - 1.0)
        with caplog.at_level(logging.WARNING, logger="graceful"):
            stop._run()
        assert order == ["term after 2"]
        assert worker.drain_bound is not None and worker.drain_bound <= 0  # none left (the adapter makes it 1 s)
        assert "abandoned 2 HTTP/2 stream(s) at the drain's deadline, after GOAWAY: 127.0.0.1:40001 streams 1, 3" in (
            caplog.text
        )
