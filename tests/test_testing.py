"""Tests for graceful.testing, the helpers users get for their own tests."""

from __future__ import annotations

import threading

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.testing import FakeClock, SignalRecorder, run_shutdown


class TestFakeClock:
    def test_wait_that_times_out_jumps_to_its_deadline(self) -> None:
        """An unset event's wait advances fake time by the timeout and returns False."""
        clock = FakeClock(start=100.0, settle=0.01)
        assert clock.wait(threading.Event(), 30) is False
        assert clock.now() == 130.0

    def test_set_event_returns_at_once_without_moving_time(self) -> None:
        """A set event's wait returns True and leaves the time alone."""
        clock = FakeClock(start=5.0)
        event = threading.Event()
        event.set()
        assert clock.wait(event, 30) is True and clock.now() == 5.0

    def test_concurrent_waits_time_out_in_deadline_order(self) -> None:
        """Two waits started together end at their own deadlines, the earlier first."""
        clock = FakeClock(start=0.0, settle=0.01)
        ended: list[tuple[str, float]] = []

        def wait(name: str, timeout: float) -> None:
            clock.wait(threading.Event(), timeout)
            ended.append((name, clock.now()))

        threads = [threading.Thread(target=wait, args=("long", 9)), threading.Thread(target=wait, args=("short", 3))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert ended == [("short", 3.0), ("long", 9.0)]

    def test_advance_moves_time(self) -> None:
        """advance() adds seconds to the fake time."""
        clock = FakeClock(start=1.0)
        clock.advance(2.5)
        assert clock.now() == 3.5


class TestSignalRecorder:
    def test_assert_order_fails_with_both_lists(self) -> None:
        """assert_order names what fired and what was expected when they differ."""
        lifecycle = Lifecycle(Config(), clock=FakeClock())
        recorder = SignalRecorder(lifecycle)
        lifecycle.has_been_ready.fire()
        recorder.assert_order(["HasBeenReady"])
        with pytest.raises(AssertionError, match=r"\['HasBeenReady'\], expected \['ShutdownInitiated'\]"):
            recorder.assert_order(["ShutdownInitiated"])

    def test_run_shutdown_runs_a_thirty_second_timeline_quickly(self) -> None:
        """run_shutdown on a FakeClock finishes a 5 s delay + 15 s drain timeline, recording fake times."""
        lifecycle = Lifecycle(Config(shutdown_delay=5, drain_timeout=15), clock=FakeClock(start=0.0))
        lifecycle.in_flight.add()  # never finishes: the drain times out
        _, recorder, report = run_shutdown(lifecycle, timeout=10)
        assert recorder.time_of("NotAcceptingNewRequests") == 5.0
        assert recorder.time_of("InFlightRequestsDrained") == 20.0
        assert report.ok
