"""Tests for graceful.core.lifecycle: the timeline, its order and its bounds."""

from __future__ import annotations

import threading

import pytest

from graceful.core.clock import MonotonicClock
from graceful.core.config import Config
from graceful.core.hooks import Outcome
from graceful.core.lifecycle import Lifecycle
from graceful.core.registry import PhaseStartedError
from graceful.testing import FakeClock, SignalRecorder, run_shutdown

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
        """Down at first; refresh_unhindered sets it while NotAcceptingNewRequests has not fired and no limit."""
        lc, _ = lifecycle()
        assert not lc.unhindered
        lc.refresh_unhindered()
        assert lc.unhindered

    def test_cleared_by_every_signal_and_kept_down_after_not_accepting(self) -> None:
        """A signal that fires clears it; after NotAcceptingNewRequests a refresh leaves it down."""
        lc, _ = lifecycle()
        lc.refresh_unhindered()
        lc.initiate_shutdown()
        assert not lc.unhindered
        lc.refresh_unhindered()
        assert lc.unhindered  # the shutdown delay: still nothing to check
        lc.stop_accepting()
        assert not lc.unhindered
        lc.refresh_unhindered()
        assert not lc.unhindered

    def test_kept_down_by_an_admission_limit_and_cleared_by_configure(self) -> None:
        """With max_in_flight a refresh leaves it down; configure() takes it down until the next refresh."""
        lc, _ = lifecycle(max_in_flight=4)
        lc.refresh_unhindered()
        assert not lc.unhindered
        lc.configure(Config())
        lc.refresh_unhindered()
        assert lc.unhindered
        lc.configure(Config(max_in_flight=1))
        assert not lc.unhindered

    def test_a_signal_firing_during_a_refresh_takes_it_back(self) -> None:
        """A refresh that read its state just before a signal fired does not leave it up."""
        lc, _ = lifecycle()
        signal = lc.not_accepting_new_requests

        class FiresWhenRead:
            """The admission limit, read by the refresh; NotAcceptingNewRequests fires as it is read."""

            @property
            def limit(self) -> int:
                signal.fired_at = lc.clock.now()
                return 0

        lc._admission = FiresWhenRead()  # type: ignore[assignment]
        lc.refresh_unhindered()
        assert not lc.unhindered


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
        """run_pre_shutdown_hooks=False: ShutdownInitiated fires, pre-shutdown hooks do not run."""
        lc = Lifecycle(Config(shutdown_delay=0), clock=FakeClock(), run_pre_shutdown_hooks=False)
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
