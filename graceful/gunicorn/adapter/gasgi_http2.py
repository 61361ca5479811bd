"""Gunicorn 27's HTTP/2 on ``-k asgi``: each connection told GOAWAY on the worker's event loop.

Runs in an ``-k asgi`` worker process that serves HTTP/2 (``h2`` in
``http_protocols``). Probed once, in ``post_worker_init`` (main thread, the
worker's loop made but not running yet), by :func:`probe_gasgi_http2`,
called from :func:`graceful.gunicorn.adapter.http2.probe_http2`. The rules
(when a connection is told what, which streams are refused) are
:mod:`graceful.gunicorn.http2`'s, the same as on gthread and gevent; this
module carries them out on the loop:

* Gunicorn's ``ASGIProtocol._handle_http2_connection`` imports
  ``AsyncHTTP2Connection`` from ``gunicorn.http2.async_connection`` at each
  call: in this process that name is a subclass, registered with the
  worker's :class:`AsyncHttp2Connections`. Nothing differs until the drain
  is requested.
* The drain's request comes from graceful's threads (``graceful-watch`` at
  ShutdownInitiated, ``graceful-stop`` at the worker's stop): it crosses
  into the loop with ``call_soon_threadsafe`` only; every frame is written
  on the loop, between two of Gunicorn's own writes (each of which queues
  its frames on h2 and hands them to the transport with no ``await`` in
  between).
* The GOAWAYs are written as frames (hyperframe) without telling h2, as on
  gthread: h2's ``close_connection`` would close its state machine while
  streams are still served. Gunicorn's ``close`` (h2's GOAWAY, the
  transport closed) comes once no stream is open; the transport's
  ``connection_lost`` then wakes Gunicorn's receive loop at once (it feeds
  the reader its end), not after its one-second read timeout.
* A stream opened above the final GOAWAY's last-stream-id is refused with
  RST_STREAM(REFUSED_STREAM) before Gunicorn sees it; the PING's ACK is
  noted, and the final GOAWAY follows on the loop; a timer stands in for an
  ACK that never comes (:data:`~graceful.gunicorn.http2.ROUND_TRIP_TIMEOUT`).

Gunicorn 27.0.1 behaviour this works around (to report upstream; drop once
fixed): ``asgi/protocol.py`` sends GOAWAY only in the ``finally`` of its
connection loop, after its stop (``worker.alive`` False) has refused the
streams opened meanwhile: a client learns nothing during the delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
from typing import Any

from graceful.gunicorn.adapter.http2 import (
    NO_ERROR,
    DrainingConnection,
    LiveConnections,
    goaway_step,
    http2_enabled,
    peer,
)
from graceful.gunicorn.adapter.release import gunicorn_release
from graceful.gunicorn.http2 import Action, Http2Drain

__all__ = ["AsyncHttp2Connections", "probe_gasgi_http2"]

logger = logging.getLogger(__name__)

#: The module whose ``AsyncHTTP2Connection`` Gunicorn's ASGI protocol looks up at each HTTP/2 connection.
MODULE = "gunicorn.http2.async_connection"
# What the subclass overrides or calls on Gunicorn's AsyncHTTP2Connection (probed).
_CONNECTION_NEEDS = ("initiate_connection", "initiate_upgrade", "_handle_event", "cleanup_stream", "close", "is_closed")


class AsyncHttp2Connections(LiveConnections):
    """This worker's live HTTP/2 connections (:class:`graceful.gunicorn.http2.Http2Server`) on its event loop.

    :meth:`wake` and :meth:`wake_stopping` may be called from any thread;
    they hand the work to the loop. :meth:`open_streams` reads from any thread.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        #: The worker's event loop (every connection's, and where their steps run).
        self.loop = loop

    def wake(self) -> None:
        """See :meth:`graceful.gunicorn.http2.Http2Server.wake`: every connection acts, on the loop."""
        self._on_loop()

    def wake_stopping(self) -> None:
        """See :meth:`graceful.gunicorn.http2.Http2Server.wake_stopping`: every connection acts, on the loop."""
        self._on_loop()

    def _on_loop(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: no connection is left to tell
            self.loop.call_soon_threadsafe(self.act_all)

    def act_all(self) -> None:
        """On the loop: each connection does what the drain says now."""
        for conn in self.live():
            conn.graceful.act()


class _AsyncGoaway:
    """One connection's GOAWAY, carried out on the worker's event loop (every method: on the loop)."""

    def __init__(self, conn: Any, drain: Http2Drain, server: AsyncHttp2Connections) -> None:
        self.conn = conn
        self.drain = drain
        self.server = server
        self.state = drain.connection()
        self.peer = peer(getattr(conn, "client_addr", None))
        #: The round-trip timer (no PING ACK yet), if one is set.
        self._timer: asyncio.TimerHandle | None = None
        #: True once Gunicorn's close was asked for.
        self._closing = False

    def act(self) -> None:
        """Do what the drain says now: a GOAWAY, or the close once no stream is open."""
        conn = self.conn
        if not self.drain.requested or self._closing:
            return  # the common case: serving, no drain requested
        if conn.is_closed:
            self.closed()
            return
        now = self.drain.clock()  # monotonic
        action = self.state.next_action(now, len(conn.streams))
        if action is Action.NOTHING:
            return
        goaway_step(self.state, conn.h2_conn, action, self._write, now)
        if action is Action.FIRST_GOAWAY:
            wake_in = self.state.wake_in(now)
            if wake_in is not None:  # no ACK within one round trip: the final GOAWAY all the same
                self._timer = self.server.loop.call_later(wake_in, self.act)
        elif action is Action.CLOSE:
            self._closing = True
            self.server.loop.create_task(self._close())

    def acknowledged(self) -> None:
        """The PING's ACK came (inside Gunicorn's event handling): the final GOAWAY goes out next, on the loop."""
        self.state.ping_acknowledged()
        self.server.loop.call_soon(self.act)

    def _write(self, data: bytes) -> None:
        # The transport buffers it: a write never waits (Gunicorn's own control frames go the same way).
        with contextlib.suppress(OSError, RuntimeError):  # the socket is gone: Gunicorn's receive loop finds out
            self.conn.writer.write(data)

    async def _close(self) -> None:
        """Gunicorn's close: h2's GOAWAY (the final last-stream-id), the transport closed.

        The transport's ``connection_lost`` feeds the reader its end, which
        ends Gunicorn's receive loop at once.
        """
        try:
            await self.conn.close(last_stream_id=self.state.last_stream_id)
        finally:
            self.closed()

    def closed(self) -> None:
        """The connection is closed (by us, or by the peer)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.state.close()
        self.server.discard(self.conn)


def _connection_class(base: type, drain: Http2Drain, server: AsyncHttp2Connections, events: Any) -> type:
    """A subclass of Gunicorn's AsyncHTTP2Connection that drains as :class:`Http2Drain` says."""

    class GoawayAsyncConnection(DrainingConnection, base):  # type: ignore[misc]  # Gunicorn's class, found at run time
        h2_events = events

        def __init__(self, cfg: Any, reader: Any, writer: Any, client_addr: Any) -> None:
            super().__init__(cfg, reader, writer, client_addr)
            self.graceful = _AsyncGoaway(self, drain, server)
            server.add(self)

        # Each override's first line is the path while no drain is requested: Gunicorn's own.

        async def initiate_connection(self) -> None:
            await super().initiate_connection()
            # Made after the request (the worker stopping): told once its SETTINGS went first.
            self.graceful.act()

        async def initiate_upgrade(self, settings_header: Any, http1_req: Any, body: bytes = b"") -> Any:
            request = await super().initiate_upgrade(settings_header, http1_req, body)
            self.graceful.act()
            return request

        async def close(self, error_code: int = NO_ERROR, last_stream_id: int | None = None) -> None:
            last_stream_id = self.graceful.state.closing_last_stream(last_stream_id)
            try:
                await super().close(error_code=error_code, last_stream_id=last_stream_id)
            finally:
                self.graceful.closed()

    return GoawayAsyncConnection


def probe_gasgi_http2(worker: Any, drain: Http2Drain) -> AsyncHttp2Connections | None:
    """``post_worker_init`` (main thread, the loop not running yet): drain this ``-k asgi`` worker's HTTP/2, or None.

    None, with a DEBUG line, when ``h2`` is not in ``http_protocols``; None
    with one warning line naming what is missing when Gunicorn's async
    HTTP/2 lacks what graceful uses. Otherwise every HTTP/2 connection the
    worker makes from now on drains as ``drain`` says.
    """
    if not http2_enabled(worker):
        logger.debug("graceful: worker %d: no HTTP/2 (Gunicorn %s, asgi worker)", os.getpid(), gunicorn_release())
        return None
    base: Any = None
    events: Any = None
    try:
        module: Any = importlib.import_module(MODULE)
        from h2 import events
    except ImportError as exc:
        missing: str | None = f"an importable HTTP/2 ({exc})"
    else:
        base = getattr(module, "AsyncHTTP2Connection", None)
        if not isinstance(base, type):
            missing = f"{MODULE}.AsyncHTTP2Connection"
        else:
            missing = next((name for name in _CONNECTION_NEEDS if not hasattr(base, name)), None)
        if missing is None and not isinstance(getattr(worker, "loop", None), asyncio.AbstractEventLoop):
            missing = "worker.loop"
    if missing is not None:
        logger.warning(
            "graceful: worker %d: Gunicorn %s's -k asgi HTTP/2 has no %s: HTTP/2 clients get no GOAWAY when it stops",
            os.getpid(),
            gunicorn_release(),
            missing,
        )
        return None
    server = AsyncHttp2Connections(worker.loop)
    module.AsyncHTTP2Connection = _connection_class(base, drain, server, events)  # this worker process only
    drain.attach(server)
    return server
