"""Gunicorn 27's HTTP/2 connections under graceful's drain (graceful.gunicorn.adapter.http2), with real h2 objects.

Each test probes a worker as ``post_worker_init`` does, builds connections
with the ``gunicorn.http.get_parser`` the probe installs, each over one end of
a ``socket.socketpair()``, and plays the client with h2's client connection at
the other end. The test's thread plays the connection's own (gthread: one per
connection), except where a read must be seen waking: there the connection
runs on a thread of its own. The adapter's clock (``time.monotonic``) is a
fake one, moved by the test: the round trip's bound passes without a wait.
Nothing listens on a port, nothing sleeps.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import gunicorn.http
import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser
from h2 import events as h2_events
from h2.config import H2Configuration

from graceful.gunicorn.adapter import http2 as adapter
from graceful.gunicorn.adapter.http2 import PING_DATA, REFUSED_STREAM, Http2Connections, probe_http2
from graceful.gunicorn.http2 import MAX_STREAM_ID, ROUND_TRIP_TIMEOUT, Http2Drain
from tests.gunicorn.test_http2 import Clock
from tests.gunicorn.test_http2_e2e import _ClientH2

HTTP2ServerConnection = pytest.importorskip(
    "gunicorn.http2.connection", reason="Gunicorn serves HTTP/2 from 27 on (22-26 have no gunicorn.http2)"
).HTTP2ServerConnection

SOON = 10.0  # real seconds: a bound for a loaded machine, never reached when things work
NO_ERROR = 0


class RecordingPoll:
    """``select.poll()`` as the adapter uses it, recording what each poll watched; ``polling`` set while one waits."""

    def __init__(self, polls: list[RecordingPoll], polling: threading.Event) -> None:
        self._poll = select.poll()
        self.fds: set[int] = set()
        self.watched: list[set[int]] = []
        self._polling = polling
        polls.append(self)

    def register(self, fd: int, mask: int) -> None:
        self.fds.add(fd)
        self._poll.register(fd, mask)

    def unregister(self, fd: int) -> None:
        self.fds.discard(fd)
        self._poll.unregister(fd)

    def poll(self, timeout: int | None = None) -> list[tuple[int, int]]:
        self.watched.append(set(self.fds))
        self._polling.set()
        try:
            return self._poll.poll(timeout)
        finally:
            self._polling.clear()


class Client:
    """An HTTP/2 client (h2) at the far end of a connection's socketpair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.h2 = _ClientH2(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.flush()
        #: True once the server closed its side.
        self.eof = False

    def flush(self) -> None:
        """Send what h2 has queued (requests; the ACKs of the server's SETTINGS and PING)."""
        self.sock.sendall(self.h2.data_to_send())

    def drop(self) -> None:
        """Never send what h2 has queued (a client that does not answer the PING)."""
        self.h2.data_to_send()

    def get(self, path: str = "/") -> int:
        """Open a stream with a GET (no body); its id."""
        stream_id = int(self.h2.get_next_available_stream_id())
        headers = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "127.0.0.1")]
        self.h2.send_headers(stream_id, headers, end_stream=True)
        self.flush()
        return stream_id

    def read(self) -> list[tuple[Any, ...]]:
        """What the server has written so far (it writes before it returns), as :func:`frames`."""
        self.sock.setblocking(False)
        return self._receive()

    def read_until(self, frame: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """What the server writes until ``frame`` arrives (written by another thread); at most SOON seconds."""
        got: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + SOON
        while frame not in got and not self.eof and (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            got += self._receive(once=True)
        return got

    def _receive(self, once: bool = False) -> list[tuple[Any, ...]]:
        events: list[Any] = []
        while not self.eof:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, TimeoutError):
                break
            if not data:
                self.eof = True
                break
            events += self.h2.receive_data(data)
            if once:
                break
        return frames(events)


def frames(events: list[Any]) -> list[tuple[Any, ...]]:
    """The frames a test judges, from h2's client events (SETTINGS and WINDOW_UPDATE left out)."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, h2_events.ConnectionTerminated):
            out.append(("GOAWAY", event.error_code, event.last_stream_id))
        elif isinstance(event, h2_events.PingReceived):
            out.append(("PING", event.ping_data))
        elif isinstance(event, h2_events.StreamReset):
            out.append(("RST_STREAM", event.stream_id, int(event.error_code)))
        elif isinstance(event, h2_events.ResponseReceived):
            headers: Any = dict(event.headers)  # str names and values: the client's header_encoding
            out.append(("HEADERS", event.stream_id, headers[":status"]))
        elif isinstance(event, h2_events.StreamEnded):
            out.append(("END", event.stream_id))
    return out


FIRST_GOAWAY = ("GOAWAY", NO_ERROR, MAX_STREAM_ID)
PING = ("PING", PING_DATA)


def final_goaway(last_stream_id: int) -> tuple[Any, ...]:
    return ("GOAWAY", NO_ERROR, last_stream_id)


def response(stream_id: int) -> list[tuple[Any, ...]]:
    return [("HEADERS", stream_id, "200"), ("END", stream_id)]


def serve(conn: Any, request: Any) -> None:
    """What gthread's worker does with one stream: answer it, then clean it up."""
    stream_id = request.stream.stream_id
    conn.send_response(stream_id, 200, [], b"ok")
    conn.cleanup_stream(stream_id)


class Worker:
    """One probed worker process: the drain, the live connections, and connections made as Gunicorn makes them."""

    def __init__(self, cfg: Config, drain: Http2Drain, server: Http2Connections) -> None:
        self.cfg = cfg
        self.drain = drain
        self.server = server
        self.sockets: list[socket.socket] = []

    def connect(self, peer: Any = None) -> tuple[Any, Client]:
        """A new HTTP/2 connection (gthread: ``get_parser(..., http2_connection=True)``, then its SETTINGS)."""
        ours, theirs = socket.socketpair()
        self.sockets += [ours, theirs]
        peer = peer or ("127.0.0.1", 40000 + len(self.sockets))
        conn = gunicorn.http.get_parser(self.cfg, ours, peer, http2_connection=True)
        conn.initiate_connection()
        client = Client(theirs)
        assert conn.receive_data() == []  # the client's preface and SETTINGS
        assert client.read() == []  # the server's SETTINGS and their ACK
        return conn, client


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The adapter's ``time`` module: its ``monotonic()`` reads a value the test moves."""
    fake = Clock()
    monkeypatch.setattr(adapter, "time", SimpleNamespace(monotonic=fake))
    return fake


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> tuple[list[RecordingPoll], threading.Event]:
    made: list[RecordingPoll] = []
    polling = threading.Event()
    fake_select = SimpleNamespace(poll=lambda: RecordingPoll(made, polling), POLLIN=select.POLLIN)
    monkeypatch.setattr(adapter, "select", fake_select)
    return made, polling


@pytest.fixture
def refused() -> list[int]:
    return []


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch, clock: Clock, refused: list[int]) -> Iterator[Worker]:
    # The probe replaces gunicorn.http.get_parser for "this worker process": restored after the test.
    monkeypatch.setattr(gunicorn.http, "get_parser", gunicorn.http.get_parser)
    cfg = Config()
    cfg.set("http_protocols", "h2,h1")
    drain = Http2Drain("ShutdownInitiated", clock=clock, on_refused=lambda: refused.append(1))
    server = probe_http2(SimpleNamespace(cfg=cfg), drain, "gthread")
    assert server is not None
    probed = Worker(cfg, drain, server)
    yield probed
    for sock in probed.sockets:
        sock.close()
    for fd in (server.wake_read, server.stopping_read, server._wake_write, server._stopping_write):
        os.close(fd)


class TestProbe:
    def test_http2_connections_are_made_by_the_draining_class_http1_by_gunicorns_parser(self, worker: Worker) -> None:
        """After the probe, get_parser builds HTTP/2 connections that drain, and HTTP/1 parsers as before."""
        conn, _client = worker.connect()
        assert isinstance(conn, HTTP2ServerConnection) and type(conn) is not HTTP2ServerConnection
        assert worker.drain.server is worker.server
        assert worker.drain.counts.connections == 1
        ours, theirs = socket.socketpair()
        with ours, theirs:
            http1 = gunicorn.http.get_parser(worker.cfg, ours, ("127.0.0.1", 1))
        assert isinstance(http1, RequestParser)

    @pytest.mark.parametrize("name", ["receive_data", "cleanup_stream", "_handle_event"])
    def test_a_gunicorn_without_what_is_overridden_is_left_alone_with_a_warning(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str
    ) -> None:
        """A Gunicorn whose HTTP2ServerConnection lacks a method graceful overrides: one warning naming it, no patch."""
        monkeypatch.delattr(HTTP2ServerConnection, name)
        before = gunicorn.http.get_parser
        cfg = SimpleNamespace(http_protocols=["h2", "h1"])
        drain = Http2Drain("ShutdownInitiated")
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert probe_http2(SimpleNamespace(cfg=cfg), drain, "gevent") is None
        assert gunicorn.http.get_parser is before and drain.server is None
        [line] = [r.getMessage() for r in caplog.records]
        assert f"HTTP/2 has no {name}: HTTP/2 clients get no GOAWAY when it stops" in line

    def test_a_gunicorn_without_get_parser_is_left_alone_with_a_warning(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """No callable gunicorn.http.get_parser to wrap: one warning naming it, nothing patched."""
        monkeypatch.setattr(gunicorn.http, "get_parser", None)
        drain = Http2Drain("ShutdownInitiated")
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert probe_http2(SimpleNamespace(cfg=SimpleNamespace(http_protocols=["h2"])), drain, "gthread") is None
        assert gunicorn.http.get_parser is None and drain.server is None
        assert "HTTP/2 has no gunicorn.http.get_parser" in caplog.text

    def test_an_unimportable_h2_is_left_alone_with_a_warning(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """h2 not importable: one warning saying so, nothing patched."""
        monkeypatch.setitem(sys.modules, "h2", None)
        before = gunicorn.http.get_parser
        drain = Http2Drain("ShutdownInitiated")
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert probe_http2(SimpleNamespace(cfg=SimpleNamespace(http_protocols=["h2"])), drain, "gthread") is None
        assert gunicorn.http.get_parser is before and drain.server is None
        assert "HTTP/2 has no an importable HTTP/2" in caplog.text


class TestServing:
    def test_with_no_drain_requested_streams_are_served_as_gunicorn_serves_them(self, worker: Worker) -> None:
        """Before the drain: requests read through the wrapped socket, answered, no GOAWAY, the live set lists them."""
        conn, client = worker.connect()
        first, second = client.get(), client.get()
        requests = conn.receive_data()
        assert [r.stream.stream_id for r in requests] == [first, second]
        peer = f"127.0.0.1:{conn.client_addr[1]}"
        assert worker.server.open_streams() == {peer: [first, second]}
        for request in requests:
            serve(conn, request)
        assert client.read() == response(first) + response(second)
        assert worker.server.open_streams() == {peer: []}
        assert (worker.drain.counts.drained, worker.drain.counts.goaway_connections) == (0, 0)

    def test_a_connection_on_a_unix_socket_is_named_by_its_address(self, worker: Worker) -> None:
        """Gunicorn's client address on a unix socket is a string: the live set names the connection by it."""
        conn, client = worker.connect(peer="/run/app.sock")
        stream = client.get()
        conn.receive_data()
        assert worker.server.open_streams() == {"/run/app.sock": [stream]}

    def test_a_read_with_no_timeout_waits_for_the_socket(self, worker: Worker) -> None:
        """keepalive 0 (no timeout on the socket): the read polls the socket and the wake pipe, then reads."""
        conn, client = worker.connect()
        conn.idle_timeout = None  # what Gunicorn makes of keepalive = 0
        stream = client.get()
        assert [r.stream.stream_id for r in conn.receive_data()] == [stream]

    def test_an_idle_connections_keepalive_timeout_still_ends_it(self, worker: Worker) -> None:
        """Nothing to read within the socket's timeout: the read times out, and Gunicorn closes the idle connection."""
        conn, client = worker.connect()
        conn.idle_timeout = 0.001  # Gunicorn's keepalive, shortened: this read waits 1 ms
        assert conn.receive_data() == []
        assert conn.is_closed
        assert client.read() == [final_goaway(0)]
        assert worker.server.open_streams() == {}

    def test_tls_bytes_waiting_in_the_ssl_object_are_read_without_a_poll(
        self, worker: Worker, polls: tuple[list[RecordingPoll], threading.Event]
    ) -> None:
        """A socket with pending() (TLS): what it holds decrypted is read at once; an empty one waits in poll."""
        made, _polling = polls
        ours, theirs = socket.socketpair()
        worker.sockets += [ours, theirs]
        tls = TlsLike(ours)
        conn = gunicorn.http.get_parser(worker.cfg, tls, ("127.0.0.1", 1), http2_connection=True)
        conn.initiate_connection()
        client = Client(theirs)
        assert conn.receive_data() == []  # nothing decrypted waits: a poll, then the read
        [poll] = made
        assert poll.watched == [{ours.fileno(), worker.server.wake_read}]
        stream = client.get()
        tls.decrypted = True
        assert [r.stream.stream_id for r in conn.receive_data()] == [stream]
        assert len(poll.watched) == 1

    def test_a_full_wake_pipe_never_blocks_the_drains_thread(self, worker: Worker) -> None:
        """The wake pipes are broadcasts, never read: once full, wake and wake_stopping still return."""
        for fd in (worker.server._wake_write, worker.server._stopping_write):
            while True:
                try:
                    os.write(fd, b"x" * 65536)
                except BlockingIOError:
                    break
        worker.server.wake()
        worker.server.wake_stopping()
        assert select.select([worker.server.wake_read, worker.server.stopping_read], [], [], 0)[0]


class TlsLike:
    """A socket as an SSL socket looks to the adapter: ``pending()`` says whether decrypted bytes wait."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.decrypted = False

    def pending(self) -> int:
        return 1 if self.decrypted else 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class TestDrain:
    def test_a_connection_busy_in_the_app_is_told_by_the_requesting_thread(self, worker: Worker) -> None:
        """Its thread inside the app: GOAWAY(2^31-1) from the drain's thread at once, without a PING (h2 untouched)."""
        conn, client = worker.connect()
        stream = client.get()
        [request] = conn.receive_data()
        worker.drain.request()
        assert client.read() == [FIRST_GOAWAY]
        assert worker.drain.counts.goaway_connections == 1
        worker.drain.stop()  # the worker's stop wakes every connection again: this one was told already
        assert client.read() == []
        serve(conn, request)
        assert client.read() == response(stream)
        assert worker.drain.counts.drained == 1
        assert not conn.is_closed  # the round trip's bound has not passed: the client may still open streams

    def test_two_step_goaway_refuses_streams_above_the_final_one_and_closes_after_the_last(
        self, worker: Worker, clock: Clock, refused: list[int]
    ) -> None:
        """Streams opened before the final GOAWAY served, later ones refused and counted; closed after the last."""
        conn, client = worker.connect()
        first = client.get()
        [request] = conn.receive_data()
        worker.drain.request()
        assert client.read() == [FIRST_GOAWAY]
        serve(conn, request)
        second = client.get()  # after GOAWAY(2^31-1): still served
        [late] = conn.receive_data()
        assert late.stream.stream_id == second
        clock.now += ROUND_TRIP_TIMEOUT  # no ACK (that GOAWAY went without a PING): the bound passes
        refused_id = client.get()
        assert conn.receive_data() == []  # the final GOAWAY, then the new stream is refused before Gunicorn sees it
        assert client.read() == [*response(first), final_goaway(second), ("RST_STREAM", refused_id, REFUSED_STREAM)]
        assert (worker.drain.counts.refused, len(refused)) == (1, 1)
        client.sock.shutdown(socket.SHUT_WR)  # the client closes its side: the server's linger ends at once
        serve(conn, late)
        assert conn.is_closed
        assert client.read() == [*response(second), final_goaway(second)]  # never more than the final GOAWAY said
        assert client.eof
        assert worker.server.open_streams() == {}
        assert (worker.drain.counts.drained, worker.drain.counts.goaway_connections) == (2, 1)

    def test_an_idle_reader_wakes_and_sends_goaway_with_a_ping_then_closes_on_the_ack(
        self, worker: Worker, polls: tuple[list[RecordingPoll], threading.Event]
    ) -> None:
        """A connection waiting in its read: woken, its own thread sends GOAWAY + PING; the ACK ends it (idle)."""
        made, polling = polls
        conn, client = worker.connect()
        got: list[Any] = []
        reader = threading.Thread(target=lambda: got.append(conn.receive_data()))
        reader.start()
        try:
            assert polling.wait(SOON)  # the connection's thread waits in its read
            worker.drain.request()  # from another thread: the reader is busy reading, so it tells the client itself
            assert client.read_until(PING) == [FIRST_GOAWAY, PING]
            client.flush()  # the PING's ACK
            client.sock.shutdown(socket.SHUT_WR)
        finally:
            reader.join(SOON)
        assert not reader.is_alive() and got == [[]]
        [poll] = made
        sock_fd = conn.sock.fileno()
        assert poll.watched == [{sock_fd, worker.server.wake_read}, {sock_fd}]  # the wake pipe only until told
        assert conn.receive_data() == []  # acknowledged, no stream open: it closes, and reads as a peer's close
        assert conn.is_closed
        assert client.read() == [final_goaway(0)]
        assert client.eof
        assert worker.drain.counts.goaway_connections == 1

    def test_a_connection_made_during_the_delay_is_told_after_its_first_response(
        self, worker: Worker, polls: tuple[list[RecordingPoll], threading.Event]
    ) -> None:
        """Made after the request: no GOAWAY until its first response is out; its read watches the stopping pipe."""
        made, _polling = polls
        worker.drain.request()
        conn, client = worker.connect()
        stream = client.get()
        [request] = conn.receive_data()
        assert client.read() == []
        [poll] = made
        assert poll.watched == [{conn.sock.fileno(), worker.server.stopping_read}] * 2  # the preface's read, this one
        serve(conn, request)
        assert client.read() == [*response(stream), FIRST_GOAWAY, PING]

    def test_a_connection_made_during_the_delay_is_told_when_the_worker_stops(self, worker: Worker) -> None:
        """Made after the request and still on its first stream: the worker's stop tells it at once."""
        worker.drain.request()
        conn, client = worker.connect()
        client.get()
        conn.receive_data()
        assert client.read() == []
        worker.drain.stop()
        assert client.read() == [FIRST_GOAWAY]

    def test_a_connection_cut_by_gunicorns_stop_no_longer_counts_as_open(self, worker: Worker) -> None:
        """Gunicorn 27's stop (receive_data(b""): its peer-closed branch) ends the connection in the drain's count."""
        conn, client = worker.connect()
        client.get()
        assert len(conn.receive_data()) == 1
        worker.drain.request()
        assert worker.drain.open_connections() == 1
        assert conn.receive_data(b"") == []
        assert conn.is_closed
        assert worker.drain.open_connections() == 0
        assert client.read() == [FIRST_GOAWAY]  # the drain's; Gunicorn's stop itself writes nothing

    def test_gunicorns_close_never_says_more_than_the_final_goaway(self, worker: Worker, clock: Clock) -> None:
        """A close naming a higher last-stream-id (Gunicorn's stop: the last stream it served) says the final one."""
        conn, client = worker.connect()
        first = client.get()
        assert len(conn.receive_data()) == 1
        worker.drain.request()
        clock.now += ROUND_TRIP_TIMEOUT
        second = client.get()
        assert conn.receive_data() == []  # the final GOAWAY (the first stream), then the new stream refused
        assert client.read() == [FIRST_GOAWAY, final_goaway(first), ("RST_STREAM", second, REFUSED_STREAM)]
        conn.close(last_stream_id=second)
        assert client.read() == [final_goaway(first)]

    def test_a_close_before_any_goaway_keeps_gunicorns_last_stream_id(self, worker: Worker) -> None:
        """No GOAWAY stated yet: Gunicorn's close says the highest stream still open, as it would alone."""
        conn, client = worker.connect()
        stream = client.get()
        conn.receive_data()
        conn.close()
        assert client.read() == [final_goaway(stream)]
        assert worker.server.open_streams() == {}

    def test_a_client_gone_before_its_goaway_is_let_go_quietly(self, worker: Worker) -> None:
        """The socket is gone when the GOAWAY is written: the connection closes and reads as a peer's close."""
        conn, client = worker.connect()
        client.sock.close()
        worker.drain.request()  # the requesting thread's write fails: its own thread finds out
        assert worker.drain.counts.goaway_connections == 0
        assert conn.receive_data() == []
        assert conn.is_closed
        assert worker.server.open_streams() == {}
