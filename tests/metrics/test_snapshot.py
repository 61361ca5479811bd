"""Tests for graceful.metrics.snapshot: one process's metrics as data, and the merge of several."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from graceful.core.clock import unix_time
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.metrics.snapshot import (
    CheckSnapshot,
    HookSnapshot,
    InfoSnapshot,
    Snapshot,
    counters_only,
    empty,
    merge,
    parse,
    snapshot,
)
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
) -> Snapshot:
    """A fake worker's snapshot."""
    return Snapshot(
        in_flight=in_flight,
        rejected={"shutting_down": shutting_down, "draining": 1, "max_in_flight": 0, "refused_stream": 0},
        during_shutdown={"delay": delay, "draining": shutting_down},
        drain_abandoned=1,
        signals={"ShutdownInitiated": started, "InFlightRequestsDrained": drained_at},
        delay={},
        hooks=[HookSnapshot(kind="cleanup_task", name="flush", runs={outcome: 1}, duration_s=cleanup_s)],
        healthchecks=[CheckSnapshot(type="readyz", name="db", ok=db_ok, success=3, error=1)],
        info=InfoSnapshot(version="1.0", server="gunicorn", worker_class="gthread"),
    )


class TestSnapshot:
    def test_reads_the_lifecycle(self) -> None:
        """A snapshot holds the in-flight count, statistics, fired signals in Unix time, hook results and info."""
        lc = Lifecycle(Config(shutdown_delay=1, drain_timeout=1), clock=FakeClock())
        lc.cleanup_task("flush")(lambda: None)
        lc.server, lc.worker_class = "gunicorn", "sync"
        lc.stats.rejected("max_in_flight")
        lc.in_flight.add()  # never ends: abandoned by the drain
        run_shutdown(lc)
        data = snapshot(lc)
        assert (data["in_flight"], data["drain_abandoned"]) == (1, 1)
        assert data["rejected"] == {"shutting_down": 0, "draining": 0, "max_in_flight": 1, "refused_stream": 0}
        assert data["signals"]["ShutdownInitiated"] == unix_time(lc.shutdown_initiated.fired_at or 0.0)
        assert "HasBeenReady" not in data["signals"]
        assert data["delay"] == {"fixed": 1.0}
        assert data["hooks"] == [HookSnapshot(kind="cleanup_task", name="flush", runs={"ok": 1}, duration_s=0.0)]
        assert data["info"]["server"] == "gunicorn" and data["info"]["worker_class"] == "sync"

    def test_is_json(self) -> None:
        """A snapshot survives JSON unchanged (a worker can publish it)."""
        data = worker(1, 2, 3, 100.0, 105.0, True, 0.5)
        assert json.loads(json.dumps(data)) == data


class TestMerge:
    def test_two_workers(self) -> None:
        """Counts sum, ShutdownInitiated is the earliest, the drain the latest, hooks and checks combine."""
        first = worker(2, 3, 10, 100.0, 105.0, True, 0.5)
        second = worker(1, 4, 7, 100.2, 106.0, False, 0.8, outcome="timed_out")
        total = merge([first, second])
        assert total["in_flight"] == 3
        assert total["rejected"] == {"shutting_down": 7, "draining": 2, "max_in_flight": 0, "refused_stream": 0}
        assert total["during_shutdown"] == {"delay": 17, "draining": 7}
        assert total["drain_abandoned"] == 2
        assert total["signals"] == {"ShutdownInitiated": 100.0, "InFlightRequestsDrained": 106.0}
        assert total["hooks"] == [
            HookSnapshot(kind="cleanup_task", name="flush", runs={"ok": 1, "timed_out": 1}, duration_s=0.8)
        ]
        assert total["healthchecks"] == [CheckSnapshot(type="readyz", name="db", ok=False, success=6, error=2)]
        assert total["info"] == first["info"]

    def test_the_delay_is_the_process_that_ran_it(self) -> None:
        """The master's delay (how long, how it ended) is the server's; workers have none; gone ones drop it."""
        master = empty()
        master["delay"] = {"quiet": 2.7}
        total = merge([master, worker(2, 3, 10, 100.0, 105.0, True, 0.5)])
        assert total["delay"] == {"quiet": 2.7}
        assert parse(json.loads(json.dumps(total)))["delay"] == {"quiet": 2.7}
        assert counters_only(total)["delay"] == {}

    def test_merging_leaves_the_snapshots_alone(self) -> None:
        """merge() copies: the workers' snapshots are unchanged."""
        first = worker(2, 3, 10, 100.0, 105.0, True, 0.5)
        before = json.dumps(first)
        merge([first, worker(1, 1, 1, 99.0, 101.0, False, 1.0)])
        assert json.dumps(first) == before

    def test_nothing_to_merge(self) -> None:
        """No snapshot at all merges to the empty one."""
        assert merge([]) == empty()


class TestCountersOnly:
    def test_keeps_counters_and_drops_gauges(self) -> None:
        """A gone process keeps its rejections, arrivals, abandoned, hook runs, the longest run and check counts;
        loses its in-flight count, signal times, info and its check's failing."""
        kept = counters_only(worker(4, 2, 3, 100.0, 105.0, False, 0.5))
        assert (kept["in_flight"], kept["signals"], kept["drain_abandoned"]) == (0, {}, 1)
        assert kept["rejected"] == {"shutting_down": 2, "draining": 1, "max_in_flight": 0, "refused_stream": 0}
        assert kept["during_shutdown"] == {"delay": 3, "draining": 2}
        assert kept["hooks"] == [HookSnapshot(kind="cleanup_task", name="flush", runs={"ok": 1}, duration_s=0.5)]
        assert kept["healthchecks"] == [CheckSnapshot(type="readyz", name="db", ok=True, success=3, error=1)]
        assert kept["info"] == InfoSnapshot(version="", server="", worker_class="")

    def test_has_no_say_in_a_live_check(self) -> None:
        """Merged with a live process, a gone one's check counts add up and the live one's pass or fail stands."""
        gone = counters_only(worker(1, 0, 0, 1.0, 2.0, False, 0.1))
        live = worker(2, 0, 0, 1.0, 2.0, False, 0.1)
        (check,) = merge([live, gone])["healthchecks"]
        assert (check["ok"], check["success"], check["error"]) == (False, 6, 2)
        live["healthchecks"][0]["ok"] = True
        assert merge([gone, live])["healthchecks"][0]["ok"] is True

    def test_leaves_its_argument_alone(self) -> None:
        """The snapshot given is not changed."""
        data = worker(1, 2, 3, 100.0, 105.0, False, 0.5)
        before = json.loads(json.dumps(data))
        counters_only(data)
        assert data == before


class TestParse:
    def test_reads_back_what_a_process_wrote(self) -> None:
        """A snapshot through JSON parses to itself (a real one, from a lifecycle, too)."""
        data = worker(1, 2, 3, 100.0, 105.0, True, 0.5)
        assert parse(json.loads(json.dumps(data))) == data
        real = snapshot(Lifecycle(Config(), clock=FakeClock()))
        assert parse(json.loads(json.dumps(real))) == real

    @pytest.mark.parametrize(
        "change",
        [
            lambda d: d.pop("in_flight"),
            lambda d: d.update(extra=1),
            lambda d: d.update(in_flight=-1),
            lambda d: d.update(in_flight=True),
            lambda d: d.update(in_flight="3"),
            lambda d: d.update(in_flight=1.5),
            lambda d: d.update(rejected=[1, 2]),
            lambda d: d["rejected"].update(max_in_flight=None),
            lambda d: d["signals"].update(ShutdownInitiated="soon"),
            lambda d: d.update(hooks={}),
            lambda d: d["hooks"].append("flush"),
            lambda d: d["hooks"][0].update(runs={"ok": -2}),
            lambda d: d["hooks"][0].update(duration_s=float("nan")),
            lambda d: d["healthchecks"][0].update(ok=1),
            lambda d: d["healthchecks"][0].pop("name"),
            lambda d: d["info"].update(version=2),
        ],
    )
    def test_refuses_anything_else(self, change: Callable[[dict[str, Any]], object]) -> None:
        """A missing or extra key, a wrong type, a negative count or a non-finite time is a ValueError."""
        data: dict[str, Any] = json.loads(json.dumps(worker(1, 2, 3, 100.0, 105.0, True, 0.5)))
        change(data)
        with pytest.raises(ValueError):
            parse(data)

    @pytest.mark.parametrize("data", [None, [], "snapshot", 3, {}])
    def test_refuses_what_is_not_an_object_of_it(self, data: object) -> None:
        """Not an object with the snapshot's keys: a ValueError."""
        with pytest.raises(ValueError):
            parse(data)
