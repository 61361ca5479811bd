"""Throughput on one Uvicorn process: graceful vs plain Uvicorn, a Starlette hello world, alternating runs, one run.

    python bench/uvicorn_throughput.py [--rounds 10] [--seconds 3] [--connections 32] [--graceful auto|serve|middleware]

Starts two servers of tests/live/asgi_load_app.py (a Starlette app; ``GET /``
answers ``Hello, world!``), each one Uvicorn process without an access log:

* plain: ``uvicorn asgi_load_app:app``;
* graceful: ``graceful serve asgi_load_app:app`` (``--graceful serve``: graceful's
  signal handling and timeline on Uvicorn), or plain Uvicorn serving the same app
  in ``GracefulASGIMiddleware`` (``--graceful middleware``: ``uvicorn --factory
  asgi_load_app:with_graceful``, the request side alone). ``auto`` (the default)
  takes ``serve`` when this graceful serves ASGI apps (it has ``graceful.uvicorn``),
  else ``middleware``; the output says which ran.

Then, round by round, loads each in turn with ``wrk`` (keep-alive), alternating
which goes first (plain-graceful, graceful-plain, ...), so drift in the
machine's speed hits both alike; the ratio is the median of each round's
graceful/plain ratio. Both servers are pinned to one CPU and wrk to another
(``taskset``), so they do not take turns on the same core. Prints requests/s per
run, the median of each, the ratio (target: graceful/plain >= 0.97) and the
server's CPU time per request (``/proc``), which a busy machine disturbs far less
than requests/s. Needs ``wrk`` and ``taskset`` (``apt-get install wrk``; taskset
is util-linux's) and two CPUs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gunicorn_throughput import Result, cpu_ratio, cpu_seconds, paired_ratio

from tests.asgi_harness import GRACEFUL_SERVE, Uvicorn
from tests.conftest import Processes
from tests.e2e_harness import Starter, free_port

PATH = "/"
#: What the graceful server is, by ``--graceful`` choice (printed with the figures).
KINDS = {
    "serve": "graceful serve (Uvicorn, graceful's signal handling and timeline)",
    "middleware": "plain Uvicorn, the app in GracefulASGIMiddleware (uvicorn --factory asgi_load_app:with_graceful)",
}


def serves_asgi() -> bool:
    """Whether this graceful's ``graceful serve`` serves ASGI apps (on Uvicorn)."""
    return importlib.util.find_spec("graceful.uvicorn") is not None


class PinnedUvicorn(Uvicorn):
    """A :class:`~tests.asgi_harness.Uvicorn` on CPU ``cpu`` (``taskset``, which execs: the pid is the server's).

    ``kind`` for the graceful one: ``serve`` (graceful serve) or ``middleware``
    (plain Uvicorn, the app wrapped in GracefulASGIMiddleware by a factory).
    """

    def __init__(self, starter: Starter, port: int, *, graceful: bool, kind: str, cpu: int, name: str) -> None:
        super().__init__(starter, port, graceful=graceful, name=name)
        self.kind = kind
        self.cpu = cpu

    def argv(self) -> list[str]:
        """``taskset -c CPU`` and the server's command line."""
        pin = ["taskset", "-c", str(self.cpu)]
        if self.graceful and self.kind == "serve":
            return [*pin, *GRACEFUL_SERVE, "-b", f"127.0.0.1:{self.port}", "--no-access-log", self.app]
        argv = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(self.port), "--no-access-log"]
        if self.graceful:  # the middleware alone
            return [*pin, *argv, "--factory", "asgi_load_app:with_graceful"]
        return [*pin, *argv, self.app]


def run_wrk(port: int, seconds: float, connections: int, cpu: int) -> tuple[float, int, int]:
    """Requests/s, requests and errors of one wrk run (one thread, on CPU ``cpu``) against 127.0.0.1:``port``."""
    argv = ["taskset", "-c", str(cpu), "wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s"]
    argv.append(f"http://127.0.0.1:{port}{PATH}")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if match is None:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    total = re.search(r"(\d+) requests in", out)
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    requests = int(total.group(1)) if total else 0
    return float(match.group(1)), requests, errors + (int(non_2xx.group(1)) if non_2xx else 0)


def cpus() -> tuple[int, int]:
    """(the servers' CPU, wrk's CPU): the first two this process may use."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        raise SystemExit("bench/uvicorn_throughput.py needs two CPUs (servers on one, wrk on another)")
    return usable[0], usable[1]


def measure(processes: Processes, rounds: int, seconds: float, connections: int, kind: str) -> tuple[Result, Result]:
    """(plain, graceful): each server loaded ``rounds`` times with wrk, alternating which goes first."""
    server_cpu, load_cpu = cpus()
    servers = {
        name: PinnedUvicorn(processes, free_port(), graceful=name == "graceful", kind=kind, cpu=server_cpu, name=name)
        for name in ("plain", "graceful")
    }
    results = {name: Result(name) for name in servers}
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready()
        for server in servers.values():  # warm up: first connections, lazy imports
            run_wrk(server.port, 1, connections, load_cpu)
        for index in range(rounds):
            order = ["plain", "graceful"] if index % 2 == 0 else ["graceful", "plain"]
            for name in order:
                cpu_before = cpu_seconds(servers[name].pid)
                rate, requests, errors = run_wrk(servers[name].port, seconds, connections, load_cpu)
                cpu = cpu_seconds(servers[name].pid) - cpu_before
                results[name].rates.append(rate)
                results[name].cpu_per_request.append(cpu / max(1, requests))
                results[name].errors += errors
    finally:
        for server in servers.values():
            server.kill()
    return results["plain"], results["graceful"]


def main(argv: list[str] | None = None) -> None:
    """Measure and print each run, the medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10, help="runs per server, alternating")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections")
    parser.add_argument(
        "--graceful",
        choices=("auto", "serve", "middleware"),
        default="auto",
        help="the graceful server: graceful serve, or plain Uvicorn with the middleware (auto: serve when it can)",
    )
    args = parser.parse_args(argv)
    for tool, package in (("wrk", "wrk"), ("taskset", "util-linux")):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: apt-get install {package}")
    kind = args.graceful if args.graceful != "auto" else ("serve" if serves_asgi() else "middleware")
    processes = Processes()
    try:
        plain, graceful = measure(processes, args.rounds, args.seconds, args.connections, kind)
    finally:
        processes.cleanup()
    print(f"GET {PATH} (Starlette hello world), wrk -t1 -c{args.connections}, {args.rounds} x {args.seconds:g} s")
    print(f"plain: uvicorn asgi_load_app:app; graceful: {KINDS[kind]}")
    for result in (plain, graceful):
        runs = " ".join(f"{rate:6.0f}" for rate in result.rates)
        cpu = statistics.median(result.cpu_per_request) * 1e6
        print(
            f"{result.name:<9} median {result.median:6.0f} req/s, {cpu:5.0f} us CPU/request"
            f"   runs {runs}   errors {result.errors}"
        )
    ratios = [g / p for g, p in zip(graceful.rates, plain.rates, strict=True)]
    print(
        f"ratio graceful/plain {paired_ratio(plain, graceful):.3f} (median of per-round ratios"
        f" {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.97)"
    )
    print(f"server CPU per request, graceful/plain {cpu_ratio(plain, graceful):.3f}")


if __name__ == "__main__":
    main()
