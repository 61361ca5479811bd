"""Long-lived ASGI connections: WebSockets and streams, told to leave during a shutdown.

A long-lived connection does not hold the drain: it is told to leave, at the
time :mod:`graceful.http.goodbyes` gives it (spread over the shutdown delay;
everything left at the drain's end at once). Told to leave:

- a WebSocket gets a close frame with code 1001 (going away) and the reason
  ``server shutting down``; the app's ``receive`` returns
  ``websocket.disconnect`` with code 1001. A WebSocket still in its
  handshake is refused (the server answers the handshake with 403);
- a stream (server-sent events, or a request marked long-running) is ended
  at a chunk boundary: once the app's ``send`` in progress (if any) has
  returned, an empty last body message completes the response (the
  chunked encoding's last chunk); the app's ``receive`` returns
  ``http.disconnect``. A stream whose response has not started gets a 503
  with ``Retry-After: 1``.

After that the app's ``send`` raises :class:`GoneAway` (an ``OSError``, as
the ASGI spec asks of a closed connection), so an app that only sends (a
ticker) ends too. Everything here runs on the event loop that serves the
connections; the lifecycle's signals fire on other threads and cross into
the loop with ``loop.call_soon_threadsafe`` (:class:`LongLived`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable

from graceful.asgi.types import Message, Receive, Send
from graceful.core.lifecycle import Lifecycle
from graceful.core.stats import LEFT_STREAM, LEFT_WEBSOCKET
from graceful.http.goodbyes import spread, window_of
from graceful.http.replies import SHUTTING_DOWN, Reply

__all__ = [
    "GOING_AWAY",
    "GoneAway",
    "LongLived",
    "Stream",
    "WebSocket",
    "goodbyes_of",
]

logger = logging.getLogger(__name__)


#: RFC 6455's close code for an endpoint going away (a server going down).
GOING_AWAY = 1001
#: The close frame's reason.
GOING_AWAY_REASON = "server shutting down"
#: A stream told to leave before its response started.
_NOT_STARTED = Reply(503, SHUTTING_DOWN, "1")


class GoneAway(OSError):
    """The app sent on a connection graceful closed: it was told to leave (the ASGI spec's closed-connection error)."""


class _Connection:
    """One long-lived connection: its app's ``receive`` and ``send``, and :meth:`leave`. Runs on the loop."""

    kind = "connection"

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._told = asyncio.Event()
        self._sending = False
        self._goodbye: asyncio.Task[None] | None = None
        self._pending: asyncio.Future[Message] | None = None
        #: True once the connection ended on its own side (closed by the app, or the response complete).
        self.ended = False
        #: True once told to leave.
        self.told = False

    # -- what the app calls --------------------------------------------------------------------

    async def receive(self) -> Message:
        """The server's next message, or the goodbye once told to leave (whichever comes first)."""
        if self.told:
            return self._farewell()
        pending = self._pending
        if pending is None:
            pending = self._pending = asyncio.ensure_future(self._receive())
        told = asyncio.ensure_future(self._told.wait())
        try:
            await asyncio.wait((pending, told), return_when=asyncio.FIRST_COMPLETED)
        finally:
            told.cancel()
        if pending.done():  # a message the server had for it comes first
            self._pending = None
            message = pending.result()
            self._saw(message)
            return message
        return self._farewell()

    async def send(self, message: Message) -> None:
        """Send for the app; once told to leave, raise :class:`GoneAway`."""
        if self.told:
            raise GoneAway(f"graceful: the {self.kind} was told to leave: the server is shutting down")
        self._sending = True
        try:
            await self._send(self._outgoing(message))
        finally:
            self._sending = False
        self._sent(message)
        if self.told and self._goodbye is None:  # told while this send was in progress: say it now
            self._goodbye = asyncio.ensure_future(self._say_goodbye())

    # -- what graceful calls -------------------------------------------------------------------

    def leave(self) -> bool:
        """Tell the connection to leave (on the loop); False when it had ended or was told already."""
        if self.told or self.ended:
            return False
        self.told = True
        self._told.set()
        if not self._sending:  # else once the app's send in progress returns (a chunk boundary)
            self._goodbye = asyncio.ensure_future(self._say_goodbye())
        return True

    async def finished(self) -> None:
        """Wait until the goodbye (if any) has been sent."""
        if self._goodbye is not None:
            await asyncio.shield(self._goodbye)

    # -- one per kind ------------------------------------------------------------------------------

    def _farewell(self) -> Message:
        raise NotImplementedError

    def _outgoing(self, message: Message) -> Message:
        return message

    def _saw(self, message: Message) -> None:
        """A message from the server (a disconnect ends the connection)."""

    def _sent(self, message: Message) -> None:
        """A message the app sent."""

    async def _say_goodbye(self) -> None:
        raise NotImplementedError

    async def _send_quietly(self, message: Message) -> None:
        """Send graceful's own message; a client already gone is no error here."""
        try:
            await self._send(message)
        except (OSError, RuntimeError) as exc:  # the connection closed meanwhile: nothing to say goodbye to
            logger.debug("graceful: goodbye to a %s not sent: %s", self.kind, exc)


class WebSocket(_Connection):
    """A WebSocket: told to leave, it gets a close frame 1001 (or its handshake is refused)."""

    kind = LEFT_WEBSOCKET

    def __init__(self, receive: Receive, send: Send) -> None:
        super().__init__(receive, send)
        self.accepted = False

    def _farewell(self) -> Message:
        return {"type": "websocket.disconnect", "code": GOING_AWAY, "reason": GOING_AWAY_REASON}

    def _saw(self, message: Message) -> None:
        if message.get("type") == "websocket.disconnect":
            self.ended = True

    def _sent(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "websocket.accept":
            self.accepted = True
        elif kind == "websocket.close" or (kind == "websocket.http.response.body" and not message.get("more_body")):
            self.ended = True

    async def _say_goodbye(self) -> None:
        if self.ended:
            return
        self.ended = True
        # Before the accept, a close refuses the handshake (the server answers 403).
        await self._send_quietly({"type": "websocket.close", "code": GOING_AWAY, "reason": GOING_AWAY_REASON})


class Stream(_Connection):
    """A streamed HTTP response: told to leave, it is completed at a chunk boundary."""

    kind = LEFT_STREAM

    def __init__(self, receive: Receive, send: Send, close_connection: bool = False) -> None:
        super().__init__(receive, send)
        self.started = False
        #: Add ``Connection: close`` to the response (HTTP/1.1 during a shutdown).
        self.close_connection = close_connection

    def _farewell(self) -> Message:
        return {"type": "http.disconnect"}

    def _saw(self, message: Message) -> None:
        if message.get("type") == "http.disconnect":
            self.ended = True

    def _outgoing(self, message: Message) -> Message:
        if self.close_connection and message.get("type") == "http.response.start":
            return with_connection_close(message)
        return message

    def _sent(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            self.started = True
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.ended = True

    async def _say_goodbye(self) -> None:
        if self.ended:
            return
        self.ended = True
        if self.started:
            await self._send_quietly({"type": "http.response.body", "body": b"", "more_body": False})
            return
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in _NOT_STARTED.headers]
        if self.close_connection:
            headers.append((b"connection", b"close"))
        await self._send_quietly({"type": "http.response.start", "status": _NOT_STARTED.status, "headers": headers})
        await self._send_quietly({"type": "http.response.body", "body": _NOT_STARTED.body, "more_body": False})


def with_connection_close(message: Message) -> Message:
    """An ``http.response.start`` message with ``Connection: close`` added (a copy; the app's is left alone)."""
    headers = list(message.get("headers", ()))
    headers.append((b"connection", b"close"))
    return {**message, "headers": headers}


class LongLived:
    """The long-lived connections of one lifecycle, and when each is told to leave.

    Connections register on the event loop that serves them (one loop per
    process: Uvicorn's); :meth:`LongLived.watch` subscribes to the
    lifecycle once, and its listener, called on whichever thread fires a
    signal, crosses into that loop with ``call_soon_threadsafe``:
    ShutdownInitiated spreads the goodbyes (:func:`graceful.http.goodbyes.spread`),
    InFlightRequestsDrained tells everyone left at once.
    """

    def __init__(self, lifecycle: Lifecycle) -> None:
        self._lifecycle = weakref.ref(lifecycle)
        self._open: dict[_Connection, None] = {}  # insertion order: oldest first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._empty: asyncio.Event | None = None
        self._watching = False

    # -- on the loop -------------------------------------------------------------------------------

    def register(self, connection: _Connection) -> None:
        """A long-lived connection opened (on the loop); during a shutdown it gets its time to leave."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the first, or a new loop (a test's): the old one's connections are gone
            self._loop, self._open, self._empty = loop, {}, asyncio.Event()
        self._open[connection] = None
        assert self._empty is not None
        self._empty.clear()
        lifecycle = self._lifecycle()
        if lifecycle is None:
            return
        self.watch(lifecycle)
        t0 = lifecycle.shutdown_initiated.fired_at
        if lifecycle.in_flight_requests_drained.fired_at is not None:
            self._tell(connection, "deadline")
        elif t0 is not None:  # opened during the delay: leaves at the window's end
            self._tell_at(connection, t0 + window_of(lifecycle.config), lifecycle)

    def unregister(self, connection: _Connection) -> None:
        """The connection's app returned (on the loop)."""
        self._open.pop(connection, None)
        if not self._open and self._empty is not None:
            self._empty.set()

    async def leave_all(self, timeout: float) -> int:
        """Tell every connection still open to leave now and wait, up to ``timeout`` s, until they ended.

        On the serving loop, after the drain and before the server's own
        shutdown (which would close them its own way: Uvicorn's 1012).
        Returns how many were told now.
        """
        told = sum(self._tell(connection, "deadline") for connection in list(self._open))
        if self._open and self._empty is not None:
            try:
                await asyncio.wait_for(self._empty.wait(), timeout)
            except asyncio.TimeoutError:
                logger.warning(
                    "graceful: %d long-lived connection(s) still open after waiting %gs for them to leave",
                    len(self._open),
                    timeout,
                )
        return told

    @property
    def open(self) -> int:
        """How many long-lived connections are open."""
        return len(self._open)

    def _spread(self, t0: float) -> None:
        """ShutdownInitiated (on the loop): each connection open now gets its time, oldest first."""
        lifecycle = self._lifecycle()
        if lifecycle is None:
            return
        connections = list(self._open)
        times = spread(t0, window_of(lifecycle.config), len(connections))
        for connection, due in zip(connections, times, strict=True):
            self._tell_at(connection, due, lifecycle)

    def _deadline(self) -> None:
        """InFlightRequestsDrained (on the loop): everyone left, at once."""
        told = sum(self._tell(connection, "deadline") for connection in list(self._open))
        if told:
            logger.info(
                "graceful: %d long-lived connection(s) still open at the end of the drain: told to leave now", told
            )

    def _tell_at(self, connection: _Connection, due: float, lifecycle: Lifecycle) -> None:
        assert self._loop is not None
        wait = max(0.0, due - lifecycle.clock.now())
        self._loop.call_later(wait, self._tell, connection, "spread")

    def _tell(self, connection: _Connection, when: str) -> bool:
        """Tell one connection to leave now; counted in the lifecycle's statistics (the record's ``left``)."""
        if connection not in self._open or not connection.leave():
            return False
        lifecycle = self._lifecycle()
        if lifecycle is not None:
            lifecycle.stats.told_to_leave(connection.kind, at_deadline=when == "deadline")
        return True

    # -- from the firing thread ---------------------------------------------------------------------

    def watch(self, lifecycle: Lifecycle) -> None:
        """Subscribe to the lifecycle's signals, once (any thread)."""
        if self._watching:
            return
        self._watching = True
        lifecycle.subscribe(self._signal)

    def _signal(self, name: str, at: float) -> None:
        """A lifecycle signal fired (on the firing thread): act on the loop."""
        loop = self._loop
        if loop is None:
            return
        if name == "ShutdownInitiated":
            _call_soon(loop, self._spread, at)
        elif name == "InFlightRequestsDrained":
            _call_soon(loop, self._deadline)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop closed meanwhile: its connections are gone
        logger.debug("graceful: the serving loop closed before a lifecycle signal reached it")


_registries: weakref.WeakKeyDictionary[Lifecycle, LongLived] = weakref.WeakKeyDictionary()


def goodbyes_of(lifecycle: Lifecycle) -> LongLived:
    """The long-lived connections of ``lifecycle`` (made on first use)."""
    registry = _registries.get(lifecycle)
    if registry is None:
        registry = _registries.setdefault(lifecycle, LongLived(lifecycle))
    return registry
