"""graceful.healthport.server: the health port's HTTP server on real sockets, and the bad input it survives."""

from __future__ import annotations

import http.client
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from graceful.healthport.address import HealthAddress
from graceful.healthport.bindwait import BindWait
from graceful.healthport.limits import Limits
from graceful.healthport.server import HealthPort
from graceful.http.health import HealthResponse
from tests.conftest import ROOT

#: Generous bound (s) for "soon" on a loaded machine.
SOON = 5.0


class Fixed:
    """A responder that answers every probe 200 ``ok`` and records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, str]] = []

    def respond(self, endpoint: str, check: str | None, query_string: str) -> HealthResponse:
        self.calls.append((endpoint, check, query_string))
        return HealthResponse(200, "ok")

    def metrics(self) -> tuple[int, bytes, str]:
        self.calls.append(("metrics", None, ""))
        return 200, b"graceful_requests_in_flight 3.0\n", "text/plain; version=0.0.4; charset=utf-8"


class Raising:
    """A responder that always raises."""

    def respond(self, endpoint: str, check: str | None, query_string: str) -> HealthResponse:
        raise RuntimeError("responder bug")

    def metrics(self) -> tuple[int, bytes, str]:
        raise RuntimeError("metrics bug")


def started(responder: object = None, **limits: float) -> HealthPort:
    port = HealthPort(HealthAddress("127.0.0.1", 0), responder or Fixed(), limits=Limits(**limits))  # type: ignore[arg-type]
    port.bind()
    return port.start()


@pytest.fixture
def port() -> Iterator[HealthPort]:
    server = started(deadline=1.0)
    try:
        yield server
    finally:
        server.close()


def number(server: HealthPort) -> int:
    assert server.listener is not None
    return int(server.listener.getsockname()[1])


def get(
    server: HealthPort, path: str, method: str = "GET", timeout: float = SOON, source: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", number(server), timeout=timeout, source_address=(source, 0))
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def raw(server: HealthPort, data: bytes, timeout: float = SOON) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", number(server)), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def wait_for(predicate: object, timeout: float = SOON) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


class TestAnswers:
    """Routing, headers, HEAD, 404 and 405, as on the app's port."""

    def test_routes_endpoints_and_checks(self, port: HealthPort) -> None:
        """/readyz, /livez?verbose&exclude=db and /readyz/poststarthook/warm reach the responder as WSGI passes them."""
        assert get(port, "/readyz")[0] == 200
        assert get(port, "/livez?verbose&exclude=db")[0] == 200
        assert get(port, "/readyz/poststarthook/warm")[0] == 200
        assert port.responder.calls == [  # type: ignore[attr-defined]
            ("readyz", None, ""),
            ("livez", None, "verbose&exclude=db"),
            ("readyz", "poststarthook/warm", ""),
        ]

    def test_headers_and_head(self, port: HealthPort) -> None:
        """graceful's headers plus Connection: close; HEAD has the length and no body."""
        status, headers, body = get(port, "/livez")
        assert (status, body) == (200, b"ok")
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert headers["Cache-Control"] == "no-store"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Connection"] == "close"
        status, headers, body = get(port, "/livez", "HEAD")
        assert (status, headers["Content-Length"], body) == (200, "2", b"")

    def test_other_paths_and_methods(self, port: HealthPort) -> None:
        """Unknown paths are 404s; POST is a 405 with Allow; the responder is not asked."""
        assert get(port, "/")[0] == 404
        assert get(port, "/metricsz")[0] == 404
        status, headers, _ = get(port, "/readyz", "POST")
        assert (status, headers["Allow"]) == (405, "GET, HEAD")
        assert get(port, "/metrics", "POST")[0] == 405
        assert port.responder.calls == []  # type: ignore[attr-defined]

    def test_metrics_with_their_content_type(self, port: HealthPort) -> None:
        """/metrics is the responder's metrics() with its content type and graceful's headers; HEAD has no body."""
        status, headers, body = get(port, "/metrics")
        assert (status, body) == (200, b"graceful_requests_in_flight 3.0\n")
        assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert (headers["Cache-Control"], headers["X-Content-Type-Options"]) == ("no-store", "nosniff")
        status, headers, body = get(port, "/metrics", "HEAD")
        assert (status, headers["Content-Length"], body) == (200, "32", b"")
        assert port.responder.calls == [("metrics", None, "")] * 2  # type: ignore[attr-defined]

    def test_a_raising_responder_is_a_500(self, caplog: pytest.LogCaptureFixture) -> None:
        """A responder that raises (a probe or /metrics) gives a logged 500, and the port keeps answering."""
        server = started(Raising())
        try:
            with caplog.at_level(logging.ERROR, logger="graceful.healthport.server"):
                assert get(server, "/readyz")[:1] == (500,)
                assert get(server, "/metrics")[0] == 500
                assert get(server, "/readyz")[0] == 500
            assert any(r.exc_info for r in caplog.records)
        finally:
            server.close()

    def test_unix_socket(self, tmp_path: Path) -> None:
        """A unix: address answers over its socket file."""
        path = str(tmp_path / "health.sock")
        server = HealthPort(HealthAddress(path=path), Fixed())
        server.bind()
        server.start()
        try:
            assert server.bound_address == f"unix:{path}"
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(SOON)
                sock.connect(path)
                sock.sendall(b"GET /livez HTTP/1.1\r\n\r\n")
                assert sock.recv(100).startswith(b"HTTP/1.1 200 OK\r\n")
        finally:
            server.close()

    def test_bound_address_names_the_real_port(self, port: HealthPort) -> None:
        """Port 0 was asked for: bound_address says which one was chosen."""
        assert port.bound_address == f"127.0.0.1:{number(port)}"


class TestBadInput:
    """Bad input never stops the port, and other probes are answered meanwhile."""

    def test_not_http(self, port: HealthPort) -> None:
        """Binary junk and a line that is no request get a 400; the port keeps answering."""
        assert raw(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03").startswith(b"HTTP/1.1 400 ")
        assert raw(port, b"HELLO\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert port.stats.bad_requests == 2
        assert get(port, "/livez")[0] == 200

    def test_huge_request_line(self, port: HealthPort) -> None:
        """A 64 KB request line gets a 431, read no further than about 12 KiB; the port keeps answering."""
        answer = raw(port, b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert port.stats.too_large == 1
        assert get(port, "/livez")[0] == 200

    def test_slow_client(self, port: HealthPort) -> None:
        """A client sending a byte every 0.2 s is closed at the deadline (1 s); probes are answered meanwhile."""
        with socket.create_connection(("127.0.0.1", number(port)), timeout=SOON) as sock:
            started_at = time.monotonic()
            answered = 0
            closed = False
            for byte in b"GET /livez HTTP/1.1\r\n":
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    closed = True
                    break
                answered += get(port, "/readyz", source="127.0.0.2")[0] == 200
                time.sleep(0.2)
                sock.setblocking(False)
                try:
                    closed = sock.recv(1) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    closed = True
                finally:
                    sock.setblocking(True)
                if closed:
                    break
            assert closed and time.monotonic() - started_at < SOON
        assert answered >= 2 and port.stats.timed_out == 1

    def test_thousand_idle_connections(self) -> None:
        """1,000 silent connections from one client, 64 slots: another client's probes are all answered."""
        port = started(deadline=1.0, max_connections=64)
        idle = []
        try:
            for _ in range(1000):
                idle.append(socket.create_connection(("127.0.0.1", number(port)), timeout=SOON))
            statuses = [get(port, "/readyz", source="127.0.0.2")[0] for _ in range(10)]
            assert statuses == [200] * 10
            stats = port.stats
            # Beyond the cap each new one shed an older silent one (or one timed out): none held a probe's slot.
            assert stats.evicted + stats.timed_out >= 1000 - port.limits.max_connections
        finally:
            for sock in idle:
                sock.close()
            port.close()

    def test_a_full_port_sheds_the_flooding_address(self) -> None:
        """At the cap, the address holding the most silent connections loses its oldest, not another's older one."""
        server = started(max_connections=8)
        other = socket.socket()
        hogs: list[socket.socket] = []
        try:
            other.settimeout(SOON)
            other.bind(("127.0.0.2", 0))
            other.connect(("127.0.0.1", number(server)))  # the oldest silent connection of all
            assert wait_for(lambda: server.stats.accepted == 1)
            hogs.extend(socket.create_connection(("127.0.0.1", number(server)), timeout=SOON) for _ in range(20))
            assert wait_for(lambda: server.stats.evicted >= 21 - 8)
            other.sendall(b"GET /livez HTTP/1.1\r\n\r\n")
            assert other.recv(100).startswith(b"HTTP/1.1 200 ")
        finally:
            for sock in [other, *hogs]:
                sock.close()
            server.close()

    def test_metrics_beyond_budget_is_a_429_and_probes_are_not_limited(self) -> None:
        """/metrics beyond its client's budget gets 429 + Retry-After; probes from that address are all answered."""
        server = started(metrics_client_rate=5.0)
        try:
            answers = [get(server, "/metrics") for _ in range(30)]
            ok = sum(status == 200 for status, _, _ in answers)
            refused = [headers for status, headers, _ in answers if status == 429]
            assert 5 <= ok <= 5 + 10  # 5 at once, then 5 a second (generous: a loaded machine)
            assert len(refused) == 30 - ok and refused[0]["Retry-After"] == "1"
            assert server.stats.rate_limited == len(refused)
            assert [get(server, "/livez")[0] for _ in range(100)] == [200] * 100
        finally:
            server.close()


class TestLifecycle:
    """Binding, passive mode, handing the listener on, watching other descriptors, closing."""

    def test_address_in_use_is_retried_in_the_background(self, caplog: pytest.LogCaptureFixture) -> None:
        """With wait_in_use, an address in use is logged once and bound as soon as it is free, saying after how
        long; on_bound is called once."""
        holder = HealthAddress("127.0.0.1", 0).bind()
        address = HealthAddress("127.0.0.1", holder.getsockname()[1])
        server = HealthPort(address, Fixed())
        bound: list[bool] = []
        wait = BindWait(str(address), 30.0, time.monotonic(), on_bound=lambda: bound.append(True))
        try:
            with caplog.at_level(logging.INFO, logger="graceful.healthport.server"):
                server.bind(wait_in_use=wait)
                assert server.listener is None and server.waiting_for_address
                server.start()
                time.sleep(0.7)  # more than one retry
                holder.close()
                assert wait_for(lambda: server.listener is not None)
            assert get(server, "/livez")[0] == 200
            assert bound == [True] and not server.waiting_for_address
            assert len([r for r in caplog.records if "is in use" in r.getMessage()]) == 1
            [line] = [r.getMessage() for r in caplog.records if "listening on" in r.getMessage()]
            assert re.search(r"after waiting \d+\.\ds for the address$", line), line
        finally:
            holder.close()
            server.close()

    def test_address_in_use_is_given_up_at_the_bound(self, caplog: pytest.LogCaptureFixture) -> None:
        """Still in use at the wait's bound: one ERROR line, on_give_up once, and no more tries."""
        holder = HealthAddress("127.0.0.1", 0).bind()
        address = HealthAddress("127.0.0.1", holder.getsockname()[1])
        server = HealthPort(address, Fixed())
        gave_up: list[bool] = []
        wait = BindWait(str(address), 0.6, time.monotonic(), on_give_up=lambda: gave_up.append(True))
        try:
            with caplog.at_level(logging.INFO, logger="graceful.healthport.server"):
                server.bind(wait_in_use=wait)
                server.start()
                assert wait_for(lambda: bool(gave_up))
                time.sleep(0.6)  # a retry's time: none comes
            assert gave_up == [True] and server.listener is None and not server.waiting_for_address
            errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
            assert len(errors) == 1 and "still in use after" in errors[0] and "giving up" in errors[0]
        finally:
            holder.close()
            server.close()

    def test_address_in_use_raises_without_retry(self) -> None:
        """Without retry_in_use (graceful serve), an address in use raises at bind()."""
        holder = HealthAddress("127.0.0.1", 0).bind()
        try:
            with pytest.raises(OSError):
                HealthPort(HealthAddress("127.0.0.1", holder.getsockname()[1]), Fixed()).bind()
        finally:
            holder.close()

    def test_passive_port_queues_then_answers(self) -> None:
        """A passive port leaves connections in the kernel's queue; once active, it answers them."""
        active = threading.Event()
        listener = HealthAddress("127.0.0.1", 0).bind()
        server = HealthPort(
            HealthAddress("127.0.0.1", 0), Fixed(), listener=listener, passive=lambda: not active.is_set()
        )
        server.start()
        try:
            with socket.create_connection(("127.0.0.1", number(server)), timeout=SOON) as sock:
                sock.sendall(b"GET /livez HTTP/1.1\r\n\r\n")
                sock.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    sock.recv(100)
                active.set()
                server.wake()
                sock.settimeout(SOON)
                assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
        finally:
            server.close()

    def test_release_listener_leaves_the_queue_to_another_holder(self) -> None:
        """release_listener: accepted connections are answered, then the port closes its copy and its thread ends."""
        server = started()
        assert server.listener is not None
        successor = socket.socket(fileno=os.dup(server.listener.fileno()))  # the other process's copy
        try:
            first = socket.create_connection(("127.0.0.1", number(server)), timeout=SOON)
            assert wait_for(lambda: server.stats.accepted == 1)
            server.release_listener()
            first.sendall(b"GET /livez HTTP/1.1\r\n\r\n")
            assert first.recv(100).startswith(b"HTTP/1.1 200 ")
            assert wait_for(lambda: server.listener is None)
            queued = socket.create_connection(successor.getsockname(), timeout=SOON)  # waits for the successor
            conn, _ = successor.accept()
            conn.close()
            queued.close()
            first.close()
        finally:
            successor.close()
            server.close()

    def test_watch_calls_back_on_the_ports_thread(self) -> None:
        """A watched descriptor's callback runs on graceful-health-port when it is readable."""
        read_end, write_end = os.pipe()
        names: list[str] = []
        server = HealthPort(HealthAddress("127.0.0.1", 0), Fixed())
        server.bind()

        def readable() -> None:
            os.read(read_end, 10)
            names.append(threading.current_thread().name)

        server.watch(read_end, readable)
        server.start()
        try:
            os.write(write_end, b"x")
            assert wait_for(lambda: names == ["graceful-health-port"])
        finally:
            server.close()
            os.close(read_end)
            os.close(write_end)

    def test_a_failing_callback_is_unwatched(self, caplog: pytest.LogCaptureFixture) -> None:
        """A watched descriptor whose callback raises is logged once and unwatched; the port keeps answering."""
        read_end, write_end = os.pipe()
        calls: list[int] = []
        server = HealthPort(HealthAddress("127.0.0.1", 0), Fixed())
        server.bind()

        def failing() -> None:
            calls.append(1)
            raise OSError("broken")

        server.watch(read_end, failing)
        try:
            with caplog.at_level(logging.ERROR, logger="graceful.healthport.server"):
                server.start()
                os.write(write_end, b"x")  # never read: it would wake the loop for ever if still watched
                assert wait_for(lambda: calls == [1])
                assert get(server, "/livez")[0] == 200
            assert calls == [1]
            assert len([r for r in caplog.records if "stops watching fd" in r.getMessage()]) == 1
        finally:
            server.close()
            os.close(read_end)
            os.close(write_end)

    def test_close_stops_answering(self) -> None:
        """close() ends the thread and closes the listener: new connections are refused."""
        server = started()
        where = number(server)
        server.close()
        assert not [t for t in threading.enumerate() if t.name == "graceful-health-port" and t.is_alive()]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", where), timeout=SOON)


FORK_SCRIPT = """
import http.client, os, socket, threading, time
from graceful.healthport.address import HealthAddress
from graceful.healthport.bindwait import BindWait
from graceful.healthport.server import HealthPort
from graceful.http.health import HealthResponse

class Fixed:
    def respond(self, endpoint, check, query):
        return HealthResponse(200, "ok")

def kept(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False

port = HealthPort(HealthAddress("127.0.0.1", 0), Fixed())
port.bind()
port.start()
number = port.listener.getsockname()[1]
listener_fd = port.listener.fileno()
statuses = []
stop = threading.Event()

def probe():
    while not stop.is_set():  # within one client's budget (20 a second)
        conn = http.client.HTTPConnection("127.0.0.1", number, timeout=5)
        conn.request("GET", "/livez")
        statuses.append(conn.getresponse().status)
        conn.close()
        stop.wait(0.06)

prober = threading.Thread(target=probe)
prober.start()
children = []
for index in range(10):
    time.sleep(0.05)
    if index == 9:
        with port.passing_listener_on():
            pid = os.fork()
    else:
        pid = os.fork()
    if pid == 0:
        os._exit(10 if kept(listener_fd) else 0)
    children.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
stop.set()
prober.join(10)
print("children", *children)
print("statuses", len(statuses), sorted(set(statuses)))
"""


class TestFork:
    """A fork while the port answers (in a subprocess: Python 3.12+ warns about forking with threads)."""

    def test_children_keep_none_of_the_port(self) -> None:
        """Forked children hold no socket of the port (but one handing it on); the parent never stops answering."""
        done = subprocess.run(
            [sys.executable, "-W", "ignore::DeprecationWarning", "-c", FORK_SCRIPT],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
        assert lines["children"] == "0 0 0 0 0 0 0 0 0 10"
        count, statuses = lines["statuses"].split(" ", 1)
        assert int(count) >= 5 and statuses == "[200]"
