"""Tests for graceful.core.stats: lock-free counters, arrivals by phase, late traffic, the drain, the sampler."""

from __future__ import annotations

import threading
import time

from graceful.core.stats import (
    PHASE_DELAY,
    PHASE_DRAINING,
    REASON_DRAINING,
    REASON_MAX_IN_FLIGHT,
    REASON_REFUSED_STREAM,
    REASON_SHUTTING_DOWN,
    Counter,
    LateTraffic,
    RequestStats,
    Sampler,
)
from graceful.testing import FakeClock


class TestCounter:
    def test_counts_every_add_from_many_threads(self) -> None:
        """Eight threads adding 5,000 times each give exactly 40,000."""
        counter = Counter()

        def add() -> None:
            for _ in range(5000):
                counter.add()

        threads = [threading.Thread(target=add) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert counter.value == 40_000

    def test_reading_does_not_change_the_count(self) -> None:
        """Reads between adds see 0, 1, 1, 2: a read is not counted."""
        counter = Counter()
        seen = [counter.value]
        counter.add()
        seen += [counter.value, counter.value]
        counter.add()
        seen.append(counter.value)
        assert seen == [0, 1, 1, 2]


class TestRequestStats:
    def test_arrivals_by_phase_and_the_last_arrival(self) -> None:
        """Arrivals before the stop count as delay, after it as draining; the last one's time is kept."""
        clock = FakeClock(start=100.0)
        stats = RequestStats(clock)
        stats.begin(100.0, shutdown_delay=10)
        stats.arrived(stopped=False)
        clock.advance(2)
        stats.arrived(stopped=False)
        clock.advance(9)
        stats.arrived(stopped=True)
        assert stats.arrivals() == {PHASE_DELAY: 2, PHASE_DRAINING: 1}
        assert stats.last_arrival_at == 111.0
        assert stats.totals() == (3, 0)

    def test_late_traffic_is_what_arrives_in_the_last_tenth_of_the_delay(self) -> None:
        """With a 10 s delay, arrivals from 9 s on are late; those after the stop are not."""
        clock = FakeClock(start=50.0)
        stats = RequestStats(clock)
        stats.begin(50.0, shutdown_delay=10)
        for at in (1.0, 8.5, 9.0, 9.5):
            clock.advance(at - (clock.now() - 50.0))
            stats.arrived(stopped=False)
        stats.arrived(stopped=True)
        late = stats.late_traffic()
        assert late == LateTraffic(count=2, window_start=9.0, last_arrival=9.5, shutdown_delay=10)

    def test_no_late_traffic_when_arrivals_stop_early(self) -> None:
        """Arrivals that stop before the last tenth of the delay are no late traffic."""
        clock = FakeClock(start=0.0)
        stats = RequestStats(clock)
        stats.begin(0.0, shutdown_delay=10)
        for _ in range(5):
            clock.advance(1.0)
            stats.arrived(stopped=False)
        assert stats.late_traffic() is None
        assert stats.arrivals()[PHASE_DELAY] == 5

    def test_rejections_by_reason(self) -> None:
        """Each reason is counted on its own."""
        stats = RequestStats(FakeClock())
        counts = {REASON_SHUTTING_DOWN: 3, REASON_DRAINING: 1, REASON_MAX_IN_FLIGHT: 2, REASON_REFUSED_STREAM: 4}
        for reason, times in counts.items():
            for _ in range(times):
                stats.rejected(reason)
        assert stats.rejections() == counts

    def test_drain_figures(self) -> None:
        """The drain remembers when it began and ended, what it waited for and what it abandoned."""
        stats = RequestStats(FakeClock())
        assert stats.drain is None
        stats.drain_began(10.0, in_flight=4)
        stats.drain_ended(12.5, abandoned=1)
        drain = stats.drain
        assert drain is not None
        assert (drain.started_at, drain.in_flight, drain.ended_at, drain.abandoned) == (10.0, 4, 12.5, 1)

    def test_health_checks_keep_the_last_result_and_the_counts(self) -> None:
        """A check that passed twice then failed once: last result failed, 2 successes, 1 error."""
        stats = RequestStats(FakeClock())
        stats.checked("readyz", [("db", True), ("ping", True)])
        stats.checked("readyz", [("db", True)])
        stats.checked("readyz", [("db", False)])
        stats.checked("livez", [("ping", True)])
        tallies = {(t.endpoint, t.name): (t.ok, t.successes, t.errors) for t in stats.health_checks()}
        assert tallies == {
            ("livez", "ping"): (True, 1, 0),
            ("readyz", "db"): (False, 2, 1),
            ("readyz", "ping"): (True, 1, 0),
        }


class TestSampler:
    def test_samples_from_start_to_stop_in_time_order(self) -> None:
        """A sampler takes a first sample at start, more while running, and a last one at stop."""
        values = iter(range(10_000))
        sampler = Sampler(FakeClock(), lambda: (next(values), 0, 0), limit=1000)
        sampler.start()
        time.sleep(0.3)
        sampler.stop()
        samples = sampler.samples
        assert len(samples) >= 3
        assert [s.in_flight for s in samples] == sorted(s.in_flight for s in samples)
        assert not sampler.truncated

    def test_bounded_in_count(self) -> None:
        """A sampler with a limit of 3 stops there and says it was truncated."""
        sampler = Sampler(FakeClock(), lambda: (1, 2, 3), limit=3)
        sampler.start()
        deadline = time.monotonic() + 10
        while not sampler.truncated and time.monotonic() < deadline:
            time.sleep(0.02)
        sampler.stop()
        assert sampler.truncated
        assert len(sampler.samples) == 3

    def test_reads_the_clock_for_each_sample(self) -> None:
        """Sample times are the clock's (a fake clock's in tests)."""
        clock = FakeClock(start=500.0)
        sampler = Sampler(clock, lambda: (0, 0, 0), limit=10)
        sampler.start()
        clock.advance(7)
        sampler.stop()
        assert sampler.samples[0].at == 500.0
        assert sampler.samples[-1].at == 507.0


class TestDrainTwice:
    def test_first_start_and_last_end_count(self) -> None:
        """Two waits (a worker in retry-after mode): in flight at the first start, abandoned at the last end."""
        stats = RequestStats(FakeClock())
        stats.drain_began(1.0, in_flight=3)
        stats.drain_ended(2.0, abandoned=1)
        stats.drain_began(5.0, in_flight=1)
        stats.drain_ended(5.5, abandoned=0)
        drain = stats.drain
        assert drain is not None
        assert (drain.started_at, drain.in_flight, drain.ended_at, drain.abandoned) == (1.0, 3, 5.5, 0)


class TestSamplerEnds:
    def test_when_there_is_nothing_left_to_sample(self) -> None:
        """A read that returns None (its lifecycle is gone) ends the thread, not truncated."""
        values: list[tuple[int, int, int] | None] = [(1, 0, 0), (2, 0, 0), None]
        sampler = Sampler(FakeClock(), lambda: values.pop(0) if values else None, limit=100)
        sampler.start()
        assert sampler.join(10)
        assert [s.in_flight for s in sampler.samples] == [1, 2]
        assert not sampler.truncated
