"""HTTP/2 draining: GOAWAY on every connection, serve what was opened, refuse the rest, close.

Runs in a Gunicorn 27+ gthread, gevent or ``-k asgi`` worker process that serves HTTP/2;
inert elsewhere (:func:`graceful.gunicorn.adapter.http2.probe_http2` says
"no HTTP/2" and nothing here is made). What Gunicorn's connection objects
are, and how a frame reaches the wire on the connection's own thread or
greenlet (or the worker's event loop), is :mod:`graceful.gunicorn.adapter.http2`'s
(:mod:`graceful.gunicorn.adapter.gasgi_http2`'s); the rules are here,
so that fakes can drive them.

HTTP/2 forbids ``Connection: close``, so a client is moved the way RFC 9113
section 6.8 says, one connection at a time::

    T0  the worker's ShutdownInitiated (or its process stop begins)
        -> every HTTP/2 connection: GOAWAY(NO_ERROR, last-stream-id 2^31-1) + PING
           (a connection made after T0: after its first response, or when the worker's
           stop begins, whichever is first)
    T1  the PING's ACK (one round trip; at most ROUND_TRIP_TIMEOUT after)
        -> GOAWAY(NO_ERROR, last-stream-id = the highest stream the client opened)
           streams above it are refused with RST_STREAM(REFUSED_STREAM): safe to retry
    T2  its last stream ends -> the connection closes (an idle one at T1)

The drain counts streams, not connections: an idle HTTP/2 connection is
closed at T1 and holds nothing. Streams still open at the drain's deadline
are abandoned, after their GOAWAY, and counted and named (:meth:`Http2Drain.abandoned`).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from graceful.gunicorn.recycling import CONNECTIONS_POLL

__all__ = [
    "MAX_STREAM_ID",
    "ROUND_TRIP_TIMEOUT",
    "Action",
    "ConnectionDrain",
    "Http2Counts",
    "Http2Drain",
    "Http2Server",
]

logger = logging.getLogger(__name__)

#: The first GOAWAY's last-stream-id (RFC 9113 section 6.8): "no stream refused yet".
MAX_STREAM_ID = 2**31 - 1
#: Seconds to wait for the PING's ACK (the client saw the first GOAWAY) before the real last-stream-id goes out.
ROUND_TRIP_TIMEOUT = 1.0


class Action(enum.Enum):
    """What a connection's own thread does next."""

    NOTHING = "nothing"
    #: GOAWAY(NO_ERROR, 2^31-1) and a PING.
    FIRST_GOAWAY = "first GOAWAY"
    #: GOAWAY(NO_ERROR, the highest stream opened); streams above it are refused.
    FINAL_GOAWAY = "final GOAWAY"
    #: The final GOAWAY (if not sent yet), then close: no stream is open.
    CLOSE = "close"


class Http2Server(Protocol):
    """What the drain needs from the worker's HTTP/2 connections (the adapter's side; any thread)."""

    def wake(self) -> None:
        """Wake every connection waiting for data, so that it acts on the drain's request."""

    def wake_stopping(self) -> None:
        """Wake the connections made after the request that have had no response yet: the worker stops."""

    def open_streams(self) -> dict[str, list[int]]:
        """The streams open now on each live HTTP/2 connection, by peer address."""


class ConnectionDrain:
    """One HTTP/2 connection's GOAWAY steps (see the module docstring). Its own thread or greenlet only."""

    def __init__(self, drain: Http2Drain, made_after_request: bool) -> None:
        self._drain = drain
        #: True when the connection was made after the GOAWAY was requested: it gets one response first.
        self.made_after_request = made_after_request
        self.responses = 0
        #: Monotonic time the first GOAWAY went out; None before.
        self.first_sent_at: float | None = None
        #: True once the client acknowledged the PING sent with the first GOAWAY.
        self.acknowledged = False
        #: The final GOAWAY's last-stream-id; None before it went out.
        self.last_stream_id: int | None = None
        self.closed = False

    def next_action(self, now: float, open_streams: int) -> Action:
        """What to do now, given the streams open on the connection (requests queued included)."""
        if self.closed:
            return Action.NOTHING
        if self.last_stream_id is not None:
            return Action.CLOSE if open_streams == 0 else Action.NOTHING
        if self.first_sent_at is not None:
            if not self.acknowledged and now - self.first_sent_at < ROUND_TRIP_TIMEOUT:
                return Action.NOTHING
            return Action.CLOSE if open_streams == 0 else Action.FINAL_GOAWAY
        if not self._drain.requested or self._spared():
            return Action.NOTHING
        return Action.FIRST_GOAWAY

    def _spared(self) -> bool:
        # Made during the delay: served first, unless the worker stops before its first response.
        return self.made_after_request and self.responses == 0 and not self._drain.stopping

    def wake_in(self, now: float) -> float | None:
        """Seconds until :meth:`next_action` may change without any frame arriving; None: only a frame or a wake."""
        if self.first_sent_at is None or self.last_stream_id is not None or self.acknowledged:
            return None
        return max(0.0, self.first_sent_at + ROUND_TRIP_TIMEOUT - now)

    def watches(self) -> str | None:
        """Which wake could change :meth:`next_action` now: ``"request"``, ``"stopping"``, or None."""
        if self.closed or self.first_sent_at is not None:
            return None
        if not self._drain.requested:
            return "request"
        return "stopping" if self._spared() else None

    def accepts(self, stream_id: int) -> bool:
        """False for a stream the client opened above the final GOAWAY's last-stream-id (refused, counted)."""
        if self.last_stream_id is None or stream_id <= self.last_stream_id:
            return True
        self._drain.refused()
        return False

    def sent_first(self, now: float) -> None:
        """The first GOAWAY and its PING are on the wire."""
        self.first_sent_at = now
        self._drain.count("goaway_connections")

    def closing_last_stream(self, asked: int | None) -> int | None:
        """The last-stream-id of the connection's closing GOAWAY: never more than a GOAWAY already said
        (RFC 9113 section 6.8). ``asked``: the server's own (Gunicorn's: the highest stream still open,
        0 for an idle connection), None for its default."""
        said = self.last_stream_id
        if asked is None or (said is not None and asked > said):
            return said
        return asked

    def sent_final(self, last_stream_id: int) -> None:
        """The final GOAWAY (``last_stream_id``) is on the wire."""
        self.last_stream_id = last_stream_id

    def ping_acknowledged(self) -> None:
        """The client answered the PING: it has seen the first GOAWAY."""
        self.acknowledged = True

    def response_done(self) -> None:
        """A stream's response is complete (or the stream is gone)."""
        self.responses += 1
        if self._drain.requested:
            self._drain.count("drained")

    def close(self) -> None:
        """The connection is closed (by us, or by the peer)."""
        self.closed = True


def _nothing() -> None:
    """``on_refused`` when nothing else counts refused streams."""


@dataclass
class Http2Counts:
    """One worker's HTTP/2 figures (logged at its exit: :meth:`Http2Drain.log_counts`)."""

    #: HTTP/2 connections made.
    connections: int = 0
    #: Streams completed after the GOAWAY was requested.
    drained: int = 0
    #: Streams refused with REFUSED_STREAM (opened above a final GOAWAY's last-stream-id).
    refused: int = 0
    #: Connections told GOAWAY.
    goaway_connections: int = 0
    #: Streams still open at the drain's deadline.
    abandoned: int = 0


class Http2Drain:
    """One worker's HTTP/2 draining (worker process; any thread unless said)."""

    def __init__(
        self, trigger: str, clock: Callable[[], float] = time.monotonic, on_refused: Callable[[], object] = _nothing
    ) -> None:
        #: The lifecycle signal whose firing requests the GOAWAY (the worker's ShutdownInitiated).
        self.trigger = trigger
        self.clock = clock
        #: Called for each stream refused (the connection's thread): the worker's rejection count.
        self._on_refused = on_refused
        #: Monotonic time the GOAWAY was requested (ShutdownInitiated, or the process stop's start).
        self.requested_at: float | None = None
        #: True once the worker stops (its stop began): connections made during the delay get GOAWAY too.
        self.stopping = False
        self.counts = Http2Counts()
        self.server: Http2Server | None = None
        self._lock = threading.Lock()

    @property
    def requested(self) -> bool:
        """True once every HTTP/2 connection is to be told GOAWAY."""
        return self.requested_at is not None

    def attach(self, server: Http2Server) -> None:
        """``post_worker_init``: the worker's HTTP/2 connections, as the adapter found them."""
        self.server = server

    def connection(self) -> ConnectionDrain:
        """A new HTTP/2 connection's steps (its own thread)."""
        self.count("connections")
        return ConnectionDrain(self, made_after_request=self.requested)

    def count(self, name: str) -> None:
        """Add one to the count ``name`` of :class:`Http2Counts`."""
        with self._lock:
            setattr(self.counts, name, getattr(self.counts, name) + 1)

    def refused(self) -> None:
        """A stream was refused with REFUSED_STREAM (its connection's thread): counted here and by ``on_refused``."""
        self.count("refused")
        self._on_refused()

    def request(self) -> bool:
        """Tell every HTTP/2 connection GOAWAY from now on; True the first time. Not in a signal handler."""
        with self._lock:
            if self.requested_at is not None:
                return False
            self.requested_at = self.clock()
        if self.server is not None:
            self.server.wake()
        return True

    def stop(self) -> None:
        """The worker's stop began (any thread, not a signal handler): every connection is told GOAWAY now."""
        self.request()
        with self._lock:
            if self.stopping:
                return
            self.stopping = True
        if self.server is not None:
            self.server.wake_stopping()

    def on_signal(self, name: str, _at: float) -> None:
        """A lifecycle listener (the firing thread): the trigger (ShutdownInitiated) requests the GOAWAY."""
        if name == self.trigger:
            self.request()

    def open_connections(self) -> int:
        """How many HTTP/2 connections are open now."""
        return 0 if self.server is None else len(self.server.open_streams())

    def wait_for_connections(self, deadline: float, pause: threading.Event) -> int:
        """Until no HTTP/2 connection is open or ``deadline`` (monotonic); the number still open.

        gevent worker's ``graceful-stop`` greenlet: Gunicorn's stop cuts
        every HTTP/2 connection without a GOAWAY, so it waits for this.
        Gunicorn offers no event for "connection closed": it looks every
        :data:`CONNECTIONS_POLL` seconds.
        """
        while self.open_connections() > 0 and self.clock() < deadline:
            pause.wait(CONNECTIONS_POLL)
        return self.open_connections()

    def log_counts(self, pid: int) -> None:
        """``worker_exit``: one line with this worker's HTTP/2 figures, if it served HTTP/2 and was told to drain."""
        counts = self.counts
        if not counts.connections or not self.requested:
            return
        logger.info(
            "graceful: worker %d HTTP/2: %d connection(s), %d told GOAWAY; %d stream(s) drained, %d refused,"
            " %d abandoned",
            pid,
            counts.connections,
            counts.goaway_connections,
            counts.drained,
            counts.refused,
            counts.abandoned,
        )

    def abandoned(self, pid: int) -> int:
        """At the drain's deadline: count the streams still open, name them in one warning; their number."""
        streams = {} if self.server is None else self.server.open_streams()
        open_ids = {peer: ids for peer, ids in streams.items() if ids}
        total = sum(len(ids) for ids in open_ids.values())
        with self._lock:
            self.counts.abandoned += total
        if total:
            named = "; ".join(f"{peer} streams {', '.join(map(str, sorted(ids)))}" for peer, ids in open_ids.items())
            logger.warning(
                "graceful: worker %d abandoned %d HTTP/2 stream(s) at the drain's deadline, after GOAWAY: %s",
                pid,
                total,
                named,
            )
        return total
