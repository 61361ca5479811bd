"""Probe latency while every worker, thread or greenlet is busy: graceful's health port, its app port, plain Gunicorn.

    python bench/health_probes.py [--probes 200] [--worker-class sync gthread]

For each worker class, two Gunicorns serving tests/live/load_app.py, started
side by side: one graceful with ``GRACEFUL_HEALTH_BIND``, one plain. Shapes:
``sync -w 2``, ``gthread -w 1 --threads 4``, ``gevent -w 1
--worker-connections 4``. Each is kept busy by twice as many clients as it
serves at once, every client looping ``GET /slow?ms=3000`` (a 3 s request).
Meanwhile three probers, each a GET every 250 ms on a fresh connection with a
1 s timeout (Kubernetes' default ``timeoutSeconds``), alternating ``/livez``
and ``/readyz`` (plain Gunicorn: the load app's own ``/readyz``): graceful's
health port, graceful's app port, plain Gunicorn's app port, all in the same
run. A probe fails on a timeout, a connection error or a status other than
200. Prints p50 / p99 / max latency (ms, connect to the whole body) and the
failures of each, and the load average before and after. Bounded:
``--probes`` per target (200 take 50 s a class) and a time limit of that plus
30 s. Target (the issue): p99 < 50 ms and no failure on the health port, for
every worker class.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.conftest import Processes
from tests.e2e_harness import Gunicorn, free_port, markdown_table

SLOW_MS = 3000
PERIOD = 0.25
TIMEOUT = 1.0
#: Gunicorn's options per worker class, and how many requests that serves at once.
SHAPES: dict[str, tuple[tuple[str, ...], int]] = {
    "sync": (("-w", "2"), 2),
    "gthread": (("-w", "1", "--threads", "4"), 4),
    "gevent": (("-k", "gevent", "-w", "1", "--worker-connections", "4"), 4),
}


@dataclass
class Probes:
    """Every probe of one target."""

    name: str
    latencies_ms: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, latency_ms: float, failure: str | None) -> None:
        with self.lock:
            self.latencies_ms.append(latency_ms)
            if failure is not None:
                self.failures[failure] = self.failures.get(failure, 0) + 1

    def row(self) -> list[str]:
        data = sorted(self.latencies_ms)
        if not data:
            return [self.name, "0", "-", "-", "-", "-"]
        p99 = data[min(len(data) - 1, round(0.99 * (len(data) - 1)))]
        failed = sum(self.failures.values())
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.failures.items()))
        return [
            self.name,
            str(len(data)),
            f"{statistics.median(data):.1f}",
            f"{p99:.1f}",
            f"{data[-1]:.1f}",
            f"{failed}" + (f" ({kinds})" if kinds else ""),
        ]


def probe(port: int, path: str, into: Probes, expect: Collection[int] = (200,)) -> None:
    """One probe on a fresh connection from 127.0.0.1; its latency from connect to the whole body.

    A failure: a timeout, a connection error, or a status not in ``expect``.
    """
    started = time.perf_counter()
    failure = None
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        if response.status not in expect:
            failure = f"http {response.status}"
    except TimeoutError:
        failure = "timeout"
    except (OSError, http.client.HTTPException) as exc:
        failure = type(exc).__name__
    finally:
        conn.close()
    into.add((time.perf_counter() - started) * 1000, failure)


def prober(port: int, paths: tuple[str, ...], into: Probes, count: int, stop: threading.Event) -> None:
    """``count`` probes, one every PERIOD s, each on its own thread (a slow one does not delay the next)."""
    threads = []
    start = time.monotonic()
    for index in range(count):
        delay = start + index * PERIOD - time.monotonic()
        if stop.wait(max(0.0, delay)):
            break
        thread = threading.Thread(target=probe, args=(port, paths[index % len(paths)], into), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(TIMEOUT + 5)


def load(port: int, clients: int, stop: threading.Event, deadline: float) -> list[threading.Thread]:
    """``clients`` threads looping a 3 s request each (a fresh connection each), until ``stop`` or ``deadline``."""

    def client() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                conn.request("GET", f"/slow?ms={SLOW_MS}&bytes=64")
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                stop.wait(0.1)
            finally:
                conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    return threads


def wait_ok(port: int, path: str, timeout: float = 30.0) -> None:
    """Until ``path`` answers 200 (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        into = Probes("wait")
        probe(port, path, into)
        if not into.failures:
            return
        time.sleep(0.1)
    raise RuntimeError(f"127.0.0.1:{port}{path} did not answer 200 within {timeout:g}s")


def run_class(worker_class: str, count: int) -> list[Probes]:
    """The three targets of one worker class, measured at the same time."""
    args, capacity = SHAPES[worker_class]
    base = "gthread" if worker_class == "gthread" else "sync"  # the harness's -k; gevent's args override it
    processes = Processes()
    try:
        health = free_port()
        env = {"GRACEFUL_HEALTH_BIND": f"127.0.0.1:{health}"}
        graceful = Gunicorn(processes, free_port(), base, graceful=True, env=env, args=args, name="graceful").start()
        plain = Gunicorn(processes, free_port(), base, graceful=False, args=args, name="plain").start()
        graceful.wait_ready()
        plain.wait_ready()
        wait_ok(health, "/readyz")
        stop = threading.Event()
        deadline = time.monotonic() + count * PERIOD + 30
        loaders = load(graceful.port, 2 * capacity, stop, deadline) + load(plain.port, 2 * capacity, stop, deadline)
        time.sleep(1.0)  # every worker busy, as many clients queued behind them
        targets = [
            (health, ("/livez", "/readyz"), Probes(f"{worker_class}: graceful, health port")),
            (graceful.port, ("/livez", "/readyz"), Probes(f"{worker_class}: graceful, app port")),
            (plain.port, ("/readyz",), Probes(f"{worker_class}: plain Gunicorn, app port")),
        ]
        probers = [
            threading.Thread(target=prober, args=(port, paths, into, count, stop), daemon=True)
            for port, paths, into in targets
        ]
        for thread in probers:
            thread.start()
        for thread in probers:
            thread.join(max(0.0, deadline - time.monotonic()) + TIMEOUT + 5)
        stop.set()
        for thread in loaders:
            thread.join(SLOW_MS / 1000 + 5)
        return [into for _, _, into in targets]
    finally:
        processes.cleanup()


def main() -> None:
    """Measure each worker class asked for, print one table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=200, help="probes per target and worker class")
    parser.add_argument("--worker-class", nargs="+", default=["sync", "gthread"], choices=sorted(SHAPES))
    args = parser.parse_args()
    before = os.getloadavg()
    rows = []
    for worker_class in args.worker_class:
        try:
            rows.extend(probes.row() for probes in run_class(worker_class, args.probes))
        except RuntimeError as exc:  # a worker class that does not boot: say so, measure the others
            print(f"{worker_class}: not measured: {str(exc).splitlines()[0]}")
    after = os.getloadavg()
    print(f"load average before {before[0]:.2f}, after {after[0]:.2f} ({os.cpu_count()} CPUs)")
    print("\n".join(markdown_table(["target", "probes", "p50 ms", "p99 ms", "max ms", "failures"], rows)))


if __name__ == "__main__":
    main()
