"""graceful.healthport.runner: the graceful-health thread runs the checks and publishes snapshots."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.healthport.runner import HealthRunner
from graceful.healthport.snapshot import Snapshot
from graceful.http.health import CheckResult, HealthChecks
from tests.conftest import ROOT

#: Generous bound (s) for "soon" on a loaded machine.
SOON = 5.0


@pytest.fixture
def lifecycle() -> Lifecycle:
    return Lifecycle(Config())


class Published:
    """Collects what a runner publishes."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Snapshot] = queue.SimpleQueue()

    def __call__(self, snapshot: Snapshot) -> None:
        self.queue.put(snapshot)

    def next(self, predicate: object = None) -> Snapshot:
        """The next snapshot (matching ``predicate``), within SOON seconds."""
        deadline = time.monotonic() + SOON
        while True:
            snapshot = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            if predicate is None or predicate(snapshot):  # type: ignore[operator]
                return snapshot


@pytest.fixture
def published() -> Published:
    return Published()


@pytest.fixture
def runners() -> Iterator[list[HealthRunner]]:
    started: list[HealthRunner] = []
    yield started
    for runner in started:
        runner.stop(SOON)


class TestHealthRunner:
    """Checks every period, cheap facts at once, always from the process it runs in."""

    def test_first_snapshot_at_once_with_the_checks(
        self, lifecycle: Lifecycle, published: Published, runners: list[HealthRunner]
    ) -> None:
        """The first snapshot comes at start with every liveness and readiness result, and this pid."""
        lifecycle.liveness_check("deadlock")(lambda: True)
        lifecycle.readiness_check("db")(lambda: False)
        runners.append(HealthRunner(lifecycle, HealthChecks(lifecycle), published, period=60).start())
        first = published.next()
        assert first.liveness == (CheckResult("deadlock", True),)
        assert first.readiness == (CheckResult("db", False, "returned False"),)
        assert first.pid == __import__("os").getpid() and not first.stopping

    def test_checks_run_each_period(
        self, lifecycle: Lifecycle, published: Published, runners: list[HealthRunner]
    ) -> None:
        """A check whose result changes is seen in a later snapshot, one period on."""
        state = {"ok": False}
        lifecycle.readiness_check("db")(lambda: state["ok"])
        runners.append(HealthRunner(lifecycle, HealthChecks(lifecycle), published, period=0.2, tick=0.02).start())
        assert not published.next().ready()
        state["ok"] = True
        assert published.next(Snapshot.ready).readiness == (CheckResult("db", True),)

    def test_post_start_hook_published_when_it_returns(
        self, lifecycle: Lifecycle, published: Published, runners: list[HealthRunner]
    ) -> None:
        """A post-start hook returning is published at the next tick, not a period later."""
        release = threading.Event()
        lifecycle.post_start_hook("warm")(lambda: release.wait(SOON))
        lifecycle.run_post_start_hooks()
        runners.append(HealthRunner(lifecycle, HealthChecks(lifecycle), published, period=60, tick=0.02).start())
        assert published.next().post_start == (("warm", "not finished"),)
        release.set()
        assert published.next().post_start == (("warm", None),)

    def test_stopping_published_at_once(
        self, lifecycle: Lifecycle, published: Published, runners: list[HealthRunner]
    ) -> None:
        """stopping() turning true is published at the next tick."""
        stopping = threading.Event()
        runner = HealthRunner(lifecycle, HealthChecks(lifecycle), published, stopping=stopping.is_set, period=60)
        runners.append(runner.start())
        assert not published.next().stopping
        stopping.set()
        assert published.next().stopping

    def test_nothing_new_nothing_published(
        self, lifecycle: Lifecycle, published: Published, runners: list[HealthRunner]
    ) -> None:
        """Between periods, unchanged facts publish nothing."""
        runners.append(HealthRunner(lifecycle, HealthChecks(lifecycle), published, period=60, tick=0.01).start())
        published.next()
        time.sleep(0.2)
        assert published.queue.empty()

    def test_a_failing_publish_does_not_stop_it(
        self, lifecycle: Lifecycle, runners: list[HealthRunner], caplog: pytest.LogCaptureFixture
    ) -> None:
        """A publish that raises is logged; the runner goes on and publishes again."""
        calls: list[int] = []
        done = threading.Event()

        def publish(_snapshot: Snapshot) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise OSError("pipe trouble")
            done.set()

        runners.append(HealthRunner(lifecycle, HealthChecks(lifecycle), publish, period=0.05, tick=0.01).start())
        assert done.wait(SOON)
        assert any("health runner failed a round" in r.getMessage() for r in caplog.records)

    def test_stop_ends_the_thread(self, lifecycle: Lifecycle, published: Published) -> None:
        """stop() ends the graceful-health thread."""
        runner = HealthRunner(lifecycle, HealthChecks(lifecycle), published).start()
        published.next()
        runner.stop(SOON)
        assert not [t for t in threading.enumerate() if t.name == "graceful-health"]


GEVENT_SCRIPT = """
from gevent import monkey
monkey.patch_all()

import time
import gevent
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.healthport.runner import HealthRunner
from graceful.http.health import HealthChecks

lifecycle = Lifecycle(Config())
lifecycle.readiness_check("slow")(lambda: time.sleep(0.3) or True)  # a cooperative sleep: patched
from gevent.monkey import get_original
os_thread = get_original("_thread", "get_ident")
published = []
threads = set()
ticks = []

def publish(snapshot):
    threads.add(os_thread())
    published.append(snapshot)

def ticker():
    for _ in range(150):
        ticks.append(time.monotonic())
        gevent.sleep(0.01)

loop = gevent.spawn(ticker)
runner = HealthRunner(lifecycle, HealthChecks(lifecycle), publish, period=0.4, tick=0.05).start()
loop.join(10)
runner.stop(5)
gaps = [b - a for a, b in zip(ticks, ticks[1:])]
print("os_threads", len(threads), threads == {os_thread()})
print("ticks", len(ticks), "max_gap", round(max(gaps), 3))
print("snapshots", len(published), "ready", sum(1 for s in published if s.ready()))
"""


class TestUnderGevent:
    """Under gevent's monkey-patching the runner is a greenlet that never blocks the hub."""

    def test_runner_cooperates_with_the_hub(self) -> None:
        """On the main OS thread (a greenlet), a ticking greenlet keeps ticking (no 0.3 s gap) while it publishes."""
        pytest.importorskip("gevent")
        done = subprocess.run(
            [sys.executable, "-c", GEVENT_SCRIPT], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr
        lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
        ticks, _, max_gap = lines["ticks"].split()
        assert int(ticks) == 150
        assert float(max_gap) < 0.25  # the hub was never held for the check's 0.3 s
        snapshots, _, ready = lines["snapshots"].split()
        assert int(snapshots) >= 2 and int(ready) >= 1
        assert lines["os_threads"] == "1 True"  # a greenlet of the main thread, not an OS thread
