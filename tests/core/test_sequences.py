"""Unit tests of graceful.core.sequences: each sequence's steps, in order, against recording fakes.

The steps themselves are tested where they live (tests/core/test_lifecycle.py,
tests/gunicorn/test_master.py, tests/gunicorn/test_worker.py); here only the
order and the branches: which step follows which, and what a phase changes.
No thread, no sleep: the lifecycles run on a FakeClock and the fakes run
"in background" at once.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.sequences import (
    MasterPhase,
    master_finish,
    master_on_loop_pass,
    master_on_term,
    server_shutdown,
    worker_exit,
    worker_watch,
)
from graceful.core.signals import LifecycleSignal
from graceful.testing import FakeClock, SignalRecorder
from tests.conftest import QUICK_HOOKS_ORDER

TIMELINE = QUICK_HOOKS_ORDER  # the pre-shutdown hooks (none here) end before the delay does


class FakeMaster:
    """A Gunicorn master's steps, recorded in order; the background runs at once, on the calling thread."""

    def __init__(self, config: Config | None = None, *, peer: bool = False, quick: bool = False) -> None:
        self.lifecycle = Lifecycle(config or Config(shutdown_delay=2), clock=FakeClock(settle=0.0))
        self.phase = MasterPhase.SERVING
        self.stop_requested = False
        self.steps: list[str] = []
        self.peer = peer
        self.quick = quick
        self.background: list[Callable[[], None]] = []

    def stops_alone(self) -> bool:
        self.steps.append("stops alone?")
        return self.peer

    def announce_shutdown(self) -> None:
        self.steps.append("announce")

    def in_background(self, sequence: Callable[[], None]) -> None:
        self.steps.append("background")
        self.background.append(sequence)

    def wait_workers_drained(self) -> None:
        self.steps.append("wait drained")

    def hand_over(self) -> None:
        self.steps.append(f"hand over ({self.phase.value})")

    def stop_workers(self) -> bool:
        self.steps.append(f"stop workers ({self.phase.value})")
        return not self.quick

    def stop_dirty_pool(self) -> None:
        self.steps.append("stop dirty pool")

    def halt_server(self) -> None:
        self.steps.append("halt")

    def exit_at_once(self) -> None:
        self.steps.append("exit 1")

    def leave_record(self) -> None:
        self.steps.append("record")

    def close(self) -> None:
        self.steps.append("close")

    def run_background(self) -> None:
        """The graceful-shutdown thread's turn."""
        for sequence in self.background:
            sequence()


class FakeWorker:
    """A Gunicorn worker's steps, recorded in order; the master's facts are set at once, at ``master_time``."""

    def __init__(
        self, config: Config | None = None, *, booted: bool = True, server_stops: bool = True, master_time: float = 7.0
    ) -> None:
        self.lifecycle = Lifecycle(config or Config(shutdown_delay=2), clock=FakeClock(settle=0.0))
        self.steps: list[str] = []
        self._booted = booted
        self._server_stops = server_stops
        self.master_time = master_time

    def learn(self, signal: LifecycleSignal) -> None:
        self.steps.append(f"learn {signal.name}")
        signal.fire(at=self.master_time)

    def wait_to_close_listeners(self) -> None:
        self.steps.append("wait close listeners")

    def stop_listening(self) -> None:
        self.steps.append("stop listening")

    def report_drained(self) -> None:
        self.steps.append(f"report drained (drain recorded: {self.lifecycle.stats.drain is not None})")

    def report_listeners_closed(self) -> None:
        self.steps.append("report listeners closed")

    @property
    def booted(self) -> bool:
        return self._booted

    @property
    def server_stops(self) -> bool:
        self.steps.append("server stops?")
        return self._server_stops

    def begin_stop(self) -> float:
        self.steps.append("begin stop")
        return 3.0

    def stop_alone(self, drain_timeout: float) -> None:
        self.steps.append(f"stop alone {drain_timeout:g}")

    def leave_part(self) -> None:
        self.steps.append(f"part (cleanup finished: {self.lifecycle.cleanup_finished.is_set()})")

    def end(self) -> None:
        self.steps.append("end")


class TestServer:
    def test_the_whole_timeline_in_order(self) -> None:
        """One process: every signal of the timeline once, in the timeline's order (no hooks: they end at once)."""
        lifecycle = Lifecycle(Config(shutdown_delay=2, hook_timeout=5), clock=FakeClock(settle=0.0))
        recorder = SignalRecorder(lifecycle)
        server_shutdown(lifecycle)
        recorder.assert_order(TIMELINE)
        assert recorder.time_of("AfterShutdownDelayDuration") - recorder.time_of("ShutdownInitiated") == 2

    def test_retry_after_mode_closes_the_listeners_after_the_drain(self) -> None:
        """send_retry_after: NotAcceptingNewRequests, the drain, and only then HTTPServerStoppedListening."""
        lifecycle = Lifecycle(Config(shutdown_delay=1, send_retry_after=True), clock=FakeClock(settle=0.0))
        recorder = SignalRecorder(lifecycle)
        server_shutdown(lifecycle)
        assert recorder.names.index("InFlightRequestsDrained") < recorder.names.index("HTTPServerStoppedListening")


class TestMaster:
    def test_the_first_term_announces_starts_the_timeline_and_returns(self) -> None:
        """First TERM: shutting down, announced, ShutdownInitiated, the rest in the background; Gunicorn goes on."""
        master = FakeMaster()
        master_on_term(master)
        assert master.steps == ["stops alone?", "announce", "background"]
        assert master.phase is MasterPhase.SHUTTING_DOWN and master.lifecycle.shutdown_initiated.is_set()
        assert not master.lifecycle.after_shutdown_delay.is_set()  # the delay is the background's

    def test_the_background_runs_the_first_half_then_hands_over(self) -> None:
        """graceful-shutdown thread: the delay and hooks to NotAcceptingNewRequests, then the hand-over, phase set."""
        master = FakeMaster()
        master_on_term(master)
        master.run_background()
        assert master.steps[-1] == "hand over (handed over)"
        assert master.lifecycle.http_server_stopped_listening.is_set()
        assert not master.lifecycle.in_flight_requests_drained.is_set()  # the workers drain, not the master

    def test_retry_after_mode_waits_for_the_workers_drain_before_closing(self) -> None:
        """send_retry_after: every worker's drain is awaited, then the listeners close, then the hand-over."""
        master = FakeMaster(Config(shutdown_delay=1, send_retry_after=True))
        master_on_term(master)
        master.run_background()
        assert master.steps[-2:] == ["wait drained", "hand over (handed over)"]
        assert master.lifecycle.http_server_stopped_listening.is_set()

    def test_a_loop_pass_does_nothing_until_the_hand_over(self) -> None:
        """Gunicorn's loop passes while serving and during the delay stop nothing."""
        master = FakeMaster()
        master_on_loop_pass(master)
        master_on_term(master)
        master_on_loop_pass(master)
        assert "stop workers (stopping workers)" not in master.steps and "halt" not in master.steps

    def test_the_pass_after_the_hand_over_stops_workers_dirty_pool_then_halts(self) -> None:
        """The loop's pass after the hand-over: workers, then the dirty pool, then Gunicorn's halt; once."""
        master = FakeMaster()
        master_on_term(master)
        master.run_background()
        master_on_loop_pass(master)
        master_on_loop_pass(master)  # halt exits the process; a pass after it would stop nothing again
        assert master.steps[-3:] == ["stop workers (stopping workers)", "stop dirty pool", "halt"]
        assert master.steps.count("halt") == 1

    def test_a_quick_stop_while_the_workers_drain_skips_the_dirty_pool(self) -> None:
        """INT or QUIT while reaping: Gunicorn's own stop finishes (the dirty pool included); halt follows."""
        master = FakeMaster(quick=True)
        master_on_term(master)
        master.run_background()
        master_on_loop_pass(master)
        assert master.steps[-2:] == ["stop workers (stopping workers)", "halt"]

    @pytest.mark.parametrize("phase", [MasterPhase.SHUTTING_DOWN, MasterPhase.HANDED_OVER])
    def test_a_second_term_exits_1(self, phase: MasterPhase) -> None:
        """A TERM Gunicorn's loop takes after the first: exit 1 at once, nothing else."""
        master = FakeMaster()
        master.phase = phase
        master_on_term(master)
        assert master.steps == ["exit 1"]

    def test_a_term_with_a_usr2_peer_stops_only_the_workers(self) -> None:
        """A live USR2 peer: no announcement, no timeline; the workers stop, then Gunicorn halts."""
        master = FakeMaster(peer=True)
        master_on_term(master)
        assert master.steps == ["stops alone?", "stop workers (stopping workers)", "stop dirty pool", "halt"]
        assert not master.lifecycle.shutdown_initiated.is_set()

    def test_on_exit_fires_the_workers_signals_and_leaves_the_record(self) -> None:
        """on_exit after a graceful shutdown: InFlightRequestsDrained and CleanupFinished, then the record."""
        master = FakeMaster()
        recorder = SignalRecorder(master.lifecycle)
        master_on_term(master)
        master.run_background()
        master_finish(master, process_stop=False)
        recorder.assert_order(TIMELINE)
        assert master.steps[-1] == "record"

    @pytest.mark.parametrize("process_stop", [False, True])
    def test_on_exit_without_a_server_shutdown_only_closes(self, process_stop: bool) -> None:
        """A quick stop (still serving) or a USR2 peer's process stop: the channel closes, no record, no signal."""
        master = FakeMaster()
        if process_stop:
            master.phase = MasterPhase.STOPPING_WORKERS
        master_finish(master, process_stop=process_stop)
        assert master.steps == ["close"] and not master.lifecycle.cleanup_finished.is_set()


class TestWorker:
    def test_the_watch_learns_both_facts_then_waits_to_close_listeners(self) -> None:
        """graceful-watch: ShutdownInitiated, NotAcceptingNewRequests, at the master's time; then the listeners."""
        worker = FakeWorker()
        worker_watch(worker)
        assert worker.steps == [
            "learn ShutdownInitiated",
            "learn NotAcceptingNewRequests",
            "wait close listeners",
            "stop listening",
            "report listeners closed",
        ]
        assert worker.lifecycle.shutdown_initiated.fired_at == 7.0

    def test_retry_after_mode_drains_and_reports_before_the_listeners(self) -> None:
        """send_retry_after: the worker drains (recorded) and reports it before it waits for the listeners."""
        worker = FakeWorker(Config(shutdown_delay=1, send_retry_after=True))
        worker_watch(worker)
        assert worker.steps[2:4] == ["report drained (drain recorded: True)", "wait close listeners"]

    def test_the_servers_stop_runs_the_second_half_then_sends_the_part(self) -> None:
        """worker_exit in the server's stop: begin, drain and cleanup (CleanupFinished), the part, the end."""
        worker = FakeWorker()
        recorder = SignalRecorder(worker.lifecycle)
        worker_exit(worker)
        assert worker.steps == ["begin stop", "server stops?", "part (cleanup finished: True)", "end"]
        assert recorder.names == ["InFlightRequestsDrained", "HTTPServerStoppedListening", "CleanupFinished"]

    def test_a_process_stop_fires_no_signal(self) -> None:
        """worker_exit in a process stop (recycled, HUP, TTOU): stopped alone with its drain time, no signal."""
        worker = FakeWorker(server_stops=False)
        recorder = SignalRecorder(worker.lifecycle)
        worker_exit(worker)
        assert worker.steps == ["begin stop", "server stops?", "stop alone 3", "part (cleanup finished: False)", "end"]
        assert recorder.names == []

    def test_a_worker_that_never_booted_only_cleans_up(self) -> None:
        """worker_exit before post_worker_init finished: the cleanup tasks only, no stop begun; part and end."""
        worker = FakeWorker(booted=False)
        ran: list[str] = []
        worker.lifecycle.cleanup_task("close")(lambda: ran.append("close"))
        worker_exit(worker)
        assert ran == ["close"] and worker.steps == ["part (cleanup finished: False)", "end"]


class TestStopRequested:
    def test_a_requested_stop_runs_as_the_first_term_on_the_next_loop_pass(self) -> None:
        """stop_requested (the health port gave up its address) starts the shutdown on the main loop's pass, once."""
        master = FakeMaster()
        master.stop_requested = True
        master_on_loop_pass(master)
        assert master.phase is MasterPhase.SHUTTING_DOWN
        assert master.steps == ["stops alone?", "announce", "background"]
        assert not master.stop_requested
        master_on_loop_pass(master)
        assert master.steps == ["stops alone?", "announce", "background"]

    def test_after_a_term_a_requested_stop_changes_nothing(self) -> None:
        """Once shutting down, a requested stop is no second TERM: nothing happens, no exit 1."""
        master = FakeMaster()
        master_on_term(master)
        master.stop_requested = True
        master_on_loop_pass(master)
        assert master.steps == ["stops alone?", "announce", "background"]
