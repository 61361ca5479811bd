"""Unit tests of the master's shutdown (graceful.gunicorn.master) against a fake arbiter and a fake clock.

Each test plays Gunicorn's part with :class:`tests.gunicorn.fakes.FakeArbiter`:
the main loop's TERM, HUP, TTOU, an OS signal, workers that exit or linger.
No Gunicorn process, no sleep: the lifecycle's waits run on a FakeClock.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn, cast

import pytest

from graceful.core.config import Config
from graceful.core.delay import QUIET_MIN, DelayEnd
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import part_of
from graceful.core.role import Role
from graceful.gunicorn.adapter.arbiter import ExitStatus
from graceful.gunicorn.channel import Kind
from graceful.gunicorn.master import MasterShutdown
from graceful.gunicorn.stop_reason import StopReason
from graceful.testing import FakeClock, SignalRecorder
from tests.gunicorn.fakes import FakeArbiter

SOON = 10.0  # real seconds: a bound for a loaded machine, never reached when things work

#: The master's signals in default mode, hooks quicker than the delay (the workers fire the rest).
MASTER_ORDER = [
    "ShutdownInitiated",
    "PreShutdownHooksStopped",
    "AfterShutdownDelayDuration",
    "NotAcceptingNewRequests",
    "HTTPServerStoppedListening",
]


class ExitRecorder:
    """Stands in for the process's exit: records the status instead of ending the test run."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


@pytest.fixture
def made() -> Iterator[list[MasterShutdown]]:
    """The masters a test makes; their channels are closed at the end."""
    masters: list[MasterShutdown] = []
    yield masters
    for master in masters:
        master.channel.close()


def master_of(
    made: list[MasterShutdown], arbiter: FakeArbiter, config: Config | None = None, settle: float = 0.05
) -> tuple[MasterShutdown, Lifecycle, SignalRecorder, ExitRecorder]:
    """An installed MasterShutdown over ``arbiter``, its lifecycle (FakeClock), a recorder and its exit.

    ``settle``: the FakeClock's real pause before its time jumps (shorter for a test of many short waits).
    """
    lifecycle = Lifecycle(config or Config(shutdown_delay=5), clock=FakeClock(settle=settle))
    recorder = SignalRecorder(lifecycle)
    exits = ExitRecorder()
    master = MasterShutdown(arbiter, lifecycle, exit=cast("type[NoReturn]", exits))
    made.append(master)
    master.install()
    return master, lifecycle, recorder, exits


@contextlib.contextmanager
def held_in_the_delay(lifecycle: Lifecycle) -> Iterator[None]:
    """A pre-shutdown hook that holds the first half (and so the hand-over) until the block ends."""
    release = threading.Event()
    lifecycle.pre_shutdown_hook("holds-the-first-half", timeout=600)(lambda: release.wait(SOON))
    try:
        yield
    finally:
        release.set()


def first_term(arbiter: FakeArbiter) -> None:
    """The first TERM, as Gunicorn's main loop hands it over; Gunicorn's loop goes on."""
    arbiter.term()
    assert not arbiter.halted


def handed_over(arbiter: FakeArbiter) -> None:
    """The shutdown thread woke Gunicorn's loop (no signal): its next pass, which stops the workers and halts."""
    assert arbiter.woken.wait(SOON), "the shutdown thread never handed over"
    arbiter.loop_pass()
    assert arbiter.halted


def shut_down(arbiter: FakeArbiter) -> None:
    """The first TERM, then the loop's pass after the hand-over."""
    first_term(arbiter)
    handed_over(arbiter)


class TestFirstTerm:
    def test_starts_the_timeline_and_keeps_gunicorn_running(self, made: list[MasterShutdown]) -> None:
        """The first TERM: ShutdownInitiated at once, systemd told STOPPING=1, the workers' broadcast fired."""
        arbiter = FakeArbiter()
        master, lifecycle, _, _ = master_of(made, arbiter)
        first_term(arbiter)  # Gunicorn's loop goes on: workers keep serving through the delay
        assert lifecycle.shutdown_initiated.is_set()
        assert arbiter.systemd[0] == "STOPPING=1"
        assert master.channel.fired(Kind.SHUTDOWN_INITIATED)
        assert "kill SIGTERM" not in arbiter.calls

    def test_hands_over_after_the_delay_then_stops_the_workers(self, made: list[MasterShutdown]) -> None:
        """The delay and the hooks, the listeners closed, one wake of the loop; its TERM stops the workers."""
        arbiter = FakeArbiter()
        master, _, recorder, _ = master_of(made, arbiter)
        shut_down(arbiter)
        recorder.assert_order(MASTER_ORDER)
        delay = recorder.time_of("AfterShutdownDelayDuration") - recorder.time_of("ShutdownInitiated")
        assert delay == pytest.approx(5.0)
        assert master.channel.fired(Kind.NOT_ACCEPTING)
        assert arbiter.calls.count("wake") == 1 and arbiter.calls.count("halt") == 1
        assert arbiter.calls[-2:] == ["kill SIGTERM", "halt"] and not arbiter.workers

    def test_the_hand_over_says_how_many_workers_it_stops(
        self, made: list[MasterShutdown], caplog: pytest.LogCaptureFixture
    ) -> None:
        """The main thread's stop of the workers is logged once, with their count and graceful_timeout."""
        arbiter = FakeArbiter(graceful_timeout=30.0)
        master_of(made, arbiter)
        with caplog.at_level(logging.INFO, logger="graceful"):
            shut_down(arbiter)
        lines = [r.getMessage() for r in caplog.records if "worker(s): each drains" in r.getMessage()]
        assert lines == [
            "graceful: stopping 2 worker(s): each drains and cleans up, SIGKILL after waiting 24.0s"
            " (graceful_timeout 30s, cut to what is left of the grace period)"  # 30 s less the 5 s delay and the margin
        ]

    def test_the_adaptive_delay_reads_the_workers_arrivals(self, made: list[MasterShutdown]) -> None:
        """With a floor, the master's delay ends QUIET_MIN after the last arrival a worker wrote on the board."""
        arbiter = FakeArbiter()
        config = Config(shutdown_delay=20, shutdown_delay_min=1, grace_period=50)
        lifecycle = Lifecycle(config, clock=FakeClock(settle=0.002))
        recorder = SignalRecorder(lifecycle)
        master = MasterShutdown(arbiter, lifecycle, exit=cast("type[NoReturn]", ExitRecorder()))
        made.append(master)
        master.install()
        master.arrivals.slot[0] = lifecycle.clock.now() + 0.4  # a worker's arrival, as the delay reads it
        shut_down(arbiter)
        delay = recorder.time_of("AfterShutdownDelayDuration") - recorder.time_of("ShutdownInitiated")
        assert delay == pytest.approx(0.4 + QUIET_MIN)
        assert lifecycle.delay_outcome is not None and lifecycle.delay_outcome.end is DelayEnd.QUIET

    def test_systemd_hears_each_signal(self, made: list[MasterShutdown]) -> None:
        """systemd's STATUS follows the master's signals, after STOPPING=1."""
        arbiter = FakeArbiter()
        master_of(made, arbiter)
        shut_down(arbiter)
        assert arbiter.systemd == ["STOPPING=1", *(f"STATUS=graceful: {name}" for name in MASTER_ORDER)]

    def test_pre_shutdown_hooks_run_once_together_in_the_master(self, made: list[MasterShutdown]) -> None:
        """Every pre-shutdown hook runs once, all at once; NotAcceptingNewRequests waits for the slowest."""
        arbiter = FakeArbiter()
        lifecycle = Lifecycle(Config(shutdown_delay=1, hook_timeout=5), clock=FakeClock())
        both_running = threading.Barrier(2, timeout=SOON)
        ran: list[str] = []

        for name in ("deregister-webhooks", "release-lease"):

            @lifecycle.pre_shutdown_hook(name)
            def hook(name: str = name) -> None:
                both_running.wait()  # fails unless both run at the same time
                ran.append(name)

        recorder = SignalRecorder(lifecycle)
        master = MasterShutdown(arbiter, lifecycle)
        made.append(master)
        master.install()
        shut_down(arbiter)
        assert sorted(ran) == ["deregister-webhooks", "release-lease"]
        assert recorder.names.index("PreShutdownHooksStopped") < recorder.names.index("NotAcceptingNewRequests")

    def test_a_hung_hook_is_bounded_by_its_timeout(self, made: list[MasterShutdown]) -> None:
        """A pre-shutdown hook that never returns holds the listeners open only until its timeout."""
        arbiter = FakeArbiter()
        lifecycle = Lifecycle(Config(shutdown_delay=1, hook_timeout=3), clock=FakeClock())
        release = threading.Event()

        @lifecycle.pre_shutdown_hook("hangs")
        def hangs() -> None:
            release.wait(SOON)

        recorder = SignalRecorder(lifecycle)
        master = MasterShutdown(arbiter, lifecycle)
        made.append(master)
        master.install()
        try:
            shut_down(arbiter)
            t0 = recorder.time_of("ShutdownInitiated")
            assert recorder.time_of("NotAcceptingNewRequests") - t0 == pytest.approx(3.0)
            assert lifecycle.hung_hooks == ["hangs"]
        finally:
            release.set()


class TestSecondSignal:
    def test_a_second_term_during_the_delay_exits_1_and_kills_the_workers(self, made: list[MasterShutdown]) -> None:
        """A TERM while the delay runs: the workers are SIGKILLed and the master exits 1 at once."""
        arbiter = FakeArbiter()
        _, lifecycle, _, exits = master_of(made, arbiter)
        with held_in_the_delay(lifecycle):
            first_term(arbiter)
            arbiter.term()
        assert exits.codes == [1]
        assert "kill SIGKILL" in arbiter.calls

    def test_a_term_while_the_workers_drain_exits_1(self, made: list[MasterShutdown]) -> None:
        """After the hand-over Gunicorn's stop() would drop a TERM: graceful's trap exits 1 instead."""
        arbiter = FakeArbiter(exit_on=(signal.SIGKILL,))  # the workers are still draining
        _, _, _, exits = master_of(made, arbiter)
        first_term(arbiter)
        # As the OS handler runs it while the master reaps: queued for the trap's thread.
        arbiter.on_reap = lambda: arbiter.os_signal(signal.SIGTERM) if not exits.codes else None
        handed_over(arbiter)
        assert exits.called.wait(SOON)
        assert exits.codes == [1] and "kill SIGKILL" in arbiter.calls
        assert arbiter.gunicorn_os_signals == []  # never reached Gunicorn, which would drop it

    def test_int_while_the_workers_drain_is_gunicorns_quick_stop(self, made: list[MasterShutdown]) -> None:
        """SIGINT (or QUIT) during the workers' drain: passed to Gunicorn, and the workers get QUIT."""
        arbiter = FakeArbiter(exit_on=(signal.SIGQUIT, signal.SIGKILL))
        master_of(made, arbiter)
        first_term(arbiter)
        arbiter.on_reap = lambda: arbiter.os_signal(signal.SIGINT)  # arrives while the master reaps
        handed_over(arbiter)
        assert arbiter.calls[-4:] == ["kill SIGTERM", "reap", "kill SIGQUIT", "halt"]
        assert arbiter.gunicorn_os_signals == [signal.SIGINT]

    @pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGQUIT])
    def test_int_and_quit_before_a_term_are_gunicorns(self, made: list[MasterShutdown], signum: int) -> None:
        """INT and QUIT while serving go straight to Gunicorn's own quick stop: no timeline."""
        arbiter = FakeArbiter()
        master, lifecycle, recorder, _ = master_of(made, arbiter)
        arbiter.os_signal(signum)
        assert arbiter.gunicorn_os_signals == [signum]
        arbiter.stop()  # Gunicorn's quick stop
        master.finish()
        assert recorder.names == [] and not lifecycle.shutdown_initiated.is_set()


class TestWorkersThatLinger:
    def test_killed_after_graceful_timeout_with_a_count(
        self, made: list[MasterShutdown], caplog: pytest.LogCaptureFixture
    ) -> None:
        """Workers still running when graceful_timeout ends are SIGKILLed, the count logged."""
        arbiter = FakeArbiter(graceful_timeout=0.02, exit_on=(signal.SIGKILL,))
        master_of(made, arbiter)
        with caplog.at_level(logging.WARNING, logger="graceful"):
            shut_down(arbiter)
        assert arbiter.calls[-3:] == ["kill SIGKILL", "reap", "halt"]  # reaped: how they ended goes in the record
        assert "2 worker(s) still running after waiting 0.0s (graceful_timeout 0.02s): killing" in caplog.text

    def test_a_worker_that_exits_on_its_own_is_not_waited_for(self, made: list[MasterShutdown]) -> None:
        """The master reaps as workers exit: once none is left, Gunicorn's stop proceeds (no SIGKILL)."""
        arbiter = FakeArbiter(exit_on=())
        master_of(made, arbiter)
        first_term(arbiter)
        arbiter.on_reap = arbiter.workers.clear  # they exit after their drain and cleanup
        handed_over(arbiter)
        assert arbiter.calls[-3:] == ["kill SIGTERM", "reap", "halt"]


class TestDirtyPool:
    def test_stopped_after_the_http_workers(self, made: list[MasterShutdown]) -> None:
        """Gunicorn 27's dirty arbiter gets its TERM only once the HTTP workers (and their requests) are done."""
        arbiter = FakeArbiter(dirty=77)
        master_of(made, arbiter)
        shut_down(arbiter)
        tail = arbiter.calls[arbiter.calls.index("kill SIGTERM") :]
        assert tail == ["kill SIGTERM", "dirty SIGTERM", "reap dirty", "halt"] and arbiter.dirty == 0

    def test_killed_with_its_workers_when_it_lingers(
        self, made: list[MasterShutdown], caplog: pytest.LogCaptureFixture
    ) -> None:
        """A dirty arbiter still running after dirty_graceful_timeout is SIGKILLed with its workers, logged."""
        arbiter = FakeArbiter(dirty=77, dirty_graceful_timeout=0.02, dirty_exit_on=())
        master, lifecycle, _, _ = master_of(made, arbiter, settle=0.002)  # 200 polls of 5 ms before the bound
        with caplog.at_level(logging.WARNING, logger="graceful"):
            shut_down(arbiter)
            master.finish()  # on_exit: the record names it
        assert arbiter.calls[-2:] == ["kill dirty tree", "halt"]
        # It had its dirty_graceful_timeout and the 1 s the master adds for its own exit.
        assert "dirty arbiter still running after waiting 1.0s (dirty_graceful_timeout 0.02s): killing" in caplog.text
        [end] = lifecycle.stats.process_ends()
        assert end.describe() == (
            "dirty arbiter 77 killed by the master at dirty_graceful_timeout (SIGKILL) while stopping:"
            " its unfinished tasks are lost"
        )

    def test_a_dirty_arbiter_that_crashes_while_stopping_is_named(self, made: list[MasterShutdown]) -> None:
        """The dirty arbiter dies of SIGSEGV as it stops: named in the master's figures; a TERM it obeys is not."""
        arbiter = FakeArbiter(dirty=77)
        arbiter.dirty_status = ExitStatus(signal=signal.SIGSEGV)
        master, lifecycle, _, _ = master_of(made, arbiter)
        shut_down(arbiter)
        master.finish()
        assert [e.describe() for e in lifecycle.stats.process_ends()] == [
            "dirty arbiter 77 killed by SIGSEGV while stopping: its unfinished tasks are lost"
        ]

    def test_a_dirty_arbiter_that_obeys_its_term_is_not_named(self, made: list[MasterShutdown]) -> None:
        """Status 0 after its TERM: a normal end."""
        arbiter = FakeArbiter(dirty=77)
        master, lifecycle, _, _ = master_of(made, arbiter)
        shut_down(arbiter)
        master.finish()
        assert lifecycle.stats.process_ends() == []

    def test_a_second_term_leaves_no_dirty_process(self, made: list[MasterShutdown]) -> None:
        """The second TERM kills the dirty arbiter and its workers too, before exiting 1."""
        arbiter = FakeArbiter(dirty=77)
        _, lifecycle, _, exits = master_of(made, arbiter)
        with held_in_the_delay(lifecycle):
            first_term(arbiter)
            arbiter.term()
        assert exits.codes == [1]
        assert arbiter.calls[-2:] == ["kill SIGKILL", "kill dirty tree"]


class TestNotAServerShutdown:
    @pytest.mark.parametrize(
        ("operation", "reason"), [("hup", StopReason.RELOAD), ("control_worker_kill", StopReason.CONTROL_KILL)]
    )
    def test_hup_and_worker_kill_say_why_and_start_no_timeline(
        self, made: list[MasterShutdown], operation: str, reason: StopReason
    ) -> None:
        """HUP and the control socket's worker kill write the stop reason first; readiness and hooks untouched."""
        arbiter = FakeArbiter()
        master, _, recorder, _ = master_of(made, arbiter)
        getattr(arbiter, operation)()
        assert master.channel.stop_reason is reason
        assert recorder.names == [] and not master.channel.fired(Kind.SHUTDOWN_INITIATED)

    @pytest.mark.parametrize(("new", "old", "reason"), [(1, 2, StopReason.SCALE_IN), (3, 2, StopReason.BY_MASTER)])
    def test_fewer_workers_are_a_scale_in(
        self, made: list[MasterShutdown], new: int, old: int, reason: StopReason
    ) -> None:
        """TTOU or the control socket's worker remove (num_workers lowered) is a scale-in; TTIN says nothing."""
        master, _, recorder, _ = master_of(made, FakeArbiter())
        master.workers_changed(new, old)
        assert master.channel.stop_reason is reason and recorder.names == []

    @pytest.mark.parametrize(("successor", "predecessor"), [(4242, 0), (0, os.getppid())])
    def test_term_with_a_live_usr2_peer_stops_only_this_masters_workers(
        self, made: list[MasterShutdown], successor: int, predecessor: int, caplog: pytest.LogCaptureFixture
    ) -> None:
        """USR2 then TERM to the old master (or to the new one, rolling back): a process stop, no timeline."""
        arbiter = FakeArbiter(successor=successor, predecessor=predecessor)
        ran: list[str] = []
        master, lifecycle, recorder, _ = master_of(made, arbiter)
        lifecycle.pre_shutdown_hook("deregister")(lambda: ran.append("deregister"))
        with caplog.at_level(logging.INFO, logger="graceful"):
            arbiter.term()  # Gunicorn halts at once: its stop closes only this master's copies
            master.finish()
        assert arbiter.calls == ["front SIGTERM SIGINT SIGQUIT", "reap", "kill SIGTERM", "halt"]
        assert master.channel.stop_reason is StopReason.UPGRADE
        assert recorder.names == [] and ran == [] and arbiter.systemd == []
        assert f"pid {successor or predecessor} serves" in caplog.text


class TestRetryAfterMode:
    def test_listeners_close_once_every_live_worker_drained(self, made: list[MasterShutdown]) -> None:
        """send_retry_after: the master keeps listening until each live worker reports; one that died is not awaited."""
        arbiter = FakeArbiter(workers=(11, 12, 13))
        master, _, recorder, _ = master_of(made, arbiter, Config(shutdown_delay=1, send_retry_after=True))
        channels = {pid: master.channel.connect(pid) for pid in (11, 12, 13)}

        def workers_drain() -> None:
            assert channels[11].wait_for(Kind.NOT_ACCEPTING, SOON)
            assert channels[11].send(Kind.DRAINED, timeout=SOON)
            arbiter.workers.discard(12)  # died during the drain
            assert channels[13].send(Kind.DRAINED, timeout=SOON)

        reporter = threading.Thread(target=workers_drain)
        reporter.start()
        shut_down(arbiter)
        reporter.join(SOON)
        for channel in channels.values():
            channel.close()
        names = recorder.names
        assert names.index("NotAcceptingNewRequests") < names.index("HTTPServerStoppedListening")


class TestListenersSharedWithOthers:
    def test_each_worker_stops_accepting_and_reports(self, made: list[MasterShutdown]) -> None:
        """Sockets another process also serves (systemd, fd://, a USR2 peer) stay open: workers stop accepting."""
        arbiter = FakeArbiter(shared_listeners=True)
        master, _, recorder, _ = master_of(made, arbiter)
        channels = [master.channel.connect(pid) for pid in (11, 12)]

        def workers_report() -> None:
            for channel in channels:
                assert channel.wait_for(Kind.CLOSE_LISTENERS, SOON)
                assert channel.send(Kind.LISTENERS_CLOSED, timeout=SOON)

        reporter = threading.Thread(target=workers_report)
        reporter.start()
        shut_down(arbiter)
        reporter.join(SOON)
        for channel in channels:
            channel.close()
        recorder.assert_order(MASTER_ORDER)


class TestFinish:
    def test_the_record_merges_the_workers_parts(self, made: list[MasterShutdown], tmp_path: Path) -> None:
        """on_exit: the master's signals and each worker's part make one record, written to GRACEFUL_REPORT_FILE."""
        report = tmp_path / "record.json"
        arbiter = FakeArbiter()
        master, lifecycle, _, _ = master_of(made, arbiter, Config(shutdown_delay=1, report_file=str(report)))
        shut_down(arbiter)
        worker = Lifecycle(Config(shutdown_delay=1), clock=FakeClock(), role=Role.WORKER)
        worker.shutdown_initiated.fire()
        worker.drain_and_clean_up()
        channel = master.channel.connect(11)
        assert channel.send_json(Kind.PART, part_of(worker, 11).to_json(), timeout=SOON)
        channel.close()  # the worker exits right after sending
        master.finish()
        record = json.loads(report.read_text())
        assert [(p["pid"], p["role"]) for p in record["parts"]] == [(os.getpid(), "master"), (11, "worker")]
        assert lifecycle.cleanup_finished.is_set()

    def test_a_worker_killed_while_stopping_is_in_the_record_with_its_requests_lost(
        self, made: list[MasterShutdown], tmp_path: Path
    ) -> None:
        """One worker SIGKILLed during its drain (4 in flight), the other drains: the record is not ok and says why."""
        report = tmp_path / "record.json"
        arbiter = FakeArbiter(exit_on=())
        master, _, _, _ = master_of(made, arbiter, Config(shutdown_delay=1, report_file=str(report)))
        killed, drained = master.channel.connect(11), master.channel.connect(12)
        first_term(arbiter)
        assert killed.send(Kind.IN_FLIGHT, b"4", timeout=SOON)
        worker = Lifecycle(Config(shutdown_delay=1), clock=FakeClock(), role=Role.WORKER)
        worker.shutdown_initiated.fire()
        worker.drain_and_clean_up()
        assert drained.send_json(Kind.PART, part_of(worker, 12).to_json(), timeout=SOON)

        def stopping() -> None:  # once TERMed: 11 is killed (the OOM killer), 12 exits after its drain
            if arbiter.workers:
                killed.close()
                drained.close()
                arbiter.worker_ends(11, ExitStatus(signal=signal.SIGKILL))
                arbiter.worker_ends(12, ExitStatus(status=0))

        arbiter.on_reap = stopping
        handed_over(arbiter)
        master.finish()
        record = json.loads(report.read_text())
        assert record["ok"] is False
        assert (record["requests"]["lost"], record["requests"]["lost_unknown"]) == (4, 0)
        assert [e["text"] for e in record["ended"]] == [
            "worker 11 killed by SIGKILL without its part of the record while stopping: 4 requests in flight lost"
        ]
        assert [p["pid"] for p in record["parts"]] == [os.getpid(), 12]

    def test_gunicorns_exit_after_the_record_skips_the_final_collections(
        self, made: list[MasterShutdown], tmp_path: Path
    ) -> None:
        """on_exit ends with the heap frozen, the record already written: Gunicorn's exit skips collecting it."""
        report = tmp_path / "record.json"
        arbiter = FakeArbiter()
        master, _, _, _ = master_of(made, arbiter, Config(shutdown_delay=1, report_file=str(report)))
        shut_down(arbiter)
        assert gc.get_freeze_count() == 0
        master.finish()
        assert report.exists() and gc.get_freeze_count() > 0

    def test_a_quick_stop_leaves_no_record(self, made: list[MasterShutdown], tmp_path: Path) -> None:
        """INT/QUIT while serving: no graceful shutdown happened, so nothing is recorded."""
        report = tmp_path / "record.json"
        arbiter = FakeArbiter()
        master, _, _, _ = master_of(made, arbiter, Config(report_file=str(report)))
        master.finish()
        assert not report.exists()
