"""Throughput of Gunicorn's ASGI workers: graceful vs plain Gunicorn, per worker class, one run.

    python bench/asgi_workers_throughput.py [--rounds 12] [--seconds 3] [--connections 32]
        [--classes asgi,...] [--control]

For each ASGI worker class (``-k asgi`` where Gunicorn has it,
``uvicorn_worker.UvicornWorker``, ``uvicorn.workers.UvicornWorker``), round
by round, starts two Gunicorn instances serving the Starlette app of the
ASGI workers' tests (tests/live/asgi_app.py, ``GET /``: ``hello``), one
worker each (``-w 1``): one plain, one with ``-c python:graceful.conf`` (the
app wrapped in GracefulASGIMiddleware by the worker). Both servers share one
CPU and are loaded at the same time, each by its own ``wrk`` (keep-alive) on
the other CPUs; then both are stopped. Prints requests/s per round, the
medians, the median of the rounds' ratios graceful/plain per class (target
>= 0.97) and the servers' CPU time per request. ``--control`` makes both
servers plain: the ratio it prints is the method's own error. Needs wrk
(``apt-get install -y wrk``).

Why not bench/gunicorn_throughput.py's method (one pair of servers for the
whole run, loaded in turn): this machine's speed drifts from second to
second, and two processes started alike can differ by a few percent for
their whole life. Loaded in turn, even with a fresh pair each round, two
plain servers (A/A) measured 1.024 here, as much as what is measured.
Loaded at once on one CPU, both see the same machine, and the kernel gives
each busy server half of it, so their rates' ratio is the inverse of their
costs' ratio; a fresh pair each round averages out the luck of one process.
Two plain servers measured 1.008 and 1.011 this way (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import httpx

from bench.gunicorn_throughput import (
    Result,
    cpu_ratio,
    load_at_once,
    paired_ratio,
    pin_cpus,
    run_wrk,
    wrk_argv,
)
from tests.e2e_harness import ROOT, _gunicorn_supports, clean_env, free_port

CLASSES = ("asgi", "uvicorn_worker.UvicornWorker", "uvicorn.workers.UvicornWorker")
APP = "tests.live.asgi_app:app"
PATH = "/"


def start(worker_class: str, graceful: bool) -> tuple[subprocess.Popen[bytes], int]:
    """One Gunicorn, one worker of ``worker_class``; returns once it answers ``GET /``."""
    port = free_port()
    env = clean_env({"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    config = ["-c", "python:graceful.conf"] if graceful else []
    argv = [str(Path(sys.executable).with_name("gunicorn")), *config, "-k", worker_class, "-w", "1"]
    argv += ["-b", f"127.0.0.1:{port}", "--log-level", "warning"]
    if _gunicorn_supports("control_socket_disable"):  # 25+: both instances' would share one path
        argv.append("--no-control-socket")
    argv.append(APP)
    # A session of its own: the master and its workers are killed together (a plain Uvicorn worker
    # whose master is gone serves on: it never looks at its parent).
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn -k {worker_class} exited with {proc.returncode} at start-up")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    raise RuntimeError(f"gunicorn -k {worker_class} did not answer within 30 s")


def measure(
    worker_class: str, rounds: int, seconds: float, connections: int, control: bool = False
) -> tuple[Result, Result]:
    """(plain, graceful) for one worker class: ``rounds`` rounds, each with a fresh pair of servers.

    In each round the two start (the order alternating), warm up, and are
    loaded at the same time for ``seconds`` (see the module's docstring for
    why). ``control``: the second server is plain too (an A/A run: the
    method's own error).
    """
    results = {name: Result(name) for name in ("plain", "graceful")}
    pinned = pin_cpus()
    for index in range(rounds):
        servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        try:
            if pinned:  # servers on one CPU, wrk on the others (children inherit affinity)
                os.sched_setaffinity(0, pinned[0])
            order = ("plain", "graceful") if index % 2 == 0 else ("graceful", "plain")
            for name in order:
                servers[name] = start(worker_class, name == "graceful" and not control)
            if pinned:
                os.sched_setaffinity(0, pinned[1])
            for name in order:  # warm up
                run_wrk(servers[name][1], 1, connections, 2, PATH)
            # Both at once, sharing the servers' one CPU: the machine's speed, which drifts from
            # second to second here, is the same for both, and the kernel gives each busy server
            # half the CPU, so the ratio of their rates is the inverse ratio of their costs.
            loads = {
                name: (wrk_argv(port, seconds, connections, 1, PATH), proc.pid)
                for name, (proc, port) in servers.items()
            }
            for name, (rate, _, errors, cpu) in load_at_once(loads, seconds).items():
                results[name].rates.append(rate)
                results[name].cpu_per_request.append(cpu)
                results[name].errors += errors
        finally:
            for proc, _ in servers.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            if pinned:
                os.sched_setaffinity(0, pinned[0] | pinned[1])
    return results["plain"], results["graceful"]


def available(worker_class: str) -> bool:
    """Whether this environment has the worker class (``-k asgi``: Gunicorn 25.1+; the others: their package)."""
    if worker_class == "asgi":
        import gunicorn

        return tuple(int(part) for part in gunicorn.__version__.split(".")[:2]) >= (25, 1)
    module = worker_class.rsplit(".", 1)[0]
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    """Measure each class and print its runs, medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=12, help="rounds, each with a fresh pair of servers")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each round's load")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections")
    parser.add_argument("--classes", default=",".join(CLASSES), help="worker classes, comma-separated")
    parser.add_argument("--control", action="store_true", help="A/A: both servers plain (the method's own error)")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    print(
        f"wrk, {args.connections} connections, {args.rounds} rounds of {args.seconds:g} s per server,"
        f" a fresh pair of servers each round, one worker each{'; CONTROL: both plain' if args.control else ''}"
    )
    for worker_class in args.classes.split(","):
        if not available(worker_class):
            print(f"-k {worker_class}: not available here, skipped")
            continue
        plain, graceful = measure(worker_class, args.rounds, args.seconds, args.connections, args.control)
        print(
            f"-k {worker_class}: plain {plain.median:.0f} req/s {[round(r) for r in plain.rates]},"
            f" graceful {graceful.median:.0f} req/s {[round(r) for r in graceful.rates]};"
            f" graceful/plain {paired_ratio(plain, graceful):.3f} (target >= 0.97);"
            f" CPU per request {1e6 * min(plain.cpu_per_request):.0f} / {1e6 * min(graceful.cpu_per_request):.0f} us,"
            f" ratio {cpu_ratio(plain, graceful):.3f}; errors {plain.errors} / {graceful.errors}"
        )


if __name__ == "__main__":
    main()
