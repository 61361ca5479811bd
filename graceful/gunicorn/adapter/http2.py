"""Gunicorn 27's HTTP/2 connections (gthread, gevent): found as they are made, told GOAWAY on their own thread.

Runs in a worker process. Probed once, in ``post_worker_init`` (main
thread; under gevent after its patch), by :func:`probe_http2`, and only
when the worker serves HTTP/2 (``h2`` in ``http_protocols``, a gthread or
gevent worker; ``-k asgi``'s is :mod:`.gasgi_http2`'s). Gunicorn 22-26 have
no HTTP/2 and the sync worker serves HTTP/1.1 only: the probe says "no
HTTP/2" and changes nothing. The rules
(when a connection is told what, which streams are refused) are
:mod:`graceful.gunicorn.http2`'s; this module carries them out:

* Both workers build an HTTP/2 connection with ``gunicorn.http.get_parser``
  (looked up at each call). In this process it builds a subclass of
  Gunicorn's ``HTTP2ServerConnection`` instead, registered with the worker's
  :class:`Http2Connections`. Nothing differs until the drain is requested.
* The connection's socket is wrapped: a read waits on the socket and on a
  wake pipe of the worker's, so a connection whose thread (gthread: one per
  connection) or greenlet (gevent) sits idle in ``recv()`` acts on the
  drain at once, on that thread: h2's state and an SSL socket are not
  shared between threads. The one exception, :meth:`_Goaway.tell_busy`: a
  connection whose thread is inside the app (it serves its streams one
  after another) gets its first GOAWAY, a frame of its own, from the thread
  that requests the drain, under the connection's lock and never while it
  reads.
* The GOAWAYs are written as frames (hyperframe) without telling h2: h2's
  ``close_connection`` moves its state machine to CLOSED, after which every
  frame of a stream still open (its body, a WINDOW_UPDATE for its response)
  is a protocol error. h2 is told (Gunicorn's ``close``) only once no stream
  is open.
* A stream opened above the final GOAWAY's last-stream-id is refused with
  RST_STREAM(REFUSED_STREAM) before Gunicorn sees it; the PING's ACK is noted.

Gunicorn 27.0.1 behaviour this works around (to report upstream; drop once
fixed): on stop, ``workers/gthread.py:663-671`` and
``workers/base_async.py:201-207`` call ``receive_data(b"")``, which takes
the peer-closed branch (``http2/connection.py:284-288``: every stream is
aborted and the connection marked closed), so the ``close()`` that follows
writes no GOAWAY (``http2/connection.py:968-969``); and nothing in Gunicorn
sends GOAWAY before its stop, while ``Connection: close`` is stripped.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from graceful.gunicorn.adapter.release import gunicorn_release
from graceful.gunicorn.http2 import MAX_STREAM_ID, Action, ConnectionDrain, Http2Drain, Http2Server

__all__ = [
    "DrainingConnection",
    "Http2Connections",
    "LiveConnections",
    "goaway_frame",
    "goaway_step",
    "http2_enabled",
    "peer",
    "probe_http2",
]

logger = logging.getLogger(__name__)

#: The opaque data of the PING sent with the first GOAWAY (its ACK ends the round trip).
PING_DATA = b"graceful"
#: Seconds a closed connection waits for the client's own close (so its last frames are read, not reset).
LINGER = 1.0
#: NO_ERROR and REFUSED_STREAM (RFC 9113 section 7).
NO_ERROR = 0x0
REFUSED_STREAM = 0x7

# What the subclass overrides or calls on Gunicorn's HTTP2ServerConnection (probed).
_CONNECTION_NEEDS = ("receive_data", "cleanup_stream", "close", "is_closed", "_handle_event")


def http2_enabled(worker: Any) -> bool:
    """True when the worker's config asks for HTTP/2 (``h2`` in ``http_protocols``; Gunicorn 27+)."""
    protocols = getattr(getattr(worker, "cfg", None), "http_protocols", None)
    return isinstance(protocols, (list, tuple)) and "h2" in protocols


def peer(client_addr: Any) -> str:
    """A connection's peer address as logs name it (``host:port``)."""
    if isinstance(client_addr, tuple) and len(client_addr) >= 2:
        return f"{client_addr[0]}:{client_addr[1]}"
    return str(client_addr)


class LiveConnections:
    """A worker's live HTTP/2 connections, held weakly (any thread; the lock guards an add, a discard, a copy).

    What both kinds share (:class:`Http2Connections` here, gthread and gevent;
    :class:`~graceful.gunicorn.adapter.gasgi_http2.AsyncHttp2Connections`, ``-k asgi``).
    """

    def __init__(self) -> None:
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, connection: Any) -> None:
        with self._lock:
            self._live.add(connection)

    def discard(self, connection: Any) -> None:
        with self._lock:
            self._live.discard(connection)

    def live(self) -> list[Any]:
        """The connections not closed yet."""
        with self._lock:
            return list(self._live)

    def open_streams(self) -> dict[str, list[int]]:
        """See :meth:`graceful.gunicorn.http2.Http2Server.open_streams`."""
        # dict(d) copies a dict in one step under the GIL: safe against the owner's changes.
        return {conn.graceful.peer: sorted(dict(conn.streams)) for conn in self.live() if not conn.is_closed}


class Http2Connections(LiveConnections):
    """This worker's live HTTP/2 connections (:class:`graceful.gunicorn.http2.Http2Server`). Any thread."""

    def __init__(self) -> None:
        super().__init__()
        # Each written once (the drain's request; the worker's stop) and never read: level-triggered
        # broadcasts. A connection watches one only while it could change what it does (no spinning).
        self.wake_read, self._wake_write = os.pipe()
        self.stopping_read, self._stopping_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        os.set_blocking(self._stopping_write, False)

    def wake(self) -> None:
        """See :meth:`graceful.gunicorn.http2.Http2Server.wake`; connections busy serving are told from here."""
        with contextlib.suppress(OSError):  # full: every reader is being woken already
            os.write(self._wake_write, b"w")
        self._tell_busy()

    def wake_stopping(self) -> None:
        """See :meth:`graceful.gunicorn.http2.Http2Server.wake_stopping`; connections busy serving are told."""
        with contextlib.suppress(OSError):  # full: every reader is being woken already
            os.write(self._stopping_write, b"s")
        self._tell_busy()

    def _tell_busy(self) -> None:
        for conn in self.live():
            conn.graceful.tell_busy()


class _Goaway:
    """One connection's GOAWAY, carried out on its own thread or greenlet."""

    def __init__(self, conn: Any, drain: Http2Drain, server: Http2Connections) -> None:
        self.conn = conn
        self.drain = drain
        self.state = drain.connection()
        #: The connection's own socket (the connection reads through a :class:`_WakeableSocket`).
        self.sock = conn.sock
        #: Held around every write to the socket and every step of the drain (re-entered by its own thread).
        self.lock = threading.RLock()
        #: True while its thread reads, or writes (see :meth:`recv` and :meth:`send`).
        self.reading = False
        self.writing = False
        self.server = server
        self.peer = peer(getattr(conn, "client_addr", None))
        self._poll: Any = None
        self._fd = -1
        self._pending: Callable[[], int] | None = None
        #: The wake pipe this connection's poll watches now, if any.
        self._watching: int | None = None

    def acknowledged(self) -> None:
        """The PING's ACK came (its own thread, reading): the final GOAWAY goes out at its next :meth:`act`."""
        self.state.ping_acknowledged()

    def act(self) -> None:
        """Do what the drain says now: a GOAWAY, or the close once no stream is open. Its own thread."""
        conn = self.conn
        if not self.drain.requested:
            return  # the common case: serving, no drain requested
        if conn.is_closed:
            self.closed()
            return
        with self.lock:
            action = self.state.next_action(time.monotonic(), len(conn.streams) + len(conn.pending_requests))
            if action is Action.NOTHING:
                return
            h2 = conn.h2_conn
            try:
                goaway_step(self.state, h2, action, self._write, time.monotonic())
                if action is Action.CLOSE:
                    conn.close(last_stream_id=self.state.last_stream_id)  # h2's GOAWAY (that last-stream-id), closed
            except OSError:
                # The socket is gone: nothing more can be told to this client.
                conn.close()
                self.closed()
                return
        if action is Action.CLOSE:
            self._linger()
            self.closed()

    def tell_busy(self) -> None:
        """The drain's request, from another thread: the first GOAWAY now, if this connection's own is busy.

        Its thread (gthread) or greenlet (gevent) serves the streams one
        after another, inside the app, and would tell the client only after
        the stream, perhaps after the drain's deadline. The GOAWAY is a frame
        of its own, written between two of the connection's writes (under
        its lock) and never while its thread reads (TLS: one SSL object, one
        thread at a time); h2's state is not touched, so it goes without the
        PING, whose round trip its bound then stands in for. A connection
        whose thread holds the lock, or reads, acts by itself (its read wakes).
        """
        if not self.lock.acquire(blocking=False):
            return
        try:
            # The drain is requested already: a read or write that began before shows here.
            if self.reading or self.writing or self.conn.is_closed:
                return
            if self.state.next_action(time.monotonic(), open_streams=1) is not Action.FIRST_GOAWAY:
                return
            with contextlib.suppress(OSError):  # the socket is gone: its thread finds out
                self.sock.sendall(goaway_frame(MAX_STREAM_ID))
                self.state.sent_first(time.monotonic())
        finally:
            self.lock.release()

    def _write(self, data: bytes) -> None:
        self.conn.sock.sendall(data)

    def _linger(self) -> None:
        """Half-close and read until the client closes (at most LINGER s): a close with unread bytes is a reset."""
        sock = self.sock
        try:
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                if not sock.recv(65536):
                    return
        except OSError:  # timed out or reset: the client is gone or not closing; Gunicorn closes the socket
            return

    def closed(self) -> None:
        self.state.close()
        self.server.discard(self.conn)

    def recv(self, sock: Any, size: int) -> bytes:
        """The connection's read (its own thread): :meth:`tell_busy` writes nothing meanwhile."""
        # The flag first, then the check: whichever of this thread and tell_busy comes second sees
        # the other (the GIL orders them), and tell_busy writes only holding the lock.
        self.reading = True
        try:
            if self.drain.requested_at is not None:
                with self.lock:  # a GOAWAY tell_busy is writing: let it finish first
                    pass
            return self._recv(sock, size)
        finally:
            self.reading = False

    def send(self, sock: Any, data: bytes) -> None:
        """The connection's write (its own thread): whole frames, never interleaved with tell_busy's."""
        self.writing = True
        try:
            if self.drain.requested_at is None:
                sock.sendall(data)
                return
            with self.lock:
                sock.sendall(data)
        finally:
            self.writing = False

    def _recv(self, sock: Any, size: int) -> bytes:
        """Wait for data, acting on the drain meanwhile.

        Every HTTP/2 read of the worker comes here: until the drain is
        requested, one ``poll()`` on the socket and the wake pipe.
        """
        timeout = sock.gettimeout()
        poller = self._poller(sock)
        if self.drain.requested_at is None and self._pending is None:
            # The common case, serving with no drain requested, in no more steps than Python's own read
            # with a timeout (a poll, then a read): the socket and the wake pipe, then the read itself.
            if timeout is not None:
                # With a timeout the socket is non-blocking at the OS level: what is there already is
                # read at once, without a poll (under load, most reads).
                with contextlib.suppress(BlockingIOError):
                    return os.read(self._fd, size)
            ready = poller.poll(None if timeout is None else math.ceil(timeout * 1000))
            if not ready:
                raise TimeoutError("timed out")
            if any(fd == self._fd for fd, _event in ready):
                return os.read(self._fd, size)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._pending is not None and self._pending() > 0:
                return bytes(sock.recv(size))  # TLS: decrypted bytes wait in the SSL object, not the socket
            self._watch(self.state.watches())
            self.act()
            if self.conn.is_closed:
                return b""  # closed by us with no stream open: what a peer's close looks like to Gunicorn
            now = time.monotonic()
            wake_in = self.state.wake_in(now)
            if self._watching is None and wake_in is None:
                return bytes(sock.recv(size))  # only a frame can change what to do now
            limits = [t for t in (wake_in, None if deadline is None else deadline - now) if t is not None]
            ready = poller.poll(math.ceil(max(0.0, min(limits)) * 1000) if limits else None)
            if any(fd == self._fd for fd, _event in ready):
                return bytes(sock.recv(size))
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("timed out")

    def _poller(self, sock: Any) -> Any:
        # Made on first use, on this thread: under gevent, select.poll is gevent's (patched before).
        if self._poll is None:
            self._fd = sock.fileno()
            self._pending = getattr(sock, "pending", None)
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN)
            self._watch(self.state.watches())
        return self._poll

    def _watch(self, which: str | None) -> None:
        """Watch the wake pipe that could change what this connection does, and only that one."""
        fd = {"request": self.server.wake_read, "stopping": self.server.stopping_read}.get(which or "")
        if fd == self._watching:
            return
        if self._watching is not None:
            self._poll.unregister(self._watching)
        if fd is not None:
            self._poll.register(fd, select.POLLIN)
        self._watching = fd


class _WakeableSocket:
    """A connection's socket whose ``recv`` also wakes for the drain; everything else is the socket's."""

    def __init__(self, sock: Any, goaway: _Goaway) -> None:
        self._sock = sock
        self._goaway = goaway

    def recv(self, size: int) -> bytes:
        return self._goaway.recv(self._sock, size)

    def sendall(self, data: bytes) -> None:
        self._goaway.send(self._sock, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def goaway_step(state: ConnectionDrain, h2: Any, action: Action, write: Callable[[bytes], object], now: float) -> None:
    """The frames of ``action`` for one connection, on its own thread or loop (both connection kinds).

    FIRST_GOAWAY writes what h2 had pending, GOAWAY(NO_ERROR, 2^31-1) and a
    PING (its ACK ends the round trip); FINAL_GOAWAY what h2 had pending and
    GOAWAY(NO_ERROR, the highest stream the client opened: those above it are
    refused); before a CLOSE, the last-stream-id is fixed (a final GOAWAY
    already out stays the last word: streams h2 saw after it were refused).
    The caller closes, and times the round trip, its own way. ``now``: monotonic.
    """
    if action is Action.FIRST_GOAWAY:
        pending = h2.data_to_send()
        h2.ping(PING_DATA)
        write(bytes(pending + goaway_frame(MAX_STREAM_ID) + h2.data_to_send()))
        state.sent_first(now)
    elif action is Action.FINAL_GOAWAY:
        last = int(h2.highest_inbound_stream_id)
        write(bytes(h2.data_to_send() + goaway_frame(last)))
        state.sent_final(last)
    elif action is Action.CLOSE and state.last_stream_id is None:
        state.sent_final(int(h2.highest_inbound_stream_id))


def goaway_frame(last_stream_id: int) -> bytes:
    """A GOAWAY(NO_ERROR, ``last_stream_id``) frame, serialized (written without telling h2)."""
    from hyperframe.frame import GoAwayFrame  # h2's own dependency, there whenever Gunicorn serves HTTP/2

    return bytes(GoAwayFrame(0, last_stream_id=last_stream_id, error_code=NO_ERROR).serialize())


class DrainingConnection:
    """What both subclasses of Gunicorn's HTTP/2 connections do alike (gthread and gevent's here, ``-k asgi``'s
    in :mod:`.gasgi_http2`): a mixin placed before Gunicorn's class. Runs where the connection's own frames
    are handled (its thread or greenlet, or the worker's event loop); ``graceful`` is its GOAWAY's carrier
    (``drain``, ``state``, ``act()``, ``acknowledged()``), ``h2_events`` h2's events module."""

    graceful: Any
    h2_events: Any
    h2_conn: Any
    streams: Any

    def cleanup_stream(self, stream_id: int) -> None:
        graceful = self.graceful
        if graceful.drain.requested_at is None:  # serving, no drain requested: Gunicorn's own
            super().cleanup_stream(stream_id)  # type: ignore[misc]  # Gunicorn's class, after this in the MRO
            return
        known = stream_id in self.streams
        super().cleanup_stream(stream_id)  # type: ignore[misc]
        if known:
            graceful.state.response_done()
            graceful.act()

    def _handle_event(self, event: Any) -> Any:
        state = self.graceful.state
        if state.first_sent_at is None:  # no GOAWAY yet: Gunicorn's own
            return super()._handle_event(event)  # type: ignore[misc]
        events = self.h2_events
        if isinstance(event, events.RequestReceived) and not state.accepts(event.stream_id):
            with contextlib.suppress(Exception):  # h2 may have closed it already: nothing to refuse
                self.h2_conn.reset_stream(event.stream_id, error_code=REFUSED_STREAM)
            return None  # Gunicorn writes the RST_STREAM with its other frames
        if isinstance(event, events.PingAckReceived) and event.ping_data == PING_DATA:
            self.graceful.acknowledged()
        return super()._handle_event(event)  # type: ignore[misc]


def _connection_class(base: type, drain: Http2Drain, server: Http2Connections, events: Any) -> type:
    """A subclass of Gunicorn's HTTP2ServerConnection that drains as :class:`Http2Drain` says."""

    class GoawayConnection(DrainingConnection, base):  # type: ignore[misc]  # Gunicorn's class, found at run time
        h2_events = events

        def __init__(self, cfg: Any, sock: Any, client_addr: Any) -> None:
            super().__init__(cfg, sock, client_addr)
            self.graceful = _Goaway(self, drain, server)
            self.sock: Any = _WakeableSocket(self.graceful.sock, self.graceful)
            server.add(self)

        # Each override's first line is the path while no drain is requested: Gunicorn's own.

        def receive_data(self, data: Any = None) -> Any:
            if drain.requested_at is None or data is not None:
                return super().receive_data(data)
            self.graceful.act()
            try:
                return super().receive_data(data)
            finally:
                if self.is_closed:
                    self.graceful.closed()

        def close(self, error_code: int = NO_ERROR, last_stream_id: int | None = None) -> None:
            last_stream_id = self.graceful.state.closing_last_stream(last_stream_id)
            super().close(error_code=error_code, last_stream_id=last_stream_id)
            self.graceful.closed()

    return GoawayConnection


def probe_http2(worker: Any, drain: Http2Drain, kind: str | None) -> Http2Server | None:
    """``post_worker_init`` (main thread; gevent: after its patch): drain this worker's HTTP/2, or None.

    None, with a DEBUG line, when the worker serves no HTTP/2 (Gunicorn
    22-26, the sync worker, ``h2`` not in ``http_protocols``); None with a
    warning when Gunicorn's HTTP/2 lacks what graceful uses. Otherwise every
    HTTP/2 connection the worker makes from now on drains as ``drain`` says.
    """
    if kind == "asgi":
        # Imported here: a WSGI worker loads no asyncio for it.
        from graceful.gunicorn.adapter.gasgi_http2 import probe_gasgi_http2

        return probe_gasgi_http2(worker, drain)
    if kind not in ("gthread", "gevent") or not http2_enabled(worker):
        logger.debug("graceful: worker %d: no HTTP/2 (Gunicorn %s, %s worker)", os.getpid(), gunicorn_release(), kind)
        return None
    http = sys.modules.get("gunicorn.http")
    try:
        from gunicorn.http2.connection import HTTP2ServerConnection
        from h2 import events
    except ImportError as exc:
        missing: str | None = f"an importable HTTP/2 ({exc})"
    else:
        missing = next((name for name in _CONNECTION_NEEDS if not hasattr(HTTP2ServerConnection, name)), None)
        if missing is None and not callable(getattr(http, "get_parser", None)):
            missing = "gunicorn.http.get_parser"
    if missing is not None:
        logger.warning(
            "graceful: worker %d: Gunicorn %s's HTTP/2 has no %s: HTTP/2 clients get no GOAWAY when it stops",
            os.getpid(),
            gunicorn_release(),
            missing,
        )
        return None
    server = Http2Connections()
    cls = _connection_class(HTTP2ServerConnection, drain, server, events)
    get_parser = http.get_parser  # type: ignore[union-attr]  # checked above

    def get_draining_parser(cfg: Any, source: Any, source_addr: Any, http2_connection: bool = False) -> Any:
        if http2_connection:
            return cls(cfg, source, source_addr)
        return get_parser(cfg, source, source_addr)

    http.get_parser = get_draining_parser  # type: ignore[union-attr]  # this worker process only
    drain.attach(server)
    return server
