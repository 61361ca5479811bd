"""HTTP/2 on Gunicorn 27's ``-k asgi`` under graceful: real Gunicorn, real SIGTERM, a real h2 client (h2c).

One connection (cleartext: with prior knowledge, or upgraded from HTTP/1.1
with ``Upgrade: h2c``) to tests/live/asgi_load_app.py keeps two ``/slow``
streams in flight across the SIGTERM. What the client
sees is recorded: the GOAWAYs (when, last-stream-id, code), a ``/readyz``
stream opened after the first GOAWAY, a stream opened after the final one,
how each stream ended, when the connection closed, the exit status.
graceful's target: GOAWAY(NO_ERROR) in the delay, the in-flight streams 200,
``/readyz`` 503, the late stream refused (REFUSED_STREAM), exit 0. Plain
Gunicorn's run (marker ``plain``) prints its figures, never judged. The
client and its h2 connection are tests/gunicorn/test_http2_e2e.py's.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e_harness import GRACEFUL_CONF, ROOT, Gunicorn, free_port, graceful_env
from tests.gunicorn.test_http2_e2e import (
    BODY,
    MAX_ID,
    READ_TIMEOUT,
    Client,
    Connection,
    Stream,
    _ClientH2,
    assert_a_hup_lost_nothing,
    report,
    under_http2_load,
)

h2_config = pytest.importorskip("h2.config")
h2_events = pytest.importorskip("h2.events")
gunicorn = pytest.importorskip("gunicorn")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.gunicorn,
    pytest.mark.asgi,
    pytest.mark.skipif(
        int(gunicorn.__version__.split(".")[0]) < 27, reason="Gunicorn's -k asgi serves HTTP/2 from 27 on"
    ),
]

#: The shutdown delay and the drain's bound in this run (short: CI time).
DELAY = 0.5
DRAIN = 5.0
#: The in-flight streams' length (ms): longer than the delay, so they are in flight when the worker stops too.
SLOW_MS = 900


class GasgiGunicorn(Gunicorn):
    """The harness's Gunicorn, serving tests/live/asgi_load_app.py with ``-k asgi`` workers over h2c."""

    #: Worker processes.
    workers = 1

    def argv(self) -> list[str]:
        """The command line."""
        argv = ["-m", "gunicorn", "-c", str(GRACEFUL_CONF)] if self.graceful else ["-m", "gunicorn"]
        argv += ["--pythonpath", str(ROOT / "tests" / "live"), "-b", f"127.0.0.1:{self.port}", "-k", "asgi"]
        argv += [
            "-w",
            str(self.workers),
            "--http-protocols",
            "h2,h1",
            "--http2-cleartext",
            "both",
            "--no-control-socket",
        ]
        return [sys.executable, *argv, *self.args, "asgi_load_app:app"]


class TwoGasgiWorkers(GasgiGunicorn):
    """Two ``-k asgi`` workers: a HUP replaces them while the master serves on."""

    workers = 2


@dataclass
class Seen:
    """What the HTTP/2 client saw, times in seconds after the SIGTERM."""

    streams: list[Stream]
    #: (seconds after SIGTERM, last-stream-id, error code) of each GOAWAY.
    goaways: list[tuple[float, int, int]]
    readyz: Stream | None
    late: Stream | None
    closed_after: float
    exit_status: int
    exit_after: float
    log: str
    in_flight: list[Stream] = field(default_factory=list)

    def line(self, who: str) -> str:
        """One line of figures (for the report)."""
        goaways = [(round(at, 2), last, code) for at, last, code in self.goaways]
        return (
            f"{who} -k asgi HTTP/2: in flight at SIGTERM {[(s.outcome, s.status) for s in self.in_flight]};"
            f" GOAWAYs (s after SIGTERM, last-stream-id, code) {goaways};"
            f" /readyz after the first GOAWAY {None if self.readyz is None else self.readyz.status};"
            f" stream after the final GOAWAY {None if self.late is None else self.late.outcome};"
            f" connection closed after {self.closed_after:.2f} s; exit {self.exit_status} after {self.exit_after:.2f} s"
        )


def _open(h2: Any, conn: Connection, by_id: dict[int, Stream], path: str) -> Stream:
    """A GET stream on ``path``, recorded."""
    sid = h2.get_next_available_stream_id()
    headers = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "127.0.0.1")]
    h2.send_headers(sid, headers, end_stream=True)
    stream = Stream(sid, time.monotonic())
    conn.streams.append(stream)
    by_id[sid] = stream
    return stream


def _upgrade(
    sock: socket.socket, h2: Any, conn: Connection, by_id: dict[int, Stream], path: str
) -> tuple[Stream, bytes]:
    """``Upgrade: h2c`` on a GET of ``path`` (RFC 7540 section 3.2): that request becomes stream 1.

    Returns the stream and the HTTP/2 bytes that came with the 101 response.
    """
    settings = h2.initiate_upgrade_connection().decode("ascii")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
        f"Upgrade: h2c\r\nHTTP2-Settings: {settings}\r\n\r\n"
    )
    sock.sendall(request.encode("ascii"))
    head = b""
    while b"\r\n\r\n" not in head:  # bounded by READ_TIMEOUT and the server's head
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed before the 101: {head!r}")
        head += chunk
    status, _, rest = head.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 101 "), head
    stream = Stream(1, time.monotonic())
    conn.streams.append(stream)
    by_id[1] = stream
    return stream, rest


def sigterm_with_streams_in_flight(processes: Any, graceful: bool, upgrade: bool = False) -> Seen:
    """Two /slow streams in flight at the SIGTERM; /readyz after the first GOAWAY, one more after the final one.

    ``upgrade``: the connection starts as HTTP/1.1 and upgrades (``Upgrade:
    h2c``), its first /slow being the upgrade's request; else HTTP/2 with
    prior knowledge.
    """
    env = {**graceful_env(DELAY, DRAIN), "GRACEFUL_GRACE_PERIOD": "30"} if graceful else {}
    instance = GasgiGunicorn(processes, free_port(), "asgi", graceful=graceful, env=env, name="h2-gasgi")
    client = Client(0, None, 0.0, 0)  # its event bookkeeping only
    conn = Connection(time.monotonic())
    by_id: dict[int, Stream] = {}
    readyz: Stream | None = None
    late: Stream | None = None
    try:
        instance.start()
        instance.wait_ready()
        h2 = _ClientH2(h2_config.H2Configuration(client_side=True, header_encoding="utf-8"))
        slow = f"/slow?ms={SLOW_MS}&bytes={BODY}"
        with socket.create_connection(("127.0.0.1", instance.port), timeout=READ_TIMEOUT) as sock:
            if upgrade:
                first, received = _upgrade(sock, h2, conn, by_id, slow)
                in_flight = [first, _open(h2, conn, by_id, slow)]
                for event in h2.receive_data(received):
                    client._on_event(event, h2, conn, by_id)
            else:
                h2.initiate_connection()
                in_flight = [_open(h2, conn, by_id, slow) for _ in range(2)]
            sock.sendall(h2.data_to_send())
            while not all(s.status for s in in_flight):  # bounded by READ_TIMEOUT: each head comes at once
                for event in h2.receive_data(sock.recv(65536)):
                    client._on_event(event, h2, conn, by_id)
                sock.sendall(h2.data_to_send())
            sigterm_at = instance.terminate()
            with contextlib.suppress(OSError):  # a reset ends the read like a close: what the client saw is kept
                while data := sock.recv(65536):  # bounded by READ_TIMEOUT
                    told = len(conn.goaways)
                    for event in h2.receive_data(data):
                        client._on_event(event, h2, conn, by_id)
                    if told == 0 and conn.goaways:  # the first GOAWAY: is the server still ready? (over HTTP/2)
                        readyz = _open(h2, conn, by_id, "/readyz")
                    elif late is None and len(conn.goaways) > told and conn.goaways[-1][1] < MAX_ID:
                        late = _open(h2, conn, by_id, f"/slow?ms=0&bytes={BODY}")  # after the final GOAWAY
                    sock.sendall(h2.data_to_send())
            closed_at = time.monotonic()
        client._end([s for s in conn.streams if s.outcome == "open"], conn, "lost: connection closed")
        exit_status = instance.wait_exit(timeout=DELAY + DRAIN + 35.0)
        assert instance.exited_at is not None
        return Seen(
            conn.streams,
            [(at - sigterm_at, last, code) for at, last, code in conn.goaways],
            readyz,
            late,
            closed_at - sigterm_at,
            exit_status,
            instance.exited_at - sigterm_at,
            instance.log(60),
            in_flight,
        )
    finally:
        instance.kill()


class TestGasgiHttp2:
    @pytest.mark.parametrize("upgrade", [False, True], ids=["prior-knowledge", "upgrade"])
    def test_sigterm_tells_http2_clients_goaway_in_the_delay_and_loses_nothing(
        self, processes: Any, upgrade: bool
    ) -> None:
        """-k asgi over HTTP/2: GOAWAY(NO_ERROR) in the delay, in-flight streams 200, later refused, /readyz 503;
        the same on a connection that began as HTTP/1.1 and upgraded (h2c), its upgrade's request in flight."""
        seen = sigterm_with_streams_in_flight(processes, graceful=True, upgrade=upgrade)
        print(f"\n{seen.line('graceful' + (' (h2c upgrade)' if upgrade else ''))}")
        assert seen.exit_status == 0, seen.log
        first, *_ = seen.goaways or [(None, None, None)]
        assert first[1:] == (MAX_ID, 0), seen.line("graceful")
        assert first[0] is not None and first[0] < DELAY, seen.line("graceful")  # told during the delay
        final = seen.goaways[1]
        assert final[2] == 0 and final[1] < MAX_ID, seen.line("graceful")
        assert [(s.outcome, s.status) for s in seen.in_flight] == [("ok", 200), ("ok", 200)], seen.line("graceful")
        assert seen.readyz is not None and seen.readyz.status == 503, seen.line("graceful")
        assert seen.readyz.id <= final[1]  # opened before the final GOAWAY: served
        assert seen.late is not None and seen.late.outcome == "refused" and seen.late.id > final[1], seen.line(
            "graceful"
        )
        # The in-flight streams outlived the delay: the drain waited for them, then the connection closed.
        assert all(s.ended is not None for s in seen.in_flight)
        assert "Traceback" not in seen.log, seen.log
        assert "HTTP/2: 1 connection(s), 1 told GOAWAY; 3 stream(s) drained, 1 refused, 0 abandoned" in seen.log

    def test_sigterm_under_http2_load_loses_no_stream(self, processes: Any, tmp_path: Path) -> None:
        """The gthread/gevent HTTP/2 load (4 connections, 3 streams each at once) on two -k asgi workers:
        SIGTERM loses no stream, every connection open then is told GOAWAY(NO_ERROR), exit 0."""
        run = under_http2_load(processes, tmp_path, "asgi", "cleartext", graceful=True, server=TwoGasgiWorkers)
        report(run)
        assert run.returncode == 0, run.describe()
        assert run.in_flight_at_sigterm(), "no stream was in flight at SIGTERM"
        assert run.lost(run.streams) == [], run.describe()
        live = run.live_at_sigterm()
        assert live and all(c.goaways and c.goaways[0][2] == 0 for c in live), run.describe()
        assert run.problems == []

    def test_a_hup_under_http2_load_loses_no_stream(self, processes: Any, tmp_path: Path) -> None:
        """HUP under HTTP/2 load on -k asgi: the replaced workers' connections get GOAWAY, nothing is lost,
        /readyz stays 200 (a process stop)."""
        run = under_http2_load(
            processes, tmp_path, "asgi", "cleartext", graceful=True, hup_for=2.0, server=TwoGasgiWorkers
        )
        report(run)
        assert_a_hup_lost_nothing(run)


@pytest.mark.plain
class TestPlainGasgiHttp2:
    def test_plain_gunicorn_asgi_over_http2(self, processes: Any) -> None:
        """Plain Gunicorn 27 -k asgi, the same client: its figures, printed beside graceful's, not judged."""
        seen = sigterm_with_streams_in_flight(processes, graceful=False)
        print(f"\n{seen.line('plain')}")
        assert seen.in_flight, "the streams ran"
