"""Throughput on one Uvicorn process: graceful vs plain Uvicorn, a Starlette hello world, one run.

    python bench/uvicorn_throughput.py [--rounds 12] [--seconds 3] [--connections 32]
        [--graceful auto|serve|middleware] [--control]

Starts two servers of tests/live/asgi_load_app.py (a Starlette app; ``GET /``
answers ``Hello, world!``), each one Uvicorn process without an access log:

* plain: ``uvicorn asgi_load_app:app``;
* graceful: ``graceful serve asgi_load_app:app`` (``--graceful serve``: graceful's
  signal handling and timeline on Uvicorn), or plain Uvicorn serving the same app
  in ``GracefulASGIMiddleware`` (``--graceful middleware``: ``uvicorn --factory
  asgi_load_app:with_graceful``, the request side alone). ``auto`` (the default)
  takes ``serve`` when this graceful serves ASGI apps (it has ``graceful.uvicorn``),
  else ``middleware``; the output says which ran.

Each round starts a fresh pair, both pinned to one CPU (``taskset``), and loads
both at the same time with ``wrk`` (keep-alive), one per server, on another
CPU, as bench/asgi_workers_throughput.py does (its docstring says why: loaded
in turn, two plain servers measured 1.024 on this machine). The ratio is the
median of each round's graceful/plain ratio. Prints requests/s per round, the
median of each, the ratio (target: graceful/plain >= 0.97) and the server's CPU
time per request (``/proc``). ``--control``: both servers plain (the method's
own error). Needs ``wrk`` and ``taskset`` (``apt-get install wrk``; taskset is
util-linux's) and two CPUs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gunicorn_throughput import Result, cpu_ratio, load_at_once, paired_ratio, parse_wrk

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


def wrk_argv(port: int, seconds: float, connections: int, cpu: int) -> list[str]:
    """One wrk run (one thread, on CPU ``cpu``) against 127.0.0.1:``port``."""
    argv = ["taskset", "-c", str(cpu), "wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s"]
    return [*argv, f"http://127.0.0.1:{port}{PATH}"]


def run_wrk(port: int, seconds: float, connections: int, cpu: int) -> tuple[float, int, int]:
    """Requests/s, requests and errors of one wrk run (one thread, on CPU ``cpu``) against 127.0.0.1:``port``."""
    argv = wrk_argv(port, seconds, connections, cpu)
    return parse_wrk(subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=True).stdout)


def cpus() -> tuple[int, int]:
    """(the servers' CPU, wrk's CPU): the first two this process may use."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        raise SystemExit("bench/uvicorn_throughput.py needs two CPUs (servers on one, wrk on another)")
    return usable[0], usable[1]


def measure(
    processes: Processes, rounds: int, seconds: float, connections: int, kind: str, control: bool = False
) -> tuple[Result, Result]:
    """(plain, graceful): ``rounds`` rounds, each a fresh pair loaded at the same time (``control``: both plain)."""
    server_cpu, load_cpu = cpus()
    results = {name: Result(name) for name in ("plain", "graceful")}
    for index in range(rounds):
        order = ["plain", "graceful"] if index % 2 == 0 else ["graceful", "plain"]
        servers = {
            name: PinnedUvicorn(
                processes,
                free_port(),
                graceful=name == "graceful" and not control,
                kind=kind,
                cpu=server_cpu,
                name=name,
            )
            for name in order
        }
        try:
            for server in servers.values():
                server.start()
            for server in servers.values():
                server.wait_ready()
            for server in servers.values():  # warm up: first connections, lazy imports
                run_wrk(server.port, 1, connections, load_cpu)
            loads = {
                name: (wrk_argv(server.port, seconds, connections, load_cpu), server.pid)
                for name, server in servers.items()
            }
            for name, (rate, _, errors, cpu) in load_at_once(loads, seconds).items():
                results[name].rates.append(rate)
                results[name].cpu_per_request.append(cpu)
                results[name].errors += errors
        finally:
            for server in servers.values():
                server.kill()
    return results["plain"], results["graceful"]


def main(argv: list[str] | None = None) -> None:
    """Measure and print each run, the medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=12, help="rounds, each with a fresh pair of servers")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each round's load")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections")
    parser.add_argument(
        "--graceful",
        choices=("auto", "serve", "middleware"),
        default="auto",
        help="the graceful server: graceful serve, or plain Uvicorn with the middleware (auto: serve when it can)",
    )
    parser.add_argument("--control", action="store_true", help="A/A: both servers plain (the method's own error)")
    args = parser.parse_args(argv)
    for tool, package in (("wrk", "wrk"), ("taskset", "util-linux")):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: apt-get install {package}")
    kind = args.graceful if args.graceful != "auto" else ("serve" if serves_asgi() else "middleware")
    processes = Processes()
    try:
        plain, graceful = measure(processes, args.rounds, args.seconds, args.connections, kind, args.control)
    finally:
        processes.cleanup()
    print(f"GET {PATH} (Starlette hello world), wrk -t1 -c{args.connections}, {args.rounds} x {args.seconds:g} s")
    print(f"plain: uvicorn asgi_load_app:app; graceful: {'CONTROL, plain too' if args.control else KINDS[kind]}")
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
