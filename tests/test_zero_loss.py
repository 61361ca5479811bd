"""Zero lost requests, end to end: real Gunicorn, real HAProxy, real SIGTERM, under load.

graceful (``gunicorn -c graceful/conf.py``) is asserted; plain Gunicorn runs
the same harness in the same session and is reported, not asserted: the
table both produce is printed at the end of the module (the README quotes it).
The harness, the failure classes and the HAProxy configuration are in
tests/e2e_harness.py; the app is tests/live/load_app.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Processes, add_figures
from tests.e2e_harness import (
    DELAY_EDGE,
    OTHER,
    TABLE_HEADER,
    Run,
    assert_nothing_lost,
    direct_sigterm,
    find_haproxy,
    rolling_restart,
)

# Under pytest-xdist one worker runs these one after the other: two rolling restarts at once on 2
# cores would measure the machine (tests/conftest.py starts groups first).
pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn, pytest.mark.load, pytest.mark.xdist_group("load-haproxy")]

WORKER_CLASSES = ["sync", "gthread", "gevent"]

#: The first failing /readyz must have been sent within this many seconds of SIGTERM.
READYZ_FLIP = 0.5


@pytest.fixture(scope="module")
def report(request: pytest.FixtureRequest) -> Iterator[list[Run]]:
    """Collect every run of the module; printed side by side in the session's summary."""
    runs: list[Run] = []
    yield runs
    if runs:
        add_figures(
            request.config,
            "zero loss: graceful vs plain Gunicorn (tests/test_zero_loss.py)",
            TABLE_HEADER,
            [run.row() for run in runs],
        )


@pytest.fixture
def haproxy_present() -> None:
    """Fail (not skip) without HAProxy: CI installs it, and a skipped proof proves nothing."""
    if find_haproxy() is None:
        pytest.fail("haproxy not found: apt-get install haproxy (.ci/run and scripts/run-tests install it)")


@pytest.mark.usefixtures("haproxy_present")
class TestRollingRestartBehindHAProxy:
    @pytest.mark.parametrize("worker_class", WORKER_CLASSES)
    def test_no_client_sees_an_error(
        self, processes: Processes, tmp_path: Path, report: list[Run], worker_class: str
    ) -> None:
        """Both instances restarted in turn behind HAProxy under load: no error, in-flight requests complete."""
        run = rolling_restart(processes, tmp_path, worker_class, graceful=True)
        report.append(run)

        assert [t.returncode for t in run.terminations] == [0, 0], run.describe()
        for term in run.terminations:
            served_in_delay = [r for r in run.records if r.served_by == str(term.pid) and r.started >= term.sigterm_at]
            assert served_in_delay, f"{term.name} served nothing after SIGTERM: the test did not test the delay"
        in_flight = run.in_flight_at_sigterm()
        assert in_flight, "no request was in flight at a SIGTERM"
        assert all(r.ok for r in in_flight), run.describe(in_flight)
        assert len(run.records) > 200
        assert not run.failures, run.describe()
        assert run.log_problems == []


class TestDirectSigterm:
    @pytest.mark.parametrize("worker_class", WORKER_CLASSES)
    def test_in_flight_and_delayed_requests_succeed(
        self, processes: Processes, report: list[Run], worker_class: str
    ) -> None:
        """SIGTERM with clients but no load balancer: requests in flight or sent during the delay all succeed."""
        run = direct_sigterm(processes, worker_class, graceful=True)
        report.append(run)

        assert_nothing_lost(run, DELAY_EDGE)
        # Readiness fails at once; liveness holds throughout the delay (under gevent: the hub is not blocked).
        sigterm_at = run.terminations[0].sigterm_at
        failing = [p.sent_at - sigterm_at for p in run.probes if p.path == "/readyz" and p.status == 503]
        assert failing and failing[0] < READYZ_FLIP, run.probes
        end = sigterm_at + run.delay_window - DELAY_EDGE  # later ones may reach the closed listeners
        livez = [p for p in run.probes if p.path == "/livez" and p.sent_at < end]
        assert len(livez) >= 2, run.probes
        assert [p for p in livez if p.status != 200] == []
        assert run.log_problems == []


@pytest.mark.plain
@pytest.mark.usefixtures("haproxy_present")
class TestPlainGunicornComparison:
    @pytest.mark.parametrize("worker_class", WORKER_CLASSES)
    def test_rolling_restart_is_measured(
        self, processes: Processes, tmp_path: Path, report: list[Run], worker_class: str
    ) -> None:
        """Plain Gunicorn through the same rolling restart: measured and every failure classified, not judged."""
        run = rolling_restart(processes, tmp_path, worker_class, graceful=False)
        report.append(run)

        # A total that a loaded 2-core machine still reaches: plain sync served 373 once.
        assert len(run.records) > 100
        assert len(run.terminations) == 2
        assert run.by_class()[OTHER] == 0, run.describe()

    @pytest.mark.parametrize("worker_class", WORKER_CLASSES)
    def test_direct_sigterm_is_measured(self, processes: Processes, report: list[Run], worker_class: str) -> None:
        """Plain Gunicorn through the same direct SIGTERM: measured and every failure classified, not judged."""
        run = direct_sigterm(processes, worker_class, graceful=False)
        report.append(run)

        assert len(run.terminations) == 1
        # Plain Gunicorn stops within a second of SIGTERM, so the run is short:
        # what makes it a measurement is traffic on both sides of the signal,
        # not a total (a loaded CI machine served 96 requests in it once).
        sigterm_at = run.terminations[0].sigterm_at
        assert len([r for r in run.records if r.started < sigterm_at]) > 20
        assert [r for r in run.records if r.started >= sigterm_at], "nothing was sent after SIGTERM"
        assert run.by_class()[OTHER] == 0, run.describe()
