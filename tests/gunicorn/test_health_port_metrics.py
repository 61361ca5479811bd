"""/metrics on the health port under real Gunicorn: the whole server's counts, recycled workers included.

Two gthread workers with GRACEFUL_HEALTH_BIND and ``--max-requests``, so that
workers are recycled while the test counts what it sent; every count the
client saw must be in one scrape of the master's port, exactly. Workers
publish every second, so the test scrapes until the figures match or a
generous bound passes (then it fails with the last figures). Traffic is to
127.0.0.1 only, every loop bounded.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest

from tests.conftest import Processes
from tests.gunicorn.test_health_port import Instance, busy, probe
from tests.metrics.helpers import Figures, figures, sample, scrape, settle

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn]

#: Two gthread workers of two threads each.
TWO_WORKERS = ("-w", "2", "--threads", "2")


class TestServerMetrics:
    def test_counts_add_up_across_recycled_workers(self, processes: Processes) -> None:
        """Bursts over max_in_flight, app-port and health-port probes, workers recycled by max_requests: one scrape
        of the health port has every 429, every 503 and every probe the client saw, exactly."""
        server = Instance(
            processes, "gthread", env={"GRACEFUL_MAX_IN_FLIGHT": "1"}, args=(*TWO_WORKERS, "--max-requests", "20")
        )
        server.wait("/readyz", "200")
        seen: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()

        def slow() -> None:
            answer = probe(server.port, "/slow?ms=200&bytes=16", timeout=10)
            with lock:
                seen[f"slow {answer}"] += 1

        for _ in range(30):
            burst = [threading.Thread(target=slow) for _ in range(3)]
            for thread in burst:
                thread.start()
            seen[f"app livez {probe(server.port, '/livez', timeout=10)}"] += 1
            seen[f"port livez {probe(server.health, '/livez')}"] += 1
            for thread in burst:
                thread.join(15)
        assert set(seen) <= {"slow 200", "slow 429", "slow 503", "app livez 200", "port livez 200"}, seen
        assert seen["slow 429"] > 0 and seen["slow 200"] > 0
        recycled = server.server.matching(r"graceful: worker \d+ stopped \(recycled\)")
        assert len(recycled) >= 1, "\n".join(server.server.lines[-30:])

        def read(data: Figures) -> dict[str, float]:
            return {
                "max_in_flight": sample(data, "graceful_requests_rejected_total", reason="max_in_flight"),
                "draining": sample(data, "graceful_requests_rejected_total", reason="draining"),
                "shutting_down": sample(data, "graceful_requests_rejected_total", reason="shutting_down"),
                "livez ping": sample(data, "graceful_healthchecks_total", name="ping", type="livez", status="success"),
                "in flight": sample(data, "graceful_requests_in_flight"),
            }

        expected = {
            "max_in_flight": float(seen["slow 429"]),
            "draining": float(seen["slow 503"]),
            "shutting_down": 0.0,
            "livez ping": float(seen["app livez 200"] + seen["port livez 200"]),
            "in flight": 0.0,
        }
        assert settle(server.health, read, expected) == expected
        # More recycling after the scrape matched: the counters stay (a recycled worker's counts are retained).
        recycled_before = len(server.server.matching(r"graceful: worker \d+ stopped \(recycled\)"))
        fast = collections.Counter(probe(server.port, "/fast", timeout=10) for _ in range(45))
        # One at a time, yet a 429 is fair: the last response's iterable may close just after the client read it.
        assert set(fast) <= {"200", "429"}, fast
        expected["max_in_flight"] += fast["429"]
        server.server.wait_for(r"graceful: worker \d+ stopped \(recycled\)", count=recycled_before + 1)
        assert settle(server.health, read, expected) == expected

    def test_a_scrape_answers_while_every_worker_is_busy(self, processes: Processes) -> None:
        """Both sync workers busy with 3 s requests, as many queued: the app's port times out, /metrics on the health
        port answers within 1 s (GET and HEAD, with the app port's headers), showing the 2 requests in flight."""
        # sync, not gthread: a gthread worker may take more connections than its share, leaving the other one a free
        # thread, so "every worker busy" would not hold for sure.
        server = Instance(processes, "sync")
        server.wait("/readyz", "200")
        stop = threading.Event()
        threads = busy(server.port, 4, 20, stop)
        try:
            time.sleep(1.0)
            assert probe(server.port, "/livez") == "TimeoutError"
            in_flight = settle(
                server.health, lambda data: {"in flight": sample(data, "graceful_requests_in_flight")}, {"in flight": 2}
            )
            assert in_flight == {"in flight": 2}
            status, headers, body = scrape(server.health, "HEAD")
            assert (status, body) == (200, "")
            assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert (headers["Cache-Control"], headers["X-Content-Type-Options"]) == ("no-store", "nosniff")
            assert int(headers["Content-Length"]) > 0
            status, _, body = scrape(server.health)
            info = [labels for (name, labels), _ in figures(body).items() if name == "graceful_info"]
            assert status == 200 and [dict(labels)["server"] for labels in info] == ["gunicorn"]
            assert dict(info[0])["worker_class"] == "sync"
        finally:
            stop.set()
            for thread in threads:
                thread.join(15)
