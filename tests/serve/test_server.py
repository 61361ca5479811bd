"""Tests for graceful.serve.server: the app loader, the request handler, the stop, and `graceful serve` end to end."""

from __future__ import annotations

import collections
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.process.sockets import accept_queue_length
from graceful.serve.server import AppImportError, GracefulServer, load_app, wrap_app
from graceful.wsgi.middleware import GracefulMiddleware
from tests.conftest import QUICK_HOOKS_ORDER, ROOT, Processes
from tests.metrics.helpers import figures, sample, scrape

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

CONSOLE_SCRIPT = str(Path(sys.executable).with_name("graceful"))
TEST_APP = "tests.live.server_app:app"
DEFAULT_ORDER = ["HasBeenReady", *QUICK_HOOKS_ORDER]
RETRY_AFTER_ORDER = [
    "HasBeenReady",
    "ShutdownInitiated",
    "PreShutdownHooksStopped",
    "AfterShutdownDelayDuration",
    "NotAcceptingNewRequests",
    "InFlightRequestsDrained",
    "HTTPServerStoppedListening",
    "CleanupFinished",
]


# -- helpers: WSGI apps, an in-process server, raw HTTP ---------------------------------------


def hello(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """Answer ``hello`` with a Content-Length, or echo the body for POST."""
    if environ["REQUEST_METHOD"] == "POST" and environ["PATH_INFO"] == "/echo":
        body = environ["wsgi.input"].read()
    elif environ["PATH_INFO"] == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter([b"one\n", b"two\n"])
    elif environ["PATH_INFO"] == "/boom":
        raise RuntimeError("the app failed")
    elif environ["PATH_INFO"] == "/hop":
        start_response("200 OK", [("Content-Length", "3"), ("Connection", "close")])
        return [b"hop"]
    else:
        body = b"hello"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


class InProcess:
    """A GracefulServer on a free port in this process, with its own lifecycle (no signal trap)."""

    def __init__(self, app: WSGIApplication, *, keep_alive: float = 5.0, start: bool = True, **settings: Any) -> None:
        config = Config(**{"shutdown_delay": 0, "drain_timeout": 5, "hook_timeout": 1, "grace_period": 10, **settings})
        self.lifecycle = Lifecycle(config)
        wrapped, _ = wrap_app(app, self.lifecycle)
        self.server = GracefulServer("127.0.0.1", 0, wrapped, self.lifecycle, threads=4, keep_alive=keep_alive)
        self.lifecycle.adapter = self.server
        self.port = self.server.port
        if start:
            self.server.start()

    def connect(self) -> http.client.HTTPConnection:
        """A new client connection to this server."""
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def shut_down(self) -> None:
        """Run the whole timeline, then close the server."""
        self.lifecycle.request_shutdown()
        assert self.lifecycle.wait_finished(15)
        self.server.close()


@pytest.fixture
def in_process() -> Iterator[Callable[..., InProcess]]:
    """Build in-process servers; each is shut down (or closed) at the end."""
    built: list[InProcess] = []

    def build(app: WSGIApplication = hello, **kwargs: Any) -> InProcess:
        server = InProcess(app, **kwargs)
        built.append(server)
        return server

    yield build
    for server in built:
        if not server.server.serving:
            server.server.start()
        server.shut_down()


def raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the peer closes ``sock`` (EOF or reset) within ``timeout`` seconds."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


# -- units ---------------------------------------------------------------------------------------


class TestLoadApp:
    def test_module_and_attribute(self) -> None:
        """module:attr imports the module and returns the attribute."""
        from examples import wsgi_app

        assert load_app("examples.wsgi_app:app") is wsgi_app.app

    def test_factory_call_with_literal_arguments(self) -> None:
        """module:factory(args) calls the factory with literal arguments."""
        app = load_app("tests.serve.test_server:make_app('made', times=2)")
        statuses: list[str] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            statuses.append(status)
            return lambda data: None

        assert list(app({}, start_response)) == [b"mademade"] and statuses == ["200 OK"]

    def test_missing_module_is_one_clear_error(self) -> None:
        """An unknown module raises AppImportError naming it."""
        with pytest.raises(AppImportError, match="no module named 'no_such_module'"):
            load_app("no_such_module:app")

    def test_missing_attribute_is_one_clear_error(self) -> None:
        """An unknown attribute raises AppImportError naming module and attribute."""
        with pytest.raises(AppImportError, match=r"'examples\.wsgi_app' has no attribute 'nope'"):
            load_app("examples.wsgi_app:nope")

    def test_not_callable_is_refused(self) -> None:
        """Something that is no WSGI callable is refused."""
        with pytest.raises(AppImportError, match="not a WSGI application"):
            load_app("examples.wsgi_app:MAX_SLOW")

    def test_expression_must_be_a_name_or_call(self) -> None:
        """Anything but a name or a call of a name is refused."""
        with pytest.raises(AppImportError, match="neither a name nor a call"):
            load_app("examples.wsgi_app:app.attr")

    def test_factory_arguments_must_be_literals(self) -> None:
        """Factory arguments that are not literals are refused, not evaluated."""
        with pytest.raises(AppImportError, match="must be literals"):
            load_app("tests.serve.test_server:make_app(open('x'))")


def make_app(text: str, times: int = 1) -> WSGIApplication:
    """A factory for TestLoadApp."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        start_response("200 OK", [])
        return [text.encode() * times]

    return app


class TestWrapApp:
    def test_plain_app_is_wrapped_with_the_lifecycle(self) -> None:
        """A plain WSGI app gets a GracefulMiddleware of the given lifecycle."""
        lifecycle = Lifecycle(Config())
        wrapped, used = wrap_app(hello, lifecycle)
        assert isinstance(wrapped, GracefulMiddleware) and used is lifecycle and wrapped.lifecycle is lifecycle

    def test_wrapped_app_is_served_as_it_is(self) -> None:
        """An app that is a GracefulMiddleware already keeps it, and its lifecycle drives the server."""
        lifecycle = Lifecycle(Config())
        middleware = GracefulMiddleware(hello, lifecycle)
        wrapped, used = wrap_app(middleware)
        assert wrapped is middleware and used is lifecycle

    def test_wrapping_twice_changes_nothing(self) -> None:
        """wrap_app is idempotent: the CLI and serve() may both call it."""
        lifecycle = Lifecycle(Config())
        once, _ = wrap_app(hello, lifecycle)
        twice, used = wrap_app(once, lifecycle)
        assert twice is once and used is lifecycle

    def test_flask_app_with_the_extension_is_not_wrapped_again(self) -> None:
        """A Flask app using graceful.flask.Graceful is served with the extension's lifecycle."""
        from flask import Flask

        from graceful.flask import Graceful

        app = Flask(__name__)
        lifecycle = Lifecycle(Config())
        Graceful(app, lifecycle=lifecycle)
        wrapped, used = wrap_app(app)
        assert wrapped is app and used is lifecycle

    def test_another_lifecycle_is_refused(self) -> None:
        """Asking for a lifecycle other than the one the app is wrapped with is an error."""
        middleware = GracefulMiddleware(hello, Lifecycle(Config()))
        with pytest.raises(ValueError, match="another lifecycle"):
            wrap_app(middleware, Lifecycle(Config()))


class TestRequestHandler:
    def test_keep_alive_reuses_the_connection(self, in_process: Callable[..., InProcess]) -> None:
        """Two HTTP/1.1 requests travel on one connection; no Connection: close before shutdown."""
        conn = in_process().connect()
        conn.request("GET", "/")
        first = conn.getresponse()
        assert first.read() == b"hello" and first.getheader("Connection") is None
        sock = conn.sock
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"hello"
        assert conn.sock is sock
        conn.close()

    def test_shutdown_responses_close_the_connection(self, in_process: Callable[..., InProcess]) -> None:
        """Once ShutdownInitiated fired, a response on a kept-alive connection says close, and the server closes."""
        server = in_process()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"Connection: close" not in sock.recv(65536)
            server.lifecycle.initiate_shutdown()
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = sock.recv(65536)
            assert b"200 OK" in reply and b"Connection: close" in reply
            assert closed_by_peer(sock)

    def test_stream_without_length_is_chunked_and_kept(self, in_process: Callable[..., InProcess]) -> None:
        """A body of unknown length goes out chunked, and the connection stays usable."""
        conn = in_process().connect()
        conn.request("GET", "/stream")
        response = conn.getresponse()
        assert response.getheader("Transfer-Encoding") == "chunked" and response.read() == b"one\ntwo\n"
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"hello"
        conn.close()

    def test_head_sends_no_body(self, in_process: Callable[..., InProcess]) -> None:
        """HEAD keeps the app's Content-Length but sends no body, so the next response is not corrupted."""
        conn = in_process().connect()
        conn.request("HEAD", "/")
        head = conn.getresponse()
        assert head.getheader("Content-Length") == "5" and head.read() == b""
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"hello"
        conn.close()

    def test_http_1_0_closes(self, in_process: Callable[..., InProcess]) -> None:
        """An HTTP/1.0 request gets Connection: close and the connection ends after the body."""
        reply = raw_exchange(in_process().port, b"GET / HTTP/1.0\r\n\r\n")
        assert b"Connection: close" in reply and reply.endswith(b"hello")

    def test_pipelined_requests_are_answered_in_order(self, in_process: Callable[..., InProcess]) -> None:
        """Requests sent back to back in one packet are each answered, in order."""
        data = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        reply = raw_exchange(in_process().port, data)
        assert reply.count(b"HTTP/1.1 200 OK") == 2 and reply.index(b"hello") < reply.index(b"one\n")

    def test_request_body_is_bounded_and_the_connection_kept(self, in_process: Callable[..., InProcess]) -> None:
        """wsgi.input ends where the body does; the next request on the connection is intact."""
        conn = in_process().connect()
        conn.request("POST", "/echo", body=b"x" * 1000)
        assert conn.getresponse().read() == b"x" * 1000
        conn.request("POST", "/", body=b"unread")  # the app never reads it: dropped by the server
        assert conn.getresponse().read() == b"hello"
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"hello"
        conn.close()

    def test_large_unread_body_closes(self, in_process: Callable[..., InProcess]) -> None:
        """A large body the app did not read is not drained: the response says close."""
        conn = in_process().connect()
        conn.request("POST", "/", body=b"x" * (256 * 1024))
        response = conn.getresponse()
        assert response.read() == b"hello" and response.getheader("Connection") == "close"
        conn.close()

    def test_chunked_request_body_is_read_then_the_connection_closed(
        self, in_process: Callable[..., InProcess]
    ) -> None:
        """A chunked request body reaches the app whole; the response closes the connection."""
        data = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        reply = raw_exchange(in_process().port, data)
        assert reply.startswith(b"HTTP/1.1 200") and b"Connection: close" in reply and reply.endswith(b"abcde")

    def test_unread_body_of_a_refused_request_does_not_reset_the_reply(
        self, in_process: Callable[..., InProcess]
    ) -> None:
        """A 429 that never reads the POST body still reaches the client: the body is drained before the close."""
        server = in_process(send_retry_after=True)
        server.lifecycle.initiate_shutdown()
        server.lifecycle.not_accepting_new_requests.fire()
        body = b"x" * 32768
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        reply = raw_exchange(server.port, head + body)
        assert reply.startswith(b"HTTP/1.1 429") and b"Connection: close" in reply

    def test_expect_100_continue_is_answered_at_once(self, in_process: Callable[..., InProcess]) -> None:
        """A client that waits for 100 Continue gets it before it sends the body."""
        server = in_process()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
            sock.sendall(b"abc")
            assert sock.recv(65536).endswith(b"abc")

    def test_app_error_is_a_500_that_closes(self, in_process: Callable[..., InProcess]) -> None:
        """An app that raises gets a 500 with Connection: close (the error is logged)."""
        reply = raw_exchange(in_process().port, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 500") and b"Connection: close" in reply

    def test_app_hop_by_hop_headers_are_dropped(self, in_process: Callable[..., InProcess]) -> None:
        """The server decides Connection: the app's own header is not sent."""
        conn = in_process().connect()
        conn.request("GET", "/hop")
        response = conn.getresponse()
        assert response.read() == b"hop" and response.getheader("Connection") is None
        conn.close()

    def test_keep_alive_zero_closes_every_connection(self, in_process: Callable[..., InProcess]) -> None:
        """keep_alive=0 turns keep-alive off."""
        reply = raw_exchange(in_process(keep_alive=0).port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"Connection: close" in reply and reply.endswith(b"hello")

    def test_idle_connection_is_closed_after_keep_alive(self, in_process: Callable[..., InProcess]) -> None:
        """A connection idle for longer than keep_alive seconds is closed by the server."""
        server = in_process(keep_alive=0.3)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"hello" in sock.recv(65536)
            assert closed_by_peer(sock, timeout=5)


class TestGracefulServer:
    def test_queued_connections_are_served_then_new_ones_refused(self, in_process: Callable[..., InProcess]) -> None:
        """Connections waiting in the accept queue at the stop are served, not reset; later ones are refused."""
        server = in_process(start=False)
        clients = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(5)]
        try:
            for client in clients:
                client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            queued = accept_queue_length(server.server.socket)
            server.server.start()
            server.server.stop_listening()
            replies = [client.recv(65536) for client in clients]
        finally:
            for client in clients:
                client.close()
        assert queued in (None, 5)
        assert all(reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"hello") for reply in replies)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()

    def test_stop_closes_idle_keep_alive_connections(self, in_process: Callable[..., InProcess]) -> None:
        """At the stop, connections idle between requests are closed."""
        server = in_process()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"hello" in sock.recv(65536)
            server.server.stop_listening()
            assert closed_by_peer(sock)

    def test_thread_count_is_bounded(self, in_process: Callable[..., InProcess]) -> None:
        """Requests run on the pool's threads only, however many connections there are."""
        names: set[str] = set()

        def record(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            names.add(threading.current_thread().name)
            time.sleep(0.05)
            start_response("200 OK", [("Content-Length", "2")])
            return [b"ok"]

        server = in_process(record)
        with ThreadPoolExecutor(12) as pool:
            replies = list(pool.map(lambda _: raw_exchange(server.port, b"GET / HTTP/1.0\r\n\r\n"), range(24)))
        assert all(reply.endswith(b"ok") for reply in replies)
        assert names <= {f"graceful-worker-{n}" for n in range(1, 5)}


# -- end to end: `graceful serve` in a subprocess, real signals --------------------------------------


class Served:
    """One `graceful serve` process under test: output collected line by line on a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="served-output", daemon=True)
        self._reader.start()
        line = self.wait_for(r"listening on http://127\.0\.0\.1:\d+")[0]
        match = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert match is not None
        self.port = int(match.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait_ready()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                with self._changed:
                    self.lines.append(line.rstrip("\n"))
                    self._changed.notify_all()
        except (OSError, ValueError):  # the stream was closed under us at teardown
            return

    def wait_for(self, pattern: str, timeout: float = 20.0) -> list[str]:
        """Wait until an output line matches ``pattern``; return the matching lines."""
        regex = re.compile(pattern)
        with self._changed:
            found = self._changed.wait_for(lambda: [line for line in self.lines if regex.search(line)], timeout)
            if not found:
                raise AssertionError(f"{pattern!r} not seen within {timeout}s; output:\n" + "\n".join(self.lines))
            return found

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if requests.get(self.url + "/readyz", timeout=5).status_code == 200:
                return
            time.sleep(0.05)
        raise AssertionError("/readyz never passed")

    def signal(self, signum: int = signal.SIGTERM) -> None:
        """Send ``signum`` to the server process (by its PID)."""
        self.proc.send_signal(signum)

    def finish(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit and for its output to end; return the exit status."""
        status = self.proc.wait(timeout)
        self._reader.join(10)
        return status

    def signals(self) -> list[str]:
        """Lifecycle signal names, in the order the app printed them."""
        with self._changed:
            return [line.split(" ", 1)[1] for line in self.lines if line.startswith("SIGNAL ")]

    def count(self, exact: str) -> int:
        """How many output lines are exactly ``exact``."""
        with self._changed:
            return sum(line == exact for line in self.lines)


SETTINGS = {
    "GRACEFUL_SHUTDOWN_DELAY": "1.5",
    "GRACEFUL_DRAIN_TIMEOUT": "10",
    "GRACEFUL_HOOK_TIMEOUT": "5",
    "GRACEFUL_GRACE_PERIOD": "30",
}


@pytest.fixture
def serve_app(processes: Processes) -> Iterator[Callable[..., Served]]:
    """Start `python -m graceful serve tests.live.server_app:app` on a free port; kill it at the end."""
    started: list[Served] = []

    def start(*, console_script: bool = False, args: tuple[str, ...] = ("--threads", "8"), **env: str) -> Served:
        base = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
        full_env = {**base, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **SETTINGS, **env}
        command = [CONSOLE_SCRIPT] if console_script else [sys.executable, "-m", "graceful"]
        argv = [*command, "serve", TEST_APP, "--bind", "127.0.0.1:0", *args, "--no-access-log"]
        served = Served(processes.start(argv, env=full_env))
        started.append(served)
        return served

    yield start
    for served in started:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(10)
        served._reader.join(10)


def get(url: str, session: requests.Session | None = None, **kwargs: Any) -> requests.Response:
    """GET ``url`` (on ``session`` if given) with a generous timeout."""
    return (session or requests).get(url, timeout=15, **kwargs)


@pytest.mark.e2e
class TestGracefulServe:
    def test_readyz_fails_and_livez_passes_after_sigterm(self, serve_app: Callable[..., Served]) -> None:
        """From SIGTERM on, /readyz answers 503 while /livez and /healthz stay 200."""
        served = serve_app()
        served.signal()
        served.wait_for("SIGNAL ShutdownInitiated")
        readyz = get(served.url + "/readyz?verbose")
        assert readyz.status_code == 503 and "[-]shutdown failed" in readyz.text
        assert get(served.url + "/livez").status_code == 200
        assert get(served.url + "/healthz").status_code == 200
        assert served.finish() == 0

    def test_requests_during_the_delay_succeed_with_connection_close(self, serve_app: Callable[..., Served]) -> None:
        """During the delay, requests on a kept-alive and on a new connection succeed with Connection: close."""
        served = serve_app()
        with requests.Session() as session:
            before = get(served.url + "/", session)
            assert before.status_code == 200 and "close" not in before.headers.get("Connection", "")
            served.signal()
            served.wait_for("SIGNAL ShutdownInitiated")
            reused = get(served.url + "/", session)
            fresh = get(served.url + "/")
        port = before.text.split()[1]
        assert reused.status_code == 200 and reused.text.split()[1] == port  # same client port: same connection
        assert "initiated=True not_accepting=False" in reused.text
        assert reused.headers["Connection"] == "close"
        assert fresh.status_code == 200 and "not_accepting=False" in fresh.text
        assert fresh.headers["Connection"] == "close"
        assert served.finish() == 0

    def test_adaptive_delay_ends_on_quiet(self, serve_app: Callable[..., Served]) -> None:
        """With a floor and no traffic, the delay ends after the 1 s quiet, far before its 10 s maximum, and says so."""
        served = serve_app(GRACEFUL_SHUTDOWN_DELAY="10", GRACEFUL_SHUTDOWN_DELAY_MIN="0.5")
        served.signal()
        served.wait_for("SIGNAL NotAcceptingNewRequests")
        assert served.finish() == 0
        (line,) = served.wait_for("the shutdown delay ended ")
        assert "quiet for 1.0 s: nothing arrived after ShutdownInitiated" in line

    def test_requests_during_a_slow_pre_shutdown_hook_succeed(self, serve_app: Callable[..., Served]) -> None:
        """After the delay, requests are still served while a pre-shutdown hook runs."""
        served = serve_app(GRACEFUL_SHUTDOWN_DELAY="0.3", SERVER_APP_PRE_SHUTDOWN="3")
        served.signal()
        served.wait_for("SIGNAL AfterShutdownDelayDuration")
        response = get(served.url + "/")
        assert response.status_code == 200 and "not_accepting=False" in response.text
        assert "PreShutdownHooksStopped" not in served.signals()
        assert served.finish() == 0
        assert served.signals().index("AfterShutdownDelayDuration") < served.signals().index("PreShutdownHooksStopped")

    def test_retry_after_mode_answers_429_on_new_and_reused_connections(self, serve_app: Callable[..., Served]) -> None:
        """send_retry_after: after the delay, new requests get 429 + Retry-After + close, on any connection."""
        served = serve_app(GRACEFUL_SEND_RETRY_AFTER="true", GRACEFUL_RETRY_AFTER="7", GRACEFUL_SHUTDOWN_DELAY="0.5")
        with ThreadPoolExecutor(1) as pool, requests.Session() as session:
            slow = pool.submit(get, served.url + "/slow?seconds=4")  # keeps the drain open
            assert get(served.url + "/", session).status_code == 200
            adapter = session.get_adapter(served.url)
            assert isinstance(adapter, requests.adapters.HTTPAdapter)
            pool_before = adapter.poolmanager.connection_from_url(served.url)
            opened = pool_before.num_connections
            served.signal()
            served.wait_for("SIGNAL NotAcceptingNewRequests")
            reused = get(served.url + "/", session)
            fresh = get(served.url + "/")
            assert pool_before.num_connections == opened  # the 429 came on the kept-alive connection
            assert slow.result().text == "slept 4\n"
        for response in (reused, fresh):
            assert response.status_code == 429
            assert response.headers["Retry-After"] == "7" and response.headers["Connection"] == "close"
        assert served.finish() == 0
        signals = served.signals()
        assert signals.index("InFlightRequestsDrained") < signals.index("HTTPServerStoppedListening")

    def test_default_mode_refuses_new_connections_after_the_stop(self, serve_app: Callable[..., Served]) -> None:
        """Once the listener closed, new connections are refused while in-flight requests finish."""
        served = serve_app(GRACEFUL_SHUTDOWN_DELAY="0.5")
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(get, served.url + "/slow?seconds=3")
            served.wait_for("SIGNAL HasBeenReady")
            time.sleep(0.2)  # let the slow request reach the app
            served.signal()
            served.wait_for("SIGNAL HTTPServerStoppedListening")
            with pytest.raises(requests.ConnectionError):
                get(served.url + "/")
            assert slow.result().status_code == 200
        assert served.finish() == 0

    def test_in_flight_slow_and_streaming_requests_complete(self, serve_app: Callable[..., Served]) -> None:
        """Slow and streaming requests started before SIGTERM complete with their whole bodies."""
        served = serve_app(GRACEFUL_SHUTDOWN_DELAY="0.3")
        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(get, served.url + "/slow?seconds=2.5")
            stream = pool.submit(get, served.url + "/stream?chunks=8&interval=0.3", stream=True)
            time.sleep(0.3)  # both are in the app
            served.signal()
            stream_text = stream.result().text
            assert slow.result().text == "slept 2.5\n"
        assert stream_text == "".join(f"chunk {n}\n" for n in range(8))
        assert served.finish() == 0
        assert served.signals().index("HTTPServerStoppedListening") < served.signals().index("InFlightRequestsDrained")

    def test_signal_order_default_mode(self, serve_app: Callable[..., Served]) -> None:
        """Default mode: the listener closes before the drain; the signals fire in exactly this order."""
        served = serve_app(GRACEFUL_SHUTDOWN_DELAY="0.5")
        served.signal()
        assert served.finish() == 0
        assert served.signals() == DEFAULT_ORDER

    def test_signal_order_retry_after_mode(self, serve_app: Callable[..., Served]) -> None:
        """send_retry_after: the listener closes only after the drain; the signals fire in exactly this order."""
        served = serve_app(GRACEFUL_SHUTDOWN_DELAY="0.5", GRACEFUL_SEND_RETRY_AFTER="1")
        served.signal()
        assert served.finish() == 0
        assert served.signals() == RETRY_AFTER_ORDER

    def test_second_signal_exits_1_at_once(self, serve_app: Callable[..., Served]) -> None:
        """A second signal during the shutdown ends the process with status 1, without cleanup."""
        served = serve_app(GRACEFUL_SHUTDOWN_DELAY="10", GRACEFUL_GRACE_PERIOD="40")
        served.signal()
        served.wait_for("SIGNAL ShutdownInitiated")
        served.signal(signal.SIGINT)
        assert served.finish(timeout=5) == 1
        assert "CleanupFinished" not in served.signals() and served.count("CLEANUP") == 0

    def test_console_script_exits_0_and_cleans_up_once(self, serve_app: Callable[..., Served]) -> None:
        """The `graceful` console script serves, shuts down on SIGTERM, runs cleanup once and exits 0."""
        served = serve_app(console_script=True, GRACEFUL_SHUTDOWN_DELAY="0.3")
        assert get(served.url + "/").status_code == 200
        served.signal()
        assert served.finish() == 0
        assert served.count("CLEANUP") == 1 and served.count("POST-START") == 1

    def test_connections_during_the_stop_are_served_or_refused_never_reset(
        self, serve_app: Callable[..., Served]
    ) -> None:
        """Under load through the stop, every request is answered 200 or its connection refused: none reset."""
        served = serve_app(GRACEFUL_SHUTDOWN_DELAY="0.5")
        outcomes: list[str] = []
        lock = threading.Lock()
        deadline = time.monotonic() + 15

        def client() -> None:
            for _ in range(5000):  # bounded in count and in time
                if time.monotonic() > deadline:
                    return
                outcome = _classify(served.url + "/")
                with lock:
                    outcomes.append(outcome)
                if outcome == "refused":
                    return

        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(client) for _ in range(4)]
            time.sleep(0.2)
            served.signal()
            for future in futures:
                future.result()
        assert served.finish() == 0
        assert outcomes.count("ok") > 0 and outcomes.count("refused") == 4
        assert [o for o in outcomes if o not in ("ok", "refused")] == []


def _classify(url: str) -> str:
    """One request on a new connection: ok (200), refused, or what else happened."""
    try:
        response = requests.get(url, timeout=10, headers={"Connection": "close"})
    except requests.ConnectionError as exc:
        reason = exc.args[0] if exc.args else exc
        text = repr(reason)
        return "refused" if "ConnectionRefusedError" in text or "Connection refused" in text else f"error {text}"
    return "ok" if response.status_code == 200 else f"status {response.status_code}"


def probe(port: int, path: str, timeout: float = 1.0) -> str:
    """``"<status> <failing lines>"`` of one GET on a fresh connection (a 1 s timeout, as a kubelet's), or the error."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        failing = [line for line in response.read().decode().splitlines() if line.startswith("[-]")]
        return " ".join([str(response.status), *failing])
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


def health_port_of(served: Served) -> int:
    """The health port a `graceful serve` process logged it listens on."""
    line = served.wait_for(r"health port listening on 127\.0\.0\.1:\d+")[0]
    match = re.search(r"127\.0\.0\.1:(\d+)", line)
    assert match is not None
    return int(match.group(1))


@pytest.mark.e2e
class TestHealthPort:
    def test_answers_while_every_request_thread_is_busy(self, serve_app: Callable[..., Served]) -> None:
        """--threads 2 and four clients of 3 s requests: the app's port times out, the health port answers 10 of 10."""
        served = serve_app(args=("--threads", "2", "--health-bind", "127.0.0.1:0"))
        health = health_port_of(served)
        with ThreadPoolExecutor(4) as pool:
            busy = [pool.submit(get, served.url + "/slow?seconds=3") for _ in range(4)]
            time.sleep(1.0)  # both threads busy, two requests queued behind them
            assert probe(served.port, "/livez") == "TimeoutError"
            answers = [probe(health, ("/livez", "/readyz")[index % 2]) for index in range(10)]
            assert answers == ["200"] * 10
            assert [future.result().status_code for future in busy] == [200] * 4

    def test_metrics_count_what_the_client_saw(self, serve_app: Callable[..., Served]) -> None:
        """GRACEFUL_MAX_IN_FLIGHT=1, bursts of three, probes on both ports: /metrics on the health port has every
        429 and every probe, exactly, and nothing in flight."""
        served = serve_app(args=("--threads", "4", "--health-bind", "127.0.0.1:0"), GRACEFUL_MAX_IN_FLIGHT="1")
        health = health_port_of(served)
        seen: collections.Counter[str] = collections.Counter()
        with ThreadPoolExecutor(3) as pool:
            for _ in range(10):
                burst = [pool.submit(get, served.url + "/slow?seconds=0.2") for _ in range(3)]
                seen[f"app livez {probe(served.port, '/livez', timeout=10)}"] += 1
                seen[f"port livez {probe(health, '/livez')}"] += 1
                for future in burst:
                    seen[f"slow {future.result().status_code}"] += 1
        assert set(seen) <= {"slow 200", "slow 429", "app livez 200", "port livez 200"}, seen
        assert seen["slow 429"] > 0
        status, _, body = scrape(health)
        data = figures(body)
        assert status == 200
        assert sample(data, "graceful_requests_rejected_total", reason="max_in_flight") == seen["slow 429"]
        assert sample(data, "graceful_healthchecks_total", name="ping", type="livez", status="success") == 20
        assert sample(data, "graceful_requests_in_flight") == 0
        info = [dict(labels) for (name, labels), _ in data.items() if name == "graceful_info"]
        assert [entry["server"] for entry in info] == ["graceful serve"]

    def test_a_scrape_answers_while_every_request_thread_is_busy(self, serve_app: Callable[..., Served]) -> None:
        """--threads 2, four clients of 3 s requests: the app's port times out, /metrics on the health port answers
        within 1 s with the two requests in flight."""
        served = serve_app(args=("--threads", "2", "--health-bind", "127.0.0.1:0"))
        health = health_port_of(served)
        with ThreadPoolExecutor(4) as pool:
            busy = [pool.submit(get, served.url + "/slow?seconds=3") for _ in range(4)]
            time.sleep(1.0)
            assert probe(served.port, "/livez") == "TimeoutError"
            status, headers, body = scrape(health)
            assert status == 200 and headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert sample(figures(body), "graceful_requests_in_flight") == 2
            assert [future.result().status_code for future in busy] == [200] * 4

    def test_readiness_until_exit(self, serve_app: Callable[..., Served]) -> None:
        """GRACEFUL_HEALTH_BIND alone: 200, then 503 [-]shutdown from SIGTERM on while /livez stays 200, exit 0."""
        served = serve_app(GRACEFUL_HEALTH_BIND="127.0.0.1:0")
        health = health_port_of(served)
        deadline = time.monotonic() + 10
        while probe(health, "/readyz") != "200" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert probe(health, "/readyz") == "200"
        served.signal()
        served.wait_for("SIGNAL ShutdownInitiated")
        lives, readies = [], []
        while served.proc.poll() is None and len(lives) < 200:
            lives.append(probe(health, "/livez"))
            readies.append(probe(health, "/readyz?verbose"))
            time.sleep(0.1)
        assert served.finish() == 0
        # The last probes may meet the process exiting; every earlier one was answered.
        assert len(lives) >= 5 and set(lives[:-2]) == {"200"}
        assert set(readies[:-2]) == {"503 [-]shutdown failed: reason withheld"}


@pytest.mark.e2e
class TestShutdownRecord:
    """What `graceful serve` leaves behind: the record file, the termination message, the late-traffic warning."""

    def test_record_and_termination_message(self, serve_app: Callable[..., Served], tmp_path: Path) -> None:
        """Four requests during the delay: the record counts them, the message summarises it, exit 0."""
        report, message = tmp_path / "record.json", tmp_path / "termination-log"
        message.write_text("")
        served = serve_app(GRACEFUL_REPORT_FILE=str(report), GRACEFUL_TERMINATION_LOG=str(message))
        assert get(served.url + "/").status_code == 200  # before the shutdown: not counted
        served.signal()
        served.wait_for("SIGNAL ShutdownInitiated")
        assert [get(served.url + "/").status_code for _ in range(4)] == [200] * 4
        assert served.finish() == 0
        record = json.loads(report.read_text())
        assert (record["server"], record["worker_class"], record["pid"]) == (
            "graceful serve",
            "threads",
            served.proc.pid,
        )
        assert [p["role"] for p in record["parts"]] == ["server"]
        assert record["requests"]["arrived"] == {"delay": 4, "draining": 0}
        assert sorted((h["kind"], h["name"], h["outcome"]) for h in record["hooks"]) == [
            ("cleanup task", "flush", "ok"),
            ("pre-shutdown hook", "announce", "ok"),
        ]
        assert record["signals"]["AfterShutdownDelayDuration"] >= 1.5
        text = message.read_text()
        assert text.startswith("graceful: clean shutdown in ")
        assert "(delay 1.5 s; 1 pre-shutdown hook ok; drained 0 requests, 0 abandoned; 1 cleanup task ok)" in text
        assert "; 4 requests arrived during the delay, the last at " in text
        served.wait_for(re.escape(text))

    def test_a_report_file_in_a_missing_directory_stops_the_start(self, processes: Processes, tmp_path: Path) -> None:
        """GRACEFUL_REPORT_FILE in a directory that does not exist: exit 2 and one line naming it."""
        missing = tmp_path / "gone" / "record.json"
        base = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
        env = {**base, "PYTHONPATH": str(ROOT), "GRACEFUL_REPORT_FILE": str(missing)}
        proc = processes.start([sys.executable, "-m", "graceful", "serve", TEST_APP, "--bind", "127.0.0.1:0"], env=env)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 2
        assert output.strip().splitlines()[-1] == (
            f"graceful serve: error: GRACEFUL_REPORT_FILE={str(missing)!r} is not allowed: its directory"
            f" {str(missing.parent)!r} does not exist (the shutdown record is written there when the server stops)"
        )

    def test_late_traffic_is_warned_about(self, serve_app: Callable[..., Served]) -> None:
        """Requests until the delay's end: one warning that the delay looks too short, with the figures."""
        served = serve_app()
        served.signal()
        served.wait_for("SIGNAL ShutdownInitiated")
        for _ in range(200):  # every 50 ms until the server stops accepting (bounded)
            if "NotAcceptingNewRequests" in served.signals():
                break
            _classify(served.url + "/")
            time.sleep(0.05)
        assert served.finish() == 0
        warnings = [line for line in served.lines if "the delay looks too short" in line]
        assert len(warnings) == 1, "\n".join(served.lines)
        assert re.search(
            r"WARNING .*graceful: \d+ request\(s\) arrived in the last tenth of the 1.5s shutdown delay", warnings[0]
        )

    def test_no_warning_when_traffic_stops_early(self, serve_app: Callable[..., Served]) -> None:
        """Requests only in the first half of the delay: no late-traffic warning."""
        served = serve_app()
        served.signal()
        served.wait_for("SIGNAL ShutdownInitiated")
        assert [get(served.url + "/").status_code for _ in range(5)] == [200] * 5
        assert served.finish() == 0
        assert not [line for line in served.lines if "the delay looks too short" in line]
        assert "NotAcceptingNewRequests" in served.signals()


@pytest.mark.e2e
class TestExamples:
    @pytest.mark.parametrize("spec", ["examples.flask_app:app", "examples.wsgi_app:app"])
    def test_example_serves_and_shuts_down(self, processes: Processes, spec: str) -> None:
        """Each example app answers / and /readyz under `graceful serve` and exits 0 on SIGTERM."""
        base = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
        env = {**base, "PYTHONUNBUFFERED": "1", "GRACEFUL_SHUTDOWN_DELAY": "0.2"}
        argv = [CONSOLE_SCRIPT, "serve", spec, "--bind", "127.0.0.1:0", "--no-access-log"]
        served = Served(processes.start(argv, env=env))
        assert get(served.url + "/").status_code == 200
        assert get(served.url + "/slow?seconds=0.1").status_code == 200
        served.signal()
        assert served.finish() == 0
        served.wait_for("CleanupFinished")
