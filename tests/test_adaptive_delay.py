"""The adaptive delay in a model of a Kubernetes rolling update: kube-proxy's DNAT rules and conntrack.

Each test runs tests/live/kubeproxy_model.py inside a network namespace it
makes (``ip netns add``, a unique name, loopback only, 127.x addresses): three
Gunicorn "pods" behind a DNAT'd Service address, clients through it, a rolling
update with maxSurge 1, each old pod's endpoint removed a lag after its
SIGTERM. Plain Gunicorn, graceful's fixed 5 s delay and the adaptive delay
(floor 1 s, the derived quiet period, a 30 s maximum) side by side; the
figures are printed at the end of the run. The fixed delay runs only where it
fails (a slow balancer): with fast propagation it is bench/adaptive_delay.py's
(0 errors, every pod 5 s and more), to keep this module near a minute.

It needs root, ``ip`` (iproute2) and ``iptables-restore`` (iptables): elsewhere
the tests are skipped with the reason, and under ``CI=true`` they fail (CI
installs them). Every namespace is removed by its name and every process in it
killed by its pid; the Processes fixture kills the model's process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Processes
from tests.e2e_harness import Gunicorn, free_port, http_get
from tests.netns import missing, network_namespace, run_model

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn, pytest.mark.load, pytest.mark.xdist_group("load-kube-proxy")]

#: The adaptive delay's settings under test (GRACEFUL_SHUTDOWN_DELAY_MIN, GRACEFUL_SHUTDOWN_DELAY).
FLOOR, MAXIMUM = 1.0, 30.0
#: Exit after SIGTERM (s) beyond the delay: the drain (nothing slow in flight), Gunicorn's stop, the exit;
#: generous for a loaded 2-core machine.
STOP_SLACK = 3.0
FIXED = ["--mode", "fixed", "--delay", "5"]
ADAPTIVE = ["--mode", "adaptive", "--delay", f"{MAXIMUM:g}", "--floor", f"{FLOOR:g}"]
SLOW_BALANCER = ["--lag", "8:10"]
LIGHT_TRAFFIC = ["--clients", "2", "--pause", "1.5:3", "--reuse", "1:1"]


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of this test's own; removed (and what runs in it killed) after."""
    reason = missing()
    with contextlib.ExitStack() as stack:
        name = None
        if reason is None:
            try:
                name = stack.enter_context(network_namespace())
            except OSError as exc:  # only the namespace's making: the test's own errors are not caught here
                reason = str(exc)
        if name is not None:
            yield name
            return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the kube-proxy model cannot run: {reason} (.ci/run installs iptables and iproute2)")
    pytest.skip(str(reason))


@pytest.fixture(scope="module")
def figures(request: pytest.FixtureRequest) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Each run's figures, printed as a table after the module's tests."""
    runs: list[tuple[str, dict[str, Any]]] = []
    yield runs
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not runs:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_sep(
            "-", "kube-proxy model: plain Gunicorn vs graceful fixed vs adaptive (tests/test_adaptive_delay.py)"
        )
        for title, run in runs:
            pods = "; ".join(
                f"removed {p['removed_s']} exit {p['exit_s']} last request {p['last_request_s']}" for p in run["pods"]
            )
            reporter.write_line(
                f"{title}: {run['ok']}/{run['requests']} ok, errors {run['errors'] or 0},"
                f" exit median {run['exit_median_s']} s, rollout {run['rollout_s']} s | {pods}"
            )


def model(processes: Processes, netns: str, *args: str) -> dict[str, Any]:
    """Run the model in ``netns`` with ``args``; its JSON figures (fails with its output if it fails)."""
    try:
        result = run_model(processes.start, netns, list(args))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    assert result["requests"] > 0, "no request was sent: the run measured nothing"
    assert all(p["exit_s"] is not None for p in result["pods"]), f"an old pod never exited: {result}"
    return result


class TestFastPropagation:
    """Endpoints removed 0.5-2 s after each SIGTERM, as kube-proxy on a healthy cluster."""

    def test_adaptive_leaves_early_and_loses_nothing(
        self, processes: Processes, netns: str, figures: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """Floor 1 s, derived quiet, 30 s maximum: 0 errors and the old pods' SIGTERM-to-exit median <= 4 s."""
        run = model(processes, netns, *ADAPTIVE)
        figures.append(("fast, adaptive", run))
        assert run["errors"] == {}, run
        assert [p["exit_code"] for p in run["pods"]] == [0, 0, 0], run
        assert all(p["exit_s"] >= FLOOR for p in run["pods"]), run
        assert run["exit_median_s"] <= 4.0, run

    @pytest.mark.plain
    def test_plain_gunicorn(self, processes: Processes, netns: str, figures: list[tuple[str, dict[str, Any]]]) -> None:
        """Plain Gunicorn in the same model, for its figures (it refuses what the rules still send it)."""
        run = model(processes, netns, "--mode", "plain")
        figures.append(("fast, plain Gunicorn", run))
        assert all(p["exit_s"] < 5.0 for p in run["pods"]), run


class TestSlowBalancer:
    """Endpoints removed 8-10 s after each SIGTERM, as a balancer that deregisters slowly."""

    def test_adaptive_stays_until_its_endpoint_is_removed(
        self, processes: Processes, netns: str, figures: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """0 errors, and each old pod exits after its endpoint was removed (the quiet comes only then)."""
        run = model(processes, netns, *ADAPTIVE, *SLOW_BALANCER)
        figures.append(("slow balancer, adaptive", run))
        assert run["errors"] == {}, run
        for pod in run["pods"]:
            assert pod["removed_s"] is not None and pod["exit_s"] > pod["removed_s"], run
            assert pod["exit_s"] <= MAXIMUM + STOP_SLACK, run

    def test_fixed_delay_loses_requests(
        self, processes: Processes, netns: str, figures: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """The fixed 5 s delay ends while the rules still send new connections: some are refused."""
        run = model(processes, netns, *FIXED, *SLOW_BALANCER)
        figures.append(("slow balancer, fixed 5 s", run))
        assert sum(run["errors"].values()) > 0, run
        assert all(p["exit_s"] < p["removed_s"] for p in run["pods"]), run


class TestLightTraffic:
    def test_the_honest_figure(
        self, processes: Processes, netns: str, figures: list[tuple[str, dict[str, Any]]]
    ) -> None:
        """2 clients, a new connection every 1.5-3 s each: printed as measured; the delay keeps its floor and maximum.

        In light traffic a quiet gap before the endpoint is removed ends the
        delay early; what then arrives is refused. The README gives the figure.
        """
        run = model(processes, netns, *ADAPTIVE, *LIGHT_TRAFFIC)
        figures.append(("light traffic, adaptive", run))
        assert run["requests"] <= 2 * 60, run  # bounded: 2 clients, at most one request each 1.5 s, for < 90 s
        for pod in run["pods"]:
            assert FLOOR <= pod["exit_s"] <= MAXIMUM + STOP_SLACK, run


class TestServerWide:
    def test_the_master_ends_the_delay_on_every_workers_arrivals(self, processes: Processes, tmp_path: Path) -> None:
        """Four sync workers serve during the delay; the master's delay ends on their quiet, after their last arrival.

        The shutdown record's delay names the last arrival any worker saw (the
        arrival board), and ends about a quiet period later, far before the maximum.
        """
        record_file = tmp_path / "record.json"
        settings = {
            "GRACEFUL_SHUTDOWN_DELAY": "20",
            "GRACEFUL_SHUTDOWN_DELAY_MIN": "0.5",
            # Set, not derived: on a loaded 2-core machine one request may stall past a derived 1 s.
            "GRACEFUL_QUIET_PERIOD": "3",
            "GRACEFUL_GRACE_PERIOD": "45",
            "GRACEFUL_REPORT_FILE": str(record_file),
            "GRACEFUL_TERMINATION_LOG": "",
        }
        server = Gunicorn(processes, free_port(), "sync", graceful=True, env=settings).start()
        server.wait_ready()
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        # The delay starts when the master acts on the TERM (its ShutdownInitiated): /readyz fails from then.
        deadline = time.monotonic() + 20
        while http_get(server.port, "/readyz")[0] != 503:
            assert time.monotonic() < deadline, "/readyz never failed after SIGTERM"
        until = time.monotonic() + 2.0
        sent = 0
        pace = threading.Event()
        # 2 s of requests during the delay, paced (a quiet machine serves 2000 in under 1 s), bounded.
        while time.monotonic() < until and sent < 2000:
            status, _, _ = http_get(server.port, "/fast")
            assert status == 200
            sent += 1
            pace.wait(0.005)
        assert server.proc.wait(30) == 0
        record = json.loads(record_file.read_text())
        delay = record["delay"]
        workers = [p for p in record["parts"] if p["role"] == "worker" and p["requests"]["last_arrival_s"] is not None]
        assert len(workers) >= 2, f"the requests reached fewer than two workers: {record['parts']}"
        latest = max(p["requests"]["last_arrival_s"] for p in workers)
        assert delay["end"] == "quiet", delay
        assert delay["last_arrival_s"] == pytest.approx(latest, abs=0.01), delay
        assert delay["last_arrival_s"] >= 1.5, delay  # requests went on for 2 s after ShutdownInitiated
        assert latest + 3.0 <= delay["ended_s"] < 15, delay  # the quiet after the last arrival, not the maximum
