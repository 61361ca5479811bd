"""HTTP/2 draining's rules (graceful.gunicorn.http2) and the worker's use of them, with fakes and a fake clock."""

from __future__ import annotations

import logging
import signal
from typing import Any

import pytest

from graceful.gunicorn.adapter.http2 import http2_enabled, probe_http2
from graceful.gunicorn.http2 import ROUND_TRIP_TIMEOUT, Action, Http2Drain
from graceful.gunicorn.stop_reason import StopReason
from tests.gunicorn.test_process_stop import Shared, SyncWorker, stop_of


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeServer:
    """The worker's HTTP/2 connections as the drain sees them: open streams by peer."""

    def __init__(self, streams: dict[str, list[int]] | None = None) -> None:
        self.streams = streams or {}
        self.wakes = 0
        self.stopping_wakes = 0

    def wake(self) -> None:
        self.wakes += 1

    def wake_stopping(self) -> None:
        self.stopping_wakes += 1

    def open_streams(self) -> dict[str, list[int]]:
        return dict(self.streams)


class Pause:
    """threading.Event's wait, advancing the fake clock and running a step instead of sleeping."""

    def __init__(self, clock: Clock, step: Any = None) -> None:
        self.clock = clock
        self.step = step
        self.waits = 0

    def wait(self, timeout: float) -> bool:
        self.waits += 1
        self.clock.now += timeout
        if self.step is not None:
            self.step(self.waits)
        return False


def drain_with(server: FakeServer | None = None) -> tuple[Http2Drain, Clock]:
    clock = Clock()
    drain = Http2Drain("ShutdownInitiated", clock=clock)
    if server is not None:
        drain.attach(server)
    return drain, clock


class TestConnectionSteps:
    def test_nothing_before_the_drain_is_requested(self) -> None:
        """A connection serves as usual until the GOAWAY is requested."""
        drain, clock = drain_with()
        conn = drain.connection()
        assert conn.next_action(clock(), open_streams=3) is Action.NOTHING
        assert conn.watches() == "request"

    def test_two_step_goaway_then_close_once_the_last_stream_ends(self) -> None:
        """GOAWAY(2^31-1) first; after the PING's ACK the real last-stream-id; close when no stream is open."""
        drain, clock = drain_with(FakeServer())
        conn = drain.connection()
        drain.request()
        assert conn.watches() is None
        steps = [conn.next_action(clock(), open_streams=2)]
        conn.sent_first(clock())
        steps.append(conn.next_action(clock(), open_streams=2))  # waiting for the round trip
        conn.ping_acknowledged()
        steps.append(conn.next_action(clock(), open_streams=2))
        conn.sent_final(7)
        steps.append(conn.next_action(clock(), open_streams=1))
        steps.append(conn.next_action(clock(), open_streams=0))
        assert steps == [Action.FIRST_GOAWAY, Action.NOTHING, Action.FINAL_GOAWAY, Action.NOTHING, Action.CLOSE]

    def test_an_idle_connection_closes_after_the_round_trip(self) -> None:
        """With no stream open the final GOAWAY and the close are one step: an idle connection holds nothing."""
        drain, clock = drain_with()
        conn = drain.connection()
        drain.request()
        conn.sent_first(clock())
        conn.ping_acknowledged()
        assert conn.next_action(clock(), open_streams=0) is Action.CLOSE

    def test_the_round_trip_is_bounded_without_an_ack(self) -> None:
        """A client that never answers the PING gets the final GOAWAY ROUND_TRIP_TIMEOUT after the first."""
        drain, clock = drain_with()
        conn = drain.connection()
        drain.request()
        conn.sent_first(clock())
        assert conn.wake_in(clock()) == ROUND_TRIP_TIMEOUT
        clock.now += ROUND_TRIP_TIMEOUT / 2
        assert conn.next_action(clock(), open_streams=1) is Action.NOTHING
        assert conn.wake_in(clock()) == pytest.approx(ROUND_TRIP_TIMEOUT / 2)
        clock.now += ROUND_TRIP_TIMEOUT / 2
        assert conn.next_action(clock(), open_streams=1) is Action.FINAL_GOAWAY

    def test_no_timer_once_acknowledged_or_final(self) -> None:
        """Only the round trip wakes a connection by time: not before the first GOAWAY, nor after the ACK."""
        drain, clock = drain_with()
        conn = drain.connection()
        assert conn.wake_in(clock()) is None
        drain.request()
        conn.sent_first(clock())
        conn.ping_acknowledged()
        assert conn.wake_in(clock()) is None

    def test_a_connection_made_during_the_delay_gets_one_response_first(self) -> None:
        """A connection made after the request is served, then told GOAWAY after its first response."""
        drain, clock = drain_with()
        drain.request()
        conn = drain.connection()
        assert conn.made_after_request
        assert conn.next_action(clock(), open_streams=1) is Action.NOTHING
        conn.response_done()
        assert conn.next_action(clock(), open_streams=0) is Action.FIRST_GOAWAY

    def test_a_connection_made_during_the_delay_is_told_when_the_worker_stops(self) -> None:
        """One that had no response yet gets GOAWAY once the worker's stop begins, and watches for it till then."""
        server = FakeServer()
        drain, clock = drain_with(server)
        drain.request()
        conn = drain.connection()
        assert conn.watches() == "stopping"
        drain.stop()
        assert server.stopping_wakes == 1
        assert conn.next_action(clock(), open_streams=0) is Action.FIRST_GOAWAY
        conn.sent_first(clock())
        assert conn.watches() is None

    def test_streams_above_the_last_stream_id_are_refused_and_counted(self) -> None:
        """Before the final GOAWAY every stream is served; after it, only those up to its last-stream-id."""
        drain, _clock = drain_with()
        conn = drain.connection()
        assert conn.accepts(99)
        conn.sent_final(5)
        assert [conn.accepts(sid) for sid in (3, 5, 7, 9)] == [True, True, False, False]
        assert drain.counts.refused == 2

    def test_the_closing_goaway_never_says_more_than_the_final_one(self) -> None:
        """The server's own close: its last-stream-id, unless above what the final GOAWAY said (or none given)."""
        drain, _clock = drain_with()
        conn = drain.connection()
        assert (conn.closing_last_stream(None), conn.closing_last_stream(7)) == (None, 7)  # no final GOAWAY yet
        conn.sent_final(5)
        assert [conn.closing_last_stream(asked) for asked in (None, 0, 5, 9)] == [5, 0, 5, 5]

    def test_a_closed_connection_does_nothing(self) -> None:
        """Once closed (by us or the peer) no step is taken."""
        drain, clock = drain_with()
        conn = drain.connection()
        drain.request()
        conn.close()
        assert conn.next_action(clock(), open_streams=0) is Action.NOTHING
        assert conn.watches() is None


class TestDrain:
    def test_request_once_wakes_every_connection(self) -> None:
        """The first request() records when and wakes the connections once; later ones change nothing."""
        server = FakeServer()
        drain, clock = drain_with(server)
        assert drain.request()
        clock.now += 1
        assert not drain.request()
        assert drain.requested_at == 100.0
        assert server.wakes == 1

    def test_the_workers_stop_requests_and_wakes_once(self) -> None:
        """stop() requests the GOAWAY too (a process stop) and wakes the spared connections once."""
        server = FakeServer()
        drain, _clock = drain_with(server)
        drain.stop()
        drain.stop()
        assert drain.requested and drain.stopping
        assert (server.wakes, server.stopping_wakes) == (1, 1)

    def test_only_the_trigger_signal_requests(self) -> None:
        """As a lifecycle listener it acts on ShutdownInitiated only."""
        drain, _clock = drain_with(FakeServer())
        drain.on_signal("HasBeenReady", 1.0)
        assert not drain.requested
        drain.on_signal("ShutdownInitiated", 2.0)
        assert drain.requested

    def test_counts(self) -> None:
        """Connections, streams completed after the request and connections told GOAWAY are counted."""
        drain, clock = drain_with()
        conn = drain.connection()
        conn.response_done()  # before the request: not a drained stream
        drain.request()
        conn.response_done()
        conn.sent_first(clock())
        counts = drain.counts
        assert (counts.connections, counts.drained, counts.goaway_connections) == (1, 1, 1)

    def test_abandoned_streams_are_counted_and_named(self, caplog: pytest.LogCaptureFixture) -> None:
        """At the deadline the streams still open are counted and named, peer by peer, in one warning."""
        server = FakeServer({"127.0.0.1:5000": [3, 1], "127.0.0.1:5001": [], "127.0.0.1:5002": [9]})
        drain, _clock = drain_with(server)
        with caplog.at_level(logging.WARNING, logger="graceful.gunicorn.http2"):
            assert drain.abandoned(42) == 3
        assert drain.counts.abandoned == 3
        [line] = caplog.messages
        assert "worker 42 abandoned 3 HTTP/2 stream(s)" in line
        assert "127.0.0.1:5000 streams 1, 3; 127.0.0.1:5002 streams 9" in line
        assert "5001" not in line

    def test_figures_logged_at_exit(self, caplog: pytest.LogCaptureFixture) -> None:
        """At exit one line gives the worker's HTTP/2 figures; none without HTTP/2 connections or a drain."""
        drain, clock = drain_with(FakeServer())
        conn = drain.connection()
        with caplog.at_level(logging.INFO, logger="graceful.gunicorn.http2"):
            drain.log_counts(7)  # no drain requested: nothing to say
            drain.request()
            conn.sent_first(clock())
            conn.response_done()
            conn.sent_final(3)
            conn.accepts(5)
            drain.log_counts(7)
        assert caplog.messages == [
            "graceful: worker 7 HTTP/2: 1 connection(s), 1 told GOAWAY; 1 stream(s) drained, 1 refused, 0 abandoned"
        ]

    def test_nothing_abandoned_says_nothing(self, caplog: pytest.LogCaptureFixture) -> None:
        """With no stream open at the deadline there is no warning."""
        drain, _clock = drain_with(FakeServer({"127.0.0.1:5000": []}))
        with caplog.at_level(logging.WARNING):
            assert drain.abandoned(42) == 0
        assert caplog.messages == []

    def test_waits_until_the_connections_closed(self) -> None:
        """gevent's stop waits until no HTTP/2 connection is open (the third look here)."""
        server = FakeServer({"a": [1], "b": []})
        drain, clock = drain_with(server)
        pause = Pause(clock, step=lambda n: server.streams.clear() if n == 3 else None)
        assert drain.wait_for_connections(clock() + 10.0, pause) == 0  # type: ignore[arg-type]
        assert pause.waits == 3

    def test_the_wait_ends_at_the_deadline(self) -> None:
        """A connection that never closes holds the wait only until the deadline; its count is returned."""
        server = FakeServer({"a": [1]})
        drain, clock = drain_with(server)
        pause = Pause(clock)
        assert drain.wait_for_connections(clock() + 0.5, pause) == 1  # type: ignore[arg-type]
        assert clock() >= 100.5


class TestProcessStop:
    def test_a_process_stop_requests_the_goaway(self) -> None:
        """A process stop (recycled here) requests the GOAWAY at its start, as ShutdownInitiated does."""
        stop = stop_of(SyncWorker())
        drain, _clock = drain_with(FakeServer())
        stop.http2 = drain
        stop.begin(StopReason.RECYCLED)
        assert drain.requested and drain.stopping

    def test_gevent_serving_http2_holds_gunicorns_term(self) -> None:
        """With HTTP/2, the OS handler leaves Gunicorn's SIGTERM handler to the graceful-stop thread."""
        worker = SyncWorker()
        stop = stop_of(worker, Shared())
        called: list[int] = []
        stop._gunicorn_term = lambda signum, _frame: called.append(signum)
        stop.http2, _clock = drain_with(FakeServer())
        stop._on_term(signal.SIGTERM, None)
        assert called == []
        stop.http2 = None
        stop._on_term(signal.SIGTERM, None)
        assert called == [signal.SIGTERM]

    def test_abandoned_streams_are_counted_before_gunicorns_term(self) -> None:
        """At the drain's end the streams still open are counted before Gunicorn's stop cuts them."""
        stop = stop_of(SyncWorker())
        server = FakeServer({"127.0.0.1:1": [1]})
        drain, _clock = drain_with(server)
        stop.http2 = drain
        order: list[str] = []
        stop._gunicorn_term = lambda _signum, _frame: order.append(f"term after {drain.counts.abandoned}")
        stop._term_after_http2(signal.SIGTERM, None)
        assert order == ["term after 1"]


class GunicornWorker:
    def __init__(self, protocols: Any) -> None:
        self.cfg = type("Cfg", (), {"http_protocols": protocols})()


class TestProbe:
    @pytest.mark.parametrize(
        ("protocols", "enabled"), [(["h2", "h1"], True), (["h1"], False), (None, False), ("h2", False)]
    )
    def test_enabled_only_when_h2_is_configured(self, protocols: Any, enabled: bool) -> None:
        """HTTP/2 is on when Gunicorn's validated http_protocols list holds h2 (absent before 27)."""
        assert http2_enabled(GunicornWorker(protocols)) is enabled

    @pytest.mark.parametrize("kind", ["sync", None])
    def test_no_http2_on_the_sync_worker(self, kind: str | None) -> None:
        """The sync worker serves HTTP/1.1 only: nothing is probed or patched."""
        drain, _clock = drain_with()
        assert probe_http2(GunicornWorker(["h2", "h1"]), drain, kind) is None
        assert drain.server is None

    def test_no_http2_when_not_configured(self) -> None:
        """Gunicorn 22-26 (no http_protocols) and h1-only configs: 'no HTTP/2', nothing changed."""
        drain, _clock = drain_with()
        assert probe_http2(GunicornWorker(None), drain, "gthread") is None
        assert drain.server is None
