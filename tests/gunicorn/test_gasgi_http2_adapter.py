"""Gunicorn 27's ``-k asgi`` HTTP/2 connections under graceful's drain (graceful.gunicorn.adapter.gasgi_http2).

Each test probes a worker as ``post_worker_init`` does, builds connections
with the ``AsyncHTTP2Connection`` the probe installs (what Gunicorn's ASGI
protocol looks up at each connection), over a fake transport: the reader is
an ``asyncio.StreamReader`` the test feeds with what h2's client connection
sends; the writer keeps what the server writes, and the thread it wrote on.
The test plays Gunicorn's receive loop and stream tasks, on an event loop
of its own, run one turn at a time. The drain's clock is a fake one: the
round trip's bound passes without a wait. Nothing listens, nothing sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from gunicorn.config import Config
from h2.config import H2Configuration

from graceful.core.lifecycle import Lifecycle
from graceful.gunicorn.adapter import gasgi_http2 as adapter
from graceful.gunicorn.adapter.http2 import REFUSED_STREAM, probe_http2
from graceful.gunicorn.asgi_stop import AsgiStop
from graceful.gunicorn.http2 import ROUND_TRIP_TIMEOUT, Http2Drain
from tests.gunicorn.test_asgi_adapters import FakeAsgiLoop
from tests.gunicorn.test_http2 import Clock
from tests.gunicorn.test_http2_adapter import FIRST_GOAWAY, PING, final_goaway, frames, response
from tests.gunicorn.test_http2_e2e import _ClientH2

async_connection = pytest.importorskip(
    "gunicorn.http2.async_connection", reason="Gunicorn serves HTTP/2 from 27 on (22-26 have no gunicorn.http2)"
)


class Wire:
    """The writer side of a connection's transport: what the server wrote, and on which thread."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.threads: set[int] = set()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.threads.add(threading.get_ident())
        self.data += data

    async def drain(self) -> None:
        """The transport never pushes back here."""

    def close(self) -> None:
        self.closed = True


class Client:
    """h2's client at the far end: sends into the connection's reader, reads what the server wrote."""

    def __init__(self, reader: asyncio.StreamReader, wire: Wire) -> None:
        self.reader = reader
        self.wire = wire
        self.h2 = _ClientH2(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.flush()

    def flush(self) -> None:
        """Send what h2 has queued (requests; the ACKs of the server's SETTINGS and PING)."""
        self.reader.feed_data(self.h2.data_to_send())

    def drop(self) -> None:
        """Never send what h2 has queued (a client that does not answer the PING)."""
        self.h2.data_to_send()

    def get(self, path: str = "/", flush: bool = True) -> int:
        """Open a stream with a GET (no body); its id."""
        stream_id = int(self.h2.get_next_available_stream_id())
        headers = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "127.0.0.1")]
        self.h2.send_headers(stream_id, headers, end_stream=True)
        if flush:
            self.flush()
        return stream_id

    def read(self) -> list[tuple[Any, ...]]:
        """What the server has written since the last read, as the frames a test judges."""
        data, self.wire.data = bytes(self.wire.data), bytearray()
        return frames(self.h2.receive_data(data)) if data else []


class Worker:
    """One probed ``-k asgi`` worker: its loop, the drain, connections made as Gunicorn's protocol makes them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, drain: Http2Drain, server: adapter.AsyncHttp2Connections):
        self.loop = loop
        self.drain = drain
        self.server = server
        self.cfg = Config()
        self.peers = 0

    def run(self, awaitable: Any) -> Any:
        """Run ``awaitable`` on the worker's loop, then the callbacks it left ready."""
        result = self.loop.run_until_complete(awaitable)
        self.turn()
        return result

    def turn(self) -> None:
        """A few turns of the loop: what call_soon(_threadsafe) and new tasks scheduled runs."""
        for _ in range(3):
            self.loop.run_until_complete(asyncio.sleep(0))

    def connect(self) -> tuple[Any, Client]:
        """A new HTTP/2 connection as ``ASGIProtocol._handle_http2_connection`` makes it, then its SETTINGS."""
        self.peers += 1
        reader = asyncio.StreamReader(loop=self.loop)
        wire = Wire()
        conn = async_connection.AsyncHTTP2Connection(self.cfg, reader, wire, ("127.0.0.1", 40000 + self.peers))
        self.run(conn.initiate_connection())
        client = Client(reader, wire)
        assert self.receive(conn) == []  # the client's preface and SETTINGS
        assert client.read() == []  # the server's SETTINGS and their ACK
        return conn, client

    def receive(self, conn: Any) -> list[Any]:
        """One pass of Gunicorn's receive loop: the requests whose headers are in."""
        return list(self.run(conn.receive_data(timeout=1.0)))

    def serve(self, conn: Any, request: Any) -> None:
        """What a stream task does: answer it, then clean it up."""
        stream_id = request.stream.stream_id

        async def task() -> None:
            try:
                await conn.send_response(stream_id, 200, [], b"ok")
            finally:
                conn.cleanup_stream(stream_id)

        self.run(task())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Iterator[Worker]:
    """A ``-k asgi`` worker serving HTTP/2, probed; Gunicorn's class is put back afterwards."""
    monkeypatch.setattr(async_connection, "AsyncHTTP2Connection", async_connection.AsyncHTTP2Connection)
    loop = asyncio.new_event_loop()
    cfg = Config()
    cfg.set("http_protocols", "h2,h1")
    drain = Http2Drain("ShutdownInitiated", clock=clock)
    server = probe_http2(SimpleNamespace(cfg=cfg, loop=loop), drain, "asgi")
    assert isinstance(server, adapter.AsyncHttp2Connections)
    try:
        yield Worker(loop, drain, server)
    finally:
        loop.close()


class TestProbe:
    def test_a_worker_without_h2_is_left_alone(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """h2 not in http_protocols: no HTTP/2 drain, Gunicorn's connection class untouched."""
        original = async_connection.AsyncHTTP2Connection
        monkeypatch.setattr(async_connection, "AsyncHTTP2Connection", original)
        loop = asyncio.new_event_loop()
        try:
            drain = Http2Drain("ShutdownInitiated")
            assert probe_http2(SimpleNamespace(cfg=Config(), loop=loop), drain, "asgi") is None
        finally:
            loop.close()
        assert async_connection.AsyncHTTP2Connection is original and drain.server is None

    def test_a_moved_internal_is_named_in_one_warning(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A Gunicorn whose async HTTP/2 lacks a name graceful uses: one warning naming it, no drain."""
        stripped = type("AsyncHTTP2Connection", (), {"close": None, "is_closed": None})
        monkeypatch.setattr(async_connection, "AsyncHTTP2Connection", stripped)
        cfg = Config()
        cfg.set("http_protocols", "h2,h1")
        loop = asyncio.new_event_loop()
        try:
            with caplog.at_level(logging.WARNING, logger=adapter.__name__):
                assert probe_http2(SimpleNamespace(cfg=cfg, loop=loop), Http2Drain("ShutdownInitiated"), "asgi") is None
        finally:
            loop.close()
        assert async_connection.AsyncHTTP2Connection is stripped
        [line] = [r.getMessage() for r in caplog.records]
        assert "-k asgi HTTP/2 has no initiate_connection: HTTP/2 clients get no GOAWAY" in line


class TestGoawayOnTheLoop:
    def test_serving_is_unchanged_until_the_drain_is_requested(self, worker: Worker) -> None:
        """No drain requested: a stream is served as Gunicorn serves it, no GOAWAY, no PING."""
        conn, client = worker.connect()
        client.get()
        [request] = worker.receive(conn)
        worker.serve(conn, request)
        assert client.read() == response(1)
        assert not conn.is_closed

    def test_the_request_from_another_thread_is_carried_out_on_the_loop(self, worker: Worker) -> None:
        """ShutdownInitiated on graceful's thread: GOAWAY(2^31-1)+PING written by the loop's thread, not that one."""
        conn, client = worker.connect()
        client.get()
        worker.receive(conn)  # a stream in flight
        requester = threading.Thread(target=worker.drain.on_signal, args=("ShutdownInitiated", 0.0))
        requester.start()
        requester.join(10.0)
        assert client.read() == []  # nothing written from graceful's thread
        worker.turn()
        assert client.read() == [FIRST_GOAWAY, PING]
        assert conn.writer.threads == {threading.get_ident()}  # the loop's thread (the test's, running it)

    def test_two_step_goaway_refuses_streams_above_the_final_one_and_closes_after_the_last(
        self, worker: Worker
    ) -> None:
        """PING ACK -> final GOAWAY (highest opened); a later stream refused; closed once the last stream ends."""
        conn, client = worker.connect()
        client.get()
        [first] = worker.receive(conn)
        worker.drain.request()
        worker.turn()
        assert client.read() == [FIRST_GOAWAY, PING]
        second = client.get(flush=False)  # sent with the PING's ACK: opened before the final GOAWAY
        client.flush()
        [served] = worker.receive(conn)
        assert served.stream.stream_id == second
        assert client.read() == [final_goaway(second)]
        refused = client.get()
        assert worker.receive(conn) == []
        assert client.read() == [("RST_STREAM", refused, REFUSED_STREAM)]
        worker.serve(conn, first)
        assert client.read() == response(1) and not conn.is_closed
        worker.serve(conn, served)
        assert client.read() == [*response(second), final_goaway(second)]  # never more than the final GOAWAY said
        assert conn.is_closed and conn.writer.closed
        counts = worker.drain.counts
        assert (counts.goaway_connections, counts.drained, counts.refused) == (1, 2, 1)

    def test_an_idle_connection_closes_at_the_ack_without_waiting_for_a_read(self, worker: Worker) -> None:
        """Idle: the PING's ACK closes it at once (GOAWAY 0), the transport closed: no 1 s receive timeout."""
        conn, client = worker.connect()
        worker.drain.request()
        worker.turn()
        assert client.read() == [FIRST_GOAWAY, PING]
        client.flush()  # the ACK
        assert worker.receive(conn) == []
        assert client.read() == [final_goaway(0)]
        assert conn.is_closed and conn.writer.closed
        assert worker.server.live() == []

    def test_no_ack_within_the_round_trip_bound_sends_the_final_goaway_all_the_same(
        self, worker: Worker, clock: Clock
    ) -> None:
        """A client that never answers the PING: a timer of ROUND_TRIP_TIMEOUT, then the final GOAWAY."""
        conn, client = worker.connect()
        client.get()
        worker.receive(conn)
        worker.drain.request()
        worker.turn()
        assert client.read() == [FIRST_GOAWAY, PING]
        client.drop()
        timer = conn.graceful._timer
        assert timer is not None
        assert timer.when() - worker.loop.time() == pytest.approx(ROUND_TRIP_TIMEOUT, abs=0.5)
        conn.graceful.act()  # before the bound: nothing
        assert client.read() == []
        clock.now += ROUND_TRIP_TIMEOUT
        conn.graceful.act()  # what the timer calls
        assert client.read() == [final_goaway(1)]

    def test_a_connection_made_during_the_delay_is_told_after_its_first_response_or_at_the_stop(
        self, worker: Worker
    ) -> None:
        """Made after the request: served first; told after its first response, or when the worker stops."""
        worker.drain.request()
        worker.turn()
        served, client = worker.connect()
        client.get()
        [request] = worker.receive(served)
        assert client.read() == []
        worker.serve(served, request)
        assert client.read() == [*response(1), FIRST_GOAWAY, PING]
        _idle, other = worker.connect()
        assert other.read() == []
        worker.drain.stop()
        worker.turn()
        assert other.read() == [FIRST_GOAWAY, PING]

    def test_open_streams_and_the_abandoned_ones_are_seen_from_another_thread(self, worker: Worker) -> None:
        """The drain's deadline (graceful-stop thread): the streams still open, by peer, counted as abandoned."""
        conn, client = worker.connect()
        client.get()
        client.get()
        worker.receive(conn)
        worker.drain.request()
        worker.turn()
        seen: list[dict[str, list[int]]] = []
        reader = threading.Thread(target=lambda: seen.append(worker.server.open_streams()))
        reader.start()
        reader.join(10.0)
        assert seen == [{"127.0.0.1:40001": [1, 3]}]
        assert worker.drain.abandoned(pid=1) == 2 and worker.drain.counts.abandoned == 2

    def test_gunicorns_own_close_never_says_more_than_the_final_goaway(self, worker: Worker) -> None:
        """The worker's stop closing a connection (Gunicorn's close, its default id): the final GOAWAY's id kept."""
        conn, client = worker.connect()
        client.get()
        assert len(worker.receive(conn)) == 1  # a stream in flight, never served here
        worker.drain.request()
        worker.turn()
        assert client.read() == [FIRST_GOAWAY, PING]
        client.flush()
        worker.receive(conn)
        assert client.read() == [final_goaway(1)]
        worker.run(conn.close())
        assert client.read() == [final_goaway(1)]
        assert conn.is_closed and worker.server.live() == []


class TestAbandonedAtTheDeadline:
    def test_the_stop_counts_abandoned_streams_on_the_loop_before_the_workers_own_stop(self) -> None:
        """Connections open at the drain's deadline: at_deadline runs on the loop, before the lifespan and finish."""
        fake = FakeAsgiLoop(connections=1)
        stop = AsgiStop(fake, Lifecycle(), lifespan_until=0.0)
        called_on: list[bool] = []

        def at_deadline() -> None:
            called_on.append(fake.loop is asyncio.get_running_loop())
            fake.steps.append("abandoned")

        async def main() -> int:
            fake.loop = asyncio.get_running_loop()
            return await asyncio.to_thread(stop.stop, time.monotonic() - 10.0, 1.0, lambda: None, at_deadline)

        assert asyncio.run(main()) == 1
        assert fake.steps == ["stop accepting", "close after response", "abandoned", "lifespan", "finish"]
        assert called_on == [True]

    def test_nothing_is_counted_when_every_connection_closed_in_time(self) -> None:
        """No connection left: at_deadline is not called."""
        fake = FakeAsgiLoop(connections=0)
        stop = AsgiStop(fake, Lifecycle(), lifespan_until=5.0)
        calls: list[None] = []

        async def main() -> int:
            fake.loop = asyncio.get_running_loop()
            return await asyncio.to_thread(stop.stop, time.monotonic(), 5.0, lambda: None, lambda: calls.append(None))

        assert asyncio.run(main()) == 0 and calls == []
