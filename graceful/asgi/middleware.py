"""ASGI middleware: health endpoints, admission during shutdown, the in-flight count, long-lived goodbyes.

The sibling of :mod:`graceful.wsgi.middleware` on the same lifecycle: the
health answers, graceful's replies and the shutdown's refusals come from
:mod:`graceful.http` and the lifecycle's :class:`~graceful.core.gate.Gate`,
written once for both. Runs on the event loop that serves the app (one per
process: Uvicorn's); nothing here blocks it (a user's health check runs on a
thread of its own, bounded by ``check_timeout``, as on the WSGI side).

What happens to one connection, by its scope's type::

    http  /livez /readyz /healthz     answered here, GET and HEAD only; never
          /<endpoint>/<check>         rejected, counted or delayed (/metrics too
                                      with config.metrics_on_app_port)
          before ShutdownInitiated    the app, counted in flight from the scope
                                      until the app returns (the hot path)
          from ShutdownInitiated      counted as an arrival; 429 + Retry-After
                                      once not accepting in retry-after mode;
                                      the response gets "Connection: close"
                                      (HTTP/1.1; also once the process stops
                                      without a shutdown: gate.closing); a
                                      client that disconnects ends its count
          max_in_flight all taken     429, Retry-After: 1
          the drain has begun         503, Retry-After: 1
          a stream                    long-lived: not counted in the drain,
                                      told to leave (graceful.asgi.long_lived):
                                      "Accept: text/event-stream" (every
                                      EventSource), long_running(scope), or
                                      (from ShutdownInitiated) a response of
                                      type text/event-stream
    websocket                         long-lived: never counted; told to leave
                                      with a close frame 1001, the goodbyes
                                      spread over the shutdown delay; once not
                                      accepting, a new handshake is refused
    lifespan                          passed to the app; a readiness check
                                      "lifespan" fails until its startup
                                      completed (graceful.asgi.lifespan)

The hot path, every plain HTTP request before a shutdown, is what
DESIGN.md asks: the path's health test, the gate's ``unhindered`` flag, one
C-level look for the event-stream header, then an ``await`` of the app
between the wait group's deque ``append`` and ``pop``. ``send`` is wrapped
only on the checked path (from ShutdownInitiated, or with ``max_in_flight``)
and for long-lived connections (``python bench/asgi_middleware.py``
measures it).

Wrapped twice with one lifecycle (a Starlette app with
``add_middleware(GracefulASGIMiddleware)`` that a server wraps again), a
connection is handled once, by the outermost: it marks the scope with
``graceful.lifecycle``, and a middleware that finds its lifecycle there
passes the connection through. A server wraps an app only when
:func:`has_asgi_middleware` finds none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from graceful.asgi.lifespan import Lifespan
from graceful.asgi.long_lived import LongLived, Stream, WebSocket, goodbyes_of, with_connection_close
from graceful.asgi.types import ASGIApp, Message, Receive, Scope, Send
from graceful.core import default as _default
from graceful.core.gate import Refusal
from graceful.core.lifecycle import Lifecycle
from graceful.core.stats import REASON_SHUTTING_DOWN
from graceful.core.waitgroup import Release
from graceful.http.apps import LIFECYCLE_KEY, is_asgi_app
from graceful.http.health import DEFAULT_CHECK_TIMEOUT, HealthChecks
from graceful.http.long_running import LongRunning, is_long_running
from graceful.http.probes import CHECK_PREFIXES, METRICS_PATH, ROOT_PATHS, answer_probe
from graceful.http.replies import Reply, refusal_reply

__all__ = [
    "LIFECYCLE_KEY",
    "ASGIApp",
    "GracefulASGIMiddleware",
    "find_asgi_middleware",
    "has_asgi_middleware",
    "is_asgi_app",
    "send_reply",
]

logger = logging.getLogger(__name__)


# Every EventSource sends exactly this header (the HTML standard): a C-level "in" on the scope's
# headers finds it without a loop of ours.
_EVENT_STREAM = (b"accept", b"text/event-stream")


class GracefulASGIMiddleware:
    """Wrap an ASGI 3 app with graceful's health endpoints, admission, in-flight count and goodbyes.

    ``lifecycle`` defaults to ``graceful.default_lifecycle``. ``long_running``
    tells which HTTP requests are streams (long-lived: told to leave, not
    counted in the drain nor limited by ``max_in_flight``); it is called with
    the scope, as :func:`graceful.path_prefixes` does. ``check_timeout`` and
    ``check_cache_ttl`` (seconds) bound and cache the health checks. The
    app comes first, so Starlette and FastAPI take it as
    ``app.add_middleware(GracefulASGIMiddleware)``. Runs on the serving
    event loop; exceptions from the app propagate (its count ended).
    """

    def __init__(
        self,
        app: ASGIApp,
        lifecycle: Lifecycle | None = None,
        *,
        long_running: LongRunning | None = None,
        check_timeout: float = DEFAULT_CHECK_TIMEOUT,
        check_cache_ttl: float = 0.0,
    ) -> None:
        self.app = app
        self.lifecycle = lifecycle if lifecycle is not None else _default.default_lifecycle
        self.long_running = long_running
        self.health = HealthChecks(self.lifecycle, check_timeout=check_timeout, check_cache_ttl=check_cache_ttl)
        self.long_lived: LongLived = goodbyes_of(self.lifecycle)
        self._lifespan = Lifespan.of(self.lifecycle)
        # /metrics on the app port only when the operator asks; read once, when the routes are fixed.
        self._metrics = self.lifecycle.config.metrics_on_app_port
        # Bound once: the hot path below reads only locals and these.
        self._gate = gate = self.lifecycle.gate
        self._in_flight = in_flight = gate.in_flight
        # The wait group's unchecked pair (C calls): see graceful.core.waitgroup.
        self._enter = in_flight.enter
        self._leave = in_flight.leave

    def __repr__(self) -> str:
        return f"<GracefulASGIMiddleware app={self.app!r} lifecycle={self.lifecycle!r}>"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lifecycle = self.lifecycle
        if LIFECYCLE_KEY in scope and scope[LIFECYCLE_KEY] is lifecycle:  # an outer one of ours handles it
            return await self.app(scope, receive, send)
        scope[LIFECYCLE_KEY] = lifecycle
        if scope["type"] != "http":
            return await self._other(scope, receive, send)
        path = scope["path"]
        # probes.is_probe_path(), inlined: every health path has a "z", few others do.
        if ("z" in path and (path in ROOT_PATHS or path.startswith(CHECK_PREFIXES))) or (
            self._metrics and path == METRICS_PATH
        ):
            return await self._probe(scope, send, path)
        if not self._gate.unhindered or self.long_running is not None or _EVENT_STREAM in scope["headers"]:
            return await self._checked(scope, receive, send)
        # SafeWaitGroup.add(), unchecked: a token, then refused if the drain has begun.
        self._enter(None)
        if self._in_flight.waiting:
            self._leave()
            return await send_reply(
                send, scope, refusal_reply(self._gate.refuse_draining()), close=_closes(scope, True)
            )
        try:
            await self.app(scope, receive, send)
        finally:
            self._leave()

    # -- HTTP off the hot path ---------------------------------------------------------------------

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An HTTP request that is a stream, or comes during a shutdown or with ``max_in_flight``."""
        gate = self._gate
        if not gate.unhindered:
            refusal = gate.check()
            if refusal is not None:
                return await self._refuse(send, scope, refusal)
        long_running = self.long_running
        if _EVENT_STREAM in scope["headers"] or (long_running is not None and is_long_running(long_running, scope)):
            return await self._stream(scope, receive, send)
        if gate.limited:
            release: Callable[[], object] | Refusal = gate.take_slot()
            if isinstance(release, Refusal):
                return await self._refuse(send, scope, release)
        else:
            self._enter(None)
            if self._in_flight.waiting:
                self._leave()
                return await self._refuse(send, scope, gate.refuse_draining())
            release = Release(self._leave)
        if gate.shutdown_initiated.fired_at is None and not gate.closing:  # only a max_in_flight: nothing more
            try:
                return await self.app(scope, receive, send)
            finally:
                release()
        request = _ShuttingDown(self, scope, receive, send, release)
        try:
            await self.app(scope, request.receive, request.send)
        finally:
            request.end()

    async def _stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A long-lived HTTP response: not counted in the drain, told to leave."""
        stream = Stream(receive, send, close_connection=self._closes(scope))
        await self._serve_long_lived(stream, scope)

    async def _serve_long_lived(self, connection: Stream | WebSocket, scope: Scope) -> None:
        self.long_lived.register(connection)
        try:
            await self.app(scope, connection.receive, connection.send)
        finally:
            self.long_lived.unregister(connection)
            await connection.finished()

    async def _probe(self, scope: Scope, send: Send, path: str) -> None:
        """Answer a health path (or ``/metrics``): the evaluation may wait on user checks, so off the loop."""
        query = scope.get("query_string", b"")
        text = query.decode("latin-1") if isinstance(query, bytes) else ""
        answer = await _off_loop(answer_probe, self.health, scope.get("method"), path, text)
        await send_reply(send, scope, answer, close=self._closes(scope))

    async def _refuse(self, send: Send, scope: Scope, refusal: Refusal) -> None:
        """Answer a request the gate refused (429 or 503, Retry-After)."""
        await send_reply(send, scope, refusal_reply(refusal), close=self._closes(scope))

    def _closes(self, scope: Scope) -> bool:
        """Whether graceful's own answer on this connection gets ``Connection: close`` now."""
        gate = self._gate
        return _closes(scope, gate.shutdown_initiated.fired_at is not None or gate.closing)

    # -- WebSocket, lifespan and the rest --------------------------------------------------------------

    async def _other(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket":
            gate = self._gate
            if gate.not_accepting.fired_at is not None:
                # Not accepting (retry-after mode keeps the listener): a new handshake is refused.
                self.lifecycle.stats.rejected(REASON_SHUTTING_DOWN)
                return await send({"type": "websocket.close", "code": 1001})
            if gate.shutdown_initiated.fired_at is not None:
                self.lifecycle.stats.arrived(False)
            return await self._serve_long_lived(WebSocket(receive, send), scope)
        if kind == "lifespan":
            return await self._lifespan.run(self.app, scope, receive, send)
        return await self.app(scope, receive, send)


class _ShuttingDown:
    """A counted HTTP request during a shutdown: ``Connection: close``, a disconnect ends the count,
    an event-stream response becomes long-lived. On the loop."""

    def __init__(
        self,
        middleware: GracefulASGIMiddleware,
        scope: Scope,
        receive: Receive,
        send: Send,
        release: Callable[[], object],
    ) -> None:
        self._middleware = middleware
        self._close = _closes(scope, True)
        self._receive = receive
        self._send = send
        self._release = release
        self._stream: Stream | None = None

    async def receive(self) -> Message:
        stream = self._stream
        if stream is not None:
            return await stream.receive()
        message = await self._receive()
        if message.get("type") == "http.disconnect":  # the client left: nothing to wait for
            self._release()
        return message

    async def send(self, message: Message) -> None:
        stream = self._stream
        if stream is not None:
            return await stream.send(message)
        if message.get("type") == "http.response.start":
            if _is_event_stream(message):
                # An event stream after all: long-lived from here, told to leave like the others.
                self._stream = stream = Stream(self._receive, self._send, close_connection=self._close)
                self._release()
                self._middleware.long_lived.register(stream)
                return await stream.send(message)
            if self._close:
                message = with_connection_close(message)
        await self._send(message)

    def end(self) -> None:
        """The app returned: the count ends (once), a stream unregisters."""
        self._release()
        if self._stream is not None:
            self._middleware.long_lived.unregister(self._stream)


def _closes(scope: Scope, shutting_down: object) -> bool:
    """Whether responses on this connection get ``Connection: close``: HTTP/1.1 during a shutdown.

    HTTP/2 forbids the header (its servers drain with GOAWAY); HTTP/1.0 closes anyway.
    """
    return bool(shutting_down) and scope.get("http_version") == "1.1"


def _is_event_stream(message: Message) -> bool:
    for name, value in message.get("headers", ()):
        if bytes(name).lower() == b"content-type":
            return bytes(value).split(b";", 1)[0].strip().lower() == b"text/event-stream"
    return False


async def send_reply(send: Send, scope: Scope, answer: Reply, *, close: bool = False) -> None:
    """Send one of graceful's answers (:class:`graceful.http.replies.Reply`); no body for HEAD.

    ``close``: with ``Connection: close`` (an HTTP/1.1 answer during a shutdown).
    """
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    body = b"" if scope.get("method") == "HEAD" else answer.body
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _off_loop(function: Callable[..., Reply], *args: object) -> Reply:
    """Run a probe's evaluation on the loop's default executor (its user checks may take ``check_timeout``)."""
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def find_asgi_middleware(app: object, lifecycle: Lifecycle | None = None) -> GracefulASGIMiddleware | None:
    """Return the :class:`GracefulASGIMiddleware` of ``lifecycle`` that ``app`` is or holds, else None.

    Looks through ``app`` attributes (most ASGI middlewares keep the app
    they wrap there) and a built Starlette ``middleware_stack``, at most 16
    deep; stops at the first GracefulASGIMiddleware, which must be of
    ``lifecycle`` (of any lifecycle when None).
    """
    node: object = app
    for _ in range(16):  # a chain of middlewares, not a cycle
        if isinstance(node, GracefulASGIMiddleware):
            return node if lifecycle is None or node.lifecycle is lifecycle else None
        inside = getattr(node, "middleware_stack", None) or getattr(node, "app", None)
        if inside is None or inside is node:
            return None
        node = inside
    return None


def has_asgi_middleware(app: object, lifecycle: Lifecycle | None = None) -> bool:
    """True when ``app`` already has graceful's middleware of ``lifecycle``: a server then does not wrap it.

    :func:`find_asgi_middleware`'s, or one declared in a Starlette or
    FastAPI app's ``user_middleware`` (``app.add_middleware(GracefulASGIMiddleware)``:
    its stack is built on the first request), its lifecycle the default one
    unless given.
    """
    if find_asgi_middleware(app, lifecycle) is not None:
        return True
    for entry in getattr(app, "user_middleware", None) or ():
        if getattr(entry, "cls", None) is not GracefulASGIMiddleware:
            continue
        # Starlette 0.35+ keeps args and kwargs; older releases kept the keywords as options.
        kwargs = getattr(entry, "kwargs", None) or getattr(entry, "options", None) or {}
        args = getattr(entry, "args", None) or ()
        declared = kwargs.get("lifecycle", args[0] if args else None) or _default.default_lifecycle
        if lifecycle is None or declared is lifecycle:
            return True
    return False
