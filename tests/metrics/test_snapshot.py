"""Tests for graceful.metrics.snapshot: a process's metrics are its report; the merge of several."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from graceful.core.clock import unix_time
from graceful.core.config import Config
from graceful.core.delay import DelayEnd, DelayOutcome
from graceful.core.lifecycle import Lifecycle
from graceful.core.report import ROLE_MASTER, ROLE_WORKER, HookEntry, RequestFigures, SampleSeries
from graceful.core.stats import CheckTally
from graceful.metrics.snapshot import Snapshot, counters_only, empty, merge, parse, snapshot
from graceful.testing import FakeClock, run_shutdown


def worker(
    in_flight: int,
    shutting_down: int,
    delay: int,
    started: float,
    drained_at: float,
    db_ok: bool,
    cleanup_s: float,
    outcome: str = "ok",
    pid: int = 11,
) -> Snapshot:
    """A fake worker's report, times on the raw monotonic clock (as metrics take them)."""
    return Snapshot(
        pid=pid,
        role=ROLE_WORKER,
        t0=0.0,
        signals={"ShutdownInitiated": started, "InFlightRequestsDrained": drained_at},
        hooks=(HookEntry("cleanup task", "flush", pid, outcome, drained_at, cleanup_s),),
        requests=RequestFigures(
            abandoned=1,
            arrived={"delay": delay, "draining": shutting_down},
            rejected={"shutting_down": shutting_down, "draining": 1, "max_in_flight": 0, "refused_stream": 0},
        ),
        samples=SampleSeries(),
        longest_pre_shutdown_hook=0.0,
        longest_cleanup_task=0.0,
        in_flight=in_flight,
        checks=(CheckTally("readyz", "db", db_ok, 3, 1),),
        version="1.0",
        server="gunicorn",
        worker_class="gthread",
    )


class TestSnapshot:
    def test_reads_the_lifecycle(self) -> None:
        """A snapshot holds the in-flight count, statistics, fired signals (Unix time when rendered), hooks and info."""
        lc = Lifecycle(Config(shutdown_delay=1, drain_timeout=1), clock=FakeClock())
        lc.cleanup_task("flush")(lambda: None)
        lc.server, lc.worker_class = "gunicorn", "sync"
        lc.stats.rejected("max_in_flight")
        lc.in_flight.add()  # never ends: abandoned by the drain
        run_shutdown(lc)
        data = snapshot(lc)
        assert (data.in_flight, data.requests.abandoned) == (1, 1)
        assert data.requests.rejected == {"shutting_down": 0, "draining": 0, "max_in_flight": 1, "refused_stream": 0}
        assert unix_time(data.origin + data.signals["ShutdownInitiated"]) == unix_time(
            lc.shutdown_initiated.fired_at or 0.0
        )
        assert "HasBeenReady" not in data.signals
        assert data.delay is not None and (data.delay.end, data.delay.ended_at) == (DelayEnd.FIXED, 1.0)
        assert [(h.kind, h.name, h.outcome, h.runs) for h in data.hooks] == [("cleanup task", "flush", "ok", 1)]
        assert (data.server, data.worker_class) == ("gunicorn", "sync")
        assert data.samples == SampleSeries()  # metrics show no samples: a file stays small

    def test_is_json(self) -> None:
        """A snapshot survives JSON unchanged (a worker can publish it)."""
        data = worker(1, 2, 3, 100.0, 105.0, True, 0.5)
        assert parse(json.loads(json.dumps(data.to_json()))) == data


class TestMerge:
    def test_two_workers(self) -> None:
        """Counts sum, ShutdownInitiated the earliest copy (no master here), the drain the latest, hooks and checks
        combine."""
        first = worker(2, 3, 10, 100.0, 105.0, True, 0.5)
        second = worker(1, 4, 7, 100.2, 106.0, False, 0.8, outcome="timed out", pid=12)
        total = merge([first, second])
        assert total.in_flight == 3
        assert total.requests.rejected == {"shutting_down": 7, "draining": 2, "max_in_flight": 0, "refused_stream": 0}
        assert total.requests.arrived == {"delay": 17, "draining": 7}
        assert total.requests.abandoned == 2
        assert total.signals == {"ShutdownInitiated": 100.0, "InFlightRequestsDrained": 106.0}
        assert [(h.pid, h.outcome, h.duration) for h in total.hooks] == [(11, "ok", 0.5), (12, "timed out", 0.8)]
        assert total.checks == (CheckTally("readyz", "db", False, 6, 2),)
        assert (total.version, total.server, total.worker_class) == ("1.0", "gunicorn", "gthread")

    def test_the_servers_facts_are_the_masters(self) -> None:
        """With the master's report in, ShutdownInitiated is the master's, even when a worker's copy is earlier."""
        master = dataclasses.replace(empty(), role=ROLE_MASTER, signals={"ShutdownInitiated": 100.1})
        total = merge([master, worker(2, 3, 10, 100.0, 105.0, True, 0.5)])
        assert total.signals["ShutdownInitiated"] == 100.1

    def test_the_delay_is_the_process_that_ran_it(self) -> None:
        """The master's delay (how long, how it ended) is the server's; workers have none; gone ones drop it."""
        master = dataclasses.replace(empty(), role=ROLE_MASTER, delay=DelayOutcome(DelayEnd.QUIET, 2.7, 1.7, 1, 1, 5))
        total = merge([master, worker(2, 3, 10, 100.0, 105.0, True, 0.5)])
        assert total.delay == master.delay
        assert parse(json.loads(json.dumps(total.to_json()))).delay == master.delay
        assert counters_only(total).delay is None

    def test_nothing_to_merge(self) -> None:
        """No snapshot at all merges to the empty one."""
        assert merge([]) == empty()


class TestCountersOnly:
    def test_keeps_counters_and_drops_gauges(self) -> None:
        """A gone process keeps its rejections, arrivals, abandoned, hook runs, the longest run and check counts;
        loses its in-flight count, signal times, info and its check's failing."""
        kept = counters_only(worker(4, 2, 3, 100.0, 105.0, False, 0.5))
        assert (kept.in_flight, kept.signals, kept.requests.abandoned) == (0, {}, 1)
        assert kept.requests.rejected == {"shutting_down": 2, "draining": 1, "max_in_flight": 0, "refused_stream": 0}
        assert kept.requests.arrived == {"delay": 3, "draining": 2}
        assert kept.hooks == (HookEntry("cleanup task", "flush", 0, "ok", None, 0.5),)
        assert kept.checks == (CheckTally("readyz", "db", True, 3, 1),)
        assert (kept.version, kept.server, kept.worker_class) == ("", "", "")

    def test_a_retained_total_does_not_grow_with_each_gone_worker(self) -> None:
        """Folding many recycled workers keeps one hook entry per outcome, its runs counted."""
        retained = empty()
        for pid in range(20):
            retained = merge([retained, counters_only(worker(0, 0, 0, 1.0, 2.0, True, 0.1 * pid, pid=pid + 1))])
        (hook,) = retained.hooks
        assert (hook.runs, hook.duration) == (20, pytest.approx(1.9))

    def test_has_no_say_in_a_live_check(self) -> None:
        """Merged with a live process, a gone one's check counts add up and the live one's pass or fail stands."""
        gone = counters_only(worker(1, 0, 0, 1.0, 2.0, False, 0.1))
        live = worker(2, 0, 0, 1.0, 2.0, False, 0.1)
        (check,) = merge([live, gone]).checks
        assert (check.ok, check.successes, check.errors) == (False, 6, 2)
        passing = dataclasses.replace(live, checks=(CheckTally("readyz", "db", True, 3, 1),))
        assert merge([gone, passing]).checks[0].ok is True


class TestParse:
    def test_reads_back_what_a_process_wrote(self) -> None:
        """A snapshot through JSON parses to itself (a real one, from a lifecycle, too)."""
        data = worker(1, 2, 3, 100.0, 105.0, True, 0.5)
        assert parse(json.loads(json.dumps(data.to_json()))) == data
        real = snapshot(Lifecycle(Config(), clock=FakeClock()))
        assert parse(json.loads(json.dumps(real.to_json()))) == real

    @pytest.mark.parametrize(
        "change",
        [
            lambda d: d.pop("pid"),
            lambda d: d.update(in_flight=-1),
            lambda d: d.update(in_flight=True),
            lambda d: d.update(in_flight="3"),
            lambda d: d.update(in_flight=1.5),
            lambda d: d["requests"].update(rejected=[1, 2]),
            lambda d: d["requests"]["rejected"].update(max_in_flight=None),
            lambda d: d["signals"].update(ShutdownInitiated="soon"),
            lambda d: d.update(hooks={}),
            lambda d: d["hooks"].append("flush"),
            lambda d: d["hooks"][0].update(runs=-2),
            lambda d: d["hooks"][0].update(duration_s=float("nan")),
            lambda d: d["checks"][0].__setitem__(2, 1),
            lambda d: d["checks"][0].pop(),
            lambda d: d["info"].update(version=2),
        ],
    )
    def test_refuses_anything_else(self, change: Callable[[dict[str, Any]], object]) -> None:
        """A missing key, a wrong type, a negative count or a non-finite time is a ValueError."""
        data: dict[str, Any] = json.loads(json.dumps(worker(1, 2, 3, 100.0, 105.0, True, 0.5).to_json()))
        change(data)
        with pytest.raises(ValueError, match=r"^metrics\."):
            parse(data)

    @pytest.mark.parametrize("data", [None, [], "snapshot", 3, {}])
    def test_refuses_what_is_not_an_object_of_it(self, data: object) -> None:
        """Not an object with the report's keys: a ValueError."""
        with pytest.raises(ValueError):
            parse(data)
