"""Tests for graceful.metrics.snapshot: one process's metrics as data, and the merge of several."""

from __future__ import annotations

import json

from graceful.core.clock import unix_time
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.metrics.snapshot import CheckSnapshot, HookSnapshot, InfoSnapshot, Snapshot, empty, merge, snapshot
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
        rejected={"shutting_down": shutting_down, "draining": 1, "max_in_flight": 0},
        during_shutdown={"delay": delay, "draining": shutting_down},
        drain_abandoned=1,
        signals={"ShutdownInitiated": started, "InFlightRequestsDrained": drained_at},
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
        assert data["rejected"] == {"shutting_down": 0, "draining": 0, "max_in_flight": 1}
        assert data["signals"]["ShutdownInitiated"] == unix_time(lc.shutdown_initiated.fired_at or 0.0)
        assert "HasBeenReady" not in data["signals"]
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
        assert total["rejected"] == {"shutting_down": 7, "draining": 2, "max_in_flight": 0}
        assert total["during_shutdown"] == {"delay": 17, "draining": 7}
        assert total["drain_abandoned"] == 2
        assert total["signals"] == {"ShutdownInitiated": 100.0, "InFlightRequestsDrained": 106.0}
        assert total["hooks"] == [
            HookSnapshot(kind="cleanup_task", name="flush", runs={"ok": 1, "timed_out": 1}, duration_s=0.8)
        ]
        assert total["healthchecks"] == [CheckSnapshot(type="readyz", name="db", ok=False, success=6, error=2)]
        assert total["info"] == first["info"]

    def test_merging_leaves_the_snapshots_alone(self) -> None:
        """merge() copies: the workers' snapshots are unchanged."""
        first = worker(2, 3, 10, 100.0, 105.0, True, 0.5)
        before = json.dumps(first)
        merge([first, worker(1, 1, 1, 99.0, 101.0, False, 1.0)])
        assert json.dumps(first) == before

    def test_nothing_to_merge(self) -> None:
        """No snapshot at all merges to the empty one."""
        assert merge([]) == empty()
