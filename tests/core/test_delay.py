"""Tests for graceful.core.delay: the adaptive delay's floor, quiet period and maximum, on a fake clock."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graceful.core.delay import (
    POLL_INTERVAL,
    QUIET_FACTOR,
    QUIET_MIN,
    AdaptiveDelay,
    DelayEnd,
    DelayOutcome,
    run_delay,
)
from graceful.testing import FakeClock

T0 = 1000.0


def scripted(clock: FakeClock, arrivals: Sequence[float]) -> Callable[[], float | None]:
    """The last arrival as a server would report it: the latest of ``arrivals`` (s after T0) not after now."""
    times = sorted(T0 + a for a in arrivals)

    def last() -> float | None:
        index = bisect.bisect_right(times, clock.now())
        return times[index - 1] if index else None

    return last


def every(step: float, until: float, start: float = 0.0) -> list[float]:
    """Arrival times (s after T0) every ``step`` from ``start`` up to ``until``."""
    count = round((until - start) / step)
    return [start + i * step for i in range(count + 1)]


def run(
    arrivals: Sequence[float], maximum: float, floor: float | None = None, quiet: float | None = None
) -> DelayOutcome:
    clock = FakeClock(start=T0, settle=0.001)
    return run_delay(clock, T0, maximum, scripted(clock, arrivals), floor=floor, quiet_period=quiet)


class TestAdaptiveDelay:
    def test_nothing_arrived_ends_at_the_floor_or_the_minimum_quiet(self) -> None:
        """With no arrival the quiet runs from ShutdownInitiated: the end is max(floor, QUIET_MIN)."""
        clock = FakeClock(start=T0)
        policy = AdaptiveDelay(T0, floor=0.5, maximum=30)
        assert policy.end_at() == T0 + QUIET_MIN
        assert AdaptiveDelay(T0, floor=4, maximum=30).end_at() == T0 + 4
        clock.advance(QUIET_MIN)
        assert policy.next_wait(clock.now()) is None

    def test_an_arrival_moves_the_end(self) -> None:
        """Each newer arrival restarts the quiet period."""
        policy = AdaptiveDelay(T0, floor=1, maximum=30, quiet_period=1.5)
        policy.observe(T0 + 2.0)
        assert policy.end_at() == T0 + 3.5
        policy.observe(T0 + 2.0)  # the same reading again changes nothing
        policy.observe(T0 + 1.0)  # nor does an older one
        assert policy.end_at() == T0 + 3.5

    def test_the_maximum_bounds_the_end(self) -> None:
        """However late the last arrival, the delay ends at the maximum."""
        policy = AdaptiveDelay(T0, floor=1, maximum=5)
        policy.observe(T0 + 4.9)
        assert policy.end_at() == T0 + 5

    def test_derived_quiet_is_twice_the_longest_ended_gap(self) -> None:
        """The derived quiet period is QUIET_FACTOR times the longest gap that ended with an arrival."""
        policy = AdaptiveDelay(T0, floor=1, maximum=30)
        for at in (0.2, 0.4, 2.0, 2.1):  # gaps 0.2 (from T0), 0.2, 1.6, 0.1
            policy.observe(T0 + at)
        assert policy.longest_gap == pytest.approx(1.6)
        assert policy.quiet_period == pytest.approx(QUIET_FACTOR * 1.6)

    def test_heavy_traffic_gets_the_minimum_quiet(self) -> None:
        """Gaps shorter than QUIET_MIN / QUIET_FACTOR leave the quiet period at QUIET_MIN."""
        policy = AdaptiveDelay(T0, floor=1, maximum=30)
        for at in every(0.01, 2.0, start=0.01):
            policy.observe(T0 + at)
        assert policy.quiet_period == QUIET_MIN

    def test_a_set_quiet_period_is_not_derived(self) -> None:
        """GRACEFUL_QUIET_PERIOD fixes the quiet period whatever the gaps."""
        policy = AdaptiveDelay(T0, floor=1, maximum=30, quiet_period=0.5)
        policy.observe(T0 + 3.0)
        assert policy.quiet_period == 0.5

    def test_arrivals_before_shutdown_are_ignored(self) -> None:
        """A time before ShutdownInitiated (a stale board) is not an arrival of this shutdown."""
        policy = AdaptiveDelay(T0, floor=1, maximum=30)
        policy.observe(T0 - 5)
        assert (policy.last_arrival, policy.end_at()) == (None, T0 + QUIET_MIN)

    def test_waits_are_bounded_by_the_poll_interval(self) -> None:
        """The policy looks again at least every POLL_INTERVAL, never past the end."""
        policy = AdaptiveDelay(T0, floor=1, maximum=30)
        assert policy.next_wait(T0) == POLL_INTERVAL
        assert policy.next_wait(T0 + QUIET_MIN - 0.01) == pytest.approx(0.01)


class TestRunDelay:
    def test_fixed_delay_runs_to_its_end(self) -> None:
        """Without a floor the delay is the fixed shutdown_delay, traffic or not."""
        outcome = run([0.5, 1.0], maximum=2)
        assert (outcome.end, outcome.ended_at, outcome.last_arrival) == (DelayEnd.FIXED, 2, 1.0)

    def test_quiet_after_traffic_stops(self) -> None:
        """Traffic every 0.2 s until 2.0 s: the delay ends QUIET_MIN after the last arrival."""
        outcome = run(every(0.2, 2.0, start=0.2), maximum=30, floor=1)
        assert outcome.end is DelayEnd.QUIET
        assert outcome.ended_at == pytest.approx(2.0 + QUIET_MIN)
        assert outcome.last_arrival == pytest.approx(2.0)

    def test_floor_holds_when_traffic_stops_early(self) -> None:
        """Traffic that stops before the floor ends the delay at the floor, not earlier."""
        outcome = run([0.1, 0.3], maximum=30, floor=3)
        assert outcome.end is DelayEnd.QUIET
        assert outcome.ended_at == pytest.approx(3)

    def test_light_traffic_lengthens_the_quiet(self) -> None:
        """Gaps of 0.6 s make the quiet 1.2 s, which outlasts a 1.1 s lull; a set quiet of 1 s ends in it."""
        arrivals = [0.6, 1.2, 1.8, 2.4, 3.5, 4.1]
        derived = run(arrivals, maximum=30, floor=1)
        assert derived.ended_at == pytest.approx(4.1 + QUIET_FACTOR * 1.1)
        fixed = run(arrivals, maximum=30, floor=1, quiet=1)
        assert (fixed.ended_at, fixed.last_arrival) == (pytest.approx(3.4), pytest.approx(2.4))

    def test_a_lull_longer_than_any_before_is_what_the_floor_covers(self) -> None:
        """A first lull longer than QUIET_MIN ends the delay early unless the floor outlasts it."""
        early = run([0.5, 2.0], maximum=30, floor=1)
        assert (early.ended_at, early.last_arrival) == (pytest.approx(1.5), pytest.approx(0.5))
        covered = run([0.5, 2.0], maximum=30, floor=3)
        assert covered.ended_at == pytest.approx(2.0 + QUIET_FACTOR * 1.5)

    def test_maximum_with_traffic_still_arriving(self) -> None:
        """A balancer that never stops sending: the delay ends at the maximum, saying so."""
        outcome = run(every(0.1, 10.0, start=0.1), maximum=3, floor=1)
        assert outcome.end is DelayEnd.MAXIMUM
        assert outcome.ended_at == pytest.approx(3)
        assert "a load balancer still routes here" in outcome.describe()


class TestDescribe:
    def test_quiet_text(self) -> None:
        """The record's phrase for a delay that ended on quiet."""
        outcome = DelayOutcome(DelayEnd.QUIET, 2.7, 1.7, 1.0, 1.0, 30)
        assert outcome.describe() == "quiet for 1.0 s after the last arrival at 1.7 s"

    def test_maximum_text(self) -> None:
        """The record's phrase for a delay that reached its maximum with traffic arriving."""
        outcome = DelayOutcome(DelayEnd.MAXIMUM, 30, 29.8, 1.0, 1.0, 30)
        assert outcome.describe() == (
            "the 30 s maximum reached with traffic still arriving, the last at 29.8 s:"
            " a load balancer still routes here"
        )

    def test_quiet_without_arrivals_and_fixed_texts(self) -> None:
        """Nothing arrived, or the delay was fixed: the phrase says so."""
        assert DelayOutcome(DelayEnd.QUIET, 1, None, 1.0, 1.0, 30).describe() == (
            "quiet for 1.0 s: nothing arrived after ShutdownInitiated"
        )
        assert DelayOutcome(DelayEnd.FIXED, 5, 4.2, None, None, 5).describe() == (
            "the fixed 5 s delay, the last at 4.2 s"
        )

    def test_json_carries_the_reason_and_the_text(self) -> None:
        """The record's JSON keeps why, when and the phrase."""
        data = DelayOutcome(DelayEnd.QUIET, 2.7, 1.7, 1.0, 1.0, 30).to_json()
        assert (data["end"], data["ended_s"], data["text"]) == (
            "quiet",
            2.7,
            "quiet for 1.0 s after the last arrival at 1.7 s",
        )


class TestProperties:
    @given(
        arrivals=st.lists(st.floats(0, 40, allow_nan=False), max_size=60),
        floor=st.floats(0, 10, allow_nan=False),
        extra=st.floats(0, 20, allow_nan=False),
        quiet=st.one_of(st.none(), st.floats(0.01, 5, allow_nan=False)),
    )
    def test_the_end_keeps_its_bounds_and_its_reason(
        self, arrivals: list[float], floor: float, extra: float, quiet: float | None
    ) -> None:
        """Whatever arrives: the delay ends within [floor, maximum], and a quiet end had no arrival for its quiet."""
        maximum = floor + extra
        clock = FakeClock(start=T0)
        last = scripted(clock, arrivals)
        policy = AdaptiveDelay(T0, floor, maximum, quiet)
        for _ in range(10_000):  # the loop of run_delay, with the fake time moved by hand
            policy.observe(last())
            wait = policy.next_wait(clock.now())
            if wait is None:
                break
            assert 0 < wait <= POLL_INTERVAL
            clock.advance(wait)
        else:
            pytest.fail("the delay never ended")
        outcome = policy.outcome(clock.now())
        assert floor - 1e-9 <= outcome.ended_at <= maximum + 1e-9
        if outcome.end is DelayEnd.QUIET:
            assert outcome.quiet_period is not None
            since = [a for a in arrivals if a <= outcome.ended_at]
            assert not since or outcome.ended_at - max(since) >= outcome.quiet_period - 1e-9
        else:
            assert outcome.ended_at == pytest.approx(maximum)
