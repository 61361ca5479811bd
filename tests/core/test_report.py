"""Tests for graceful.core.report: one process's report, its codec, and the one merge with one rule per field."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from graceful.core.clock import Waitable
from graceful.core.codec import ReportError
from graceful.core.config import Config
from graceful.core.delay import DelayEnd, DelayOutcome
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import part_of, record_of
from graceful.core.report import (
    ROLE_MASTER,
    ROLE_SERVER,
    ROLE_WORKER,
    HookEntry,
    ProcessReport,
    RequestFigures,
    SampleSeries,
    merge,
    report_of,
    role_of,
)
from graceful.core.role import Role
from graceful.core.stats import END_NO_PART, END_SIGNAL, END_STATUS, CheckTally, ProcessEnd
from graceful.testing import FakeClock, run_shutdown


def report(pid: int, role: str, t0: float, **changes: Any) -> ProcessReport:
    """A hand-made report, times in s since its own ``t0``."""
    return dataclasses.replace(ProcessReport.empty(), pid=pid, role=role, t0=t0, **changes)


def drain_ending_requests(lc: Lifecycle, clock: FakeClock, releases: list[Any]) -> None:
    """Make the in-flight requests end as the drain starts waiting for them (the clock's first wait once the wait
    group waits), so the drain counts them with no real time given to a thread."""
    wait_on_clock = clock.wait

    def wait(event: Waitable, timeout: float) -> bool:
        if lc.in_flight.waiting:
            for release in releases:
                release()  # later calls do nothing
        return wait_on_clock(event, timeout)

    clock.wait = wait  # type: ignore[method-assign]


class TestDrainedCount:
    def test_three_requests_through_the_drain_say_drained_3(self) -> None:
        """graceful serve: three requests in flight at SIGTERM, served during the drain: the record says drained 3."""
        clock = FakeClock()
        lc = Lifecycle(Config(shutdown_delay=1), clock=clock)
        releases = [lc.in_flight.add() for _ in range(3)]
        drain_ending_requests(lc, clock, releases)
        run_shutdown(lc)
        record = record_of(lc, [part_of(lc, 1)], "1.0")
        assert record.requests.drained == 3
        assert record.requests.abandoned == 0
        assert "drained 3 requests in " in record.summary()

    def test_a_worker_that_served_them_before_worker_exit_says_drained_3(self) -> None:
        """A Gunicorn worker (gthread): its stop begins with three in flight, Gunicorn serves them before
        worker_exit's drain finds none; merged with the master's report the record still says drained 3."""
        clock = FakeClock()
        master = Lifecycle(Config(shutdown_delay=1), clock=clock)
        master.become_master("gunicorn", "gthread")
        worker = Lifecycle(Config(shutdown_delay=1), clock=clock, role=Role.WORKER)
        releases = [worker.in_flight.add() for _ in range(3)]
        master.initiate_shutdown()
        worker.initiate_shutdown()
        worker.stats.drain_began(clock.now(), worker.in_flight.count)  # the worker's stop begins
        clock.advance(2.5)
        for release in releases:  # Gunicorn serves them before worker_exit
            release()
        worker.stop_process(5.0)
        run_shutdown(master)
        parts = [part_of(master, 100), part_of(worker, 101)]
        record = record_of(master, parts, "1.0")
        assert record.requests.drained == 3
        assert record.requests.drain_seconds == pytest.approx(2.5)
        assert "drained 3 requests in 2.5 s, 0 abandoned" in record.summary()


class TestReportOf:
    def test_reads_every_piece(self) -> None:
        """A report holds signals, hooks with their pid, counters, in-flight count, checks, delay and info."""
        clock = FakeClock()
        lc = Lifecycle(Config(shutdown_delay=2, drain_timeout=1), clock=clock)
        lc.cleanup_task("flush")(lambda: None)
        lc.server, lc.worker_class = "gunicorn", "sync"
        lc.has_been_ready.fire()
        clock.advance(3)
        lc.stats.checked("readyz", [("db", False)])
        lc.stats.rejected("max_in_flight")
        lc.in_flight.add()  # never ends: abandoned
        run_shutdown(lc)
        got = report_of(lc, 7)
        assert got.t0 == lc.shutdown_initiated.fired_at
        assert (got.signals["ShutdownInitiated"], got.signals["HasBeenReady"]) == (0.0, -3.0)
        assert [(h.kind, h.name, h.pid, h.outcome) for h in got.hooks] == [("cleanup task", "flush", 7, "ok")]
        assert (got.in_flight, got.requests.drained, got.requests.abandoned) == (1, 1, 1)
        assert got.requests.rejected["max_in_flight"] == 1
        assert got.checks == (CheckTally("readyz", "db", False, 0, 1),)
        assert got.delay is not None and got.delay.end is DelayEnd.FIXED
        assert (got.role, got.server, got.worker_class) == (ROLE_SERVER, "gunicorn", "sync")
        assert got.samples.t and got.samples.t[0] == 0.0

    def test_origin_zero_and_no_samples_for_metrics(self) -> None:
        """origin=0 gives raw monotonic times; samples=False leaves the samples out."""
        lc = Lifecycle(Config(shutdown_delay=0), clock=FakeClock())
        run_shutdown(lc)
        got = report_of(lc, 1, origin=0.0, samples=False)
        assert got.signals["ShutdownInitiated"] == lc.shutdown_initiated.fired_at
        assert got.samples == SampleSeries()

    def test_at_rest(self) -> None:
        """A process that never shut down has a report too: origin 0, no shutdown signals."""
        got = report_of(Lifecycle(Config(), clock=FakeClock()), 1)
        assert (got.t0, got.signals, got.requests.drained) == (0.0, {}, 0)

    def test_role_of_the_lifecycle(self) -> None:
        """The record names the lifecycle's role: graceful serve's process, a Gunicorn master, a worker."""
        lc = Lifecycle(Config())
        assert role_of(lc) == ROLE_SERVER
        lc.become_master("gunicorn", "sync")
        assert role_of(lc) == ROLE_MASTER
        lc.become_worker("a worker")
        assert role_of(lc) == ROLE_WORKER


class TestMerge:
    MASTER = report(
        100,
        ROLE_MASTER,
        50.0,
        signals={
            "HasBeenReady": -9.0,
            "ShutdownInitiated": 0.0,
            "HTTPServerStoppedListening": 5.0,
            "InFlightRequestsDrained": 9.0,
            "CleanupFinished": 9.5,
        },
        hooks=(HookEntry("pre-shutdown hook", "deregister", 100, "ok", 0.0, 1.0),),
        delay=DelayOutcome(DelayEnd.QUIET, 2.7, 1.7, 1.0, 1.0, 5),
        longest_pre_shutdown_hook=3.0,
        longest_cleanup_task=5.0,
        version="1.0",
        server="gunicorn",
        worker_class="gthread",
    )
    WORKER = report(
        101,
        ROLE_WORKER,
        50.5,
        signals={
            "HasBeenReady": -10.0,
            "ShutdownInitiated": 0.0,
            "HTTPServerStoppedListening": 0.1,
            "InFlightRequestsDrained": 6.0,
            "CleanupFinished": 10.0,
        },
        hooks=(HookEntry("cleanup task", "flush", 101, "ok", 6.0, 0.5),),
        requests=RequestFigures(
            drained=3,
            drain_seconds=2.0,
            abandoned=1,
            arrived={"delay": 4, "draining": 1},
            late=1,
            late_from=0.9,
            last_arrival=1.5,
            rejected={"shutting_down": 0, "draining": 2, "max_in_flight": 0, "refused_stream": 1},
        ),
        samples=SampleSeries(t=(0.0, 1.0), in_flight=(3, 0), arrived=(0, 4), rejected=(0, 2)),
        in_flight=2,
        checks=(CheckTally("readyz", "db", False, 3, 1),),
        longest_cleanup_task=2.0,
    )

    def test_a_worker_merged_with_the_master_gives_each_field_by_its_rule(self) -> None:
        """Master first, then a worker half a second later: every field follows the docstring's table."""
        total = merge([self.MASTER, self.WORKER])
        # The first report's identity and scale.
        assert (total.pid, total.role, total.t0, total.offset) == (100, ROLE_MASTER, 50.0, 0.0)
        assert (total.version, total.server, total.worker_class) == ("1.0", "gunicorn", "gthread")
        # Signals: HasBeenReady the earliest (the worker's, -9.5 on the master's scale) ...
        assert total.signals["HasBeenReady"] == pytest.approx(-9.5)
        # ... the server's facts the owner's (the master's, though the worker's copy would be earlier) ...
        assert total.signals["ShutdownInitiated"] == 0.0
        assert total.signals["HTTPServerStoppedListening"] == 5.0
        # ... the drain the serving process's (6.5), not the master's late one (9) ...
        assert total.signals["InFlightRequestsDrained"] == pytest.approx(6.5)
        # ... and the cleanup the latest of all.
        assert total.signals["CleanupFinished"] == pytest.approx(10.5)
        # Counters summed; drain the longest; late window the earliest, last arrival the latest.
        assert (total.in_flight, total.requests.drained, total.requests.abandoned) == (2, 3, 1)
        assert total.requests.rejected == {"shutting_down": 0, "draining": 2, "max_in_flight": 0, "refused_stream": 1}
        assert total.requests.drain_seconds == 2.0
        assert total.requests.late_from == pytest.approx(1.4)
        assert total.requests.last_arrival == pytest.approx(2.0)
        # Every hook run, moved onto the master's scale; the delay the master's.
        assert [(h.name, h.started) for h in total.hooks] == [("deregister", 0.0), ("flush", pytest.approx(6.5))]
        assert total.delay == self.MASTER.delay
        # The longest pre-shutdown hook the owner's; the longest cleanup task the serving process's.
        assert (total.longest_pre_shutdown_hook, total.longest_cleanup_task) == (3.0, 2.0)
        assert total.checks == (CheckTally("readyz", "db", False, 3, 1),)
        assert total.samples.at(0.5) == (3, 0, 0)

    def test_without_an_owner_the_earliest_and_the_latest(self) -> None:
        """Workers only: the server's facts are the earliest copy, the drain the latest of them."""
        other = dataclasses.replace(self.WORKER, pid=102, t0=51.0)
        total = merge([self.WORKER, other])
        assert total.signals["HTTPServerStoppedListening"] == 0.1
        assert total.signals["InFlightRequestsDrained"] == pytest.approx(6.5)

    def test_checks_pass_only_everywhere_and_counts_add(self) -> None:
        """A check passes in the merge only when every process passes it; its counts add up."""
        passing = dataclasses.replace(self.WORKER, checks=(CheckTally("readyz", "db", True, 5, 0),))
        (check,) = merge([passing, self.WORKER]).checks
        assert check == CheckTally("readyz", "db", False, 8, 1)

    def test_ended_processes_are_each_kept_on_the_first_scale_and_their_losses_add(self) -> None:
        """Two masters' ended workers: every one kept, moved onto the first report's origin; lost and unknown summed."""
        first = report(
            100,
            ROLE_MASTER,
            50.0,
            ended=(ProcessEnd(11, END_SIGNAL, 1.0, signal="SIGKILL", in_flight=3),),
            requests=RequestFigures(lost=3),
        )
        second = report(
            200,
            ROLE_MASTER,
            51.0,
            ended=(ProcessEnd(21, END_STATUS, 1.0, status=1),),
            requests=RequestFigures(lost_unknown=1),
        )
        total = merge([first, second])
        assert [(e.pid, e.at) for e in total.ended] == [(11, 1.0), (21, 2.0)]
        assert (total.requests.lost, total.requests.lost_unknown) == (3, 1)

    def test_report_of_counts_the_lost_requests_of_the_ended_processes(self) -> None:
        """A master's report names the workers that ended abnormally, with the requests lost with them."""
        lc = Lifecycle(Config(), clock=FakeClock())
        lc.role = Role.MASTER
        lc.stats.process_ended(ProcessEnd(11, END_SIGNAL, 4.0, signal="SIGKILL", in_flight=3))
        lc.stats.process_ended(ProcessEnd(12, END_NO_PART, 5.0, status=0))
        lc.stats.process_ended(ProcessEnd(13, END_SIGNAL, 5.0, signal="SIGKILL", in_flight=7, part=True))
        taken = report_of(lc, 1, origin=3.0)
        assert [(e.pid, e.at, e.lost) for e in taken.ended] == [(11, 1.0, 3), (12, 2.0, None), (13, 2.0, 0)]
        assert (taken.requests.lost, taken.requests.lost_unknown) == (3, 1)
        assert ProcessReport.read(json.loads(json.dumps(taken.to_json()))) == taken

    def test_nothing_to_merge(self) -> None:
        """No report merges to the empty one."""
        assert merge([]) == ProcessReport.empty()

    def test_counters_only_fold_runs_and_keep_counts(self) -> None:
        """A gone process keeps its counts and hook runs (folded per outcome), drops times, in flight and delay."""
        worker = dataclasses.replace(self.WORKER, delay=self.MASTER.delay)
        kept = merge([worker.counters_only(), worker.counters_only()])
        assert (kept.in_flight, kept.signals, kept.delay, kept.samples) == (0, {}, None, SampleSeries())
        assert kept.requests.drained == 6 and kept.requests.rejected["draining"] == 4
        assert kept.requests.last_arrival is None
        assert kept.hooks == (HookEntry("cleanup task", "flush", 0, "ok", None, 0.5, None, runs=2),)
        assert kept.checks == (CheckTally("readyz", "db", True, 6, 2),)


class TestCodec:
    def test_round_trip(self) -> None:
        """to_json then read gives the same report (every field; a merge's sample grid to 0.1 ms)."""
        for original in (TestMerge.MASTER, TestMerge.WORKER):
            assert ProcessReport.read(json.loads(json.dumps(original.to_json()))) == original
        merged = merge([TestMerge.MASTER, TestMerge.WORKER])
        assert ProcessReport.read(json.loads(json.dumps(merged.to_json()))).to_json() == merged.to_json()

    def test_reads_a_part_written_by_0_2(self) -> None:
        """A 0.2 part (no in_flight, checks, delay, info) reads with those empty."""
        data = TestMerge.WORKER.to_json()
        for newer in ("in_flight", "checks", "delay", "info"):
            del data[newer]
        got = ProcessReport.read(data)
        assert (got.in_flight, got.checks, got.delay, got.server) == (0, (), None, "")
        assert got.requests == TestMerge.WORKER.requests

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda d: d.update(role="boss"), r"report\.role: expected one of"),
            (lambda d: d.pop("requests"), r"report\.requests: missing"),
            (lambda d: d.update(in_flight=-1), r"report\.in_flight: expected a whole number"),
            (
                lambda d: d["checks"].append(["readyz", "db", 1, 0, 0]),
                r"report\.checks\[1\]\[2\]: expected true or false",
            ),
            (lambda d: d["checks"].append(["readyz"]), r"report\.checks\[1\]: expected a list of 5 items"),
            (lambda d: d["signals"].update(ShutdownInitiated="soon"), r"report\.signals\.ShutdownInitiated"),
            (lambda d: d["hooks"][0].update(runs=True), r"report\.hooks\[0\]\.runs: expected a whole number"),
            (lambda d: d["hooks"][0].update(duration_s=float("nan")), r"report\.hooks\[0\]\.duration_s"),
            (lambda d: d["info"].update(version=2), r"report\.info\.version: expected a string"),
            (lambda d: d["delay"].update(end="never"), r"report\.delay\.end: expected one of fixed"),
        ],
    )
    def test_refuses_what_is_not_a_report(self, change: Any, message: str) -> None:
        """Hostile input: one ReportError naming the first field that is wrong."""
        data = json.loads(json.dumps(dataclasses.replace(TestMerge.WORKER, delay=TestMerge.MASTER.delay).to_json()))
        change(data)
        with pytest.raises(ReportError, match=message):
            ProcessReport.read(data)

    @pytest.mark.parametrize("data", [None, [], "report", 3])
    def test_refuses_what_is_not_an_object(self, data: object) -> None:
        """Not a JSON object: a ReportError saying so."""
        with pytest.raises(ReportError, match="report: expected a JSON object"):
            ProcessReport.read(data)
