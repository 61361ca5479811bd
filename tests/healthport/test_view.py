"""graceful.healthport.view: the server's answers from its processes' snapshots (fixed clocks, no sockets)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.healthport.snapshot import Snapshot
from graceful.healthport.view import HEALTH_RUNNER, MASTER_LOOP, WORKERS, WORKERS_READY, HealthView, Heard
from graceful.http.health import CheckResult
from graceful.testing import FakeClock, SignalRecorder

NOW = 1000.0


class Facts:
    """Sources for a view, set by each test."""

    def __init__(self) -> None:
        self.snapshots: list[Heard] = []
        self.booting_count = 0
        self.last = NOW
        self.idle: float | None = 0.5
        self.down = False

    def heard(self) -> Sequence[Heard]:
        return self.snapshots

    def booting(self) -> int:
        return self.booting_count

    def last_heard(self) -> float:
        return self.last

    def master_idle(self) -> float | None:
        return self.idle

    def shutting_down(self) -> bool:
        return self.down


def worker(
    pid: int,
    *,
    ready: tuple[CheckResult, ...] = (),
    live: tuple[CheckResult, ...] = (),
    hooks: tuple[tuple[str, str | None], ...] = (),
    stopping: bool = False,
    age: float = 0.5,
) -> Heard:
    return Snapshot(pid, stopping, hooks, live, ready), NOW - age


@pytest.fixture
def facts() -> Facts:
    return Facts()


@pytest.fixture
def lifecycle() -> Lifecycle:
    return Lifecycle(Config(expose_check_errors=True))


def view(lifecycle: Lifecycle, facts: Facts, *, workers: bool = True) -> HealthView:
    return HealthView(lifecycle, facts, liveness_bound=30.0, stale_after=5.0, workers=workers, clock=lambda: NOW)


def listing(v: HealthView, endpoint: str, query: str = "verbose") -> tuple[int, list[str]]:
    response = v.respond(endpoint, None, query)
    return response.status, response.body.splitlines()


OK_DB = CheckResult("db", True)
BAD_DB = CheckResult("db", False, "RuntimeError: connection refused")


class TestReadiness:
    """/readyz: some worker ready, post-start hooks, readiness checks, the server's shutdown."""

    def test_one_ready_worker_is_enough(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """With one worker ready and one failing db, /readyz passes with a warn: line naming the check."""
        facts.snapshots = [worker(1, ready=(BAD_DB,)), worker(2, ready=(OK_DB,))]
        assert listing(view(lifecycle, facts), "readyz") == (
            200,
            [
                "[+]ping ok",
                "[+]workers-ready ok",
                "[+]db ok",
                "[+]shutdown ok",
                "warn: db failing in 1 of 2 workers",
                "readyz check passed",
            ],
        )

    def test_quiet_pass_is_ok(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """Without ?verbose a pass is just ok, warn lines included."""
        facts.snapshots = [worker(1, ready=(BAD_DB,)), worker(2, ready=(OK_DB,))]
        assert view(lifecycle, facts).respond("readyz", None, "").body == "ok"

    def test_no_worker_ready_lists_the_best(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """No ready worker: 503 listing the worker failing fewest checks, with the counts of why."""
        facts.snapshots = [
            worker(1, ready=(BAD_DB, CheckResult("queue", False, "down"))),
            worker(2, ready=(BAD_DB, CheckResult("queue", True))),
        ]
        facts.booting_count = 1
        status, lines = listing(view(lifecycle, facts), "readyz")
        assert status == 503
        assert lines == [
            "[+]ping ok",
            "[-]workers-ready failed: no ready worker (1 booting, 2 not passing their checks)",
            "[-]db failed: RuntimeError: connection refused",
            "[+]queue ok",
            "[+]shutdown ok",
            "warn: queue failing in 1 of 2 workers",
            "readyz check failed",
        ]

    def test_post_start_hooks_of_the_best_worker(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """A worker whose post-start hook has not returned is not ready; the hook is listed."""
        facts.snapshots = [worker(1, hooks=(("warm", "not finished"),))]
        status, lines = listing(view(lifecycle, facts), "readyz")
        assert status == 503
        assert "[-]poststarthook/warm failed: not finished" in lines
        facts.snapshots = [worker(1, hooks=(("warm", None),))]
        assert listing(view(lifecycle, facts), "readyz")[0] == 200

    def test_before_any_worker_published(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """Before boot: only ping, workers-ready (booting) and shutdown."""
        facts.booting_count = 2
        assert listing(view(lifecycle, facts), "readyz") == (
            503,
            [
                "[+]ping ok",
                "[-]workers-ready failed: no ready worker (2 booting)",
                "[+]shutdown ok",
                "readyz check failed",
            ],
        )

    def test_stopping_and_silent_workers_do_not_count(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """A stopping worker and one not heard for longer than stale_after are counted as such, not ready."""
        facts.snapshots = [worker(1, stopping=True), worker(2, age=6.0)]
        status, lines = listing(view(lifecycle, facts), "readyz")
        assert status == 503
        assert "[-]workers-ready failed: no ready worker (1 stopping, 1 silent)" in lines

    def test_shutdown_fails_readyz_only(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """The server's shutdown fails /readyz while /livez and /healthz pass."""
        facts.snapshots = [worker(1)]
        facts.down = True
        v = view(lifecycle, facts)
        assert listing(v, "readyz")[1][-2:] == ["[-]shutdown failed: server is shutting down", "readyz check failed"]
        assert v.respond("livez", None, "").status == 200
        assert v.respond("healthz", None, "").status == 200

    def test_reasons_withheld_by_default(self, facts: Facts) -> None:
        """Without expose_check_errors the reasons are withheld, as on the app's port."""
        facts.booting_count = 1
        status, lines = listing(view(Lifecycle(Config()), facts), "readyz")
        assert status == 503 and "[-]workers-ready failed: reason withheld" in lines


class TestReplacedWorkers:
    """workers-ready through HUP, recycling, TTIN/TTOU and worker kills: the last verdict holds while replacements
    boot, within boot_bound (Gunicorn's timeout), on a fake clock."""

    BOUND = 30.0

    def setup(self, lifecycle: Lifecycle, facts: Facts) -> tuple[FakeClock, HealthView]:
        clock = FakeClock(start=NOW)
        v = HealthView(lifecycle, facts, liveness_bound=self.BOUND, stale_after=5.0, workers=True, clock=clock.now)
        return clock, v

    @staticmethod
    def heard(clock: FakeClock, pid: int, **kwargs: object) -> Heard:
        """Worker ``pid``'s snapshot, arrived just now."""
        snapshot, _ = worker(pid, **kwargs)  # type: ignore[arg-type]
        return snapshot, clock.now()

    def ready_server(self, lifecycle: Lifecycle, facts: Facts) -> tuple[FakeClock, HealthView]:
        """Two ready workers, seen by one probe."""
        clock, v = self.setup(lifecycle, facts)
        facts.snapshots = [self.heard(clock, 1, ready=(OK_DB,)), self.heard(clock, 2, ready=(OK_DB,))]
        assert listing(v, "readyz")[0] == 200
        return clock, v

    def test_hup_old_workers_stopping_new_ones_booting(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """HUP: the old workers stopping, their replacements not published yet: 200, with a warn: line saying so."""
        clock, v = self.ready_server(lifecycle, facts)
        clock.advance(0.3)
        facts.snapshots = [self.heard(clock, 1, stopping=True), self.heard(clock, 2, stopping=True)]
        facts.booting_count = 2
        status, lines = listing(v, "readyz")
        assert status == 200
        assert "[+]workers-ready ok" in lines
        assert (
            "warn: workers-ready held: no ready worker (2 booting, 2 stopping); the last ready 0.3s ago,"
            " replacements boot within 30s"
        ) in lines
        assert v.respond("healthz", None, "").status == 200

    def test_recycling_the_only_worker(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """max_requests with one worker: reaped before its replacement is forked (no worker at all), then booting,
        then starting (a post-start hook pending, its post-start lines left out): 200 throughout, then ready."""
        clock, v = self.ready_server(lifecycle, facts)
        clock.advance(0.2)
        facts.snapshots = []
        assert listing(v, "readyz")[0] == 200
        facts.booting_count = 1
        clock.advance(0.4)
        assert listing(v, "readyz")[0] == 200
        facts.booting_count = 0
        facts.snapshots = [self.heard(clock, 3, ready=(OK_DB,), hooks=(("warm", "not finished"),))]
        status, lines = listing(v, "readyz")
        assert status == 200 and lines[:3] == ["[+]ping ok", "[+]workers-ready ok", "[+]db ok"]
        assert any(line.startswith("warn: workers-ready held: no ready worker (1 starting)") for line in lines)
        facts.snapshots = [self.heard(clock, 3, ready=(OK_DB,), hooks=(("warm", None),))]
        status, lines = listing(v, "readyz")
        assert status == 200 and not any(line.startswith("warn:") for line in lines)

    def test_the_hold_ends_at_the_boot_bound(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """Replacements that have not published within boot_bound of the last ready worker: 503, saying why."""
        clock, v = self.ready_server(lifecycle, facts)
        facts.snapshots = []
        facts.booting_count = 2
        clock.advance(self.BOUND)
        assert listing(v, "readyz")[0] == 200
        clock.advance(0.5)
        status, lines = listing(v, "readyz")
        assert status == 503
        assert (
            "[-]workers-ready failed: no ready worker (2 booting); the last ready 30s ago, longer than a boot"
            " may take (30s)"
        ) in lines

    def test_a_failing_check_is_a_verdict_that_stands(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """A fresh worker failing a readiness check fails at once, and replacements booting after it do not
        bring the hold back: only a ready worker does."""
        clock, v = self.ready_server(lifecycle, facts)
        facts.snapshots = [self.heard(clock, 1, ready=(BAD_DB,)), self.heard(clock, 2, stopping=True)]
        facts.booting_count = 1
        status, lines = listing(v, "readyz")
        assert status == 503
        assert "[-]workers-ready failed: no ready worker (1 booting, 1 not passing their checks, 1 stopping)" in lines
        facts.snapshots = []
        facts.booting_count = 2
        assert listing(v, "readyz")[0] == 503
        facts.snapshots = [self.heard(clock, 3, ready=(OK_DB,))]
        facts.booting_count = 1
        assert listing(v, "readyz")[0] == 200
        facts.snapshots = []
        assert listing(v, "readyz")[0] == 200

    def test_start_up_is_not_a_replacement(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """Before any worker was ready, booting and starting workers fail workers-ready, as before."""
        clock, v = self.setup(lifecycle, facts)
        facts.booting_count = 1
        facts.snapshots = [self.heard(clock, 1, hooks=(("warm", "not finished"),))]
        status, lines = listing(v, "readyz")
        assert status == 503 and "[-]workers-ready failed: no ready worker (1 booting, 1 starting)" in lines

    def test_a_silent_worker_ends_the_hold(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """A live worker not heard for longer than stale_after (not stopping) is not a replacement: 503."""
        clock, v = self.ready_server(lifecycle, facts)
        clock.advance(6.0)
        facts.snapshots = [(facts.snapshots[0][0], NOW)]  # worker 1's last word, 6 s old
        facts.booting_count = 1
        status, lines = listing(v, "readyz")
        assert status == 503 and "[-]workers-ready failed: no ready worker (1 booting, 1 silent)" in lines

    def test_no_hold_through_the_servers_shutdown(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """The server shutting down: its stopping workers are not replaced; workers-ready fails (/healthz too)."""
        clock, v = self.ready_server(lifecycle, facts)
        facts.down = True
        facts.snapshots = [self.heard(clock, 1, stopping=True)]
        assert listing(v, "readyz")[0] == 503
        status, lines = listing(v, "healthz")
        assert status == 503 and "[-]workers-ready failed: no ready worker (1 stopping)" in lines

    def test_a_worker_killed_while_the_others_serve(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """TTOU or the control socket's worker kill: one worker stopping, the other ready: 200 with no note."""
        clock, v = self.ready_server(lifecycle, facts)
        facts.snapshots = [self.heard(clock, 1, stopping=True), self.heard(clock, 2, ready=(OK_DB,))]
        status, lines = listing(v, "readyz")
        assert status == 200 and not any(line.startswith("warn:") for line in lines)


class TestLiveness:
    """/livez: busy is not dead; fails only when no worker or the master's loop has been silent too long."""

    def test_live_workers(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """Live master loop and workers: ping, master-loop, workers, then the best worker's liveness checks."""
        facts.snapshots = [worker(1, live=(CheckResult("deadlock", True),))]
        assert listing(view(lifecycle, facts), "livez") == (
            200,
            ["[+]ping ok", "[+]master-loop ok", "[+]workers ok", "[+]deadlock ok", "livez check passed"],
        )

    def test_busy_workers_with_old_snapshots_still_live(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """Workers last heard 20 s ago (under the 30 s bound): alive, though not counted ready."""
        facts.snapshots = [worker(1, age=20.0)]
        facts.last = NOW - 20.0
        v = view(lifecycle, facts)
        assert v.respond("livez", None, "").status == 200
        assert v.respond("readyz", None, "").status == 503

    def test_no_worker_for_longer_than_the_bound(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """No worker published for 31 s (bound 30 s): workers fails, saying so."""
        facts.last = NOW - 31.0
        status, lines = listing(view(lifecycle, facts), "livez")
        assert status == 503
        assert "[-]workers failed: no worker has published for 31s (bound 30s)" in lines

    def test_stuck_master_loop(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """The master's loop idle for 45 s: master-loop fails."""
        facts.snapshots = [worker(1)]
        facts.idle = 45.0
        status, lines = listing(view(lifecycle, facts), "livez")
        assert status == 503
        assert "[-]master-loop failed: the master's loop has not run for 45s (bound 30s)" in lines

    def test_a_liveness_check_failing_in_one_worker(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """A liveness check failing in one of two workers warns; failing in all fails."""
        bad = CheckResult("deadlock", False, "stuck")
        good = CheckResult("deadlock", True)
        facts.snapshots = [worker(1, live=(bad,)), worker(2, live=(good,))]
        status, lines = listing(view(lifecycle, facts), "livez")
        assert status == 200 and "warn: deadlock failing in 1 of 2 workers" in lines
        facts.snapshots = [worker(1, live=(bad,)), worker(2, live=(bad,))]
        assert listing(view(lifecycle, facts), "livez")[0] == 503


class TestHealthz:
    """/healthz: the /livez lines, workers-ready and the readiness checks, no shutdown."""

    def test_composition(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """Lines in order; post-start hooks and shutdown are /readyz's only."""
        facts.snapshots = [worker(1, ready=(OK_DB,), hooks=(("warm", None),))]
        facts.down = True
        assert listing(view(lifecycle, facts), "healthz") == (
            200,
            [
                "[+]ping ok",
                "[+]master-loop ok",
                "[+]workers ok",
                "[+]workers-ready ok",
                "[+]db ok",
                "healthz check passed",
            ],
        )


class TestQueries:
    """Per-check paths, ?exclude and HEAD-less answers go through the app port's rendering."""

    def test_per_check_path(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """/readyz/<name> answers for that line alone; an unknown name is a 404."""
        facts.snapshots = [worker(1, ready=(BAD_DB,))]
        v = view(lifecycle, facts)
        assert v.respond("readyz", "db", "").status == 503
        assert v.respond("livez", WORKERS, "").status == 200
        missing = v.respond("readyz", "nope", "")
        assert (missing.status, missing.body) == (404, 'no readyz check named "nope"\n')

    def test_exclude(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """?exclude=shutdown passes during the shutdown, as on the app's port."""
        facts.snapshots = [worker(1)]
        facts.down = True
        assert view(lifecycle, facts).respond("readyz", None, "exclude=shutdown").status == 200


class TestHasBeenReady:
    """The first full pass of /readyz fires the server's HasBeenReady, once."""

    def test_fires_once(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """Failing, excluding and per-check probes do not fire it; the first full pass does, once."""
        recorder = SignalRecorder(lifecycle)
        v = view(lifecycle, facts)
        facts.booting_count = 1
        v.respond("readyz", None, "")
        facts.booting_count = 0
        facts.snapshots = [worker(1)]
        v.respond("readyz", None, "exclude=db")
        v.respond("readyz", WORKERS_READY, "")
        assert recorder.names == []
        v.respond("readyz", None, "")
        v.respond("readyz", None, "")
        assert recorder.names == ["HasBeenReady"]


class TestFailureLog:
    """A failing probe is logged once per change of what fails, not once per probe."""

    def test_once_per_phase(self, lifecycle: Lifecycle, facts: Facts, caplog: pytest.LogCaptureFixture) -> None:
        """Ten probes through boot, ready and shutdown log three lines: failing, passing again, shutting down."""
        v = view(lifecycle, facts)
        with caplog.at_level(logging.INFO, logger="graceful.http.health"):
            facts.booting_count = 2
            for _ in range(3):
                v.respond("readyz", None, "")
            facts.booting_count = 1
            facts.snapshots = [worker(1)]
            for _ in range(3):
                v.respond("readyz", None, "")
            facts.down = True
            for _ in range(4):
                v.respond("readyz", None, "")
        lines = [(r.levelno, r.getMessage()) for r in caplog.records if "/readyz check" in r.getMessage()]
        assert lines == [
            (logging.WARNING, "graceful: /readyz check failed: workers-ready: no ready worker (2 booting)"),
            (logging.INFO, "graceful: /readyz check passes again"),
            (logging.INFO, "graceful: /readyz check failed: shutdown: server is shutting down"),
        ]

    def test_counts_changing_alone_log_nothing(
        self, lifecycle: Lifecycle, facts: Facts, caplog: pytest.LogCaptureFixture
    ) -> None:
        """workers-ready's reason changing its counts, and nothing else, is not a new line."""
        v = view(lifecycle, facts)
        with caplog.at_level(logging.INFO, logger="graceful.http.health"):
            facts.booting_count = 2
            v.respond("readyz", None, "")
            facts.booting_count = 1
            facts.snapshots = [worker(1, stopping=True)]
            v.respond("readyz", None, "")
        assert len([r for r in caplog.records if "/readyz check failed" in r.getMessage()]) == 1


class TestSingleProcess:
    """Without Gunicorn (graceful serve): one health-runner line instead of the workers' lines."""

    def test_lines(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """health-runner in /livez and /readyz, no master-loop, no workers."""
        facts.idle = None
        facts.snapshots = [worker(1, ready=(OK_DB,))]
        v = view(lifecycle, facts, workers=False)
        assert listing(v, "livez")[1] == ["[+]ping ok", f"[+]{HEALTH_RUNNER} ok", "livez check passed"]
        assert listing(v, "readyz")[1] == [
            "[+]ping ok",
            f"[+]{HEALTH_RUNNER} ok",
            "[+]db ok",
            "[+]shutdown ok",
            "readyz check passed",
        ]
        assert MASTER_LOOP not in v.respond("healthz", None, "verbose").body

    def test_no_fresh_snapshot(self, lifecycle: Lifecycle, facts: Facts) -> None:
        """A runner silent for 6 s fails readiness; for 31 s, liveness too."""
        facts.idle = None
        facts.snapshots = [worker(1, age=6.0)]
        facts.last = NOW - 6.0
        v = view(lifecycle, facts, workers=False)
        assert f"[-]{HEALTH_RUNNER} failed: no health snapshot within 5s" in listing(v, "readyz")[1]
        assert v.respond("livez", None, "").status == 200
        facts.last = NOW - 31.0
        assert f"[-]{HEALTH_RUNNER} failed: no health snapshot for 31s (bound 30s)" in listing(v, "livez")[1]
