"""Tests for graceful.core.lifecycle: the timeline, its order and its bounds."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from graceful.core.clock import MonotonicClock
from graceful.core.config import Config
from graceful.core.hooks import Outcome
from graceful.core.lifecycle import Lifecycle
from graceful.core.registry import PhaseStartedError
from graceful.core.role import Role
from graceful.testing import FakeClock, SignalRecorder, run_shutdown
from tests.conftest import QUICK_HOOKS_ORDER

DEFAULT_ORDER = [
    "ShutdownInitiated",
    "AfterShutdownDelayDuration",
    "PreShutdownHooksStopped",
    "NotAcceptingNewRequests",
    "HTTPServerStoppedListening",
    "InFlightRequestsDrained",
    "CleanupFinished",
]
RETRY_AFTER_ORDER = [
    "ShutdownInitiated",
    "AfterShutdownDelayDuration",
    "PreShutdownHooksStopped",
    "NotAcceptingNewRequests",
    "InFlightRequestsDrained",
    "HTTPServerStoppedListening",
    "CleanupFinished",
]


class RecordingAdapter:
    """A ServerAdapter that records when it was told to stop listening."""

    def __init__(self, lifecycle_ref: list[Lifecycle]) -> None:
        self.calls: list[bool] = []
        self._ref = lifecycle_ref

    def stop_listening(self) -> None:
        # Record whether the drain had finished when listeners were closed.
        self.calls.append(self._ref[0].in_flight_requests_drained.is_set())


def lifecycle(**config: object) -> tuple[Lifecycle, RecordingAdapter]:
    ref: list[Lifecycle] = []
    adapter = RecordingAdapter(ref)
    lc = Lifecycle(Config(**config), clock=FakeClock(), adapter=adapter)  # type: ignore[arg-type]
    ref.append(lc)
    return lc, adapter


class TestSignalOrder:
    def test_default_mode_order(self) -> None:
        """Default mode: listeners close at NotAcceptingNewRequests, before the drain."""
        lc, adapter = lifecycle(shutdown_delay=5)

        @lc.pre_shutdown_hook("slow", timeout=10)
        def slow() -> None:
            lc.clock.wait(threading.Event(), 8)

        _, recorder, _ = run_shutdown(lc)
        recorder.assert_order(DEFAULT_ORDER)
        assert adapter.calls == [False]

    def test_retry_after_mode_order(self) -> None:
        """send_retry_after: listeners close only after InFlightRequestsDrained."""
        lc, adapter = lifecycle(shutdown_delay=5, send_retry_after=True)

        @lc.pre_shutdown_hook("slow", timeout=10)
        def slow() -> None:
            lc.clock.wait(threading.Event(), 8)

        _, recorder, _ = run_shutdown(lc)
        recorder.assert_order(RETRY_AFTER_ORDER)
        assert adapter.calls == [True]

    def test_fast_hooks_stop_before_the_delay_ends(self) -> None:
        """Hooks quicker than the delay: PreShutdownHooksStopped precedes AfterShutdownDelayDuration."""
        lc, _ = lifecycle(shutdown_delay=5)
        lc.pre_shutdown_hook("quick")(lambda: None)
        _, recorder, _ = run_shutdown(lc)
        assert recorder.names[:3] == ["ShutdownInitiated", "PreShutdownHooksStopped", "AfterShutdownDelayDuration"]

    def test_has_been_ready_is_not_part_of_shutdown(self) -> None:
        """HasBeenReady fires only when told (first passing /readyz), not during shutdown."""
        lc, _ = lifecycle()
        _, recorder, _ = run_shutdown(lc)
        assert "HasBeenReady" not in recorder.names
        assert lc.has_been_ready.fire() is True and lc.has_been_ready.fire() is False


class TestTimeline:
    def test_not_accepting_waits_for_the_delay(self) -> None:
        """With no hooks, NotAcceptingNewRequests fires shutdown_delay after ShutdownInitiated."""
        lc, _ = lifecycle(shutdown_delay=7, grace_period=40)
        _, recorder, _ = run_shutdown(lc)
        assert recorder.time_of("NotAcceptingNewRequests") - recorder.time_of("ShutdownInitiated") == 7

    def test_not_accepting_waits_for_slow_hooks(self) -> None:
        """A hook slower than the delay holds NotAcceptingNewRequests until it ends."""
        lc, _ = lifecycle(shutdown_delay=2)

        @lc.pre_shutdown_hook("deregister", timeout=4)
        def deregister() -> None:
            lc.clock.wait(threading.Event(), 3)

        _, recorder, report = run_shutdown(lc)
        assert recorder.time_of("NotAcceptingNewRequests") - recorder.time_of("ShutdownInitiated") == 3
        assert report.by_name("deregister").outcome is Outcome.OK

    def test_hung_hook_bounded_by_its_timeout(self) -> None:
        """A pre-shutdown hook that never returns holds the timeline only until its timeout."""
        lc, _ = lifecycle(shutdown_delay=1)
        release = threading.Event()
        lc.pre_shutdown_hook("hang", timeout=4)(lambda: release.wait(30))
        _, recorder, report = run_shutdown(lc)
        assert recorder.time_of("NotAcceptingNewRequests") - recorder.time_of("ShutdownInitiated") == 4
        assert report.by_name("hang").outcome is Outcome.TIMED_OUT
        assert lc.hung_hooks == ["hang"]
        release.set()

    def test_drain_waits_for_in_flight_requests(self) -> None:
        """InFlightRequestsDrained waits until the last in-flight request is done."""
        lc = Lifecycle(Config(shutdown_delay=0), clock=MonotonicClock())
        release = lc.in_flight.add()
        recorder = SignalRecorder(lc)
        lc.request_shutdown()
        assert lc.not_accepting_new_requests.event.wait(10)
        assert not lc.in_flight_requests_drained.event.wait(0.1)
        release()
        assert lc.cleanup_finished.event.wait(10)
        assert recorder.names[-2:] == ["InFlightRequestsDrained", "CleanupFinished"]

    def test_drain_timeout_abandons_requests(self, caplog: pytest.LogCaptureFixture) -> None:
        """A request that never ends is abandoned at drain_timeout, with the count logged."""
        lc, _ = lifecycle(shutdown_delay=0, drain_timeout=10)
        lc.in_flight.add()
        _, recorder, _ = run_shutdown(lc)
        assert recorder.time_of("InFlightRequestsDrained") - recorder.time_of("NotAcceptingNewRequests") == 10
        assert "abandoning 1 in-flight request(s)" in caplog.text

    def test_drain_figures_count_what_it_waited_for_and_abandoned(self) -> None:
        """The drain's statistics: two requests in flight at its start, one abandoned at drain_timeout."""
        lc, _ = lifecycle(shutdown_delay=0, drain_timeout=10)
        lc.in_flight.add()
        lc.in_flight.add()()
        lc.in_flight.add()
        run_shutdown(lc)
        drain = lc.stats.drain
        assert drain is not None
        assert (drain.in_flight, drain.abandoned) == (2, 2)

    def test_cleanup_tasks_run_after_the_drain(self) -> None:
        """Cleanup tasks start only after InFlightRequestsDrained."""
        lc, _ = lifecycle(shutdown_delay=0)
        seen = []
        lc.cleanup_task("flush")(lambda: seen.append(lc.in_flight_requests_drained.is_set()))
        run_shutdown(lc)
        assert seen == [True]

    def test_report_lists_pre_shutdown_then_cleanup(self) -> None:
        """The report holds every hook and task with its outcome, pre-shutdown first."""
        lc, _ = lifecycle(shutdown_delay=0)
        lc.cleanup_task("c")(lambda: None)
        lc.pre_shutdown_hook("p")(lambda: None)
        _, _, report = run_shutdown(lc)
        assert [(r.kind, r.name, r.outcome) for r in report.results] == [
            ("pre-shutdown hook", "p", Outcome.OK),
            ("cleanup task", "c", Outcome.OK),
        ]


class TestOnce:
    def test_request_shutdown_many_times_runs_hooks_once(self) -> None:
        """Shutdown requested from many threads, many times: each hook and task runs once."""
        lc, adapter = lifecycle(shutdown_delay=0)
        calls: list[str] = []
        lc.pre_shutdown_hook("p")(lambda: calls.append("p"))
        lc.cleanup_task("c")(lambda: calls.append("c"))
        threads = [threading.Thread(target=lc.request_shutdown) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        assert lc.cleanup_finished.event.wait(30)
        lc.request_shutdown()
        assert lc.drain_and_clean_up() is lc.report
        assert sorted(calls) == ["c", "p"]
        assert adapter.calls == [False]

    def test_signals_fire_once(self) -> None:
        """fire() is idempotent: only the first call fires and records the time."""
        lc, _ = lifecycle()
        assert lc.shutdown_initiated.fire() is True
        first = lc.shutdown_initiated.fired_at
        lc.clock.advance(3)  # type: ignore[attr-defined]
        assert lc.shutdown_initiated.fire() is False
        assert lc.shutdown_initiated.fired_at == first


class TestUnhindered:
    """The one flag GracefulMiddleware reads to skip the shutdown and admission checks."""

    def test_set_when_there_is_nothing_to_check(self) -> None:
        """Down at first; refresh_unhindered sets it while ShutdownInitiated has not fired and no limit."""
        lc, _ = lifecycle()
        assert not lc.gate.unhindered
        lc.gate.refresh()
        assert lc.gate.unhindered

    def test_cleared_by_every_signal(self) -> None:
        """A signal that fires before the shutdown (HasBeenReady) clears it until the next refresh."""
        lc, _ = lifecycle()
        lc.gate.refresh()
        lc.has_been_ready.fire()
        assert not lc.gate.unhindered
        lc.gate.refresh()
        assert lc.gate.unhindered

    def test_kept_down_from_shutdown_initiated(self) -> None:
        """From ShutdownInitiated on a refresh leaves it down: every request is then checked and counted."""
        lc, _ = lifecycle()
        lc.gate.refresh()
        lc.initiate_shutdown()
        assert not lc.gate.unhindered
        lc.gate.refresh()
        assert not lc.gate.unhindered  # the shutdown delay: requests are counted as arrivals
        lc.stop_accepting()
        lc.gate.refresh()
        assert not lc.gate.unhindered

    def test_kept_down_by_an_admission_limit_and_cleared_by_configure(self) -> None:
        """With max_in_flight a refresh leaves it down; configure() takes it down until the next refresh."""
        lc, _ = lifecycle(max_in_flight=4)
        lc.gate.refresh()
        assert not lc.gate.unhindered
        lc.configure(Config())
        lc.gate.refresh()
        assert lc.gate.unhindered
        lc.configure(Config(max_in_flight=1))
        assert not lc.gate.unhindered

    def test_a_signal_firing_during_a_refresh_takes_it_back(self) -> None:
        """A refresh that read its state just before a signal fired does not leave it up."""
        lc, _ = lifecycle()
        signal = lc.shutdown_initiated

        class FiresWhenRead:
            """The admission limit, read by the refresh; ShutdownInitiated fires as it is read."""

            @property
            def limit(self) -> int:
                signal.fired_at = lc.clock.now()
                return 0

        lc.gate._admission = FiresWhenRead()  # type: ignore[assignment]
        lc.gate.refresh()
        assert not lc.gate.unhindered


class TestRegistrationPhases:
    def test_pre_shutdown_hook_after_shutdown_is_an_error(self) -> None:
        """Registering a pre-shutdown hook once shutdown began raises PhaseStartedError."""
        lc, _ = lifecycle(shutdown_delay=0)
        run_shutdown(lc)
        with pytest.raises(PhaseStartedError):
            lc.pre_shutdown_hook("late")(lambda: None)

    def test_cleanup_task_after_cleanup_is_an_error(self) -> None:
        """Registering a cleanup task once cleanup began raises PhaseStartedError."""
        lc, _ = lifecycle(shutdown_delay=0)
        run_shutdown(lc)
        with pytest.raises(PhaseStartedError):
            lc.cleanup_task("late")(lambda: None)


class TestWorkerScope:
    def test_worker_lifecycle_does_not_run_server_hooks(self) -> None:
        """A worker's lifecycle (Role.WORKER): ShutdownInitiated fires, pre-shutdown hooks do not run."""
        lc = Lifecycle(Config(shutdown_delay=0), clock=FakeClock(), role=Role.WORKER)
        calls = []
        lc.pre_shutdown_hook("server")(lambda: calls.append(1))
        lc.initiate_shutdown()
        lc.stop_accepting()
        report = lc.drain_and_clean_up()
        assert calls == [] and report.results == ()
        assert lc.cleanup_finished.is_set()


class TestProcessStop:
    def test_fires_no_signal_and_runs_cleanup_once(self) -> None:
        """stop_process(): no lifecycle signal fires; the cleanup tasks run once, even if called again."""
        lc, adapter = lifecycle()
        recorder = SignalRecorder(lc)
        calls: list[int] = []
        lc.cleanup_task("flush")(lambda: calls.append(1))
        drains: list[bool] = []
        lc.stop_process(1.0, on_drained=drains.append)
        lc.stop_process(1.0, on_drained=drains.append)
        lc.drain_and_clean_up()
        assert recorder.names == [] and adapter.calls == []
        assert calls == [1] and drains == [True]
        assert lc.report.by_name("flush").outcome is Outcome.OK

    def test_drain_waits_for_in_flight_requests_then_cleanup(self) -> None:
        """The drain waits for a request in flight; on_drained runs between the drain and the cleanup."""
        lc = Lifecycle(Config(), clock=MonotonicClock())
        order: list[str] = []
        lc.cleanup_task("flush")(lambda: order.append("cleanup"))
        done = lc.in_flight.add()

        def finish() -> None:
            order.append("request done")
            done()

        threading.Timer(0.1, finish).start()
        lc.stop_process(10.0, on_drained=lambda drained: order.append(f"drained={drained}"))
        assert order == ["request done", "drained=True", "cleanup"]

    def test_drain_timeout_is_reported(self, caplog: pytest.LogCaptureFixture) -> None:
        """A request outliving the drain timeout: on_drained(False), the lifecycle's warning, cleanup still runs."""
        lc, _ = lifecycle()
        calls: list[int] = []
        lc.cleanup_task("flush")(lambda: calls.append(1))
        lc.in_flight.add()
        drains: list[bool] = []
        lc.stop_process(2.0, on_drained=drains.append)
        assert drains == [False] and calls == [1]
        assert "abandoning 1 in-flight request(s)" in caplog.text


class TestRenewAfterPatch:
    def test_keeps_state_with_new_events(self) -> None:
        """renew_after_patch(): each signal gets a new event, fired ones stay fired; the timeline still runs."""
        lc, _ = lifecycle(shutdown_delay=0)
        lc.initiate_shutdown()
        old = {s.name: s.event for s in lc.signals}
        lc.renew_after_patch()
        assert all(s.event is not old[s.name] for s in lc.signals)
        assert lc.shutdown_initiated.event.is_set() and not lc.cleanup_finished.event.is_set()
        lc.stop_accepting()
        lc.drain_and_clean_up()
        assert lc.cleanup_finished.event.is_set() and not old["CleanupFinished"].is_set()


class TestPostStart:
    def test_post_start_status_until_hook_returns(self) -> None:
        """A post-start hook reports 'not finished' until it returns, then None."""
        lc, _ = lifecycle()
        release = threading.Event()
        lc.post_start_hook("warm-cache")(lambda: release.wait(10))
        assert lc.post_start_status() == {"warm-cache": "not started"}
        lc.run_post_start_hooks()
        assert lc.post_start_status() == {"warm-cache": "not finished"}
        release.set()
        for _ in range(100):
            if lc.post_start_status()["warm-cache"] is None:
                break
            threading.Event().wait(0.05)
        assert lc.post_start_status() == {"warm-cache": None}

    def test_failed_post_start_hook_reports_error(self) -> None:
        """A post-start hook that raises stays failing, with its error."""
        lc, _ = lifecycle()

        def boom() -> None:
            raise RuntimeError("no db")

        lc.post_start_hook("db")(boom)
        lc.run_post_start_hooks()
        for _ in range(100):
            if lc.post_start_status()["db"] != "not finished":
                break
            threading.Event().wait(0.05)
        assert lc.post_start_status() == {"db": "failed: RuntimeError: no db"}


class TestBudget:
    def test_registered_hook_timeouts_count_in_the_budget(self) -> None:
        """check_budget() refuses a registered cleanup task too long for the grace period."""
        lc, _ = lifecycle()
        lc.cleanup_task("slow", timeout=20)(lambda: None)
        with pytest.raises(ValueError, match="longest cleanup task 20s"):
            lc.check_budget()


class TestObservation:
    """What the lifecycle observes and logs: structured fields, samples, late traffic, hook results."""

    def lines(self, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "graceful.core.lifecycle" and r.graceful_event == "signal"]

    def test_shutdown_initiated_is_logged_without_seconds_and_the_others_with(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The ShutdownInitiated line is just its name; every later one says how long after it."""
        caplog.set_level(logging.INFO, "graceful")
        lc, _ = lifecycle(shutdown_delay=2)
        run_shutdown(lc)
        messages = [r.getMessage() for r in self.lines(caplog)]
        assert messages[0] == "graceful: ShutdownInitiated"
        assert "graceful: AfterShutdownDelayDuration (2.000s after ShutdownInitiated)" in messages
        assert all(m.endswith("s after ShutdownInitiated)") for m in messages[1:])

    def test_signal_lines_carry_structured_fields(self, caplog: pytest.LogCaptureFixture) -> None:
        """Each signal line has its event, signal, seconds since ShutdownInitiated and pid as LogRecord attributes."""
        caplog.set_level(logging.INFO, "graceful")
        lc, _ = lifecycle(shutdown_delay=3)
        _, recorder, _ = run_shutdown(lc)
        t0 = recorder.time_of("ShutdownInitiated")
        lines = self.lines(caplog)
        assert [r.graceful_signal for r in lines] == recorder.names
        for record in lines:
            assert record.graceful_since_shutdown_s == round(recorder.time_of(record.graceful_signal) - t0, 6)
            assert record.graceful_pid == os.getpid()

    def test_a_signal_before_the_shutdown_has_no_seconds(self, caplog: pytest.LogCaptureFixture) -> None:
        """HasBeenReady, before any shutdown, is logged with no seconds since ShutdownInitiated."""
        caplog.set_level(logging.INFO, "graceful")
        lc, _ = lifecycle()
        lc.has_been_ready.fire()
        (line,) = self.lines(caplog)
        assert line.getMessage() == "graceful: HasBeenReady"
        assert (line.graceful_signal, line.graceful_since_shutdown_s) == ("HasBeenReady", None)

    def test_hook_and_drain_lines_carry_structured_fields(self, caplog: pytest.LogCaptureFixture) -> None:
        """A hook's outcome line and the drain timeout's warning say their event and when they happened."""
        caplog.set_level(logging.INFO, "graceful")
        lc, _ = lifecycle(shutdown_delay=1, drain_timeout=4)
        lc.pre_shutdown_hook("deregister")(lambda: None)
        lc.in_flight.add()
        run_shutdown(lc)
        events = {r.getMessage(): r for r in caplog.records if hasattr(r, "graceful_event")}
        hook = events["graceful: pre-shutdown hook 'deregister' ok after 0.000s"]
        assert (hook.graceful_event, hook.graceful_since_shutdown_s) == ("hook", 1.0)
        drain = events["graceful: drain timed out after 4s; abandoning 1 in-flight request(s)"]
        assert (drain.graceful_event, drain.graceful_since_shutdown_s) == ("drain_timeout", 5.0)

    def test_samples_span_the_shutdown(self) -> None:
        """Samples start at ShutdownInitiated and end at CleanupFinished (the lifecycle's clock)."""
        lc, _ = lifecycle(shutdown_delay=2)
        _, recorder, _ = run_shutdown(lc)
        samples = lc.samples
        assert samples[0].at == recorder.time_of("ShutdownInitiated")
        assert samples[-1].at == recorder.time_of("CleanupFinished")

    def test_no_samples_in_a_process_serving_no_requests(self) -> None:
        """A lifecycle that serves no requests (a Gunicorn master's) takes no samples."""
        lc, _ = lifecycle(shutdown_delay=1)
        lc.role = Role.MASTER
        run_shutdown(lc)
        assert lc.samples == []

    def test_late_traffic_is_warned_about_at_not_accepting(self, caplog: pytest.LogCaptureFixture) -> None:
        """Arrivals in the last tenth of the delay give one warning, with the figures, at NotAcceptingNewRequests."""
        lc, _ = lifecycle(shutdown_delay=10, grace_period=40)
        lc.initiate_shutdown()
        clock = lc.clock
        assert isinstance(clock, FakeClock)
        clock.advance(9.5)
        lc.stats.arrived(stopped=False)
        lc.stats.arrived(stopped=False)
        lc.stop_accepting()
        warnings = [r for r in caplog.records if getattr(r, "graceful_event", None) == "late_traffic"]
        assert [r.getMessage() for r in warnings] == [
            "graceful: 2 request(s) arrived in the last tenth of the 10s shutdown delay (from 9.000s after"
            " ShutdownInitiated; the last at 9.500s): the delay looks too short for the load balancers to stop"
            " sending here; raise GRACEFUL_SHUTDOWN_DELAY"
        ]
        assert warnings[0].levelno == logging.WARNING

    def test_no_late_traffic_warning_when_arrivals_stop_early(self, caplog: pytest.LogCaptureFixture) -> None:
        """Arrivals that end before the last tenth of the delay give no warning."""
        lc, _ = lifecycle(shutdown_delay=10, grace_period=40)
        lc.initiate_shutdown()
        clock = lc.clock
        assert isinstance(clock, FakeClock)
        clock.advance(8.9)
        lc.stats.arrived(stopped=False)
        clock.advance(1.1)
        lc.stop_accepting()
        assert not [r for r in caplog.records if getattr(r, "graceful_event", None) == "late_traffic"]
        assert lc.stats.arrivals()["delay"] == 1

    def test_hook_results_so_far(self) -> None:
        """hook_results() lists the post-start, pre-shutdown and cleanup results recorded so far, with starts."""
        lc, _ = lifecycle(shutdown_delay=0)
        lc.post_start_hook("warm")(lambda: None)
        lc.pre_shutdown_hook("p")(lambda: None)
        lc.cleanup_task("c")(lambda: None)
        lc.run_post_start_hooks()
        run_shutdown(lc)
        results = lc.hook_results()
        assert [(r.kind, r.name) for r in results] == [
            ("post-start hook", "warm"),
            ("pre-shutdown hook", "p"),
            ("cleanup task", "c"),
        ]
        assert all(r.started_at is not None for r in results)

    def test_a_fork_copy_counts_its_own_requests(self) -> None:
        """A master's copy that becomes a worker: its statistics start from zero and it samples its requests."""
        lc, _ = lifecycle(shutdown_delay=1)
        lc.become_master("gunicorn", "sync")
        assert (lc.role, lc.role.serves_requests, lc.role.runs_pre_shutdown_hooks) == (Role.MASTER, False, True)
        lc.stats.rejected("draining")
        lc.become_worker("a worker")
        assert lc.stats.rejections()["draining"] == 0
        assert (lc.role, lc.role.serves_requests, lc.role.runs_pre_shutdown_hooks) == (Role.WORKER, True, False)
        assert (lc.server, lc.worker_class) == ("gunicorn", "sync")

    def test_a_worker_refuses_pre_shutdown_hooks_saying_why(self) -> None:
        """After become_worker a pre-shutdown hook registered is refused with the reason given."""
        lc, _ = lifecycle(shutdown_delay=1)
        lc.become_worker("they run in the master")
        with pytest.raises(RuntimeError, match="they run in the master"):
            lc.pre_shutdown_hook("late")(lambda: None)

    def test_a_copy_forked_in_the_delay_samples_only_once_resumed(self) -> None:
        """reinit_after_fork in the delay starts no thread; resume_after_fork then counts and samples."""
        lc = Lifecycle(Config(shutdown_delay=5), clock=FakeClock())
        lc.initiate_shutdown()
        lc.reinit_after_fork()
        assert lc.samples == []
        lc.resume_after_fork()
        assert len(lc.samples) == 1  # the sampler's first sample, taken as it starts
        lc.resume_after_fork()  # once
        assert len(lc.samples) == 1
        lc.cleanup_finished.fire()

    def test_resuming_a_copy_forked_before_any_shutdown_does_nothing(self) -> None:
        """resume_after_fork outside a shutdown starts nothing."""
        lc = Lifecycle(Config(shutdown_delay=5), clock=FakeClock())
        lc.reinit_after_fork()
        lc.resume_after_fork()
        assert lc.samples == []

    def test_a_dropped_lifecycle_does_not_keep_its_sampler(self) -> None:
        """A lifecycle dropped in the middle of its shutdown lets its sampler thread end."""
        import gc

        lc = Lifecycle(Config(shutdown_delay=1), clock=FakeClock())
        lc.initiate_shutdown()
        sampler = lc._sampler
        assert sampler is not None
        del lc
        gc.collect()
        assert sampler.join(10)


class TestAdaptiveDelay:
    def test_delay_ends_on_quiet_with_a_reason(self) -> None:
        """With a floor, AfterShutdownDelayDuration fires once quiet, well before the maximum, and says why."""
        clock = FakeClock(settle=0.002)
        lc = Lifecycle(Config(shutdown_delay=20, shutdown_delay_min=1, grace_period=50), clock=clock)
        lc.last_arrival = lambda: None  # nothing arrives: quiet since ShutdownInitiated
        _, recorder, _ = run_shutdown(lc)
        recorder.assert_order(QUICK_HOOKS_ORDER)
        assert recorder.time_of("AfterShutdownDelayDuration") - recorder.time_of("ShutdownInitiated") == 1.0
        assert lc.delay_outcome is not None
        assert lc.delay_outcome.describe() == "quiet for 1.0 s: nothing arrived after ShutdownInitiated"

    def test_this_process_arrivals_hold_the_delay(self) -> None:
        """Under graceful serve the process's own request statistics are the arrivals the delay reads."""
        clock = FakeClock(settle=0.002)
        lc = Lifecycle(Config(shutdown_delay=20, shutdown_delay_min=1, grace_period=50), clock=clock)
        lc.stats.last_arrival_at = clock.now() + 0.5  # read as a request 0.5 s after ShutdownInitiated
        _, recorder, _ = run_shutdown(lc)
        assert recorder.time_of("AfterShutdownDelayDuration") - recorder.time_of("ShutdownInitiated") == 1.5

    def test_no_late_traffic_warning_when_the_delay_ended_on_quiet(self, caplog: pytest.LogCaptureFixture) -> None:
        """Arrivals in the maximum's last tenth do not advise a longer delay when it ended on quiet."""
        clock = FakeClock(settle=0.002)
        lc = Lifecycle(Config(shutdown_delay=2, shutdown_delay_min=1.95, grace_period=50), clock=clock)
        lc.last_arrival = lambda: None
        lc.initiate_shutdown()
        clock.advance(1.9)
        lc.stats.arrived(False)  # in the last tenth of the 2 s maximum
        with caplog.at_level(logging.WARNING, logger="graceful.core.lifecycle"):
            lc.run_until_not_accepting()
        assert lc.stats.late_traffic() is not None
        assert lc.delay_outcome is not None and lc.delay_outcome.end.value == "quiet"
        assert "too short" not in caplog.text

    def test_late_traffic_warning_when_the_maximum_ended_it(self, caplog: pytest.LogCaptureFixture) -> None:
        """Traffic at the maximum still gets the advice to raise GRACEFUL_SHUTDOWN_DELAY."""
        clock = FakeClock(settle=0.002)
        lc = Lifecycle(Config(shutdown_delay=2, shutdown_delay_min=1, grace_period=50), clock=clock)
        lc.initiate_shutdown()
        lc.last_arrival = lambda: clock.now()  # something arrives at every look
        clock.advance(1.9)
        lc.stats.arrived(False)
        with caplog.at_level(logging.WARNING, logger="graceful.core.lifecycle"):
            lc.run_until_not_accepting()
        assert lc.delay_outcome is not None and lc.delay_outcome.end.value == "maximum"
        assert "raise GRACEFUL_SHUTDOWN_DELAY" in caplog.text

    def test_a_worker_sees_a_quiet_end_before_the_maximum(self, caplog: pytest.LogCaptureFixture) -> None:
        """A process that did not run the delay (a Gunicorn worker) gives no advice when it ended before the maximum."""
        clock = FakeClock(settle=0.002)
        lc = Lifecycle(Config(shutdown_delay=2, shutdown_delay_min=1.95, grace_period=50), clock=clock)
        lc.role = Role.WORKER
        lc.shutdown_initiated.fire()  # the master's broadcast
        clock.advance(1.9)
        lc.stats.arrived(False)  # in the last tenth of the 2 s maximum
        clock.advance(0.05)
        with caplog.at_level(logging.WARNING, logger="graceful.core.lifecycle"):
            lc.not_accepting_new_requests.fire()  # 1.95 s: before the maximum, so on quiet
        assert lc.stats.late_traffic() is not None
        assert "too short" not in caplog.text

    def test_a_worker_still_advises_after_the_maximum(self, caplog: pytest.LogCaptureFixture) -> None:
        """NotAcceptingNewRequests at the maximum with late arrivals: the worker advises a longer maximum."""
        clock = FakeClock(settle=0.002)
        lc = Lifecycle(Config(shutdown_delay=2, shutdown_delay_min=1, grace_period=50), clock=clock)
        lc.role = Role.WORKER
        lc.shutdown_initiated.fire()
        clock.advance(1.9)
        lc.stats.arrived(False)
        clock.advance(0.1)
        with caplog.at_level(logging.WARNING, logger="graceful.core.lifecycle"):
            lc.not_accepting_new_requests.fire()
        assert "raise GRACEFUL_SHUTDOWN_DELAY" in caplog.text
