"""What the health port costs when nobody probes it: throughput and idle CPU with GRACEFUL_HEALTH_BIND on / off.

    python bench/health_idle_cost.py [--rounds 10] [--seconds 3] [--idle 20]

Two graceful Gunicorns, started side by side, ``gthread -w 1 --threads 8``
serving tests/live/load_app.py: one with the health port (its master thread,
its worker's runner publishing once a second), one without. Throughput: the
method of bench/gunicorn_throughput.py (wrk on ``/fast``, alternating rounds,
the servers on one CPU and wrk on the others); the figure is the median of
the per-round on/off ratios (target: >= 0.99), with the servers' CPU time per
request beside it. Idle: the CPU time master and worker used over ``--idle``
seconds with no traffic, on and off, in milliseconds per second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gunicorn_throughput import WORKER_ARGS, Result, cpu_seconds, pin_cpus, run_wrk

from tests.conftest import Processes
from tests.e2e_harness import Gunicorn, free_port


def main() -> None:
    """Measure both, print the runs' medians, the ratios and the idle CPU."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="wrk runs per server, alternating")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each wrk run")
    parser.add_argument("--connections", type=int, default=32, help="wrk's keep-alive connections")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measured")
    args = parser.parse_args()
    processes = Processes()
    servers = {
        "off": Gunicorn(processes, free_port(), "gthread", graceful=True, args=WORKER_ARGS, name="off"),
        "on": Gunicorn(
            processes,
            free_port(),
            "gthread",
            graceful=True,
            env={"GRACEFUL_HEALTH_BIND": f"127.0.0.1:{free_port()}"},
            args=WORKER_ARGS,
            name="on",
        ),
    }
    results = {name: Result(name) for name in servers}
    idle: dict[str, float] = {}
    before = os.getloadavg()
    pinned = pin_cpus()
    try:
        if pinned:
            os.sched_setaffinity(0, pinned[0])
        for server in servers.values():
            server.start()
        if pinned:
            os.sched_setaffinity(0, pinned[1])
        for server in servers.values():
            server.wait_ready()
        time.sleep(2.0)  # past start-up
        started = {name: cpu_seconds(server.pid) for name, server in servers.items()}
        began = time.monotonic()
        time.sleep(args.idle)
        elapsed = time.monotonic() - began
        for name, server in servers.items():
            idle[name] = (cpu_seconds(server.pid) - started[name]) / elapsed * 1000
        for server in servers.values():  # warm up: first connections
            run_wrk(server.port, 1, args.connections, 2)
        for index in range(args.rounds):
            for name in ["off", "on"] if index % 2 == 0 else ["on", "off"]:
                cpu_before = cpu_seconds(servers[name].pid)
                rate, requests, errors = run_wrk(servers[name].port, args.seconds, args.connections, 2)
                results[name].rates.append(rate)
                results[name].cpu_per_request.append((cpu_seconds(servers[name].pid) - cpu_before) / max(1, requests))
                results[name].errors += errors
    finally:
        processes.cleanup()
        if pinned:
            os.sched_setaffinity(0, pinned[0] | pinned[1])
    for result in results.values():
        print(
            f"health port {result.name:<3}: median {result.median:6.0f} req/s (rounds {min(result.rates):.0f}-"
            f"{max(result.rates):.0f}), {statistics.median(result.cpu_per_request) * 1e6:5.1f} us CPU/request,"
            f" errors {result.errors}; idle {idle[result.name]:.2f} ms CPU/s (master + worker)"
        )
    on, off = results["on"], results["off"]
    ratios = [a / b for a, b in zip(on.rates, off.rates, strict=True)]
    cpu = statistics.median(a / b for a, b in zip(on.cpu_per_request, off.cpu_per_request, strict=True))
    print(
        f"throughput on/off {statistics.median(ratios):.3f} (median of {len(ratios)} per-round ratios,"
        f" {min(ratios):.3f}-{max(ratios):.3f}; target >= 0.99); CPU/request on/off {cpu:.3f};"
        f" idle CPU on - off {idle['on'] - idle['off']:.2f} ms/s"
    )
    after = os.getloadavg()
    print(f"load average before {before[0]:.2f}, after {after[0]:.2f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
