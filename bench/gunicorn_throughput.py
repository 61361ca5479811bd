"""Throughput under Gunicorn gthread: graceful vs plain Gunicorn, alternating runs, one machine, one run.

    python bench/gunicorn_throughput.py [--rounds 5] [--seconds 5] [--connections 32]

Starts two Gunicorn instances serving tests/live/load_app.py with the same
worker class as the zero-loss suite, one worker (``-k gthread -w 1 --threads 8``): one
plain, one with ``-c graceful/conf.py``. Then, round by round, loads each in
turn with ``wrk`` on ``GET /fast`` (256 bytes, keep-alive), alternating which
goes first (plain-graceful, graceful-plain, ...), so drift in the machine's
speed hits both alike; the ratio is the median of each round's
graceful/plain ratio (two runs seconds apart see the same machine). The servers run on one CPU and wrk on the others
(``sched_setaffinity``), so they do not take turns on the same core. Prints requests/s per run, the median of each and
the ratio (target: graceful/plain >= 0.97), and the servers' CPU time per
request (master and workers, from ``/proc``), which a busy machine disturbs
far less than requests/s. Without wrk (``apt-get install
wrk``) a Python keep-alive client is used instead; it is slower than the
servers, so its ratio says less.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.conftest import Processes
from tests.e2e_harness import Gunicorn, free_port

PATH = "/fast"
#: One worker process: with two, how wrk's connections happen to split between them
#: moves throughput by +-30% from run to run, far more than what is measured.
WORKER_ARGS = ("-w", "1")


@dataclass
class Result:
    """Every run of one server."""

    name: str
    rates: list[float] = field(default_factory=list)
    #: CPU seconds the server (master and workers) spent per request, per run.
    cpu_per_request: list[float] = field(default_factory=list)
    errors: int = 0

    @property
    def median(self) -> float:
        """Median requests/s."""
        return statistics.median(self.rates)


def cpu_seconds(master: int) -> float:
    """User + system CPU seconds used so far by ``master`` and its children (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid, ppid = int(entry), int(fields[1])
        if master in (pid, ppid):
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def run_wrk(port: int, seconds: float, connections: int, threads: int, path: str = PATH) -> tuple[float, int, int]:
    """Requests/s, requests and errors (non-2xx included) of one wrk run against 127.0.0.1:``port``."""
    out = subprocess.run(
        wrk_argv(port, seconds, connections, threads, path),
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=True,
    ).stdout
    return parse_wrk(out)


def wrk_argv(port: int, seconds: float, connections: int, threads: int, path: str = PATH) -> list[str]:
    """wrk's command line: keep-alive ``GET path`` on 127.0.0.1:``port`` for ``seconds``."""
    return ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", f"http://127.0.0.1:{port}{path}"]


def parse_wrk(out: str) -> tuple[float, int, int]:
    """Requests/s, requests and errors (non-2xx included) from wrk's output."""
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    total = re.search(r"(\d+) requests in", out)
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    requests = int(total.group(1)) if total else 0
    return float(match.group(1)), requests, errors + (int(non_2xx.group(1)) if non_2xx else 0)


def load_at_once(loads: dict[str, tuple[list[str], int]], seconds: float) -> dict[str, tuple[float, int, int, float]]:
    """Run one wrk per server at the same time: name -> (its wrk command line, the server's master pid).

    Returns name -> (requests/s, requests, errors, the server's CPU seconds
    per request over the run). Every wrk is gone when it returns.
    """
    before = {name: cpu_seconds(pid) for name, (_, pid) in loads.items()}
    running: dict[str, subprocess.Popen[str]] = {}
    try:
        for name, (argv, _) in loads.items():
            running[name] = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        outputs = {name: load.communicate(timeout=seconds + 30)[0] for name, load in running.items()}
    finally:
        for load in running.values():  # still running only if a wait above failed
            load.kill()
            load.wait(10)
    results = {}
    for name, (_, pid) in loads.items():
        rate, requests, errors = parse_wrk(outputs[name])
        results[name] = (rate, requests, errors, (cpu_seconds(pid) - before[name]) / max(1, requests))
    return results


def run_python(port: int, seconds: float, connections: int) -> tuple[float, int, int]:
    """Requests/s, requests and errors of ``connections`` keep-alive http.client threads (wrk's stand-in)."""
    counts = [0] * connections
    errors = [0] * connections
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        while time.monotonic() < deadline:
            try:
                conn.request("GET", PATH)
                response = conn.getresponse()
                response.read()
                counts[index] += response.status == 200
            except (OSError, http.client.HTTPException):
                errors[index] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.close()

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 10)
    return sum(counts) / (time.monotonic() - started), sum(counts), sum(errors)


def pin_cpus() -> tuple[set[int], set[int]] | None:
    """(server CPUs, load CPUs): the first CPU we may use for the servers, the rest for the load."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {cpus[0]}, set(cpus[1:])


def measure(
    processes: Processes, rounds: int, seconds: float, connections: int, threads: int = 2
) -> tuple[Result, Result, str]:
    """(plain, graceful, client name): each server loaded ``rounds`` times, alternating order."""
    client = "wrk" if shutil.which("wrk") else "python"
    servers = {
        name: Gunicorn(processes, free_port(), "gthread", graceful=name == "graceful", args=WORKER_ARGS, name=name)
        for name in ("plain", "graceful")
    }
    results = {name: Result(name) for name in servers}
    pinned = pin_cpus()
    try:
        if pinned:  # servers on one CPU, the load on the others (children inherit affinity)
            os.sched_setaffinity(0, pinned[0])
        for server in servers.values():
            server.start()
        if pinned:
            os.sched_setaffinity(0, pinned[1])
        for server in servers.values():
            server.wait_ready()

        def load(name: str, duration: float) -> tuple[float, int, int]:
            port = servers[name].port
            if client == "wrk":
                return run_wrk(port, duration, connections, threads)
            return run_python(port, duration, connections)

        for name in servers:  # warm up: imports, first connections
            load(name, 1)
        for index in range(rounds):
            order = ["plain", "graceful"] if index % 2 == 0 else ["graceful", "plain"]
            for name in order:
                cpu_before = cpu_seconds(servers[name].pid)
                rate, requests, errors = load(name, seconds)
                cpu = cpu_seconds(servers[name].pid) - cpu_before
                results[name].rates.append(rate)
                results[name].cpu_per_request.append(cpu / max(1, requests))
                results[name].errors += errors
    finally:
        for server in servers.values():
            server.kill()
        if pinned:
            os.sched_setaffinity(0, pinned[0] | pinned[1])
    return results["plain"], results["graceful"], client


def paired_ratio(plain: Result, graceful: Result) -> float:
    """Median over rounds of graceful/plain: each round's two runs were back to back."""
    return statistics.median(g / p for g, p in zip(graceful.rates, plain.rates, strict=True))


def cpu_ratio(plain: Result, graceful: Result) -> float:
    """Median over rounds of graceful/plain server CPU time per request (less noisy than req/s)."""
    return statistics.median(g / p for g, p in zip(graceful.cpu_per_request, plain.cpu_per_request, strict=True))


def main(argv: list[str] | None = None) -> None:
    """Measure and print each run, the medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10, help="runs per server, alternating")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections")
    args = parser.parse_args(argv)
    processes = Processes()
    try:
        plain, graceful, client = measure(processes, args.rounds, args.seconds, args.connections)
    finally:
        processes.cleanup()
    print(f"client {client}, {args.connections} connections, {args.rounds} x {args.seconds:g} s per server")
    for result in (plain, graceful):
        runs = " ".join(f"{rate:6.0f}" for rate in result.rates)
        cpu = statistics.median(result.cpu_per_request) * 1e6
        print(
            f"{result.name:<9} median {result.median:6.0f} req/s, {cpu:5.0f} us CPU/request"
            f"   runs {runs}   errors {result.errors}"
        )
    print(f"ratio graceful/plain {paired_ratio(plain, graceful):.3f} (median of per-round ratios; target >= 0.97)")
    print(f"server CPU per request, graceful/plain {cpu_ratio(plain, graceful):.3f}")


if __name__ == "__main__":
    main()
