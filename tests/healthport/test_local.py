"""graceful.healthport.local: the runner and the port of one process, in this process (real sockets)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.healthport.address import HealthAddress
from graceful.healthport.local import LocalHealth
from graceful.http.health import HealthChecks
from graceful.http.replies import NO_METRICS
from tests.healthport.helpers import get

SOON = 5.0


@pytest.fixture
def lifecycle() -> Lifecycle:
    return Lifecycle(Config(expose_check_errors=True))


@pytest.fixture
def local(lifecycle: Lifecycle) -> Iterator[LocalHealth]:
    health = LocalHealth(lifecycle, HealthChecks(lifecycle), HealthAddress("127.0.0.1", 0)).start()
    try:
        yield health
    finally:
        health.close()


def probe(health: LocalHealth, path: str) -> tuple[int, str]:
    return get(health.port.listener, path, SOON)


def eventually(health: LocalHealth, path: str, status: int, saying: str = "") -> tuple[int, str]:
    """The first answer with ``status`` whose body holds ``saying`` (or the last one, at SOON)."""
    deadline = time.monotonic() + SOON
    answer = probe(health, path)
    while (answer[0] != status or saying not in answer[1]) and time.monotonic() < deadline:
        time.sleep(0.1)  # a probe every 0.1 s until the answer changes (bounded by SOON)
        answer = probe(health, path)
    return answer


class TestLocalHealth:
    """One process: health-runner lines, its checks, its ShutdownInitiated."""

    def test_ready_once_the_runner_published(self, lifecycle: Lifecycle, local: LocalHealth) -> None:
        """/readyz passes once the first snapshot is in, listing health-runner and the process's checks."""
        assert eventually(local, "/readyz?verbose", 200) == (
            200,
            "[+]ping ok\n[+]health-runner ok\n[+]shutdown ok\nreadyz check passed\n",
        )

    def test_checks_and_shutdown(self, lifecycle: Lifecycle) -> None:
        """A failing readiness check, then ShutdownInitiated: both show on the port; /livez stays 200."""
        state = {"ok": False}
        lifecycle.readiness_check("db")(lambda: state["ok"])
        health = LocalHealth(lifecycle, HealthChecks(lifecycle), HealthAddress("127.0.0.1", 0)).start()
        try:
            # Before the runner's first snapshot the port also answers 503, for that reason.
            status, body = eventually(health, "/readyz?verbose", 503, saying="[-]db failed")
            assert status == 503 and "[-]db failed: returned False" in body
            state["ok"] = True
            assert eventually(health, "/readyz", 200)[0] == 200
            lifecycle.initiate_shutdown()
            assert "[-]shutdown failed: server is shutting down" in eventually(health, "/readyz?verbose", 503)[1]
            assert probe(health, "/livez")[0] == 200
        finally:
            health.close()

    def test_close_stops_both_threads(self, lifecycle: Lifecycle) -> None:
        """close() ends the runner and the port."""
        health = LocalHealth(lifecycle, HealthChecks(lifecycle), HealthAddress("127.0.0.1", 0)).start()
        health.close()
        names = {t.name for t in threading.enumerate() if t.is_alive()}
        assert not names & {"graceful-health", "graceful-health-port"}

    def test_sources(self, lifecycle: Lifecycle, local: LocalHealth) -> None:
        """One process: nothing booting, no master loop, the lifecycle's own shutdown."""
        assert (local.booting(), local.master_idle(), local.shutting_down()) == (0, None, False)
        lifecycle.initiate_shutdown()
        assert local.shutting_down()

    def test_metrics_are_this_processes(self, lifecycle: Lifecycle, local: LocalHealth) -> None:
        """/metrics: this process's metrics as at the scrape (a rejection made just before is in), its probes too."""
        lifecycle.stats.rejected("max_in_flight")
        eventually(local, "/readyz", 200)
        status, body = probe(local, "/metrics")
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(body)}
        rejected = {s.labels["reason"]: s.value for s in families["graceful_requests_rejected"].samples}
        assert rejected["max_in_flight"] == 1
        checks = {
            (s.labels["type"], s.labels["name"], s.labels["status"]): s.value
            for s in families["graceful_healthchecks"].samples
            if s.name == "graceful_healthchecks_total"
        }
        assert checks[("readyz", "ping", "success")] >= 1

    def test_metrics_404_without_prometheus_client(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, local: LocalHealth
    ) -> None:
        """Without prometheus_client: 404 saying how to install it, one warning for many scrapes, probes unharmed."""
        monkeypatch.setitem(sys.modules, "prometheus_client", None)
        monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
        monkeypatch.setattr("graceful.http.probes._missing_library_logged", [])
        answers = [probe(local, "/metrics") for _ in range(3)]
        assert answers == [(404, NO_METRICS.decode())] * 3
        assert len([r for r in caplog.records if "/metrics answers 404" in r.getMessage()]) == 1
        assert eventually(local, "/livez", 200)[0] == 200
