"""Tests for graceful.gunicorn.shared.ArrivalBoard: workers' arrivals, read by the master across fork."""

from __future__ import annotations

import os
import threading
import time

import pytest

from graceful.core.clock import MonotonicClock
from graceful.core.stats import RequestStats
from graceful.gunicorn.shared import ArrivalBoard


def reap(pid: int, timeout: float) -> int:
    """Wait (bounded) for child ``pid`` to exit; return its exit status, -1 if it did not in time."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        pause.wait(0.01)
    return -1


class TestArrivalBoard:
    def test_empty_until_the_first_arrival(self) -> None:
        """A fresh board has no arrival to report."""
        assert ArrivalBoard().last() is None

    # Python 3.12+ warns about fork() in a process with threads (pytest-timeout's); the child only writes memory.
    @pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
    def test_a_forked_workers_arrival_reaches_the_master(self) -> None:
        """A child's request statistics write each arrival's monotonic time; the parent reads it."""
        board = ArrivalBoard()
        before = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the "worker": count one arrival during the shutdown, then leave at once
            stats = RequestStats(MonotonicClock())
            stats.publish_arrivals(board.slot)
            stats.arrived(False)
            os._exit(0)
        assert reap(pid, timeout=30) == 0
        last = board.last()
        assert last is not None and before <= last <= time.monotonic()

    def test_the_latest_write_wins(self) -> None:
        """Two workers' arrivals: the board holds the later one written."""
        board = ArrivalBoard()
        board.slot[0] = 5.0
        board.slot[0] = 7.5
        assert board.last() == 7.5

    def test_garbage_is_not_an_arrival(self) -> None:
        """A value no clock wrote (NaN, infinite, not positive) reads as no arrival."""
        board = ArrivalBoard()
        for value in (float("nan"), float("inf"), -1.0):
            board.slot[0] = value
            assert board.last() is None
