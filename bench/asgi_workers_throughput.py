"""Throughput of Gunicorn's ASGI workers: graceful vs plain Gunicorn, per worker class, alternating runs, one run.

    python bench/asgi_workers_throughput.py [--rounds 6] [--seconds 3] [--connections 32] [--classes asgi,...]

For each ASGI worker class (``-k asgi`` where Gunicorn has it,
``uvicorn_worker.UvicornWorker``, ``uvicorn.workers.UvicornWorker``) starts
two Gunicorn instances serving the Starlette app of the ASGI workers' tests
(tests/live/asgi_app.py, ``GET /``: ``hello``), one worker each
(``-w 1``): one plain, one with ``-c python:graceful.conf`` (the app wrapped in
GracefulASGIMiddleware by the worker). Then, round by round, loads each in
turn with ``wrk`` (keep-alive), alternating which goes first, as
bench/gunicorn_throughput.py does for gthread (its helpers: wrk's parsing,
CPU pinning, the paired ratio). Prints requests/s per run, the medians, the
ratio graceful/plain per class (target >= 0.97) and the servers' CPU time
per request. Needs wrk (``apt-get install -y wrk``).
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

from bench.gunicorn_throughput import Result, cpu_ratio, cpu_seconds, paired_ratio, pin_cpus, run_wrk
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


def measure(worker_class: str, rounds: int, seconds: float, connections: int) -> tuple[Result, Result]:
    """(plain, graceful) for one worker class: each loaded ``rounds`` times, alternating order."""
    results = {name: Result(name) for name in ("plain", "graceful")}
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    pinned = pin_cpus()
    try:
        if pinned:  # servers on one CPU, wrk on the others (children inherit affinity)
            os.sched_setaffinity(0, pinned[0])
        for name in results:
            servers[name] = start(worker_class, name == "graceful")
        if pinned:
            os.sched_setaffinity(0, pinned[1])
        for name in results:  # warm up
            run_wrk(servers[name][1], 1, connections, 2, PATH)
        for index in range(rounds):
            for name in ("plain", "graceful") if index % 2 == 0 else ("graceful", "plain"):
                proc, port = servers[name]
                before = cpu_seconds(proc.pid)
                rate, requests, errors = run_wrk(port, seconds, connections, 2, PATH)
                results[name].rates.append(rate)
                results[name].cpu_per_request.append((cpu_seconds(proc.pid) - before) / max(1, requests))
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
    parser.add_argument("--rounds", type=int, default=6, help="runs per server, alternating")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections")
    parser.add_argument("--classes", default=",".join(CLASSES), help="worker classes, comma-separated")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    print(f"wrk, {args.connections} connections, {args.rounds} x {args.seconds:g} s per server, one worker each")
    for worker_class in args.classes.split(","):
        if not available(worker_class):
            print(f"-k {worker_class}: not available here, skipped")
            continue
        plain, graceful = measure(worker_class, args.rounds, args.seconds, args.connections)
        print(
            f"-k {worker_class}: plain {plain.median:.0f} req/s {[round(r) for r in plain.rates]},"
            f" graceful {graceful.median:.0f} req/s {[round(r) for r in graceful.rates]};"
            f" graceful/plain {paired_ratio(plain, graceful):.3f} (target >= 0.97);"
            f" CPU per request {1e6 * min(plain.cpu_per_request):.0f} / {1e6 * min(graceful.cpu_per_request):.0f} us,"
            f" ratio {cpu_ratio(plain, graceful):.3f}; errors {plain.errors} / {graceful.errors}"
        )


if __name__ == "__main__":
    main()
