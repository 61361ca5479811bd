"""Tests for graceful.core.hooks (the concurrent hook runner)."""

from __future__ import annotations

import sys
import threading
import time

from graceful.core.clock import MonotonicClock
from graceful.core.hooks import Hook, HookBatch, Outcome, ShutdownReport
from graceful.testing import FakeClock


def batch(*hooks: Hook, default_timeout: float = 5.0, clock: object = None) -> HookBatch:
    return HookBatch("cleanup task", hooks, default_timeout, clock or FakeClock())  # type: ignore[arg-type]


class TestHookBatch:
    def test_all_hooks_run_and_report_ok(self) -> None:
        """Every hook runs once and reports ok in registration order."""
        ran: list[str] = []
        report = batch(
            Hook("cleanup task", "a", lambda: ran.append("a")), Hook("cleanup task", "b", lambda: ran.append("b"))
        ).wait()
        assert sorted(ran) == ["a", "b"]
        assert [(r.name, r.outcome) for r in report.results] == [("a", Outcome.OK), ("b", Outcome.OK)]
        assert report.ok

    def test_hooks_run_concurrently(self) -> None:
        """All hooks are running at the same time: a barrier of N parties is passed by N hooks."""
        barrier = threading.Barrier(10, timeout=10)
        hooks = [Hook("cleanup task", f"h{i}", barrier.wait) for i in range(10)]
        report = batch(*hooks, clock=MonotonicClock()).wait()
        assert [r.outcome for r in report.results] == [Outcome.OK] * 10

    def test_raising_hook_does_not_stop_others(self) -> None:
        """A hook that raises is reported failed with its error; the others still run."""
        ran = []

        def boom() -> None:
            raise RuntimeError("database gone")

        report = batch(Hook("cleanup task", "boom", boom), Hook("cleanup task", "ok", lambda: ran.append(1))).wait()
        assert report.by_name("boom").outcome is Outcome.FAILED
        assert report.by_name("boom").error == "RuntimeError: database gone"
        assert report.by_name("ok").outcome is Outcome.OK and ran == [1]

    def test_sys_exit_in_hook_is_contained(self) -> None:
        """A hook calling sys.exit is a failure, not the end of the process or of the others."""
        report = batch(
            Hook("cleanup task", "exit", lambda: sys.exit(3)), Hook("cleanup task", "ok", lambda: None)
        ).wait()
        assert report.by_name("exit").outcome is Outcome.FAILED
        assert report.by_name("exit").error == "SystemExit: 3"
        assert report.by_name("ok").outcome is Outcome.OK

    def test_hung_hook_times_out_at_its_own_timeout(self) -> None:
        """A hook that never returns is reported timed out after its own timeout and listed as hung."""
        release = threading.Event()
        b = batch(
            Hook("cleanup task", "hang", lambda: release.wait(30), timeout=2), Hook("cleanup task", "ok", lambda: None)
        )
        report = b.wait()
        assert report.by_name("hang").outcome is Outcome.TIMED_OUT
        assert report.by_name("hang").duration == 2
        assert b.hung == ["hang"]
        release.set()

    def test_late_result_does_not_overwrite_timeout(self) -> None:
        """A hook that returns after being declared timed out stays timed out in the batch's live results."""
        release = threading.Event()
        b = batch(Hook("cleanup task", "slow", lambda: release.wait(30), timeout=1))
        assert b.wait().by_name("slow").outcome is Outcome.TIMED_OUT
        assert b.hung == ["slow"]
        release.set()
        deadline = time.monotonic() + 10
        while b.hung and time.monotonic() < deadline:  # the hook's thread returns and records its late "ok"
            time.sleep(0.01)
        assert b.hung == []
        reason = b.pending_reason("slow")
        assert reason is not None and reason.startswith("timed out")

    def test_start_twice_runs_each_hook_once(self) -> None:
        """start() and wait() any number of times run every hook exactly once."""
        calls = []
        b = batch(Hook("cleanup task", "once", lambda: calls.append(1)))
        b.start()
        b.start()
        b.wait()
        b.wait()
        assert calls == [1]

    def test_ten_one_second_hooks_take_one_second(self) -> None:
        """10 hooks of 1 s each (on the batch's clock) run together: the batch ends 1 s after it began, not 10."""
        clock = FakeClock()
        hooks = [Hook("cleanup task", f"s{i}", lambda: clock.wait(threading.Event(), 1.0)) for i in range(10)]
        started = clock.now()
        report = batch(*hooks, clock=clock).wait()
        assert report.ok
        assert clock.now() - started == 1.0

    def test_empty_batch_reports_nothing(self) -> None:
        """A batch without hooks returns an empty ok report."""
        report = batch().wait()
        assert report.results == () and report.ok


class TestShutdownReport:
    def test_summary_counts_outcomes(self) -> None:
        """summary() counts ok, failed and timed out."""
        from graceful.core.hooks import HookResult

        r = ShutdownReport(
            (
                HookResult("x", "a", Outcome.OK, 0.1),
                HookResult("x", "b", Outcome.FAILED, 0.1, "E"),
                HookResult("x", "c", Outcome.TIMED_OUT, 5, "late"),
            )
        )
        assert r.summary() == "1 ok, 1 failed, 1 timed out"
        assert not r.ok
