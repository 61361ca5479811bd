"""Tests for graceful.core.waitgroup."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graceful.core.waitgroup import POLL_INTERVAL, ClosesOnce, Release, SafeWaitGroup, WaitGroupClosed
from graceful.testing import FakeClock


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

    def test_a_release_called_twice_ends_its_unit_once(self) -> None:
        """Calling a release again does nothing: it never ends another unit's count."""
        wg = SafeWaitGroup()
        first, second = wg.add(), wg.add()
        first()
        first()
        assert wg.count == 1
        second()
        assert wg.count == 0

    def test_release_from_another_thread_ends_the_wait(self) -> None:
        """A waiter returns True once the last unit is released on another thread, polling for it."""
        wg = SafeWaitGroup()
        release = wg.add()
        timer = threading.Timer(0.05, release)
        timer.start()
        started = time.monotonic()
        assert wg.wait(10) is True
        assert time.monotonic() - started < 5  # polled, not slept out
        timer.join(5)

    def test_wait_without_a_bound_is_refused(self) -> None:
        """The polled condition refuses an unbounded wait (every wait in graceful has a timeout)."""
        wg = SafeWaitGroup()
        wg.add()
        with pytest.raises(ValueError, match="timeout"):
            # A clock's wait that forwards no bound, as a careless Clock would.
            wg.wait(1.0, lambda condition, _timeout: condition.wait(None))

    def test_a_fake_clock_waits_on_it_like_an_event(self) -> None:
        """With a FakeClock the wait times out at the fake deadline, and ends early on release."""
        wg = SafeWaitGroup()
        release = wg.add()
        clock = FakeClock(settle=0.01)  # nothing will release: time jumps after 2 settles
        start = clock.now()
        assert wg.wait(30, clock.wait) is False
        assert clock.now() - start == 30
        clock = FakeClock(settle=0.5)  # the release below lands long before time may jump (2 settles)
        start = clock.now()
        timer = threading.Timer(POLL_INTERVAL, release)
        timer.start()
        assert wg.wait(30, clock.wait) is True
        assert clock.now() == start
        timer.join(5)

    def test_racing_adders_are_either_counted_or_refused(self) -> None:
        """Under concurrent add/release and a wait, every add is counted and drained, or refused."""
        wg = SafeWaitGroup()
        refused = []
        start = threading.Barrier(9)

        def worker() -> None:
            start.wait(5)
            for _ in range(2000):
                try:
                    release = wg.add()
                except WaitGroupClosed:
                    refused.append(1)
                    return
                release()

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        start.wait(5)
        assert wg.wait(30) is True
        for t in threads:
            t.join(30)
        assert wg.count == 0
        assert len(refused) <= 8

    @given(st.lists(st.sampled_from(["add", "release", "release again", "wait"]), max_size=60))
    def test_count_is_adds_minus_releases_and_adds_refused_after_wait(self, ops: list[str]) -> None:
        """Any sequence: count == accepted adds - distinct releases; adds after a wait refused; wait True iff 0."""
        wg = SafeWaitGroup()
        open_releases: list[Callable[[], None]] = []
        used: list[Callable[[], None]] = []
        waited = False
        for op in ops:
            if op == "add":
                if waited:
                    with pytest.raises(WaitGroupClosed):
                        wg.add()
                else:
                    open_releases.append(wg.add())
            elif op == "release" and open_releases:
                release = open_releases.pop(0)
                release()
                used.append(release)
            elif op == "release again" and used:
                used[-1]()
            elif op == "wait":
                waited = True
                assert wg.wait(0) is (not open_releases)
            assert wg.count == len(open_releases)
            assert wg.waiting is waited


class TestHotPathPair:
    """enter/leave: the unchecked form of add() that GracefulMiddleware uses on every request."""

    def test_enter_counts_and_leave_ends(self) -> None:
        """enter(None) counts one unit, leave() ends one; the count is what the drain waits for."""
        wg = SafeWaitGroup()
        wg.enter(None)
        wg.enter(None)
        assert wg.count == 2
        wg.leave()
        assert wg.count == 1
        wg.leave()
        assert wg.count == 0 and wg.wait(0)

    def test_waiting_is_set_by_wait_and_seen_after_enter(self) -> None:
        """A caller that entered after wait() began sees ``waiting`` and leaves: the drain is not held up."""
        wg = SafeWaitGroup()
        assert not wg.waiting
        wg.wait(0)
        wg.enter(None)
        assert wg.waiting
        wg.leave()
        assert wg.count == 0


class TestRelease:
    """Release and ClosesOnce: end a unit once, however often called."""

    def test_before_runs_then_release_once(self) -> None:
        """before() then release(), in that order, on the first call only."""
        calls: list[str] = []
        done = Release(lambda: calls.append("release"), before=lambda: calls.append("before"))
        done()
        done()
        done.close()
        assert calls == ["before", "release"]

    def test_release_runs_when_before_raises(self) -> None:
        """A raising before() (an app's close) still ends the unit, and the error propagates."""
        ended: list[int] = []

        def failing() -> None:
            raise OSError("app close failed")

        done = Release(lambda: ended.append(1), before=failing)
        with pytest.raises(OSError):
            done()
        done()
        assert ended == [1]

    def test_mixin_on_a_list_subclass(self) -> None:
        """ClosesOnce mixed into a list subclass keeps the list and releases once on close()."""

        class Counted(ClosesOnce, list[bytes]):
            __slots__ = ("_release",)
            _before = None

        ended: list[int] = []
        counted = Counted([b"a", b"b"])
        counted._release = lambda: ended.append(1)
        counted.close()
        counted.close()
        assert list(counted) == [b"a", b"b"] and len(counted) == 2 and ended == [1]
