"""Zero lost requests on Uvicorn, end to end: two `graceful serve` processes behind HAProxy, a rolling restart.

The ASGI twin of tests/test_zero_loss.py's rolling restart (tests/e2e_harness.py's
scenario, HAProxy health-checking ``/readyz``, 24 keep-alive clients, no
retries): a Starlette app (tests/live/asgi_load_app.py) served by ``graceful
serve`` (Uvicorn) is asserted; plain Uvicorn runs the same scenario in the same
session and is reported, not asserted (marker ``plain``). The table both
produce is printed at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.asgi_harness import uvicorn_instances
from tests.conftest import Processes, add_figures
from tests.e2e_harness import OTHER, TABLE_HEADER, Run, find_haproxy, rolling_restart

# One worker runs the HAProxy rolling restarts one after the other, the WSGI ones included (same group).
pytestmark = [pytest.mark.e2e, pytest.mark.load, pytest.mark.asgi, pytest.mark.xdist_group("load-haproxy")]

#: The label of these runs in the table (the harness's worker-class column).
SERVER = "uvicorn"


@pytest.fixture(scope="module")
def report(request: pytest.FixtureRequest) -> Iterator[list[Run]]:
    """Collect every run of the module; printed side by side in the session's summary."""
    runs: list[Run] = []
    yield runs
    if runs:
        add_figures(
            request.config,
            "zero loss on Uvicorn: graceful serve vs plain Uvicorn (tests/test_asgi_zero_loss.py)",
            TABLE_HEADER,
            [run.row() for run in runs],
        )


@pytest.fixture
def haproxy_present() -> None:
    """Fail (not skip) without HAProxy: CI installs it, and a skipped proof proves nothing."""
    if find_haproxy() is None:
        pytest.fail("haproxy not found: apt-get install haproxy (.ci/run and scripts/run-tests install it)")


@pytest.mark.usefixtures("haproxy_present")
def test_rolling_restart_no_client_sees_an_error(processes: Processes, tmp_path: Path, report: list[Run]) -> None:
    """Both graceful serve (Uvicorn) instances restarted in turn behind HAProxy under load: no error, exit 0."""
    run = rolling_restart(processes, tmp_path, SERVER, graceful=True, make=uvicorn_instances(processes, graceful=True))
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


@pytest.mark.plain
@pytest.mark.usefixtures("haproxy_present")
def test_plain_uvicorn_rolling_restart_is_measured(processes: Processes, tmp_path: Path, report: list[Run]) -> None:
    """Plain Uvicorn through the same rolling restart: measured and every failure classified, not judged."""
    run = rolling_restart(
        processes, tmp_path, SERVER, graceful=False, make=uvicorn_instances(processes, graceful=False)
    )
    report.append(run)

    assert len(run.records) > 100
    assert len(run.terminations) == 2
    assert run.by_class()[OTHER] == 0, run.describe()
