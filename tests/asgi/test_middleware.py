"""Tests for graceful.asgi: the middleware, long-lived goodbyes and the lifespan gate, driven in-process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, MutableMapping
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import graceful
from graceful.asgi import GoneAway, GracefulASGIMiddleware, goodbyes_of, has_asgi_middleware, is_asgi_app
from graceful.asgi.lifespan import LIFESPAN_CHECK
from graceful.asgi.long_lived import GOING_AWAY
from graceful.asgi.middleware import find_asgi_middleware
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.http.health import HealthChecks

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 10))


async def settle() -> None:
    """Let every task on the loop run until it waits on something (passes of the loop, no sleep)."""
    for _ in range(20):
        await asyncio.sleep(0)


def http_scope(
    path: str = "/", method: str = "GET", headers: Iterable[tuple[bytes, bytes]] = (), http_version: str = "1.1"
) -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": http_version,
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": list(headers),
    }


def ws_scope(path: str = "/ws") -> Scope:
    return {"type": "websocket", "path": path, "headers": [], "query_string": b"", "subprotocols": []}


class Peer:
    """The server's side of one connection: what the app receives, and what it sent."""

    def __init__(self, *messages: Message) -> None:
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        for message in messages:
            self.inbox.put_nowait(message)
        self.sent: list[Message] = []
        self.gate: asyncio.Event | None = None  # when set, send waits for it (a slow client)

    async def receive(self) -> Message:
        return await self.inbox.get()

    async def send(self, message: Message) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append(message)

    def types(self) -> list[str]:
        return [m["type"] for m in self.sent]

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def request() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def hello(
    scope: Scope, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]
) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def lifecycle(**settings: Any) -> Lifecycle:
    settings.setdefault("shutdown_delay", 2.0)
    return Lifecycle(Config(**settings))


async def call(middleware: GracefulASGIMiddleware, scope: Scope, peer: Peer | None = None) -> Peer:
    peer = peer or Peer(request())
    await middleware(scope, peer.receive, peer.send)
    return peer


class TestHealthEndpoints:
    def test_readyz_answers_ok_then_503_from_shutdown_initiated(self) -> None:
        """/readyz is 200 ``ok`` with graceful's headers, 503 once ShutdownInitiated fired; the app never sees it."""
        lc = lifecycle()
        seen: list[str] = []

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            seen.append(scope["path"])
            await hello(scope, receive, send)

        middleware = GracefulASGIMiddleware(app, lc)
        before = run(call(middleware, http_scope("/readyz")))
        assert (before.status, before.body) == (200, b"ok")
        assert before.headers()[b"cache-control"] == b"no-store"
        assert before.headers()[b"content-type"] == b"text/plain; charset=utf-8"
        lc.shutdown_initiated.fire()
        after = run(call(middleware, http_scope("/readyz")))
        assert after.status == 503
        assert b"[-]shutdown failed" in after.body
        assert run(call(middleware, http_scope("/livez"))).status == 200
        assert seen == []

    def test_head_has_no_body_and_post_is_405(self) -> None:
        """HEAD on a health path has no body; other methods get 405 with Allow: GET, HEAD."""
        middleware = GracefulASGIMiddleware(hello, lifecycle())
        head = run(call(middleware, http_scope("/livez", method="HEAD")))
        assert (head.status, head.body) == (200, b"")
        post = run(call(middleware, http_scope("/livez", method="POST")))
        assert post.status == 405
        assert post.headers()[b"allow"] == b"GET, HEAD"

    def test_per_check_path_and_unknown_check(self) -> None:
        """/readyz/<check> answers that check alone; an unknown check is 404."""
        middleware = GracefulASGIMiddleware(hello, lifecycle())
        assert run(call(middleware, http_scope("/readyz/ping"))).status == 200
        assert run(call(middleware, http_scope("/readyz/nothing"))).status == 404

    def test_metrics_go_to_the_app_unless_on_the_app_port(self) -> None:
        """/metrics is the app's own path unless metrics_on_app_port is set."""
        peer = run(call(GracefulASGIMiddleware(hello, lifecycle()), http_scope("/metrics")))
        assert peer.body == b"hello"


class TestInFlight:
    def test_a_request_is_counted_from_its_scope_until_the_app_returns(self) -> None:
        """The in-flight count includes the request while its app runs, and not after."""
        lc = lifecycle()
        counts: list[int] = []

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            counts.append(lc.in_flight.count)
            await hello(scope, receive, send)

        peer = run(call(GracefulASGIMiddleware(app, lc), http_scope()))
        assert peer.body == b"hello"
        assert counts == [1]
        assert lc.in_flight.count == 0

    def test_an_app_that_raises_ends_its_count_and_the_error_propagates(self) -> None:
        """An exception from the app propagates and leaves nothing counted."""
        lc = lifecycle()

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            run(call(GracefulASGIMiddleware(app, lc), http_scope()))
        assert lc.in_flight.count == 0

    def test_a_request_after_the_drain_began_gets_503(self) -> None:
        """Once the drain waits, a new request is refused with 503 Retry-After: 1 and counted as draining."""
        lc = lifecycle()
        lc.in_flight.wait(0)
        peer = run(call(GracefulASGIMiddleware(hello, lc), http_scope()))
        assert peer.status == 503
        assert peer.headers()[b"retry-after"] == b"1"
        assert lc.stats.rejections()["draining"] == 1

    def test_max_in_flight_refuses_the_request_over_the_limit_with_429(self) -> None:
        """With max_in_flight 1, a second concurrent request gets 429 Retry-After: 1."""
        lc = lifecycle(max_in_flight=1)
        release = asyncio.Event

        async def scenario() -> tuple[Peer, Peer]:
            hold = release()

            async def app(scope: Scope, receive: Any, send: Any) -> None:
                await hold.wait()
                await hello(scope, receive, send)

            middleware = GracefulASGIMiddleware(app, lc)
            first = asyncio.ensure_future(call(middleware, http_scope()))
            await asyncio.sleep(0)
            second = await call(middleware, http_scope())
            hold.set()
            return await first, second

        first, second = run(scenario())
        assert first.status == 200
        assert (second.status, second.headers()[b"retry-after"]) == (429, b"1")
        assert lc.in_flight.count == 0


class TestDuringShutdown:
    def test_responses_get_connection_close_on_http_1_1_only(self) -> None:
        """From ShutdownInitiated an HTTP/1.1 response gets Connection: close; HTTP/2 gets none."""
        lc = lifecycle()
        middleware = GracefulASGIMiddleware(hello, lc)
        assert b"connection" not in run(call(middleware, http_scope())).headers()
        lc.shutdown_initiated.fire()
        assert run(call(middleware, http_scope())).headers()[b"connection"] == b"close"
        assert b"connection" not in run(call(middleware, http_scope(http_version="2"))).headers()

    def test_a_process_stop_closes_connections_without_a_shutdown(self) -> None:
        """The gate's close_connections (a worker recycled or HUP'd): Connection: close, no arrival counted."""
        lc = lifecycle()
        middleware = GracefulASGIMiddleware(hello, lc)
        assert b"connection" not in run(call(middleware, http_scope())).headers()
        lc.gate.close_connections()
        assert run(call(middleware, http_scope())).headers()[b"connection"] == b"close"
        assert run(call(middleware, http_scope("/readyz"))).headers()[b"connection"] == b"close"
        assert b"connection" not in run(call(middleware, http_scope(http_version="2"))).headers()
        assert lc.in_flight.count == 0 and sum(lc.stats.arrivals().values()) == 0

    def test_the_apps_message_is_not_changed(self) -> None:
        """Connection: close is added to a copy: the app's own message keeps its headers."""
        lc = lifecycle()
        start: Message = {"type": "http.response.start", "status": 200, "headers": [(b"x", b"1")]}

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            await send(start)
            await send({"type": "http.response.body", "body": b""})

        lc.shutdown_initiated.fire()
        run(call(GracefulASGIMiddleware(app, lc), http_scope()))
        assert start["headers"] == [(b"x", b"1")]

    def test_arrivals_are_counted_from_shutdown_initiated(self) -> None:
        """Requests after ShutdownInitiated count as arrivals of the delay; probes never do."""
        lc = lifecycle()
        middleware = GracefulASGIMiddleware(hello, lc)
        run(call(middleware, http_scope()))
        lc.shutdown_initiated.fire()
        run(call(middleware, http_scope()))
        run(call(middleware, http_scope("/readyz")))
        assert lc.stats.arrivals()["delay"] == 1

    def test_retry_after_mode_answers_429_once_not_accepting(self) -> None:
        """send_retry_after: from NotAcceptingNewRequests new requests get 429 with the config's Retry-After."""
        lc = lifecycle(send_retry_after=True, retry_after=7)
        lc.shutdown_initiated.fire()
        lc.not_accepting_new_requests.fire()
        peer = run(call(GracefulASGIMiddleware(hello, lc), http_scope()))
        assert (peer.status, peer.headers()[b"retry-after"]) == (429, b"7")
        assert lc.stats.rejections()["shutting_down"] == 1

    def test_a_client_that_disconnects_ends_its_count(self) -> None:
        """During a shutdown, http.disconnect ends the request's count while its app still runs."""
        lc = lifecycle()
        counts: list[int] = []

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            await receive()
            assert (await receive())["type"] == "http.disconnect"
            counts.append(lc.in_flight.count)

        lc.shutdown_initiated.fire()
        run(call(GracefulASGIMiddleware(app, lc), http_scope(), Peer(request(), {"type": "http.disconnect"})))
        assert counts == [0]


async def echo_socket(scope: Scope, receive: Any, send: Any) -> None:
    """A WebSocket app: accept, then echo until disconnected; records what it saw on the scope."""
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        scope.setdefault("seen", []).append(message)
        if message["type"] == "websocket.disconnect":
            try:
                await send({"type": "websocket.send", "text": "after"})
            except GoneAway:
                scope["gone"] = True
            return
        await send({"type": "websocket.send", "text": message.get("text")})


class TestWebSockets:
    def test_told_to_leave_a_websocket_gets_1001_and_its_app_a_disconnect(self) -> None:
        """leave_all sends a close frame 1001; the app's receive returns disconnect 1001, its send raises GoneAway."""
        lc = lifecycle()
        middleware = GracefulASGIMiddleware(echo_socket, lc)
        scope = ws_scope()

        async def scenario() -> Peer:
            peer = Peer({"type": "websocket.connect"})
            task = asyncio.ensure_future(middleware(scope, peer.receive, peer.send))
            await settle()
            assert lc.in_flight.count == 0  # never counted in the drain
            assert goodbyes_of(lc).open == 1
            assert await goodbyes_of(lc).leave_all(5) == 1
            await task
            return peer

        peer = run(scenario())
        assert peer.sent[-1] == {"type": "websocket.close", "code": GOING_AWAY, "reason": "server shutting down"}
        assert scope["seen"][-1]["code"] == GOING_AWAY
        assert scope["gone"] is True
        assert lc.stats.left() == {"websocket": 1, "stream": 0, "at_deadline": 1}

    def test_a_handshake_told_to_leave_is_refused_with_a_close(self) -> None:
        """A WebSocket told to leave before its app accepted gets websocket.close (the server answers 403)."""
        lc = lifecycle()

        async def slow_accept(scope: Scope, receive: Any, send: Any) -> None:
            message = await receive()
            if message["type"] == "websocket.connect":
                assert (await receive())["type"] == "websocket.disconnect"

        middleware = GracefulASGIMiddleware(slow_accept, lc)

        async def scenario() -> Peer:
            peer = Peer({"type": "websocket.connect"})
            task = asyncio.ensure_future(middleware(ws_scope(), peer.receive, peer.send))
            await settle()
            await goodbyes_of(lc).leave_all(5)
            await task
            return peer

        assert run(scenario()).types() == ["websocket.close"]

    def test_once_not_accepting_a_new_handshake_is_refused(self) -> None:
        """After NotAcceptingNewRequests a WebSocket handshake is closed before the app sees it, and counted."""
        lc = lifecycle()
        lc.shutdown_initiated.fire()
        lc.not_accepting_new_requests.fire()
        seen: list[Scope] = []

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            seen.append(scope)

        peer = run(call(GracefulASGIMiddleware(app, lc), ws_scope(), Peer({"type": "websocket.connect"})))
        assert peer.types() == ["websocket.close"]
        assert seen == []
        assert lc.stats.rejections()["shutting_down"] == 1

    def test_goodbyes_are_spread_over_the_delay_oldest_first(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Three sockets open at T0 are told at T0 + delay/4, 2/4, 3/4, oldest first; one opened later at T0 + delay."""
        lc = lifecycle(shutdown_delay=4.0)
        middleware = GracefulASGIMiddleware(echo_socket, lc)
        scheduled: list[tuple[float, int]] = []

        async def scenario() -> None:
            loop = asyncio.get_running_loop()
            scopes = [ws_scope(f"/ws/{i}") for i in range(3)]
            peers = [Peer({"type": "websocket.connect"}) for _ in scopes]
            tasks = []
            for scope, peer in zip(scopes, peers, strict=True):
                tasks.append(asyncio.ensure_future(middleware(scope, peer.receive, peer.send)))
                await settle()
            registered = list(goodbyes_of(lc)._open)
            real_call_later = loop.call_later

            def call_later(delay: float, callback: Any, *args: Any) -> Any:
                if args and args[-1] == "spread":  # a goodbye: recorded, not scheduled
                    connection = args[0]
                    scheduled.append((delay, registered.index(connection) if connection in registered else 3))
                    return None
                return real_call_later(delay, callback, *args)

            monkeypatch.setattr(loop, "call_later", call_later)
            lc.shutdown_initiated.fire()
            await settle()
            late = Peer({"type": "websocket.connect"})
            task = asyncio.ensure_future(middleware(ws_scope("/ws/late"), late.receive, late.send))
            await settle()
            monkeypatch.undo()
            await goodbyes_of(lc).leave_all(5)
            await asyncio.gather(task, *tasks)

        run(scenario())
        assert [index for _, index in scheduled] == [0, 1, 2, 3]
        delays = [delay for delay, _ in scheduled]
        assert delays[:3] == pytest.approx([1.0, 2.0, 3.0], abs=0.05)
        assert delays[3] == pytest.approx(4.0, abs=0.05)

    def test_the_end_of_the_drain_tells_everyone_left(self) -> None:
        """InFlightRequestsDrained tells every long-lived connection still open to leave, at once."""
        lc = lifecycle()
        middleware = GracefulASGIMiddleware(echo_socket, lc)

        async def scenario() -> Peer:
            peer = Peer({"type": "websocket.connect"})
            task = asyncio.ensure_future(middleware(ws_scope(), peer.receive, peer.send))
            await settle()
            await asyncio.get_running_loop().run_in_executor(None, lc.in_flight_requests_drained.fire)
            await asyncio.wait_for(task, 5)
            return peer

        assert run(scenario()).sent[-1]["code"] == GOING_AWAY
        assert lc.stats.left() == {"websocket": 1, "stream": 0, "at_deadline": 1}


def sse_scope() -> Scope:
    return http_scope("/events", headers=[(b"accept", b"text/event-stream")])


async def ticker(scope: Scope, receive: Any, send: Any) -> None:
    """A stream that sends an event until its client goes; records how it ended on the scope."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})

    async def listen() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        scope["disconnected"] = True

    listener = asyncio.ensure_future(listen())
    try:
        while not listener.done():
            await send({"type": "http.response.body", "body": b"data: tick\n\n", "more_body": True})
            await asyncio.sleep(0)
    except GoneAway:
        scope["gone"] = True
    await listener


class TestStreams:
    def test_an_event_stream_is_not_counted_and_ends_with_a_complete_response(self) -> None:
        """An EventSource request is long-lived: never in flight; told to leave, its response completes at a
        chunk boundary and its app sees http.disconnect."""
        lc = lifecycle()
        middleware = GracefulASGIMiddleware(ticker, lc)
        scope = sse_scope()

        async def scenario() -> Peer:
            peer = Peer(request())
            task = asyncio.ensure_future(middleware(scope, peer.receive, peer.send))
            await settle()
            assert lc.in_flight.count == 0
            await goodbyes_of(lc).leave_all(5)
            await task
            return peer

        peer = run(scenario())
        assert peer.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
        assert all(m.get("more_body") for m in peer.sent[1:-1])
        assert scope["disconnected"] is True

    def test_the_goodbye_waits_for_the_send_in_progress(self) -> None:
        """Told to leave while the app's send is in progress, the last chunk follows that send, never inside it."""
        lc = lifecycle()
        middleware = GracefulASGIMiddleware(ticker, lc)

        async def scenario() -> Peer:
            peer = Peer(request())
            task = asyncio.ensure_future(middleware(sse_scope(), peer.receive, peer.send))
            await settle()
            peer.gate = asyncio.Event()  # the client stops reading: the next send hangs
            await settle()
            told = asyncio.ensure_future(goodbyes_of(lc).leave_all(5))
            await settle()
            assert peer.sent[-1]["more_body"] is True  # nothing written in the middle of a chunk
            peer.gate.set()
            await told
            await task
            return peer

        peer = run(scenario())
        assert peer.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
        assert peer.sent[-2]["body"] == b"data: tick\n\n"

    def test_a_stream_told_to_leave_before_it_started_gets_503(self) -> None:
        """A long-running request whose response has not started is answered 503 Retry-After: 1."""
        lc = lifecycle()

        async def waits(scope: Scope, receive: Any, send: Any) -> None:
            await receive()
            assert (await receive())["type"] == "http.disconnect"

        middleware = GracefulASGIMiddleware(waits, lc, long_running=graceful.path_prefixes("/poll"))

        async def scenario() -> Peer:
            peer = Peer(request())
            task = asyncio.ensure_future(middleware(http_scope("/poll"), peer.receive, peer.send))
            await settle()
            await goodbyes_of(lc).leave_all(5)
            await task
            return peer

        peer = run(scenario())
        assert peer.status == 503
        assert peer.headers()[b"retry-after"] == b"1"

    def test_an_event_stream_response_during_a_shutdown_becomes_long_lived(self) -> None:
        """During a shutdown, a text/event-stream response (no Accept header) leaves the drain's count."""
        lc = lifecycle()
        counts: list[int] = []

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            counts.append(lc.in_flight.count)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
                }
            )
            counts.append(lc.in_flight.count)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        lc.shutdown_initiated.fire()
        peer = run(call(GracefulASGIMiddleware(app, lc), http_scope()))
        assert counts == [1, 0]
        assert peer.headers()[b"connection"] == b"close"


class TestLifespan:
    def test_readiness_waits_for_the_apps_startup(self) -> None:
        """The lifespan readiness check fails until the app sent lifespan.startup.complete."""
        lc = lifecycle()
        checks = HealthChecks(lc)

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            assert (await receive())["type"] == "lifespan.startup"
            assert not checks.evaluate("readyz", only=LIFESPAN_CHECK).ok
            await send({"type": "lifespan.startup.complete"})
            assert (await receive())["type"] == "lifespan.shutdown"
            await send({"type": "lifespan.shutdown.complete"})

        peer = Peer({"type": "lifespan.startup"}, {"type": "lifespan.shutdown"})
        run(call(GracefulASGIMiddleware(app, lc), {"type": "lifespan", "asgi": {"version": "3.0"}}, peer))
        assert checks.evaluate("readyz", only=LIFESPAN_CHECK).ok
        assert peer.types() == ["lifespan.startup.complete", "lifespan.shutdown.complete"]

    def test_an_app_without_lifespan_does_not_hold_readiness(self, caplog: pytest.LogCaptureFixture) -> None:
        """An app that raises on the lifespan scope (Django's) passes the check; the error reaches the server."""
        lc = lifecycle()

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            raise ValueError("Django can only handle ASGI/HTTP connections, not lifespan.")

        with pytest.raises(ValueError, match="lifespan"):
            run(call(GracefulASGIMiddleware(app, lc), {"type": "lifespan"}, Peer({"type": "lifespan.startup"})))
        assert HealthChecks(lc).evaluate("readyz", only=LIFESPAN_CHECK).ok

    def test_a_failed_startup_keeps_readiness_failing(self) -> None:
        """lifespan.startup.failed keeps the lifespan check failing."""
        lc = lifecycle()

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "lifespan.startup.failed", "message": "no database"})

        run(call(GracefulASGIMiddleware(app, lc), {"type": "lifespan"}, Peer({"type": "lifespan.startup"})))
        assert not HealthChecks(lc).evaluate("readyz", only=LIFESPAN_CHECK).ok

    def test_the_shutdown_is_logged_with_its_duration(self, caplog: pytest.LogCaptureFixture) -> None:
        """lifespan.shutdown.complete is logged with the seconds the app's shutdown took."""
        lc = lifecycle()

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})

        peer = Peer({"type": "lifespan.startup"}, {"type": "lifespan.shutdown"})
        with caplog.at_level(logging.INFO, logger="graceful.asgi.lifespan"):
            run(call(GracefulASGIMiddleware(app, lc), {"type": "lifespan"}, peer))
        assert any("lifespan shutdown completed after running" in r.getMessage() for r in caplog.records)


class TestNesting:
    def test_wrapped_twice_a_request_is_handled_once(self) -> None:
        """Two middlewares of one lifecycle: the outer handles the request, the inner passes it through."""
        lc = lifecycle()
        calls: list[int] = []

        async def app(scope: Scope, receive: Any, send: Any) -> None:
            calls.append(lc.in_flight.count)
            await hello(scope, receive, send)

        outer = GracefulASGIMiddleware(GracefulASGIMiddleware(app, lc), lc)
        lc.shutdown_initiated.fire()
        peer = run(call(outer, http_scope()))
        assert calls == [1]
        assert lc.stats.arrivals()["delay"] == 1
        assert list(peer.headers()).count(b"connection") == 1

    def test_has_asgi_middleware_sees_starlettes_declared_middleware(self) -> None:
        """A Starlette app with add_middleware(GracefulASGIMiddleware) already has it: a server wraps it no more."""
        lc = lifecycle()
        app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("hi"))])
        assert not has_asgi_middleware(app, lc)
        app.add_middleware(GracefulASGIMiddleware, lifecycle=lc)
        assert has_asgi_middleware(app, lc)
        assert not has_asgi_middleware(app, lifecycle())
        wrapped = GracefulASGIMiddleware(hello, lc)
        assert find_asgi_middleware(wrapped, lc) is wrapped

    def test_is_asgi_app_tells_asgi_from_wsgi(self) -> None:
        """Coroutine functions and objects with an async __call__ are ASGI; a WSGI callable is not."""

        class Handler:
            async def __call__(self, scope: Scope, receive: Any, send: Any) -> None: ...

        def wsgi(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            return []

        assert is_asgi_app(hello)
        assert is_asgi_app(Handler())
        assert is_asgi_app(Starlette())
        assert not is_asgi_app(wsgi)

    def test_graceful_exports_the_middleware(self) -> None:
        """graceful.GracefulASGIMiddleware is the middleware (imported on first use)."""
        assert graceful.GracefulASGIMiddleware is GracefulASGIMiddleware
        assert "GracefulASGIMiddleware" in graceful.__all__


class TestWrongKind:
    def test_the_wsgi_middleware_refuses_an_asgi_app_in_one_line(self) -> None:
        """GracefulMiddleware given an ASGI app raises WrongKindOfApp naming the ASGI middleware to use."""
        from graceful.http.apps import WrongKindOfApp

        with pytest.raises(WrongKindOfApp, match="is an ASGI app; GracefulMiddleware wraps WSGI apps") as refused:
            graceful.GracefulMiddleware(hello, lifecycle())  # type: ignore[arg-type]
        assert "\n" not in str(refused.value)
        assert isinstance(refused.value, TypeError)


class TestEveryResponseCloses:
    def test_probes_and_refusals_during_a_shutdown_carry_connection_close(self) -> None:
        """From ShutdownInitiated graceful's own answers (a probe, a 429) also carry Connection: close."""
        lc = lifecycle(send_retry_after=True)
        middleware = GracefulASGIMiddleware(hello, lc)
        assert b"connection" not in run(call(middleware, http_scope("/readyz"))).headers()
        lc.shutdown_initiated.fire()
        assert run(call(middleware, http_scope("/readyz"))).headers()[b"connection"] == b"close"
        lc.not_accepting_new_requests.fire()
        refused = run(call(middleware, http_scope()))
        assert (refused.status, refused.headers()[b"connection"]) == (429, b"close")
