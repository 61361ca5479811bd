"""Tests for graceful.http.health: which checks run, how they are timed and cached, how probes render."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.http.health import (
    DEFAULT_CHECK_TIMEOUT,
    HEALTHZ,
    LIVEZ,
    READYZ,
    CheckResult,
    FailureLog,
    HealthChecks,
    HealthQuery,
    HealthReport,
    respond_with,
)
from graceful.testing import FakeClock, SignalRecorder

# Generous bound for "answers on time": far above check_timeout, far below a hang.
ON_TIME = 3.0


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock whose waits give a quick check up to 5 real seconds, even on a loaded machine."""
    return FakeClock(settle=5.0)


@pytest.fixture
def lifecycle(clock: FakeClock) -> Lifecycle:
    return Lifecycle(Config(), clock=clock)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event hung checks wait on; set at teardown, and their threads joined."""
    event = threading.Event()
    yield event
    event.set()
    for thread in threading.enumerate():
        if thread.name.startswith("graceful-check-"):
            thread.join(5)


def join_check_threads() -> None:
    for thread in threading.enumerate():
        if thread.name.startswith("graceful-check-"):
            thread.join(5)


def counting(result: object = True) -> tuple[Callable[[], object], list[int]]:
    calls: list[int] = []

    def check() -> object:
        calls.append(1)
        return result

    return check, calls


class TestHealthQuery:
    """HealthQuery.parse reads ?verbose and ?exclude as kube-apiserver does."""

    def test_empty(self) -> None:
        """An empty query string asks for nothing."""
        assert HealthQuery.parse("") == HealthQuery(False, ())

    def test_verbose_present_with_any_value(self) -> None:
        """verbose counts when present at all, even as verbose=false."""
        assert HealthQuery.parse("verbose").verbose
        assert HealthQuery.parse("verbose=false").verbose
        assert not HealthQuery.parse("verbosity=1").verbose

    def test_exclude_is_repeatable_and_ordered(self) -> None:
        """Every exclude value is kept in order."""
        assert HealthQuery.parse("exclude=a&verbose&exclude=b").exclude == ("a", "b")

    def test_percent_and_plus_decoding(self) -> None:
        """Names are percent-decoded (poststarthook%2Fx) and + is a space."""
        assert HealthQuery.parse("exclude=poststarthook%2Fwarm&exclude=a+b").exclude == ("poststarthook/warm", "a b")

    def test_utf8_read_from_wsgi_latin1(self) -> None:
        """A WSGI latin-1 string holding UTF-8 bytes is read as UTF-8."""
        raw = "exclude=" + "é".encode().decode("latin-1")
        assert HealthQuery.parse(raw).exclude == ("é",)

    @pytest.mark.parametrize("query", ["%", "&&&", "=&=", "exclude", "exclude=%zz", "\x00\xff", "exclude=%E9"])
    def test_malformed_never_raises(self, query: str) -> None:
        """Malformed fields and escapes are taken as they come."""
        HealthQuery.parse(query)


class TestHealthReport:
    """HealthReport.render produces kube-apiserver's text."""

    def test_quiet_pass_is_ok(self) -> None:
        """A passing probe without verbose is exactly 'ok'."""
        report = HealthReport(READYZ, (CheckResult("ping", True),))
        assert report.ok
        assert report.render(verbose=False, expose_errors=False) == "ok"

    def test_verbose_pass_lists_checks(self) -> None:
        """Verbose lists [+]name ok lines and ends with '<endpoint> check passed'."""
        report = HealthReport(READYZ, (CheckResult("ping", True), CheckResult("shutdown", True)))
        assert report.render(verbose=True, expose_errors=False) == ("[+]ping ok\n[+]shutdown ok\nreadyz check passed\n")

    def test_failure_withholds_reason(self) -> None:
        """A failing check shows 'reason withheld', whatever verbose says."""
        report = HealthReport(READYZ, (CheckResult("ping", True), CheckResult("shutdown", False, "secret")))
        text = "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"
        assert not report.ok
        assert report.render(verbose=False, expose_errors=False) == text
        assert report.render(verbose=True, expose_errors=False) == text

    def test_failure_exposes_reason_on_one_line(self) -> None:
        """With expose_errors the reason is shown, its whitespace folded into one line."""
        report = HealthReport(LIVEZ, (CheckResult("db", False, "ConnectionError: refused\n  twice"),))
        assert report.render(verbose=False, expose_errors=True) == (
            "[-]db failed: ConnectionError: refused twice\nlivez check failed\n"
        )

    def test_excluded_and_unmatched(self) -> None:
        """Excluded checks read 'excluded: ok'; unmatched names give one sorted, quoted warn line."""
        report = HealthReport(
            HEALTHZ,
            (CheckResult("ping", True), CheckResult("db", True, excluded=True)),
            unmatched=("zz", "a"),
        )
        assert report.render(verbose=True, expose_errors=False) == (
            "[+]ping ok\n[+]db excluded: ok\n"
            'warn: some health checks cannot be excluded: no matches for "a","zz"\n'
            "healthz check passed\n"
        )

    def test_failed_lists_failures(self) -> None:
        """failed holds only the failing results."""
        bad = CheckResult("b", False, "x")
        assert HealthReport(LIVEZ, (CheckResult("a", True), bad)).failed == (bad,)

    def test_notes_are_warn_lines_that_do_not_fail(self) -> None:
        """Notes render as warn: lines after the checks and the unmatched line; the probe still passes."""
        report = HealthReport(READYZ, (CheckResult("db", True),), ("x",), ("db failing in 1 of 2 workers",))
        assert report.ok
        assert report.render(verbose=True, expose_errors=False).splitlines()[-3:] == [
            'warn: some health checks cannot be excluded: no matches for "x"',
            "warn: db failing in 1 of 2 workers",
            "readyz check passed",
        ]
        assert report.render(verbose=False, expose_errors=False) == "ok"

    def test_excluding(self) -> None:
        """excluding() marks the excluded results passing and lists the names that matched nothing."""
        items = (CheckResult("ping", True), CheckResult("db", False, "down"))
        report = HealthReport.excluding(READYZ, items, ("db", "nope"))
        assert report.ok
        assert report.results == (CheckResult("ping", True), CheckResult("db", True, excluded=True))
        assert report.unmatched == ("nope",)


class TestHealthChecksComposition:
    """Which checks each endpoint runs, in which order."""

    def test_livez(self, lifecycle: Lifecycle) -> None:
        """/livez runs ping and the liveness checks only."""
        lifecycle.liveness_check("loop")(lambda: True)
        lifecycle.readiness_check("db")(lambda: True)
        lifecycle.post_start_hook("warm")(lambda: None)
        assert HealthChecks(lifecycle).names(LIVEZ) == ["ping", "loop"]

    def test_readyz(self, lifecycle: Lifecycle) -> None:
        """/readyz runs ping, readiness checks, post-start hooks, then shutdown."""
        lifecycle.liveness_check("loop")(lambda: True)
        lifecycle.readiness_check("db")(lambda: True)
        lifecycle.post_start_hook("warm")(lambda: None)
        assert HealthChecks(lifecycle).names(READYZ) == ["ping", "db", "poststarthook/warm", "shutdown"]

    def test_healthz(self, lifecycle: Lifecycle) -> None:
        """/healthz runs ping, liveness and readiness checks, but not shutdown nor post-start hooks."""
        lifecycle.liveness_check("loop")(lambda: True)
        lifecycle.readiness_check("db")(lambda: True)
        lifecycle.post_start_hook("warm")(lambda: None)
        assert HealthChecks(lifecycle).names(HEALTHZ) == ["ping", "loop", "db"]

    def test_shutdown_fails_readyz_only(self, lifecycle: Lifecycle) -> None:
        """From ShutdownInitiated on, /readyz fails its shutdown check; /livez and /healthz pass."""
        checks = HealthChecks(lifecycle)
        assert checks.evaluate(READYZ).ok
        lifecycle.initiate_shutdown()
        readyz = checks.evaluate(READYZ)
        assert [(r.name, r.ok) for r in readyz.results] == [("ping", True), ("shutdown", False)]
        assert checks.evaluate(LIVEZ).ok
        assert checks.evaluate(HEALTHZ).ok

    def test_post_start_hook_fails_until_it_returned(self, lifecycle: Lifecycle) -> None:
        """poststarthook/<name> fails ('not started') until the hook has run and returned."""
        lifecycle.post_start_hook("warm")(lambda: None)
        checks = HealthChecks(lifecycle)
        before = checks.evaluate(READYZ, only="poststarthook/warm").results[0]
        assert (before.ok, before.reason) == (False, "not started")
        lifecycle.run_post_start_hooks()
        for thread in threading.enumerate():
            if thread.name.startswith("graceful-post-start"):
                thread.join(5)
        assert checks.evaluate(READYZ, only="poststarthook/warm").results[0].ok

    @pytest.mark.parametrize("value", [True, None, 0, "", [], "yes"])
    def test_anything_but_false_passes(self, lifecycle: Lifecycle, value: object) -> None:
        """A check passes when it returns anything but False (None, 0 and '' included)."""
        lifecycle.readiness_check("c")(lambda: value)
        assert HealthChecks(lifecycle).evaluate(READYZ).ok

    def test_false_fails(self, lifecycle: Lifecycle) -> None:
        """A check that returns False fails with 'returned False'."""
        lifecycle.readiness_check("c")(lambda: False)
        result = HealthChecks(lifecycle).evaluate(READYZ, only="c").results[0]
        assert (result.ok, result.reason) == (False, "returned False")

    def test_raise_fails_with_error_and_logs(self, lifecycle: Lifecycle, caplog: pytest.LogCaptureFixture) -> None:
        """A check that raises fails with the exception as reason, and the traceback is logged."""

        def broken() -> bool:
            raise ValueError("db down")

        lifecycle.liveness_check("db")(broken)
        with caplog.at_level(logging.WARNING, logger="graceful.http.health"):
            result = HealthChecks(lifecycle).evaluate(LIVEZ, only="db").results[0]
        assert (result.ok, result.reason) == (False, "ValueError: db down")
        assert any(record.exc_info for record in caplog.records)

    def test_a_check_is_logged_once_per_change(self, lifecycle: Lifecycle, caplog: pytest.LogCaptureFixture) -> None:
        """Raising five times logs one traceback; another reason logs again; passing again logs once."""
        state = {"error": "db down"}

        def flaky() -> bool:
            if state["error"]:
                raise ValueError(state["error"])
            return True

        lifecycle.readiness_check("db")(flaky)
        checks = HealthChecks(lifecycle)
        with caplog.at_level(logging.INFO, logger="graceful.http.health"):
            for error in ["db down"] * 5 + ["pool exhausted", "", ""]:
                state["error"] = error
                checks.evaluate(READYZ, only="db")
        assert [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records] == [
            (logging.WARNING, "graceful: readiness check 'db' failing: ValueError: db down", True),
            (logging.WARNING, "graceful: readiness check 'db' failing: ValueError: pool exhausted", True),
            (logging.INFO, "graceful: readiness check 'db' passes again", False),
        ]

    def test_run_user_checks(self, lifecycle: Lifecycle) -> None:
        """run_user_checks gives every liveness and every readiness result, built-ins left out."""
        lifecycle.liveness_check("deadlock")(lambda: True)
        lifecycle.readiness_check("db")(lambda: False)
        lifecycle.readiness_check("queue")(lambda: True)
        lifecycle.post_start_hook("warm")(lambda: None)
        assert HealthChecks(lifecycle).run_user_checks() == (
            (CheckResult("deadlock", True),),
            (CheckResult("db", False, "returned False"), CheckResult("queue", True)),
        )

    def test_system_exit_is_a_failed_check(self, lifecycle: Lifecycle) -> None:
        """Even SystemExit from a check is only a failed check."""

        def leaving() -> None:
            raise SystemExit(3)

        lifecycle.liveness_check("x")(leaving)
        assert not HealthChecks(lifecycle).evaluate(LIVEZ).ok

    def test_excluded_checks_do_not_run(self, lifecycle: Lifecycle) -> None:
        """An excluded check is reported 'excluded' and never called."""
        check, calls = counting(False)
        lifecycle.readiness_check("db")(check)
        report = HealthChecks(lifecycle).evaluate(READYZ, exclude=("db", "nope"))
        assert report.ok and calls == []
        assert [r.name for r in report.results if r.excluded] == ["db"]
        assert report.unmatched == ("nope",)

    def test_only_selects_by_name(self, lifecycle: Lifecycle) -> None:
        """only= runs just the checks with that name; an unknown name gives no results."""
        lifecycle.readiness_check("db")(lambda: True)
        checks = HealthChecks(lifecycle)
        assert [r.name for r in checks.evaluate(READYZ, only="db").results] == ["db"]
        assert checks.evaluate(READYZ, only="nope").results == ()

    @pytest.mark.parametrize("kwargs", [{"check_timeout": 0}, {"check_timeout": float("nan")}, {"check_cache_ttl": -1}])
    def test_bad_settings_raise(self, lifecycle: Lifecycle, kwargs: dict[str, float]) -> None:
        """A check_timeout <= 0 or a negative check_cache_ttl is refused."""
        with pytest.raises(ValueError, match="not allowed"):
            HealthChecks(lifecycle, **kwargs)

    def test_default_timeout_below_kubelet_default(self) -> None:
        """The default check timeout fits inside Kubernetes' default probe timeout of 1 s."""
        assert 0 < DEFAULT_CHECK_TIMEOUT < 1


class TestHealthChecksTiming:
    """Per-check timeouts, no overlapping runs, and the result cache."""

    def test_hung_check_times_out_on_the_fake_clock(self, gate: threading.Event) -> None:
        """A hung check is reported 'timed out' after check_timeout (fake) seconds."""
        clock = FakeClock(settle=0.05)
        lifecycle = Lifecycle(Config(), clock=clock)
        lifecycle.readiness_check("hang")(gate.wait)
        start = clock.now()
        result = HealthChecks(lifecycle, check_timeout=2).evaluate(READYZ, only="hang").results[0]
        assert (result.ok, result.reason) == (False, "timed out")
        assert clock.now() - start == pytest.approx(2)

    def test_hung_check_answers_on_time(self, gate: threading.Event) -> None:
        """On the real clock a probe with a hung check answers within a generous bound."""
        lifecycle = Lifecycle(Config())
        lifecycle.readiness_check("hang")(gate.wait)
        lifecycle.readiness_check("quick")(lambda: True)
        checks = HealthChecks(lifecycle, check_timeout=0.2)
        started = time.monotonic()
        response = checks.respond(READYZ)
        assert time.monotonic() - started < ON_TIME
        assert response.status == 503
        assert "[-]hang failed" in response.body and "[+]quick ok" in response.body

    def test_running_check_is_not_started_again(self, gate: threading.Event) -> None:
        """While a timed-out run is still going, probes report it failed at once and start no new run."""
        clock = FakeClock(settle=0.5)  # the hung run costs 1 real second; the quick one gets as long
        lifecycle = Lifecycle(Config(), clock=clock)
        calls: list[int] = []

        def hang() -> None:
            calls.append(1)
            gate.wait()

        lifecycle.readiness_check("hang")(hang)
        checks = HealthChecks(lifecycle, check_timeout=1)
        checks.evaluate(READYZ, only="hang")
        before = clock.now()
        again = checks.evaluate(READYZ, only="hang").results[0]
        assert clock.now() == before  # answered without waiting
        assert not again.ok and again.reason is not None and again.reason.startswith("timed out")
        assert calls == [1]
        gate.set()
        join_check_threads()
        assert checks.evaluate(READYZ, only="hang").results[0].ok
        assert calls == [1, 1]

    def test_concurrent_probes_share_one_run(self, gate: threading.Event) -> None:
        """Two probes at once share the run in progress and both get its result."""
        lifecycle = Lifecycle(Config())
        started = threading.Event()
        calls: list[int] = []

        def slow() -> bool:
            calls.append(1)
            started.set()
            return gate.wait(5)

        lifecycle.readiness_check("slow")(slow)
        checks = HealthChecks(lifecycle, check_timeout=5)
        results: list[bool] = []
        first = threading.Thread(target=lambda: results.append(checks.evaluate(READYZ).ok))
        first.start()
        assert started.wait(5)
        second = threading.Thread(target=lambda: results.append(checks.evaluate(READYZ).ok))
        second.start()
        gate.set()
        first.join(5)
        second.join(5)
        assert results == [True, True]
        assert calls == [1]

    def test_cache_reuses_result_within_ttl(self, lifecycle: Lifecycle, clock: FakeClock) -> None:
        """With check_cache_ttl a result is reused until ttl seconds have passed."""
        check, calls = counting()
        lifecycle.readiness_check("db")(check)
        checks = HealthChecks(lifecycle, check_cache_ttl=10)
        checks.evaluate(READYZ)
        clock.advance(9.9)
        checks.evaluate(READYZ)
        assert len(calls) == 1
        clock.advance(0.1)
        checks.evaluate(READYZ)
        assert len(calls) == 2

    def test_cache_keeps_failures_too(self, lifecycle: Lifecycle, clock: FakeClock) -> None:
        """A cached failure stays a failure until the ttl ends."""
        state = {"ok": False}
        lifecycle.readiness_check("db")(lambda: state["ok"])
        checks = HealthChecks(lifecycle, check_cache_ttl=5)
        assert not checks.evaluate(READYZ).ok
        state["ok"] = True
        assert not checks.evaluate(READYZ).ok
        clock.advance(5)
        assert checks.evaluate(READYZ).ok

    def test_no_cache_by_default(self, lifecycle: Lifecycle) -> None:
        """Without a ttl every probe runs the check again."""
        check, calls = counting()
        lifecycle.readiness_check("db")(check)
        checks = HealthChecks(lifecycle)
        checks.evaluate(READYZ)
        checks.evaluate(READYZ)
        assert len(calls) == 2

    def test_shutdown_is_never_cached(self, lifecycle: Lifecycle) -> None:
        """The shutdown check reflects ShutdownInitiated at once, whatever the ttl."""
        checks = HealthChecks(lifecycle, check_cache_ttl=60)
        assert checks.evaluate(READYZ).ok
        lifecycle.initiate_shutdown()
        assert not checks.evaluate(READYZ).ok


class TestRespond:
    """HealthChecks.respond: status, body, logging and HasBeenReady."""

    def test_pass_is_200_ok(self, lifecycle: Lifecycle) -> None:
        """A passing probe answers 200 'ok'."""
        response = HealthChecks(lifecycle).respond(READYZ)
        assert (response.status, response.body) == (200, "ok")

    def test_verbose_pass(self, lifecycle: Lifecycle) -> None:
        """?verbose on a passing probe lists every check."""
        response = HealthChecks(lifecycle).respond(LIVEZ, query_string="verbose")
        assert (response.status, response.body) == (200, "[+]ping ok\nlivez check passed\n")

    def test_fail_is_503_listing_withheld(self, lifecycle: Lifecycle, caplog: pytest.LogCaptureFixture) -> None:
        """A failing probe answers 503 with the listing; the reason is withheld but logged."""

        def broken() -> bool:
            raise RuntimeError("password=hunter2")

        lifecycle.readiness_check("db")(broken)
        with caplog.at_level(logging.INFO, logger="graceful.http.health"):
            response = HealthChecks(lifecycle).respond(READYZ)
        assert response.status == 503
        assert response.body == "[+]ping ok\n[-]db failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"
        assert "hunter2" not in response.body
        assert any("/readyz check failed: db: RuntimeError: password=hunter2" in r.getMessage() for r in caplog.records)

    def test_reason_exposed_when_configured(self, clock: FakeClock) -> None:
        """With expose_check_errors the real reason is in the body."""
        lifecycle = Lifecycle(Config(expose_check_errors=True), clock=clock)
        lifecycle.initiate_shutdown()
        response = HealthChecks(lifecycle).respond(READYZ)
        assert "[-]shutdown failed: process is shutting down\n" in response.body

    def test_shutdown_only_failure_logs_at_info(self, lifecycle: Lifecycle, caplog: pytest.LogCaptureFixture) -> None:
        """Failing only because of the shutdown is logged at INFO, not as a warning."""
        lifecycle.initiate_shutdown()
        with caplog.at_level(logging.INFO, logger="graceful.http.health"):
            HealthChecks(lifecycle).respond(READYZ)
        records = [r for r in caplog.records if "check failed" in r.getMessage()]
        assert [r.levelno for r in records] == [logging.INFO]

    def test_per_check(self, lifecycle: Lifecycle) -> None:
        """/readyz/<name> answers for that check alone."""
        lifecycle.readiness_check("db")(lambda: False)
        checks = HealthChecks(lifecycle)
        assert checks.respond(READYZ, "ping").status == 200
        failed = checks.respond(READYZ, "db")
        assert (failed.status, failed.body) == (503, "[-]db failed: reason withheld\nreadyz check failed\n")

    def test_per_check_post_start_hook_name(self, lifecycle: Lifecycle) -> None:
        """A check name with a slash (poststarthook/<name>) is addressable."""
        lifecycle.post_start_hook("warm")(lambda: None)
        assert HealthChecks(lifecycle).respond(READYZ, "poststarthook/warm").status == 503

    def test_unknown_check_is_404(self, lifecycle: Lifecycle) -> None:
        """An unknown per-check name, or shutdown under /livez, is a 404 naming it."""
        checks = HealthChecks(lifecycle)
        response = checks.respond(READYZ, "nope")
        assert (response.status, response.body) == (404, 'no readyz check named "nope"\n')
        assert checks.respond(LIVEZ, "shutdown").status == 404
        assert checks.respond(READYZ, "").status == 404

    def test_unmatched_exclude_warns_but_passes(self, lifecycle: Lifecycle) -> None:
        """?exclude of an unknown name adds a warn line and does not fail the probe."""
        response = HealthChecks(lifecycle).respond(READYZ, query_string="exclude=nope&verbose")
        assert response.status == 200
        assert 'warn: some health checks cannot be excluded: no matches for "nope"\n' in response.body

    def test_exclude_shutdown_passes_during_shutdown(self, lifecycle: Lifecycle) -> None:
        """?exclude=shutdown lets /readyz pass during shutdown, as in kube-apiserver."""
        lifecycle.initiate_shutdown()
        assert HealthChecks(lifecycle).respond(READYZ, query_string="exclude=shutdown").status == 200

    def test_failing_probes_log_once_per_phase(self, lifecycle: Lifecycle, caplog: pytest.LogCaptureFixture) -> None:
        """Probes every "second" through a shutdown log one line, not one per probe."""
        checks = HealthChecks(lifecycle)
        lifecycle.initiate_shutdown()
        with caplog.at_level(logging.INFO, logger="graceful.http.health"):
            for _ in range(10):
                assert checks.respond(READYZ).status == 503
        assert len([r for r in caplog.records if "check failed" in r.getMessage()]) == 1


class TestFailureLog:
    """FailureLog: one line per change of the failing set of a path."""

    def test_changes_only(self, caplog: pytest.LogCaptureFixture) -> None:
        """Start failing, another check failing, the same again, passing again: three lines, levels by cause."""
        log = FailureLog()
        db = CheckResult("db", False, "down")
        shutdown = CheckResult("shutdown", False, "process is shutting down")
        with caplog.at_level(logging.INFO, logger="graceful.http.health"):
            log.record("/readyz", HealthReport(READYZ, (CheckResult("ping", True),)))
            log.record("/readyz", HealthReport(READYZ, (db,)))
            log.record("/readyz", HealthReport(READYZ, (db,)))
            log.record("/readyz", HealthReport(READYZ, (CheckResult("db", False, "other reason"),)))
            log.record("/readyz", HealthReport(READYZ, (db, shutdown)))
            log.record("/readyz", HealthReport(READYZ, (CheckResult("db", True),)))
        assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
            (logging.WARNING, "graceful: /readyz check failed: db: down"),
            (logging.INFO, "graceful: /readyz check failed: db: down; shutdown: process is shutting down"),
            (logging.INFO, "graceful: /readyz check passes again"),
        ]

    def test_paths_are_apart(self, caplog: pytest.LogCaptureFixture) -> None:
        """/livez and /readyz/db keep their own failing sets."""
        log = FailureLog()
        report = HealthReport(READYZ, (CheckResult("db", False, "down"),))
        with caplog.at_level(logging.INFO, logger="graceful.http.health"):
            log.record("/readyz", report)
            log.record("/readyz/db", report)
            log.record("/readyz", report)
        assert [r.getMessage().split(" check")[0] for r in caplog.records] == [
            "graceful: /readyz",
            "graceful: /readyz/db",
        ]


class TestRespondWith:
    """respond_with: the app port's answer from results evaluated elsewhere (the health port's)."""

    ITEMS = (CheckResult("ping", True), CheckResult("db", False, "down"), CheckResult("shutdown", True))

    def test_same_answer_as_the_app_port(self, lifecycle: Lifecycle) -> None:
        """The same results give the same status and body as HealthChecks.respond."""
        lifecycle.readiness_check("db")(lambda: False)
        app_port = HealthChecks(lifecycle).respond(READYZ, query_string="verbose")
        items = (CheckResult("ping", True), CheckResult("db", False, "returned False"), CheckResult("shutdown", True))
        assert respond_with(lifecycle, items, READYZ, None, "verbose", failure_log=FailureLog()) == app_port

    def test_per_check_exclude_and_404(self, lifecycle: Lifecycle) -> None:
        """/readyz/<name> picks one line; ?exclude marks it; an unknown name is a 404."""
        log = FailureLog()
        assert respond_with(lifecycle, self.ITEMS, READYZ, "ping", "", failure_log=log).status == 200
        assert respond_with(lifecycle, self.ITEMS, READYZ, "db", "", failure_log=log).status == 503
        assert respond_with(lifecycle, self.ITEMS, READYZ, None, "exclude=db", failure_log=log).status == 200
        missing = respond_with(lifecycle, self.ITEMS, READYZ, "nope", "", failure_log=log)
        assert (missing.status, missing.body) == (404, 'no readyz check named "nope"\n')

    def test_notes(self, lifecycle: Lifecycle) -> None:
        """Notes are warn: lines of the listing."""
        items = (CheckResult("ping", True),)
        response = respond_with(lifecycle, items, READYZ, None, "verbose", failure_log=FailureLog(), notes=("n",))
        assert response.body == "[+]ping ok\nwarn: n\nreadyz check passed\n"

    def test_has_been_ready(self, lifecycle: Lifecycle) -> None:
        """A full pass of /readyz fires the lifecycle's HasBeenReady; an excluding one does not."""
        ok = (CheckResult("ping", True),)
        respond_with(lifecycle, ok, READYZ, None, "exclude=x", failure_log=FailureLog())
        assert not lifecycle.has_been_ready.is_set()
        respond_with(lifecycle, ok, READYZ, None, "", failure_log=FailureLog())
        assert lifecycle.has_been_ready.is_set()


class TestCounted:
    """Each probe's results go into the lifecycle's statistics (for graceful_healthcheck and its total)."""

    def test_results_of_each_probe_are_counted_but_not_excluded_checks(self, lifecycle: Lifecycle) -> None:
        """Two probes of /readyz, the second excluding db: db is counted once, ping and shutdown twice."""
        lifecycle.readiness_check("db")(lambda: False)
        checks = HealthChecks(lifecycle)
        checks.respond(READYZ)
        checks.respond(READYZ, query_string="exclude=db")
        checks.respond(LIVEZ, "ping")
        join_check_threads()
        tallies = {(t.endpoint, t.name): (t.ok, t.successes, t.errors) for t in lifecycle.stats.health_checks()}
        assert tallies == {
            ("livez", "ping"): (True, 1, 0),
            ("readyz", "db"): (False, 0, 1),
            ("readyz", "ping"): (True, 2, 0),
            ("readyz", "shutdown"): (True, 2, 0),
        }


class TestHasBeenReady:
    """HasBeenReady fires at the first passing /readyz, and only then."""

    def test_fires_once_at_first_pass(self, lifecycle: Lifecycle) -> None:
        """Two passing /readyz probes fire HasBeenReady exactly once."""
        recorder = SignalRecorder(lifecycle)
        checks = HealthChecks(lifecycle)
        checks.respond(READYZ)
        checks.respond(READYZ)
        assert recorder.names == ["HasBeenReady"]
        assert lifecycle.has_been_ready.is_set()

    def test_not_before_readiness_passes(self, lifecycle: Lifecycle) -> None:
        """A failing /readyz does not fire it; the first passing one does."""
        state = {"ok": False}
        lifecycle.readiness_check("db")(lambda: state["ok"])
        checks = HealthChecks(lifecycle)
        checks.respond(READYZ)
        assert not lifecycle.has_been_ready.is_set()
        state["ok"] = True
        checks.respond(READYZ)
        assert lifecycle.has_been_ready.is_set()

    def test_not_from_other_probes(self, lifecycle: Lifecycle) -> None:
        """/livez, /healthz, per-check and excluding /readyz probes do not fire it."""
        checks = HealthChecks(lifecycle)
        checks.respond(LIVEZ)
        checks.respond(HEALTHZ)
        checks.respond(READYZ, "ping")
        checks.respond(READYZ, query_string="exclude=shutdown")
        assert not lifecycle.has_been_ready.is_set()
