"""The cost of one ``/metrics`` scrape on the health port, beside a ``/livez`` on the same port, same run.

    python bench/metrics_scrape.py [--scrapes 200] [--workers 2]

One graceful Gunicorn (``gthread -w 2 --threads 2``, tests/live/load_app.py)
with ``GRACEFUL_HEALTH_BIND``, idle but for the probes. Alternating, one
every 0.1 s (within one client's budget of 20 answers a second), a GET
``/metrics`` and a GET ``/livez`` on fresh connections with a 1 s timeout;
latency from connect to the whole body. The scrape is answered by the
master's ``graceful-health-port`` thread: it takes each live worker's
latest metrics record from the workers' channels, checks it, merges them
with the master's own snapshot and renders Prometheus' text. Prints median / p99 /
max (ms) of each, the difference of the medians, and the body size.
Bounded: ``--scrapes`` of each (200 take 40 s), each with a 1 s timeout.

Then the master's part alone, in this process: ``--workers`` workers'
records sent by :class:`~graceful.gunicorn.metrics.WorkerMetrics` through
their channels, and the median over 2,000 rounds of what the port's thread
does per scrape (parse and check the records, then render).
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.conftest import Processes
from tests.e2e_harness import Gunicorn, free_port, markdown_table

PERIOD = 0.1
TIMEOUT = 1.0


def timed_get(port: int, path: str) -> tuple[float, int, int]:
    """One GET on a fresh connection: milliseconds from connect to the whole body, status, body size."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        return (time.perf_counter() - started) * 1000, response.status, len(body)
    finally:
        conn.close()


def wait_ok(port: int, path: str, timeout: float = 30.0) -> None:
    """Until ``path`` answers 200 (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if timed_get(port, path)[1] == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"127.0.0.1:{port}{path} did not answer 200 within {timeout:g}s")


def row(name: str, latencies: list[float], failures: int) -> list[str]:
    data = sorted(latencies)
    p99 = data[min(len(data) - 1, round(0.99 * (len(data) - 1)))]
    return [name, str(len(data)), f"{statistics.median(data):.2f}", f"{p99:.2f}", f"{data[-1]:.2f}", str(failures)]


def in_process(workers: int, rounds: int = 2000) -> tuple[float, float]:
    """Median µs of reading ``workers`` records into snapshots, and of that plus rendering (the port's thread)."""
    from graceful.core.config import Config
    from graceful.core.lifecycle import Lifecycle
    from graceful.gunicorn.channel import Kind, MasterChannel
    from graceful.gunicorn.metrics import ServerMetrics, WorkerMetrics
    from graceful.metrics import render_metrics

    channel = MasterChannel()
    ends = []
    try:
        for pid in range(100, 100 + workers):
            worker = Lifecycle(Config())
            worker.stats.rejected("max_in_flight")
            worker.stats.checked("livez", [("ping", True)])
            ends.append(channel.connect(pid))
            WorkerMetrics(ends[-1], worker).publish()
        metrics = ServerMetrics(Lifecycle(Config()), channel)
        deadline = time.monotonic() + 10
        while len(channel.latest(Kind.METRICS)) < workers and time.monotonic() < deadline:
            time.sleep(0.01)  # the channel's thread reads them
        render_metrics(snapshots=metrics.snapshots)  # the import, once
        read, whole = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            metrics.snapshots()
            read.append(time.perf_counter() - started)
            started = time.perf_counter()
            render_metrics(snapshots=metrics.snapshots)
            whole.append(time.perf_counter() - started)
        return statistics.median(read) * 1e6, statistics.median(whole) * 1e6
    finally:
        for end in ends:
            end.close()
        channel.close()


def main() -> None:
    """Measure, print one table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes (and as many /livez)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    processes = Processes()
    try:
        health = free_port()
        env = {"GRACEFUL_HEALTH_BIND": f"127.0.0.1:{health}"}
        shape = ("-w", str(args.workers), "--threads", "2")
        server = Gunicorn(processes, free_port(), "gthread", graceful=True, env=env, args=shape).start()
        server.wait_ready()
        wait_ok(health, "/readyz")
        time.sleep(1.5)  # every worker has published its metrics once
        before = os.getloadavg()
        results: dict[str, list[float]] = {"/metrics": [], "/livez": []}
        failures = dict.fromkeys(results, 0)
        size = 0
        for index in range(2 * args.scrapes):
            path = ("/metrics", "/livez")[index % 2]
            try:
                latency, status, length = timed_get(health, path)
            except (OSError, http.client.HTTPException):
                failures[path] += 1
            else:
                results[path].append(latency)
                failures[path] += status != 200
                if path == "/metrics":
                    size = length
            time.sleep(PERIOD)
        after = os.getloadavg()
    finally:
        processes.cleanup()
    print(f"load average before {before[0]:.2f}, after {after[0]:.2f} ({os.cpu_count()} CPUs)")
    print(f"gthread -w {args.workers} --threads 2, idle; /metrics body {size} bytes")
    rows = [row(f"health port {path}", latencies, failures[path]) for path, latencies in results.items()]
    print("\n".join(markdown_table(["target", "requests", "p50 ms", "p99 ms", "max ms", "failures"], rows)))
    extra = statistics.median(results["/metrics"]) - statistics.median(results["/livez"])
    print(f"a scrape costs {extra:.2f} ms more than a /livez (medians)")
    read, whole = in_process(args.workers)
    print(f"in process, {args.workers} workers' files: read {read:.0f} us, read and render {whole:.0f} us (medians)")


if __name__ == "__main__":
    main()
