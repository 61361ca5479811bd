"""HTTP/2 under a real Gunicorn 27 (gthread, gevent), real SIGTERM, a real HTTP/2 client (the h2 library).

Each case starts tests/live/load_app.py serving HTTP/2 (cleartext with prior
knowledge, or TLS with ALPN and a certificate made here), keeps a few
connections busy with several streams each, sends SIGTERM to the master and
keeps the load on until the server exits. Counted per run: streams in flight
at SIGTERM lost, streams opened during the delay failed (a REFUSED_STREAM or
a stream above a GOAWAY's last-stream-id is safe to retry: counted apart),
the GOAWAYs each connection got, SIGTERM to exit. Graceful's target: 0, 0, a
GOAWAY(NO_ERROR) on every connection. Plain Gunicorn (``plain``) is run
beside it and its figures printed, never judged.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import random
import re
import signal
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e_harness import Gunicorn, free_port, graceful_env, http_get, markdown_table

h2_connection = pytest.importorskip("h2.connection", reason="HTTP/2 needs the h2 library (the test extra)")
h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")
h2_errors = pytest.importorskip("h2.errors")
gunicorn = pytest.importorskip("gunicorn")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.gunicorn,
    pytest.mark.skipif(
        int(gunicorn.__version__.split(".")[0]) < 27, reason="Gunicorn serves HTTP/2 from 27 on (22-26: none)"
    ),
]

#: Seconds of the shutdown delay and bound of the drain in these runs (short: CI time).
DELAY = 1.5
DRAIN = 5.0
#: Connections, and streams each keeps open at once.
CONNECTIONS = 4
CONCURRENCY = 3
#: The longest /slow stream (ms): some are in flight at SIGTERM and when the listeners close.
SLOW_MS = 600
BODY = 2048
#: The first GOAWAY's last-stream-id (RFC 9113 section 6.8).
MAX_ID = 2**31 - 1
#: Seconds a client waits for a frame before it calls its open streams lost.
READ_TIMEOUT = 10.0


class _ClientH2(h2_connection.H2Connection):  # type: ignore[misc]  # h2 ships no stubs
    """h2's client connection that keeps reading after a graceful GOAWAY (RFC 9113 section 6.8).

    h2 closes its own state on any GOAWAY, after which the frames of the
    streams the server still serves would be protocol errors.
    """

    def _receive_goaway_frame(self, frame: Any) -> Any:
        if frame.error_code != 0:
            return super()._receive_goaway_frame(frame)
        event = h2_events.ConnectionTerminated()
        event.error_code = frame.error_code
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data
        return [], [event]


@dataclass
class Stream:
    id: int
    started: float
    ended: float | None = None
    status: int | None = None
    body: int = 0
    #: ok, refused (safe to retry), or lost (with why).
    outcome: str = "open"


@dataclass
class Connection:
    opened: float
    streams: list[Stream] = field(default_factory=list)
    #: (when, last-stream-id, error code) of each GOAWAY.
    goaways: list[tuple[float, int, int]] = field(default_factory=list)
    closed: float | None = None


class Client:
    """One client thread: one HTTP/2 connection at a time, ``CONCURRENCY`` streams open; a new one after GOAWAY."""

    def __init__(self, port: int, tls: ssl.SSLContext | None, stop_at: float, seed: int) -> None:
        self.port = port
        self.tls = tls
        self.stop_at = stop_at
        self.random = random.Random(seed)
        self.connections: list[Connection] = []
        self.refused_connects = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while time.monotonic() < self.stop_at:
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=READ_TIMEOUT)
            except OSError:
                self.refused_connects += 1  # the server stopped listening: a balancer has dropped it
                return
            try:
                if self.tls is not None:
                    sock = self.tls.wrap_socket(sock, server_hostname="localhost")
                    assert sock.selected_alpn_protocol() == "h2"
                self._serve(sock)
            except (OSError, AssertionError):
                return
            finally:
                sock.close()
            if any(s.outcome.startswith("lost") for s in self.connections[-1].streams):
                return  # a client that saw an error reports it rather than retrying (bounds a broken run)

    def _open(self, h2: Any, conn: Connection) -> None:
        sid = h2.get_next_available_stream_id()
        ms = self.random.choice((0, 0, 50, 200, SLOW_MS))
        path = f"/slow?ms={ms}&bytes={BODY}"
        headers = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "127.0.0.1")]
        h2.send_headers(sid, headers, end_stream=True)
        conn.streams.append(Stream(sid, time.monotonic()))

    def _serve(self, sock: socket.socket) -> None:
        conn = Connection(time.monotonic())
        self.connections.append(conn)
        h2 = _ClientH2(h2_config.H2Configuration(client_side=True, header_encoding="utf-8"))
        h2.initiate_connection()
        by_id: dict[int, Stream] = {}
        sock.settimeout(READ_TIMEOUT)
        try:
            while True:
                open_streams = [s for s in conn.streams if s.outcome == "open"]
                while not conn.goaways and len(open_streams) < CONCURRENCY and time.monotonic() < self.stop_at:
                    self._open(h2, conn)
                    by_id[conn.streams[-1].id] = conn.streams[-1]
                    open_streams.append(conn.streams[-1])
                sock.sendall(h2.data_to_send())
                if not open_streams:
                    return
                data = sock.recv(65536)
                if not data:
                    self._end(open_streams, conn, "lost: connection closed")
                    return
                for event in h2.receive_data(data):
                    self._on_event(event, h2, conn, by_id)
        except TimeoutError:
            self._end([s for s in conn.streams if s.outcome == "open"], conn, "lost: timed out")
        except OSError as exc:
            self._end([s for s in conn.streams if s.outcome == "open"], conn, f"lost: {exc!r}")
        finally:
            conn.closed = time.monotonic()

    def _end(self, streams: list[Stream], conn: Connection, why: str) -> None:
        last = conn.goaways[-1][1] if conn.goaways else None
        for stream in streams:
            stream.ended = time.monotonic()
            # Above a GOAWAY's last-stream-id the server said it did not process it: safe to retry.
            stream.outcome = "refused" if last is not None and stream.id > last else why

    def _on_event(self, event: Any, h2: Any, conn: Connection, by_id: dict[int, Stream]) -> None:
        stream = by_id.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2_events.ResponseReceived) and stream is not None:
            stream.status = int(dict(event.headers)[":status"])
        elif isinstance(event, h2_events.DataReceived) and stream is not None:
            stream.body += len(event.data)
            h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2_events.StreamEnded) and stream is not None:
            stream.ended = time.monotonic()
            stream.outcome = "ok" if stream.status == 200 and stream.body == BODY else "lost: incomplete"
        elif isinstance(event, h2_events.StreamReset) and stream is not None:
            stream.ended = time.monotonic()
            refused = event.error_code == h2_errors.ErrorCodes.REFUSED_STREAM
            stream.outcome = "refused" if refused else f"lost: reset {event.error_code!r}"
        elif isinstance(event, h2_events.ConnectionTerminated):
            conn.goaways.append((time.monotonic(), int(event.last_stream_id), int(event.error_code)))
            above = [s for s in conn.streams if s.outcome == "open" and s.id > event.last_stream_id]
            self._end(above, conn, "refused")


@dataclass
class Http2Run:
    worker: str
    transport: str
    graceful: bool
    sigterm_at: float
    exited_at: float
    returncode: int
    clients: list[Client]
    log: str
    problems: list[str]
    hup_at: float | None = None
    #: /readyz statuses between the HUP and the SIGTERM.
    readyz: list[int] = field(default_factory=list)

    @property
    def connections(self) -> list[Connection]:
        return [c for client in self.clients for c in client.connections]

    @property
    def streams(self) -> list[Stream]:
        return [s for c in self.connections for s in c.streams]

    def lost(self, streams: list[Stream]) -> list[Stream]:
        return [s for s in streams if s.outcome.startswith("lost") or s.outcome == "open"]

    def in_flight_at_sigterm(self) -> list[Stream]:
        return [s for s in self.streams if s.started < self.sigterm_at and (s.ended or 1e18) > self.sigterm_at]

    def opened_during_delay(self) -> list[Stream]:
        return [s for s in self.streams if self.sigterm_at <= s.started < self.sigterm_at + DELAY]

    def live_at_sigterm(self) -> list[Connection]:
        """Connections open at SIGTERM or made after it."""
        return [c for c in self.connections if (c.closed or 1e18) > self.sigterm_at]

    def row(self) -> list[str]:
        live = self.live_at_sigterm()
        told = [c for c in live if any(code == 0 for _t, _last, code in c.goaways)]
        refused = [s for s in self.streams if s.started >= self.sigterm_at and s.outcome == "refused"]
        return [
            "graceful" if self.graceful else "plain",
            self.worker,
            self.transport,
            f"{len(self.lost(self.in_flight_at_sigterm()))}/{len(self.in_flight_at_sigterm())}",
            f"{len(self.lost(self.opened_during_delay()))}/{len(self.opened_during_delay())}",
            str(len(refused)),
            f"{len(told)}/{len(live)}",
            f"{self.exited_at - self.sigterm_at:.1f}",
        ]

    def describe(self) -> str:
        lost = self.lost(self.streams)
        lines = [f"{s.id} {s.outcome} started {s.started - self.sigterm_at:+.2f}s" for s in lost[:12]]
        return "\n".join([*lines, self.log])


HEADER = [
    "server",
    "worker",
    "transport",
    "in flight at SIGTERM lost",
    "opened during the delay failed",
    "refused (safe to retry)",
    "connections told GOAWAY",
    "SIGTERM to exit (s)",
]


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A key and a certificate for localhost/127.0.0.1, made now (cryptography)."""
    crypto = pytest.importorskip("cryptography")
    del crypto
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = directory / "key.pem", directory / "cert.pem"
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


def http2_server_args(transport: str, directory: Path) -> tuple[list[str], ssl.SSLContext | None]:
    """Gunicorn's HTTP/2 arguments for ``transport`` (cleartext or tls), and the client's TLS context."""
    if transport == "cleartext":
        return ["--http-protocols", "h2,h1", "--http2-cleartext", "both"], None
    key, cert = self_signed(directory)
    context = ssl.create_default_context(cafile=str(cert))
    context.set_alpn_protocols(["h2"])
    return ["--http-protocols", "h2,h1", "--keyfile", str(key), "--certfile", str(cert)], context


def wait_ready(instance: Gunicorn, tls: ssl.SSLContext | None) -> None:
    """Until the instance answers (bounded); over TLS the harness's plain HTTP/1.1 probe cannot."""
    if tls is None:
        instance.wait_ready()
        return
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        assert instance.proc is not None and instance.proc.poll() is None, instance.log()
        with contextlib.suppress(OSError):
            http1 = ssl.create_default_context()
            http1.check_hostname = False
            http1.verify_mode = ssl.CERT_NONE  # a readiness poll of our own server on 127.0.0.1
            conn = http.client.HTTPSConnection("127.0.0.1", instance.port, timeout=1.0, context=http1)
            try:
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    return
            finally:
                conn.close()
        time.sleep(0.05)
    raise AssertionError(f"not ready:\n{instance.log()}")


class Http1Client:
    """A keep-alive HTTP/1.1 client on the same port (cleartext), one request after another (bounded)."""

    def __init__(self, port: int, stop_at: float) -> None:
        self.port = port
        self.stop_at = stop_at
        #: (sent at, status or the error, the Connection header).
        self.results: list[tuple[float, str, str]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=READ_TIMEOUT)
        while time.monotonic() < self.stop_at:
            sent = time.monotonic()
            try:
                conn.request("GET", f"/slow?ms=20&bytes={BODY}")
                response = conn.getresponse()
                ok = response.status == 200 and len(response.read()) == BODY
                self.results.append((sent, "ok" if ok else "incomplete", response.getheader("Connection") or ""))
                if response.will_close:
                    conn.close()
            except (OSError, http.client.HTTPException) as exc:
                self.results.append((sent, repr(exc), ""))
                conn.close()
                if isinstance(exc, ConnectionRefusedError):
                    return  # the server stopped listening
        conn.close()


def under_http2_load(
    processes: Any,
    tmp_path: Path,
    worker: str,
    transport: str,
    *,
    graceful: bool,
    warm_up: float = 1.0,
    http1: Http1Client | None = None,
    hup_for: float = 0.0,
    server: type[Gunicorn] = Gunicorn,
) -> Http2Run:
    """One instance under HTTP/2 load; SIGTERM; the load goes on until it exits (bounded).

    ``hup_for`` > 0: a HUP first (its workers are replaced: a process stop), ``/readyz`` probed
    over HTTP/1.1 every 0.1 s for that many seconds, then the SIGTERM. ``server``: the harness's
    Gunicorn, or a subclass serving another app (the ``-k asgi`` tests').
    """
    args, tls = http2_server_args(transport, tmp_path)
    env = {**graceful_env(DELAY, DRAIN), "GRACEFUL_GRACE_PERIOD": "30"} if graceful else {}
    instance = server(processes, free_port(), worker, graceful=graceful, env=env, args=args, name=f"h2-{worker}")
    try:
        instance.start()
        wait_ready(instance, tls)
        stop_at = time.monotonic() + warm_up + DELAY + DRAIN + 10.0
        clients = [Client(instance.port, tls, stop_at, seed) for seed in range(CONNECTIONS)]
        for client in clients:
            client.thread.start()
        if http1 is not None:
            http1.port, http1.stop_at = instance.port, stop_at
            http1.thread.start()
        time.sleep(warm_up)
        hup_at, readyz = None, []
        if hup_for:
            assert instance.proc is not None
            hup_at = time.monotonic()
            instance.proc.send_signal(signal.SIGHUP)
            while time.monotonic() < hup_at + hup_for:
                readyz.append(http_get(instance.port, "/readyz")[0])
                time.sleep(0.1)
        sigterm_at = instance.terminate()
        returncode = instance.wait_exit(timeout=DELAY + DRAIN + 20.0)
        for client in clients:
            client.thread.join(READ_TIMEOUT + 5.0)
        if http1 is not None:
            http1.thread.join(READ_TIMEOUT + 5.0)
        assert instance.exited_at is not None
        return Http2Run(
            worker,
            transport,
            graceful,
            sigterm_at,
            instance.exited_at,
            returncode,
            clients,
            instance.log(40),
            instance.problems() if graceful else [],
            hup_at,
            readyz,
        )
    finally:
        instance.kill()


def report(run: Http2Run) -> None:
    print()
    print("\n".join(markdown_table(HEADER, [run.row()])))


def assert_a_hup_lost_nothing(run: Http2Run) -> None:
    """A HUP under HTTP/2 load, then the SIGTERM: exit 0, no stream lost, every connection open at the HUP
    told GOAWAY(NO_ERROR) by its replaced worker, /readyz 200 throughout (a process stop)."""
    assert run.hup_at is not None
    assert run.returncode == 0, run.describe()
    assert run.lost(run.streams) == [], run.describe()
    at_hup = [c for c in run.connections if c.opened < run.hup_at and (c.closed or 1e18) > run.hup_at]
    assert at_hup, "no connection was open at the HUP"
    # Told by the replaced workers, before the SIGTERM: a process stop drains HTTP/2 too.
    assert all(c.goaways and c.goaways[0][2] == 0 and c.goaways[0][0] < run.sigterm_at for c in at_hup)
    assert run.readyz and set(run.readyz) == {200}, run.readyz
    assert run.problems == []


CASES = [("gthread", "cleartext"), ("gevent", "cleartext"), ("gthread", "tls"), ("gevent", "tls")]


class TestGracefulHttp2:
    @pytest.mark.parametrize(("worker", "transport"), CASES)
    def test_sigterm_under_http2_load_loses_no_stream(
        self, processes: Any, tmp_path: Path, worker: str, transport: str
    ) -> None:
        """Under HTTP/2 load, SIGTERM loses no stream, every connection gets GOAWAY(NO_ERROR), exit 0."""
        run = under_http2_load(processes, tmp_path, worker, transport, graceful=True)
        report(run)
        assert run.returncode == 0, run.describe()
        in_flight = run.in_flight_at_sigterm()
        assert in_flight, "no stream was in flight at SIGTERM"
        assert run.lost(in_flight) == [], run.describe()
        during = run.opened_during_delay()
        assert len(during) > 5, "too few streams opened during the delay to tell"
        assert run.lost(during) == [], run.describe()
        assert run.lost(run.streams) == [], run.describe()
        live = run.live_at_sigterm()
        assert live and all(c.goaways and c.goaways[0][2] == 0 for c in live), run.describe()
        # The last GOAWAY names the highest stream the connection served: nothing above it was served.
        for conn in live:
            last = conn.goaways[-1][1]
            assert all(s.id <= last for s in conn.streams if s.outcome == "ok"), run.describe()
        assert run.problems == []

    @pytest.mark.parametrize("worker", ["gthread", "gevent"])
    def test_http1_clients_on_the_same_port_are_unchanged(self, processes: Any, tmp_path: Path, worker: str) -> None:
        """An HTTP/1.1 keep-alive client beside the HTTP/2 load: served to the delay's end, Connection: close in it."""
        http1 = Http1Client(0, 0.0)
        run = under_http2_load(processes, tmp_path, worker, "cleartext", graceful=True, http1=http1)
        report(run)
        assert run.returncode == 0, run.describe()
        assert run.lost(run.streams) == [], run.describe()
        until_delay_end = [r for r in http1.results if r[0] < run.sigterm_at + DELAY - 0.2]
        assert len(until_delay_end) > 10 and all(r[1] == "ok" for r in until_delay_end), http1.results
        during = [r for r in until_delay_end if r[0] > run.sigterm_at + 0.2]
        assert during and all(r[2] == "close" for r in during), http1.results

    @pytest.mark.parametrize("worker", ["gthread", "gevent"])
    def test_a_process_stop_drains_http2_and_leaves_readiness(
        self, processes: Any, tmp_path: Path, worker: str
    ) -> None:
        """HUP under HTTP/2 load: the old workers' connections get GOAWAY and lose nothing; /readyz stays 200."""
        run = under_http2_load(processes, tmp_path, worker, "cleartext", graceful=True, hup_for=3.0)
        report(run)
        assert_a_hup_lost_nothing(run)

    def test_streams_opened_after_the_final_goaway_are_refused(self, processes: Any, tmp_path: Path) -> None:
        """A client ignoring GOAWAY: streams it opened before the final one are served, later ones refused."""
        args, _tls = http2_server_args("cleartext", tmp_path)
        env = {**graceful_env(DELAY, DRAIN), "GRACEFUL_GRACE_PERIOD": "30"}
        instance = Gunicorn(processes, free_port(), "gthread", graceful=True, env=env, args=args, name="h2-late")
        try:
            instance.start()
            instance.wait_ready()
            client = Client(instance.port, None, time.monotonic() + 30.0, 0)
            conn = Connection(time.monotonic())
            h2 = _ClientH2(h2_config.H2Configuration(client_side=True, header_encoding="utf-8"))
            h2.initiate_connection()
            by_id: dict[int, Stream] = {}
            with socket.create_connection(("127.0.0.1", instance.port), timeout=READ_TIMEOUT) as sock:
                sock.sendall(h2.data_to_send())
                assert any(isinstance(e, h2_events.RemoteSettingsChanged) for e in h2.receive_data(sock.recv(65536)))
                instance.terminate()
                late: list[Stream] = []
                while data := sock.recv(65536):  # bounded by READ_TIMEOUT
                    told = len(conn.goaways)
                    for event in h2.receive_data(data):
                        client._on_event(event, h2, conn, by_id)
                    if told == 0 and conn.goaways:  # the first GOAWAY: two streams anyway (with the PING's ACK)
                        for _ in range(2):
                            client._open(h2, conn)
                            by_id[conn.streams[-1].id] = conn.streams[-1]
                    elif len(conn.goaways) > 1 and not late and conn.goaways[-1][1] < MAX_ID:  # the final one
                        client._open(h2, conn)
                        late.append(conn.streams[-1])
                        by_id[late[0].id] = late[0]
                    sock.sendall(h2.data_to_send())
            client._end([st for st in conn.streams if st.outcome == "open"], conn, "lost: connection closed")
            returncode = instance.wait_exit(timeout=DELAY + DRAIN + 20.0)
        finally:
            instance.kill()
        assert returncode == 0
        first, *rest = conn.streams
        assert [st.outcome for st in (first, *rest[:1])] == ["ok", "ok"], conn.streams
        assert late and late[0].outcome == "refused", conn.streams
        assert late[0].id > conn.goaways[-1][1]

    @pytest.mark.parametrize("worker", ["gthread", "gevent"])
    def test_a_stream_outliving_the_drain_is_cut_after_goaway_and_named(
        self, processes: Any, tmp_path: Path, worker: str
    ) -> None:
        """A stream longer than the drain: its connection had GOAWAY first; the worker names it as abandoned."""
        args, _tls = http2_server_args("cleartext", tmp_path)
        delay, drain = 0.5, 1.0
        env = {**graceful_env(delay, drain), "GRACEFUL_GRACE_PERIOD": "30"}
        instance = Gunicorn(processes, free_port(), worker, graceful=True, env=env, args=args, name="h2-long")
        goaways: list[int] = []
        outcome = "open"
        try:
            instance.start()
            instance.wait_ready()
            h2 = _ClientH2(h2_config.H2Configuration(client_side=True, header_encoding="utf-8"))
            h2.initiate_connection()
            with socket.create_connection(("127.0.0.1", instance.port), timeout=READ_TIMEOUT) as sock:
                headers = [(":method", "GET"), (":path", "/slow?ms=6000&bytes=64"), (":scheme", "http")]
                h2.send_headers(1, [*headers, (":authority", "127.0.0.1")], end_stream=True)
                sock.sendall(h2.data_to_send())
                while not any(isinstance(e, h2_events.ResponseReceived) for e in h2.receive_data(sock.recv(65536))):
                    sock.sendall(h2.data_to_send())  # bounded by READ_TIMEOUT: the response's head comes at once
                instance.terminate()
                with contextlib.suppress(OSError):
                    while data := sock.recv(65536):  # bounded: the worker exits at the drain's deadline
                        for event in h2.receive_data(data):
                            if isinstance(event, h2_events.ConnectionTerminated):
                                goaways.append(int(event.error_code))
                            elif isinstance(event, h2_events.StreamEnded):
                                outcome = "ended"
                        sock.sendall(h2.data_to_send())
            returncode = instance.wait_exit(timeout=delay + drain + 20.0)
        finally:
            instance.kill()
        assert returncode == 0
        assert outcome == "open"  # cut: it outlived the drain
        assert goaways and goaways[0] == 0, "no GOAWAY(NO_ERROR) before the cut"
        log = instance.log(200)
        assert "abandoned 1 HTTP/2 stream(s) at the drain's deadline, after GOAWAY: 127.0.0.1:" in log, log
        assert re.search(
            r"HTTP/2: 1 connection\(s\), 1 told GOAWAY; \d+ stream\(s\) drained, 0 refused, 1 abandoned", log
        ), log

    def test_an_idle_http2_connection_is_closed_and_holds_nothing(self, processes: Any, tmp_path: Path) -> None:
        """An idle HTTP/2 connection gets both GOAWAYs and is closed in the delay: the drain does not wait for it."""
        args, _tls = http2_server_args("cleartext", tmp_path)
        # Gunicorn closes an idle HTTP/2 connection at its keep-alive timeout (2 s by default): not this one.
        args += ["--keep-alive", "30"]
        env = {**graceful_env(DELAY, DRAIN), "GRACEFUL_GRACE_PERIOD": "30"}
        instance = Gunicorn(processes, free_port(), "gthread", graceful=True, env=env, args=args, name="h2-idle")
        try:
            instance.start()
            instance.wait_ready()
            sock = socket.create_connection(("127.0.0.1", instance.port), timeout=READ_TIMEOUT)
            h2 = _ClientH2(h2_config.H2Configuration(client_side=True, header_encoding="utf-8"))
            h2.initiate_connection()
            sock.sendall(h2.data_to_send())
            # The server's SETTINGS: it has made the connection, before the SIGTERM.
            assert any(isinstance(e, h2_events.RemoteSettingsChanged) for e in h2.receive_data(sock.recv(65536)))
            sock.sendall(h2.data_to_send())
            sigterm_at = instance.terminate()
            goaways: list[tuple[float, int, int]] = []
            with sock:
                while data := sock.recv(65536):  # bounded by READ_TIMEOUT: raises if the server never closes
                    for event in h2.receive_data(data):
                        if isinstance(event, h2_events.ConnectionTerminated):
                            goaways.append((time.monotonic(), int(event.last_stream_id), int(event.error_code)))
                    sock.sendall(h2.data_to_send())  # the SETTINGS and PING acknowledgements
            closed_at = time.monotonic()
            returncode = instance.wait_exit(timeout=DELAY + DRAIN + 20.0)
        finally:
            instance.kill()
        assert returncode == 0
        assert [(last, code) for _at, last, code in goaways][:1] == [(2**31 - 1, 0)]
        assert [(last, code) for _at, last, code in goaways][1:] == [(0, 0)]
        # Closed in the delay, not at the drain's deadline (DELAY + DRAIN after the SIGTERM).
        assert closed_at - sigterm_at < DELAY, instance.log()
        assert "still open at the drain's deadline" not in instance.log(200)
        assert instance.exited_at is not None and instance.exited_at - sigterm_at < DELAY + DRAIN, instance.log()


@pytest.mark.plain
class TestPlainGunicornHttp2:
    @pytest.mark.parametrize(("worker", "transport"), CASES)
    def test_plain_gunicorn_under_http2_load(self, processes: Any, tmp_path: Path, worker: str, transport: str) -> None:
        """Plain Gunicorn 27 under the same load: its figures, printed beside graceful's, not judged."""
        run = under_http2_load(processes, tmp_path, worker, transport, graceful=False)
        report(run)
        assert run.streams, "the load ran"
