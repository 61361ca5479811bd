"""Tests for graceful.wsgi.middleware: health routing, admission, the in-flight count, long-running requests."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import threading
import types
import wsgiref.util
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import Client, EnvironBuilder
from werkzeug.wrappers import Response
from werkzeug.wsgi import ClosingIterator

import graceful
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.testing import FakeClock
from graceful.wsgi.middleware import (
    LIFECYCLE_KEY,
    SHUTTING_DOWN_KEY,
    GracefulMiddleware,
    _werkzeug_closing_iterator,
    find_middleware,
    path_prefixes,
)

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
}
HEALTH_HEADERS = {
    "Content-Type": "text/plain; charset=utf-8",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def hello(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


class Recorder:
    """A WSGI app that records what it saw and streams its body through a generator."""

    def __init__(self, lifecycle: Lifecycle, chunks: int = 2) -> None:
        self.lifecycle = lifecycle
        self.chunks = chunks
        self.count_in_app: int | None = None
        self.environ: WSGIEnvironment | None = None
        self.closed = 0
        self.count_in_body: list[int] = []

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        self.environ = environ
        self.count_in_app = self.lifecycle.in_flight.count
        start_response("200 OK", [("Content-Type", "text/plain")])
        return self.body()

    def body(self) -> Iterator[bytes]:
        try:
            for i in range(self.chunks):
                self.count_in_body.append(self.lifecycle.in_flight.count)
                yield b"chunk%d" % i
        finally:
            self.closed += 1


class Closing:
    """A response iterable that counts its close() calls."""

    def __init__(self) -> None:
        self.closes = 0

    def __iter__(self) -> Iterator[bytes]:
        return iter([b"x"])

    def close(self) -> None:
        self.closes += 1


class Captured:
    """start_response that keeps the status and headers."""

    def __init__(self) -> None:
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []

    def __call__(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
        self.status = status
        self.headers = headers
        return lambda data: None

    @property
    def code(self) -> int:
        assert self.status is not None
        return int(self.status[:3])

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


def body_or_werkzeug(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """A generic iterable at /plain, a werkzeug response elsewhere."""
    if environ["PATH_INFO"] == "/plain":
        start_response("200 OK", [])
        return Closing()
    return Response(b"werkzeug")(environ, start_response)  # type: ignore[no-any-return]


def environ_for(path: str = "/", method: str = "GET", query: str = "") -> dict[str, Any]:
    return dict(EnvironBuilder(path=path, method=method, query_string=query).get_environ())


def call(app: Any, path: str = "/", method: str = "GET", query: str = "") -> tuple[Captured, Any]:
    """Call a WSGI app directly; return the captured start_response and the response iterable."""
    captured = Captured()
    result = app(environ_for(path, method, query), captured)
    return captured, result


def finish(result: Any) -> bytes:
    """Iterate and close a response as a server does."""
    try:
        return b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()


def fake_clock() -> FakeClock:
    """A fake clock whose waits give a quick check up to 5 real seconds, even on a loaded machine."""
    return FakeClock(settle=5.0)


@pytest.fixture
def lifecycle() -> Lifecycle:
    return Lifecycle(Config(), clock=fake_clock())


def retry_after_lifecycle(**config: Any) -> Lifecycle:
    return Lifecycle(Config(send_retry_after=True, **config), clock=fake_clock())


class TestHealthEndpoints:
    """The health endpoints on the app's own port."""

    @pytest.mark.parametrize("path", ["/livez", "/readyz", "/healthz"])
    def test_get_ok(self, lifecycle: Lifecycle, path: str) -> None:
        """GET answers 200 'ok' with the plain-text, nosniff, no-store headers."""
        response = Client(GracefulMiddleware(hello, lifecycle)).get(path)
        assert response.status_code == 200
        assert response.get_data() == b"ok"
        for name, value in HEALTH_HEADERS.items():
            assert response.headers[name] == value
        assert response.headers["Content-Length"] == "2"

    @pytest.mark.parametrize("path", ["/livez", "/readyz", "/healthz", "/readyz/ping"])
    def test_head_has_headers_and_no_body(self, lifecycle: Lifecycle, path: str) -> None:
        """HEAD answers like GET, with Content-Length but no body."""
        captured, result = call(GracefulMiddleware(hello, lifecycle), path, "HEAD")
        assert captured.code == 200
        assert captured.header("Content-Length") == "2"
        assert finish(result) == b""

    @pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get", "BREW"])
    @pytest.mark.parametrize("path", ["/livez", "/readyz", "/healthz", "/readyz/shutdown"])
    def test_other_methods_405(self, lifecycle: Lifecycle, method: str, path: str) -> None:
        """Any other method is 405 with Allow: GET, HEAD."""
        captured, result = call(GracefulMiddleware(hello, lifecycle), path, method)
        assert captured.code == 405
        assert captured.header("Allow") == "GET, HEAD"
        assert b"GET and HEAD" in finish(result)

    def test_verbose_format(self, lifecycle: Lifecycle) -> None:
        """?verbose gives the kube-apiserver listing."""
        response = Client(GracefulMiddleware(hello, lifecycle)).get("/readyz?verbose")
        assert response.get_data(as_text=True) == "[+]ping ok\n[+]shutdown ok\nreadyz check passed\n"

    def test_failing_readyz_during_shutdown(self, lifecycle: Lifecycle) -> None:
        """After ShutdownInitiated /readyz is 503 with the listing; /livez and /healthz stay 200."""
        client = Client(GracefulMiddleware(hello, lifecycle))
        lifecycle.initiate_shutdown()
        readyz = client.get("/readyz")
        assert readyz.status_code == 503
        assert readyz.get_data(as_text=True) == (
            "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"
        )
        assert readyz.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert client.get("/livez").status_code == 200
        assert client.get("/healthz").status_code == 200

    def test_exclude_repeatable_and_unknown(self, lifecycle: Lifecycle) -> None:
        """?exclude is repeatable; unknown names warn and do not fail."""
        lifecycle.readiness_check("db")(lambda: False)
        client = Client(GracefulMiddleware(hello, lifecycle))
        response = client.get("/readyz?exclude=db&exclude=nope&verbose")
        assert response.status_code == 200
        assert response.get_data(as_text=True) == (
            "[+]ping ok\n[+]db excluded: ok\n[+]shutdown ok\n"
            'warn: some health checks cannot be excluded: no matches for "nope"\n'
            "readyz check passed\n"
        )

    def test_per_check_paths(self, lifecycle: Lifecycle) -> None:
        """/readyz/<name> answers one check; unknown names are 404; so for /livez and /healthz."""
        lifecycle.readiness_check("db")(lambda: False)
        lifecycle.post_start_hook("warm")(lambda: None)
        client = Client(GracefulMiddleware(hello, lifecycle))
        assert client.get("/readyz/ping").status_code == 200
        assert client.get("/readyz/shutdown").status_code == 200
        assert client.get("/readyz/db").status_code == 503
        assert client.get("/readyz/poststarthook/warm").status_code == 503
        assert client.get("/readyz/nope").status_code == 404
        assert client.get("/readyz/").status_code == 404
        assert client.get("/livez/ping").status_code == 200
        assert client.get("/livez/db").status_code == 404
        assert client.get("/healthz/db").status_code == 503

    def test_reason_exposed(self) -> None:
        """With expose_check_errors the failure reason is in the body."""
        lifecycle = Lifecycle(Config(expose_check_errors=True), clock=fake_clock())
        lifecycle.readiness_check("db")(lambda: False)
        body = Client(GracefulMiddleware(hello, lifecycle)).get("/readyz").get_data(as_text=True)
        assert "[-]db failed: returned False\n" in body

    @pytest.mark.parametrize("path", ["/", "/readyzz", "/READYZ", "/api/readyz", "/livez.json", "//readyz", "/xyz/"])
    def test_other_paths_go_to_the_app(self, lifecycle: Lifecycle, path: str) -> None:
        """Only the exact health paths are answered here; the rest reach the app."""
        response = Client(GracefulMiddleware(hello, lifecycle)).get(path)
        assert response.get_data() == b"hello"

    def test_hung_check_answers_on_time(self) -> None:
        """A hung readiness check is reported failed within a generous bound; the probe is not held."""
        gate = threading.Event()
        lifecycle = Lifecycle(Config())
        lifecycle.readiness_check("hang")(gate.wait)
        client = Client(GracefulMiddleware(hello, lifecycle, check_timeout=0.1))
        try:
            done = threading.Event()
            statuses: list[int] = []

            def probe() -> None:
                statuses.append(client.get("/readyz").status_code)
                done.set()

            threading.Thread(target=probe).start()
            assert done.wait(3.0)
            assert statuses == [503]
        finally:
            gate.set()

    def test_has_been_ready_fires_once(self, lifecycle: Lifecycle) -> None:
        """HasBeenReady fires at the first passing /readyz, once."""
        fired: list[str] = []
        lifecycle.subscribe(lambda name, at: fired.append(name))
        client = Client(GracefulMiddleware(hello, lifecycle))
        client.get("/livez")
        assert fired == []
        client.get("/readyz")
        client.get("/readyz")
        assert fired == ["HasBeenReady"]


class TestHealthIsNeverRejected:
    """Health paths are never rejected, counted or delayed."""

    def test_not_rejected_in_retry_after_mode(self) -> None:
        """After NotAcceptingNewRequests in retry-after mode, probes still answer."""
        lifecycle = retry_after_lifecycle()
        lifecycle.initiate_shutdown()
        lifecycle.stop_accepting()
        client = Client(GracefulMiddleware(hello, lifecycle))
        assert client.get("/livez").status_code == 200
        assert client.get("/readyz").status_code == 503

    def test_not_rejected_while_draining(self, lifecycle: Lifecycle) -> None:
        """Once the drain began (wait group closed), probes still answer."""
        lifecycle.in_flight.wait(0)
        assert Client(GracefulMiddleware(hello, lifecycle)).get("/livez").status_code == 200

    def test_not_limited_by_max_in_flight(self) -> None:
        """With every admission slot taken, probes still answer."""
        lifecycle = Lifecycle(Config(max_in_flight=1), clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle)
        _, held = call(mw)
        assert Client(mw).get("/livez").status_code == 200
        finish(held)

    def test_not_counted(self, lifecycle: Lifecycle) -> None:
        """A probe's response is not counted in flight."""
        _, result = call(GracefulMiddleware(hello, lifecycle), "/readyz")
        assert lifecycle.in_flight.count == 0
        finish(result)


class TestAdmission:
    """What new requests get during shutdown and when the admission limit is full."""

    def test_served_during_shutdown_delay(self, lifecycle: Lifecycle) -> None:
        """Between ShutdownInitiated and NotAcceptingNewRequests requests are served normally."""
        lifecycle.initiate_shutdown()
        assert Client(GracefulMiddleware(hello, lifecycle)).get("/").get_data() == b"hello"

    def test_retry_after_mode_gives_429(self) -> None:
        """In retry-after mode after NotAcceptingNewRequests a new request gets 429 + Retry-After."""
        lifecycle = retry_after_lifecycle(retry_after=7)
        app = Recorder(lifecycle)
        lifecycle.initiate_shutdown()
        lifecycle.stop_accepting()
        captured, result = call(GracefulMiddleware(app, lifecycle))
        assert captured.code == 429
        assert captured.header("Retry-After") == "7"
        assert captured.header("Content-Type") == "text/plain; charset=utf-8"
        assert b"shutting down" in finish(result)
        assert app.environ is None
        assert lifecycle.in_flight.count == 0

    def test_default_mode_still_serves_after_not_accepting(self, lifecycle: Lifecycle) -> None:
        """In default mode the server closes its listeners; requests already here are served."""
        lifecycle.initiate_shutdown()
        lifecycle.stop_accepting()
        assert Client(GracefulMiddleware(hello, lifecycle)).get("/").get_data() == b"hello"

    def test_race_with_drain_gives_503(self, lifecycle: Lifecycle) -> None:
        """A request that arrives after the drain began gets 503 + Retry-After: 1, uncounted."""
        app = Recorder(lifecycle)
        lifecycle.in_flight.wait(0)
        captured, result = call(GracefulMiddleware(app, lifecycle))
        assert captured.code == 503
        assert captured.header("Retry-After") == "1"
        finish(result)
        assert app.environ is None
        assert lifecycle.in_flight.count == 0

    def test_max_in_flight_full_gives_429_and_slot_comes_back(self) -> None:
        """A full max_in_flight answers 429 + Retry-After; the slot frees when the response closes."""
        lifecycle = Lifecycle(Config(max_in_flight=1), clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle)
        first_status, first = call(mw)
        assert first_status.code == 200
        refused, body = call(mw)
        assert refused.code == 429
        assert refused.header("Retry-After") == "1"
        assert b"Too many requests" in finish(body)
        finish(first)
        again, result = call(mw)
        assert again.code == 200
        finish(result)

    def test_slot_released_once_on_double_close(self) -> None:
        """Closing a response twice frees its slot once (a BoundedSemaphore would raise otherwise)."""
        lifecycle = Lifecycle(Config(max_in_flight=1), clock=fake_clock())
        _, result = call(GracefulMiddleware(hello, lifecycle))
        result.close()
        result.close()
        assert lifecycle.gate.admission.try_acquire()

    def test_slot_released_when_app_raises(self) -> None:
        """An app that raises gives its slot back and ends its count."""
        lifecycle = Lifecycle(Config(max_in_flight=1), clock=fake_clock())

        def broken(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            raise RuntimeError("boom")

        mw = GracefulMiddleware(broken, lifecycle)
        with pytest.raises(RuntimeError):
            call(mw)
        assert lifecycle.in_flight.count == 0
        assert lifecycle.gate.admission.try_acquire()

    def test_slot_released_on_drain_race(self) -> None:
        """A request refused by the drain does not keep its admission slot."""
        lifecycle = Lifecycle(Config(max_in_flight=1), clock=fake_clock())
        lifecycle.in_flight.wait(0)
        captured, result = call(GracefulMiddleware(hello, lifecycle))
        finish(result)
        assert captured.code == 503
        assert lifecycle.gate.admission.try_acquire()

    def test_limit_counts_streams_until_closed(self) -> None:
        """With max_in_flight on, a stream holds its slot and its count until close()."""
        lifecycle = Lifecycle(Config(max_in_flight=2), clock=fake_clock())
        mw = GracefulMiddleware(Recorder(lifecycle), lifecycle)
        _, result = call(mw)
        assert lifecycle.in_flight.count == 1
        finish(result)
        assert lifecycle.in_flight.count == 0

    def test_config_set_after_wrapping_is_in_force(self, lifecycle: Lifecycle) -> None:
        """A config given to the lifecycle after the middleware was built applies (read per request)."""
        mw = GracefulMiddleware(hello, lifecycle)
        finish(call(mw)[1])
        lifecycle.configure(Config(max_in_flight=1))
        _, held = call(mw)
        assert call(mw)[0].code == 429
        finish(held)

    def test_requests_served_before_the_stop_do_not_let_later_ones_skip_the_checks(self) -> None:
        """Requests before NotAcceptingNewRequests skip the checks; the first one after it is refused."""
        lifecycle = retry_after_lifecycle()
        mw = GracefulMiddleware(hello, lifecycle)
        assert [finish(call(mw)[1]) for _ in range(3)] == [b"hello"] * 3
        assert lifecycle.gate.unhindered
        lifecycle.initiate_shutdown()
        assert finish(call(mw)[1]) == b"hello"  # the delay: served
        lifecycle.stop_accepting()
        assert [call(mw)[0].code for _ in range(2)] == [429, 429]
        assert not lifecycle.gate.unhindered

    def test_limit_from_the_environment_applies_from_the_first_request(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A lifecycle whose config loads lazily (from GRACEFUL_*) limits from the very first request."""
        monkeypatch.setenv("GRACEFUL_MAX_IN_FLIGHT", "1")
        lifecycle = Lifecycle(clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle)
        _, held = call(mw)
        assert call(mw)[0].code == 429
        finish(held)
        assert lifecycle.gate.admission.limit == 1

    @pytest.mark.parametrize("state", ["retry-after", "draining", "full"])
    def test_no_hop_by_hop_headers(self, state: str) -> None:
        """Graceful's own refusals carry no Connection (or other hop-by-hop) header."""
        lifecycle = retry_after_lifecycle(max_in_flight=1)
        mw = GracefulMiddleware(hello, lifecycle)
        held = None
        if state == "retry-after":
            lifecycle.initiate_shutdown()
            lifecycle.stop_accepting()
        elif state == "draining":
            lifecycle.in_flight.wait(0)
        else:
            held = call(mw)[1]
        captured, result = call(mw)
        finish(result)
        assert captured.code in (429, 503)
        assert not {k.lower() for k, _ in captured.headers} & HOP_BY_HOP
        if held is not None:
            finish(held)

    def test_head_refusal_has_no_body(self) -> None:
        """A refused HEAD request gets the status and headers without a body."""
        lifecycle = retry_after_lifecycle()
        lifecycle.initiate_shutdown()
        lifecycle.stop_accepting()
        captured, result = call(GracefulMiddleware(hello, lifecycle), method="HEAD")
        assert captured.code == 429
        assert finish(result) == b""


class TestInFlight:
    """A request is in flight from the app call until its response's close()."""

    def test_counted_inside_the_app(self, lifecycle: Lifecycle) -> None:
        """The app already sees itself counted."""
        app = Recorder(lifecycle)
        finish(call(GracefulMiddleware(app, lifecycle))[1])
        assert app.count_in_app == 1

    def test_stream_counted_until_closed(self, lifecycle: Lifecycle) -> None:
        """A streamed response stays counted while it is iterated and until close()."""
        app = Recorder(lifecycle, chunks=3)
        _, result = call(GracefulMiddleware(app, lifecycle))
        assert lifecycle.in_flight.count == 1
        assert b"".join(result) == b"chunk0chunk1chunk2"
        assert app.count_in_body == [1, 1, 1]
        assert lifecycle.in_flight.count == 1
        result.close()
        assert lifecycle.in_flight.count == 0

    def test_drain_waits_for_the_stream(self, lifecycle: Lifecycle) -> None:
        """The drain is not done while a stream is open, and is once it is closed."""
        _, result = call(GracefulMiddleware(Recorder(lifecycle), lifecycle))
        assert not lifecycle.in_flight.wait(0)
        result.close()
        assert lifecycle.in_flight.wait(0)

    def test_app_raising_decrements(self, lifecycle: Lifecycle) -> None:
        """An app that raises still ends its count, and the error propagates."""

        def broken(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            raise KeyError("boom")

        with pytest.raises(KeyError):
            call(GracefulMiddleware(broken, lifecycle))
        assert lifecycle.in_flight.count == 0

    def test_body_raising_decrements_on_close(self, lifecycle: Lifecycle) -> None:
        """A body that raises mid-stream ends its count when the server closes it."""

        def failing_body() -> Iterator[bytes]:
            yield b"a"
            raise ValueError("mid-stream")

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            start_response("200 OK", [])
            return failing_body()

        _, result = call(GracefulMiddleware(app, lifecycle))
        with pytest.raises(ValueError):
            finish(result)
        assert lifecycle.in_flight.count == 0

    def test_close_called_once(self, lifecycle: Lifecycle) -> None:
        """The app iterable's close() runs exactly once, even when the server closes twice."""
        body = Closing()
        _, result = call(GracefulMiddleware(lambda e, s: (s("200 OK", []), body)[1], lifecycle))
        result.close()
        result.close()
        assert body.closes == 1
        assert lifecycle.in_flight.count == 0

    def test_close_raising_still_decrements(self, lifecycle: Lifecycle) -> None:
        """If the app's close() raises, the count still ends and the error propagates."""

        class BadClose(Closing):
            def close(self) -> None:
                raise OSError("close failed")

        _, result = call(GracefulMiddleware(lambda e, s: (s("200 OK", []), BadClose())[1], lifecycle))
        with pytest.raises(OSError):
            result.close()
        assert lifecycle.in_flight.count == 0

    def test_generator_closed(self, lifecycle: Lifecycle) -> None:
        """A generator body abandoned half-way is closed (its finally runs)."""
        app = Recorder(lifecycle, chunks=5)
        _, result = call(GracefulMiddleware(app, lifecycle))
        next(iter(result))
        result.close()
        assert app.closed == 1

    def test_list_response_keeps_len(self, lifecycle: Lifecycle) -> None:
        """A list response still has len() (wsgiref sets Content-Length from it) and closes once."""
        _, result = call(GracefulMiddleware(hello, lifecycle))
        assert len(result) == 1
        assert list(result) == [b"hello"]
        result.close()
        result.close()
        assert lifecycle.in_flight.count == 0

    def test_file_wrapper_returned_as_is(self, lifecycle: Lifecycle) -> None:
        """The server's own file_wrapper object comes back unwrapped (sendfile), and close() releases."""
        streams: list[io.BytesIO] = []

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            start_response("200 OK", [])
            streams.append(io.BytesIO(b"file body"))
            wrapped: Iterable[bytes] = environ["wsgi.file_wrapper"](streams[-1])
            return wrapped

        mw = GracefulMiddleware(app, lifecycle)
        for _ in range(2):  # the first response, and one after the middleware learnt the class
            environ = environ_for("/")
            environ["wsgi.file_wrapper"] = wsgiref.util.FileWrapper
            result = mw(environ, Captured())
            assert type(result) is wsgiref.util.FileWrapper
            assert lifecycle.in_flight.count == 1
            assert finish(result) == b"file body"
            result.close()
            assert streams[-1].closed
            assert lifecycle.in_flight.count == 0

    def test_other_responses_after_a_file_wrapper(self, lifecycle: Lifecycle) -> None:
        """Generators and lists after a file_wrapper response are wrapped and released as usual."""
        app = Recorder(lifecycle)
        mw = GracefulMiddleware(app, lifecycle)
        for _ in range(2):
            environ = environ_for("/")
            environ["wsgi.file_wrapper"] = wsgiref.util.FileWrapper
            assert finish(mw(environ, Captured())) == b"chunk0chunk1"
        assert lifecycle.in_flight.count == 0
        assert app.closed == 2

    def test_file_wrapper_with_slots_is_wrapped(self, lifecycle: Lifecycle) -> None:
        """A file_wrapper class that refuses a new close attribute is wrapped like any iterable."""

        class Slotted:
            __slots__ = ("chunks",)

            def __init__(self, chunks: list[bytes]) -> None:
                self.chunks = chunks

            def __iter__(self) -> Iterator[bytes]:
                return iter(self.chunks)

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            start_response("200 OK", [])
            return Slotted([b"a"])

        environ = environ_for("/")
        environ["wsgi.file_wrapper"] = Slotted
        result = GracefulMiddleware(app, lifecycle)(environ, Captured())
        assert type(result) is not Slotted
        assert finish(result) == b"a"
        assert lifecycle.in_flight.count == 0

    def test_werkzeug_response_is_returned_as_is_and_counted_until_its_close_callbacks_ran(
        self, lifecycle: Lifecycle
    ) -> None:
        """A werkzeug response (every Flask one) is not wrapped: the count joins its close callbacks, last."""
        seen: list[str] = []
        returned: list[object] = []

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            response = Response(b"werkzeug")
            response.call_on_close(lambda: seen.append(f"app's close, count {lifecycle.in_flight.count}"))
            returned.append(response(environ, start_response))
            return returned[-1]  # type: ignore[return-value]

        _, result = call(GracefulMiddleware(app, lifecycle))
        assert type(result) is ClosingIterator
        assert result is returned[0]
        assert lifecycle.in_flight.count == 1
        assert finish(result) == b"werkzeug"
        assert seen == ["app's close, count 1"]
        assert lifecycle.in_flight.count == 0

    def test_werkzeug_response_closed_twice_runs_its_callbacks_and_ends_its_count_once(
        self, lifecycle: Lifecycle
    ) -> None:
        """A second close() of a werkzeug response runs nothing: no app callback, no other request's count."""
        closes: list[int] = []

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            response = Response(b"x")
            response.call_on_close(lambda: closes.append(1))
            return response(environ, start_response)  # type: ignore[no-any-return]

        mw = GracefulMiddleware(app, lifecycle)
        _, first = call(mw)
        _, second = call(mw)
        assert lifecycle.in_flight.count == 2
        first.close()
        first.close()
        assert (closes, lifecycle.in_flight.count) == ([1], 1)
        second.close()
        assert (closes, lifecycle.in_flight.count) == ([1, 1], 0)

    def test_werkzeug_close_callback_that_raises_keeps_the_request_counted(self, lifecycle: Lifecycle) -> None:
        """Werkzeug stops at a close callback that raises, before ours: the drain then waits out its timeout."""

        def fail() -> None:
            raise OSError("close failed")

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            response = Response(b"x")
            response.call_on_close(fail)
            return response(environ, start_response)  # type: ignore[no-any-return]

        _, result = call(GracefulMiddleware(app, lifecycle))
        with pytest.raises(OSError, match="close failed"):
            finish(result)
        assert lifecycle.in_flight.count == 1
        assert lifecycle.in_flight.wait(0) is False

    def test_werkzeug_keeps_close_callbacks_in_a_list(self) -> None:
        """The werkzeug installed here has ClosingIterator._callbacks as a list: the path above is in use.

        Were a werkzeug release to change that, the middleware would wrap its
        responses like any other (and this test would say so).
        """
        assert _werkzeug_closing_iterator() is ClosingIterator

    def test_a_werkzeug_whose_closing_iterator_copies_its_callbacks_gets_the_wrapper(
        self, lifecycle: Lifecycle, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A ClosingIterator that never runs appended callbacks is found out at the first response.

        Its responses get the generic wrapper, so the count still ends at
        close(); one warning names the werkzeug version, however many
        responses follow.
        """
        closed: list[int] = []

        class CopyingClosingIterator:
            """A werkzeug release that copies its callbacks when built: later appends never run."""

            def __init__(self, iterable: Iterable[bytes], callbacks: list[Callable[[], object]] | None = None) -> None:
                self._iterable = iter(iterable)
                self._callbacks: list[Callable[[], object]] = list(callbacks or [])
                self._to_run = tuple(self._callbacks)

            def __iter__(self) -> Iterator[bytes]:
                return self._iterable

            def close(self) -> None:
                for callback in self._to_run:
                    callback()

        fake = types.ModuleType("werkzeug.wsgi")
        fake.ClosingIterator = CopyingClosingIterator  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "werkzeug.wsgi", fake)

        def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            start_response("200 OK", [])
            return CopyingClosingIterator([b"x"], [lambda: closed.append(1)])

        mw = GracefulMiddleware(app, lifecycle)
        with caplog.at_level(logging.WARNING, logger="graceful.wsgi.middleware"):
            results = [call(mw)[1] for _ in range(3)]
        assert all(type(result) is not CopyingClosingIterator for result in results)
        assert lifecycle.in_flight.count == 3
        assert [finish(result) for result in results] == [b"x"] * 3
        assert closed == [1, 1, 1]
        assert lifecycle.in_flight.count == 0
        warnings = [r.getMessage() for r in caplog.records if "ClosingIterator" in r.getMessage()]
        assert len(warnings) == 1
        assert metadata.version("werkzeug") in warnings[0] and "ran 0 times" in warnings[0]

    def test_werkzeug_is_not_loaded_by_graceful(self) -> None:
        """graceful looks werkzeug's ClosingIterator up, never imports it: a plain app's worker goes without."""
        code = (
            "import sys, graceful, graceful.conf, graceful.wsgi.middleware\n"
            "print(sorted(name for name in sys.modules if name.split('.')[0] == 'werkzeug'))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.strip() == "[]"

    def test_werkzeug_response_after_a_plain_first_response_is_still_joined(self, lifecycle: Lifecycle) -> None:
        """Classes are remembered at the first non-list response; a werkzeug response later is joined, not wrapped."""
        mw = GracefulMiddleware(body_or_werkzeug, lifecycle)
        first = finish(call(mw, "/plain")[1])
        _, second = call(mw, "/werkzeug")
        assert (first, type(second)) == (b"x", ClosingIterator)
        assert finish(second) == b"werkzeug"
        assert lifecycle.in_flight.count == 0

    def test_werkzeug_client_round_trip(self, lifecycle: Lifecycle) -> None:
        """Through werkzeug's test client the request counts until the client closes the response."""
        client = Client(GracefulMiddleware(Recorder(lifecycle), lifecycle))
        response = client.get("/")
        assert response.get_data() == b"chunk0chunk1"
        assert lifecycle.in_flight.count == 1
        response.close()
        assert lifecycle.in_flight.count == 0
        assert client.get("/", buffered=True).status_code == 200
        assert lifecycle.in_flight.count == 0


class TestShutdownStatistics:
    """What the middleware counts: arrivals after ShutdownInitiated by phase, refusals by reason, nothing before."""

    def test_nothing_is_counted_before_the_shutdown(self, lifecycle: Lifecycle) -> None:
        """Requests before ShutdownInitiated take the unhindered path and count no arrival."""
        mw = GracefulMiddleware(hello, lifecycle)
        for _ in range(3):
            finish(call(mw)[1])
        assert lifecycle.gate.unhindered
        assert lifecycle.stats.totals() == (0, 0)

    def test_arrivals_by_phase(self, lifecycle: Lifecycle) -> None:
        """Two requests during the delay, one after NotAcceptingNewRequests; probes are not counted."""
        mw = GracefulMiddleware(hello, lifecycle)
        finish(call(mw)[1])
        lifecycle.initiate_shutdown()
        finish(call(mw)[1])
        finish(call(mw)[1])
        finish(call(mw, "/readyz")[1])
        lifecycle.stop_accepting()
        finish(call(mw)[1])
        assert lifecycle.stats.arrivals() == {"delay": 2, "draining": 1}
        assert not lifecycle.gate.unhindered

    def test_retry_after_refusals_are_counted_as_shutting_down(self) -> None:
        """In retry-after mode each 429 after NotAcceptingNewRequests is a shutting_down rejection and an arrival."""
        lifecycle = retry_after_lifecycle()
        mw = GracefulMiddleware(hello, lifecycle)
        lifecycle.initiate_shutdown()
        lifecycle.stop_accepting()
        assert [call(mw)[0].code for _ in range(3)] == [429] * 3
        rejected = {"shutting_down": 3, "draining": 0, "max_in_flight": 0, "refused_stream": 0}
        assert lifecycle.stats.rejections() == rejected
        assert lifecycle.stats.arrivals() == {"delay": 0, "draining": 3}

    def test_a_request_that_races_the_drain_is_counted_as_draining(self, lifecycle: Lifecycle) -> None:
        """The 503 of a request arriving once the drain began is a draining rejection, with or without a limit."""
        for lc in (lifecycle, Lifecycle(Config(max_in_flight=2), clock=fake_clock())):
            mw = GracefulMiddleware(hello, lc)
            lc.in_flight.wait(0)
            assert call(mw)[0].code == 503
            assert lc.stats.rejections()["draining"] == 1

    def test_a_full_admission_limit_is_counted_as_max_in_flight(self) -> None:
        """A 429 because every max_in_flight slot is taken is a max_in_flight rejection."""
        lifecycle = Lifecycle(Config(max_in_flight=1), clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle)
        _, held = call(mw)
        assert call(mw)[0].code == 429
        finish(held)
        assert lifecycle.stats.rejections()["max_in_flight"] == 1
        assert lifecycle.stats.arrivals() == {"delay": 0, "draining": 0}

    def test_late_traffic_is_counted_until_the_end_of_the_delay(self) -> None:
        """Requests through the middleware in the last tenth of the delay are late; earlier ones are not."""
        lifecycle = Lifecycle(Config(shutdown_delay=10, grace_period=40), clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle)
        lifecycle.initiate_shutdown()
        clock = lifecycle.clock
        assert isinstance(clock, FakeClock)
        for _ in range(10):  # one a second, the last at 9.5 s
            clock.advance(0.95)
            finish(call(mw)[1])
        late = lifecycle.stats.late_traffic()
        assert late is not None and late.count == 1 and late.last_arrival == pytest.approx(9.5)


class TestMetricsOnTheAppPort:
    """``/metrics`` on the app port: only with metrics_on_app_port, never counted, 404 without prometheus_client."""

    def test_not_routed_by_default(self, lifecycle: Lifecycle) -> None:
        """Without the setting, /metrics is the app's path."""
        mw = GracefulMiddleware(hello, lifecycle)
        assert finish(call(mw, "/metrics")[1]) == b"hello"

    def test_answered_with_the_setting(self) -> None:
        """With metrics_on_app_port, /metrics answers Prometheus' text format; other paths still reach the app."""
        lifecycle = Lifecycle(Config(metrics_on_app_port=True), clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle)
        captured, result = call(mw, "/metrics")
        body = finish(result).decode()
        assert captured.code == 200
        assert captured.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
        assert "graceful_requests_in_flight 0.0" in body
        assert finish(call(mw, "/metrics/")[1]) == b"hello"
        assert finish(call(mw, "/readyz")[1]) == b"ok"
        assert finish(call(mw, "/api/items")[1]) == b"hello"
        assert call(mw, "/metrics", method="POST")[0].code == 405
        lifecycle.initiate_shutdown()
        finish(call(mw, "/metrics")[1])
        assert lifecycle.stats.totals() == (0, 0)

    def test_nested_middlewares_answer_it_once(self) -> None:
        """Wrapped twice with one lifecycle (a Gunicorn worker around a Flask app's), /metrics is answered inside."""
        lifecycle = Lifecycle(Config(metrics_on_app_port=True), clock=fake_clock())
        inner = GracefulMiddleware(hello, lifecycle)
        outer = GracefulMiddleware(inner, lifecycle)
        captured, result = call(outer, "/metrics")
        assert captured.code == 200 and b"graceful_requests_in_flight" in finish(result)
        assert finish(call(outer, "/")[1]) == b"hello"
        lifecycle.initiate_shutdown()
        finish(call(outer, "/")[1])
        assert lifecycle.stats.arrivals()["delay"] == 1  # counted once, by the inner one

    def test_a_request_already_handled_outside_passes_through(self) -> None:
        """With the route on, a request an outer middleware of the lifecycle handles goes straight to the app."""
        lifecycle = Lifecycle(Config(metrics_on_app_port=True), clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle)
        environ = environ_for("/metrics")
        environ[LIFECYCLE_KEY] = lifecycle
        assert b"".join(mw(environ, Captured())) == b"hello"

    def test_404_and_one_log_line_without_prometheus_client(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Without prometheus_client, /metrics is a 404 saying how to install it, logged once."""
        monkeypatch.setitem(sys.modules, "prometheus_client", None)
        monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
        monkeypatch.setattr("graceful.http.probes._missing_library_logged", [])
        lifecycle = Lifecycle(Config(metrics_on_app_port=True), clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle)
        answers = [call(mw, "/metrics") for _ in range(2)]
        assert [captured.code for captured, _ in answers] == [404, 404]
        assert b"pip install 'graceful-wsgi[prometheus]'" in finish(answers[0][1])
        logged = [r.getMessage() for r in caplog.records if "/metrics answers 404" in r.getMessage()]
        assert logged == [
            "graceful: /metrics answers 404: prometheus_client is not installed:"
            " pip install 'graceful-wsgi[prometheus]'"
        ]


class TestNesting:
    """Two middlewares of one lifecycle handle a request once; the innermost one's options apply."""

    def test_outer_finds_inner_and_passes_through(self, lifecycle: Lifecycle) -> None:
        """An outer middleware that finds one of its lifecycle inside passes requests to it untouched."""
        inner = GracefulMiddleware(Recorder(lifecycle), lifecycle, long_running=path_prefixes("/stream"))
        outer = GracefulMiddleware(inner, lifecycle)
        assert outer.inner is inner
        _, result = call(outer, "/stream")
        assert lifecycle.in_flight.count == 0  # the inner one's long_running applied
        finish(result)

    def test_found_through_wsgi_app_and_app_attributes(self, lifecycle: Lifecycle) -> None:
        """The inner middleware is found through a Flask-style wsgi_app and a middleware's app."""

        class Proxy:
            def __init__(self, app: Any) -> None:
                self.app = app

            def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
                result: Iterable[bytes] = self.app(environ, start_response)
                return result

        class FlaskLike:
            def __init__(self, wsgi_app: Any) -> None:
                self.wsgi_app = wsgi_app

            def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
                result: Iterable[bytes] = self.wsgi_app(environ, start_response)
                return result

        inner = GracefulMiddleware(hello, lifecycle)
        assert GracefulMiddleware(FlaskLike(Proxy(inner)), lifecycle).inner is inner

    def test_found_through_a_bound_call(self, lifecycle: Lifecycle) -> None:
        """find_middleware sees a middleware installed as its bound __call__."""
        inner = GracefulMiddleware(hello, lifecycle)
        assert find_middleware(inner.__call__, lifecycle) is inner
        assert find_middleware(hello, lifecycle) is None

    def test_other_lifecycle_is_not_passed_through(self, lifecycle: Lifecycle) -> None:
        """A middleware of another lifecycle inside does not make the outer one transparent."""
        inner = GracefulMiddleware(hello, Lifecycle(Config(), clock=fake_clock()))
        assert GracefulMiddleware(inner, lifecycle).inner is None
        assert GracefulMiddleware(hello, lifecycle).inner is None

    def test_any_lifecycle_when_none_is_given(self, lifecycle: Lifecycle) -> None:
        """find_middleware(app) with no lifecycle returns the first middleware, of whichever lifecycle."""
        other = GracefulMiddleware(hello, Lifecycle(Config(), clock=fake_clock()))
        assert find_middleware(other, lifecycle) is None
        assert find_middleware(other) is other
        assert find_middleware(GracefulMiddleware(other, lifecycle)).lifecycle is lifecycle  # the outer one, first
        assert find_middleware(hello) is None

    def test_hidden_inner_counts_once(self, lifecycle: Lifecycle) -> None:
        """An inner middleware the outer cannot see passes through at request time: counted once."""
        app = Recorder(lifecycle)
        inner = GracefulMiddleware(app, lifecycle)
        outer = GracefulMiddleware(lambda environ, start_response: inner(environ, start_response), lifecycle)
        assert outer.inner is None
        _, result = call(outer)
        assert app.count_in_app == 1
        finish(result)
        assert lifecycle.in_flight.count == 0

    def test_two_lifecycles_count_separately(self, lifecycle: Lifecycle) -> None:
        """Middlewares of two lifecycles each count, and the app sees the inner one."""
        outer = Lifecycle(Config(), clock=fake_clock())
        app = Recorder(lifecycle)
        _, result = call(GracefulMiddleware(GracefulMiddleware(app, lifecycle), outer))
        assert (outer.in_flight.count, lifecycle.in_flight.count) == (1, 1)
        assert app.environ is not None and app.environ[LIFECYCLE_KEY] is lifecycle
        finish(result)
        assert (outer.in_flight.count, lifecycle.in_flight.count) == (0, 0)


class TestLongRunning:
    """Long-running requests: not counted, not limited, told when to stop."""

    def test_not_counted(self, lifecycle: Lifecycle) -> None:
        """A long-running request is not in the in-flight count."""
        app = Recorder(lifecycle)
        mw = GracefulMiddleware(app, lifecycle, long_running=path_prefixes("/stream"))
        _, result = call(mw, "/stream/events")
        assert app.count_in_app == 0
        assert lifecycle.in_flight.count == 0
        finish(result)

    def test_not_limited(self) -> None:
        """A long-running request is served even with every admission slot taken."""
        lifecycle = Lifecycle(Config(max_in_flight=1), clock=fake_clock())
        mw = GracefulMiddleware(hello, lifecycle, long_running=path_prefixes("/ws"))
        _, held = call(mw)
        captured, result = call(mw, "/ws")
        assert captured.code == 200
        finish(result)
        finish(held)

    def test_environ_event_set_at_not_accepting(self, lifecycle: Lifecycle) -> None:
        """environ['graceful.shutting_down'] is the Event that NotAcceptingNewRequests sets."""
        app = Recorder(lifecycle)
        finish(call(GracefulMiddleware(app, lifecycle, long_running=path_prefixes("/stream")), "/stream")[1])
        assert app.environ is not None
        event = app.environ[SHUTTING_DOWN_KEY]
        assert isinstance(event, threading.Event)
        assert app.environ[LIFECYCLE_KEY] is lifecycle
        lifecycle.initiate_shutdown()
        assert not event.is_set()
        lifecycle.stop_accepting()
        assert event.is_set()

    def test_every_request_gets_the_keys(self, lifecycle: Lifecycle) -> None:
        """Ordinary requests find both environ keys too."""
        app = Recorder(lifecycle)
        finish(call(GracefulMiddleware(app, lifecycle), "/")[1])
        assert app.environ is not None
        assert app.environ[SHUTTING_DOWN_KEY] is lifecycle.not_accepting_new_requests.event
        assert app.environ[LIFECYCLE_KEY] is lifecycle

    def test_renewed_event_reaches_requests_of_a_middleware_made_before(self, lifecycle: Lifecycle) -> None:
        """After renew_after_patch() (a gevent worker), a middleware made earlier hands out the new event."""
        app = Recorder(lifecycle)
        middleware = GracefulMiddleware(app, lifecycle)
        old = lifecycle.not_accepting_new_requests.event
        lifecycle.renew_after_patch()
        finish(call(middleware, "/")[1])
        assert app.environ is not None
        assert app.environ[SHUTTING_DOWN_KEY] is lifecycle.not_accepting_new_requests.event is not old

    def test_refused_in_retry_after_mode(self) -> None:
        """A new long-running request after NotAcceptingNewRequests in retry-after mode gets 429."""
        lifecycle = retry_after_lifecycle()
        lifecycle.initiate_shutdown()
        lifecycle.stop_accepting()
        mw = GracefulMiddleware(hello, lifecycle, long_running=path_prefixes("/stream"))
        assert call(mw, "/stream")[0].code == 429

    def test_served_while_draining(self, lifecycle: Lifecycle) -> None:
        """An uncounted request is not refused by the drain."""
        lifecycle.in_flight.wait(0)
        mw = GracefulMiddleware(hello, lifecycle, long_running=path_prefixes("/stream"))
        assert call(mw, "/stream")[0].code == 200

    def test_predicate_raising_counts_as_usual(self, lifecycle: Lifecycle, caplog: pytest.LogCaptureFixture) -> None:
        """A long_running predicate that raises is logged and the request counted as usual."""

        def broken(environ: WSGIEnvironment) -> bool:
            raise RuntimeError("bad predicate")

        app = Recorder(lifecycle)
        with caplog.at_level(logging.ERROR, logger="graceful.wsgi.middleware"):
            finish(call(GracefulMiddleware(app, lifecycle, long_running=broken))[1])
        assert app.count_in_app == 1
        assert "long_running predicate raised" in caplog.text


class TestPathPrefixes:
    """path_prefixes builds a predicate matching whole path segments."""

    @pytest.mark.parametrize(
        ("path", "expected"),
        [
            ("/stream", True),
            ("/stream/", True),
            ("/stream/a/b", True),
            ("/ws", True),
            ("/streams", False),
            ("/", False),
            ("/api/stream", False),
        ],
    )
    def test_matching(self, path: str, expected: bool) -> None:
        """A path matches when it is a prefix or lies under one."""
        assert path_prefixes("/stream", "/ws/")({"PATH_INFO": path}) is expected

    def test_missing_or_odd_path_does_not_match(self) -> None:
        """A missing or non-string PATH_INFO matches nothing and does not raise."""
        predicate = path_prefixes("/stream")
        assert predicate({}) is False
        assert predicate({"PATH_INFO": None}) is False

    def test_root_matches_everything(self) -> None:
        """The prefix '/' matches every path."""
        assert path_prefixes("/")({"PATH_INFO": "/anything"})

    @pytest.mark.parametrize("prefixes", [(), ("stream",), ("",), (b"/stream",)])
    def test_bad_prefixes(self, prefixes: tuple[Any, ...]) -> None:
        """No prefix, or one that is not a string starting with '/', is refused."""
        with pytest.raises(ValueError):
            path_prefixes(*prefixes)


class TestDefaults:
    """Construction defaults."""

    def test_default_lifecycle(self) -> None:
        """Without a lifecycle the middleware uses graceful.default_lifecycle."""
        assert GracefulMiddleware(hello).lifecycle is graceful.default_lifecycle

    def test_bad_check_timeout(self, lifecycle: Lifecycle) -> None:
        """A check_timeout of 0 is refused at construction."""
        with pytest.raises(ValueError):
            GracefulMiddleware(hello, lifecycle, check_timeout=0)


STATUS_LINE = re.compile(r"^[1-5]\d\d [^\r\n]+$")
HEALTH_PATHS = ["/livez", "/readyz", "/healthz", "/readyz/ping", "/readyz/shutdown", "/readyz/", "/livez/x"]
paths = st.one_of(
    st.sampled_from([*HEALTH_PATHS, "/", "", "/readyz%2F", "/ready%7A", "/%E9", "/readyz/\xe9", "/readyz/%ZZ"]),
    st.text(max_size=40),
    st.text(max_size=20).map(lambda name: "/readyz/" + name),
    st.binary(max_size=30).map(lambda raw: raw.decode("latin-1")),
)
methods = st.one_of(st.sampled_from(["GET", "HEAD", "POST", "OPTIONS", "get", "", "BREW"]), st.text(max_size=12))
queries = st.one_of(
    st.sampled_from(["", "verbose", "exclude=ping&verbose", "exclude", "%", "&&=&", "exclude=%zz&exclude=%E9"]),
    st.text(max_size=60),
    st.lists(st.sampled_from(["verbose", "exclude=ping", "exclude=nope", "exclude=", "x=%"]), max_size=8).map("&".join),
)
environs = st.fixed_dictionaries(
    {},
    optional={
        "PATH_INFO": paths,
        "REQUEST_METHOD": methods,
        "QUERY_STRING": st.one_of(queries, st.none(), st.integers()),
        "SCRIPT_NAME": st.text(max_size=10),
    },
)
states = st.sampled_from(["serving", "shutting down", "retry-after", "draining", "full"])


class TestFuzz:
    """Bad input never raises out of the middleware."""

    @settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(environ=environs, state=states, failing=st.booleans())
    def test_any_environ_gives_a_valid_response(self, environ: dict[str, Any], state: str, failing: bool) -> None:
        """Any environ, in any lifecycle state, gives a valid status, valid headers and a bytes body."""
        lifecycle = Lifecycle(Config(send_retry_after=True, max_in_flight=1), clock=fake_clock())
        lifecycle.readiness_check("db")(lambda: not failing)
        mw = GracefulMiddleware(hello, lifecycle)
        if state == "shutting down":
            lifecycle.initiate_shutdown()
        elif state == "retry-after":
            lifecycle.initiate_shutdown()
            lifecycle.stop_accepting()
        elif state == "draining":
            lifecycle.in_flight.wait(0)
        elif state == "full":
            assert lifecycle.gate.admission.try_acquire()
        captured = Captured()
        result = mw(environ, captured)
        body = finish(result)
        assert captured.status is not None and STATUS_LINE.match(captured.status)
        for name, value in captured.headers:
            assert isinstance(name, str) and isinstance(value, str)
            name.encode("latin-1")
            value.encode("latin-1")
            assert name.lower() not in HOP_BY_HOP
        assert isinstance(body, bytes)
        assert lifecycle.in_flight.count == 0

    @pytest.mark.parametrize("path", ["/readyz", "/livez/ping", "/"])
    def test_huge_query_string(self, lifecycle: Lifecycle, path: str) -> None:
        """A megabyte of query string is answered, not raised on."""
        query = "exclude=" + "x" * 500_000 + "&" + "&".join(["verbose"] * 50_000)
        captured = Captured()
        finish(GracefulMiddleware(hello, lifecycle)(environ_for(path, query=query), captured))
        assert captured.code in (200, 404)

    def test_missing_path_info(self, lifecycle: Lifecycle) -> None:
        """An environ without PATH_INFO goes to the app."""
        captured = Captured()
        assert finish(GracefulMiddleware(hello, lifecycle)({}, captured)) == b"hello"

    @pytest.mark.parametrize("path_info", [None, 42, b"/readyz", ["/readyz"]])
    def test_non_string_path_info(self, lifecycle: Lifecycle, path_info: object) -> None:
        """A PATH_INFO that is no string (a server bug) is no health path and does not raise here."""
        captured = Captured()
        assert finish(GracefulMiddleware(hello, lifecycle)({"PATH_INFO": path_info}, captured)) == b"hello"

    def test_health_internal_error_is_a_500(
        self, lifecycle: Lifecycle, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Should answering a probe itself fail, the probe gets a logged 500 instead of an exception."""
        mw = GracefulMiddleware(hello, lifecycle)

        def broken(*args: object) -> None:
            raise RuntimeError("bug")

        monkeypatch.setattr(mw.health, "respond", broken)
        captured = Captured()
        with caplog.at_level(logging.ERROR, logger="graceful.wsgi.middleware"):
            finish(mw(environ_for("/readyz"), captured))
        assert captured.code == 500
        assert "health endpoint" in caplog.text
