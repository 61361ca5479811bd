"""Tests for graceful.waitgroup."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graceful.waitgroup import SafeWaitGroup, WaitGroupClosed


class TestSafeWaitGroup:
    def test_empty_group_is_drained(self) -> None:
        """wait() on a group with nothing in flight returns True at once."""
        assert SafeWaitGroup().wait(0) is True

    def test_wait_times_out_while_work_is_in_flight(self) -> None:
        """wait() returns False when the count does not reach zero in time."""
        wg = SafeWaitGroup()
        wg.add()
        assert wg.wait(0.01) is False
        assert wg.count == 1

    def test_add_after_wait_raises(self) -> None:
        """Once waiting began, add() raises WaitGroupClosed and does not count."""
        wg = SafeWaitGroup()
        wg.wait(0)
        with pytest.raises(WaitGroupClosed):
            wg.add()
        assert wg.count == 0

    def test_done_without_add_raises(self) -> None:
        """More done() than add() is a ValueError, never a negative count."""
        with pytest.raises(ValueError, match="more often than add"):
            SafeWaitGroup().done()

    def test_done_from_another_thread_wakes_waiter(self) -> None:
        """A waiter is woken when the last in-flight unit finishes on another thread."""
        wg = SafeWaitGroup()
        wg.add()
        threading.Timer(0.05, wg.done).start()
        assert wg.wait(10) is True

    def test_racing_adders_are_either_counted_or_refused(self) -> None:
        """Under concurrent add/done and a wait, every add is counted and drained, or refused."""
        wg = SafeWaitGroup()
        refused = []
        start = threading.Barrier(9)

        def worker() -> None:
            start.wait(5)
            for _ in range(2000):
                try:
                    wg.add()
                except WaitGroupClosed:
                    refused.append(1)
                    return
                wg.done()

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        start.wait(5)
        assert wg.wait(30) is True
        for t in threads:
            t.join(30)
        assert wg.count == 0
        assert len(refused) <= 8

    @given(st.lists(st.sampled_from(["add", "done", "wait"]), max_size=60))
    def test_count_is_adds_minus_dones_and_adds_refused_after_wait(self, ops: list[str]) -> None:
        """Any sequence: count == accepted adds - dones; adds after a wait are refused; wait is True iff count 0."""
        wg = SafeWaitGroup()
        expected, waited = 0, False
        for op in ops:
            if op == "add":
                if waited:
                    with pytest.raises(WaitGroupClosed):
                        wg.add()
                else:
                    wg.add()
                    expected += 1
            elif op == "done":
                if expected == 0:
                    with pytest.raises(ValueError):
                        wg.done()
                else:
                    wg.done()
                    expected -= 1
            else:
                waited = True
                assert wg.wait(0) is (expected == 0)
            assert wg.count == expected
            assert wg.waiting is waited
