"""HTTP/2 throughput under Gunicorn 27: graceful vs plain Gunicorn, alternating runs, same machine, same run.

    python bench/http2_throughput.py [--worker gthread|gevent] [--rounds 5] [--seconds 5] [--clients 8] [--streams 4]

Starts two Gunicorn instances serving tests/live/load_app.py over cleartext
HTTP/2 with prior knowledge (``--http-protocols h2,h1 --http2-cleartext
both``), one worker each: one plain, one with ``-c graceful/conf.py``. Round
by round, loads each in turn with h2load (Debian's nghttp2-client) on ``GET
/fast`` (256 bytes), alternating which goes first, so drift in the machine's
speed hits both alike. Prints requests/s per run, the median of each, the
median of the rounds' graceful/plain ratios (target: >= 0.97), and the servers' CPU
time per request (master and worker, from ``/proc``), which a busy machine disturbs less. Needs Gunicorn
27+ with h2 (``pip install 'gunicorn[http2]'``) and h2load (``apt-get install
nghttp2-client``); without them it says so and exits 2.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gunicorn_throughput import cpu_seconds
from tests.conftest import Processes
from tests.e2e_harness import Gunicorn, free_port

PATH = "/fast"
HTTP2_ARGS = ("--http-protocols", "h2,h1", "--http2-cleartext", "both", "-w", "1")
#: h2load's summary line: "finished in 5.00s, 1234.56 req/s, ...".
_RATE = re.compile(r"finished in [\d.]+m?s, ([\d.]+) req/s")
_FAILED = re.compile(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored")


def run_h2load(port: int, seconds: float, clients: int, streams: int) -> tuple[float, int, int]:
    """Requests/s, requests done and failed-or-errored requests of one h2load run against 127.0.0.1:``port``."""
    argv = ["h2load", "-D", f"{seconds:g}", "-c", str(clients), "-m", str(streams), "-t", "1"]
    out = subprocess.run(
        [*argv, f"http://127.0.0.1:{port}{PATH}"], capture_output=True, text=True, timeout=seconds + 30, check=False
    ).stdout
    rate, failed = _RATE.search(out), _FAILED.search(out)
    if rate is None or failed is None:
        raise RuntimeError(f"h2load said:\n{out}")
    return float(rate.group(1)), int(failed.group(1)), int(failed.group(3)) + int(failed.group(4))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("gthread", "gevent"), default="gthread")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--streams", type=int, default=4)
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        print("http2_throughput: h2load not found (apt-get install nghttp2-client)", file=sys.stderr)
        return 2
    try:
        import gunicorn

        if int(gunicorn.__version__.split(".")[0]) < 27:
            raise ImportError(f"Gunicorn {gunicorn.__version__} serves no HTTP/2")
        import h2  # noqa: F401  # Gunicorn's HTTP/2 needs it
    except ImportError as exc:
        print(f"http2_throughput: {exc} (pip install 'gunicorn[http2]>=27')", file=sys.stderr)
        return 2
    processes = Processes()
    rates: dict[str, list[float]] = {"plain": [], "graceful": []}
    errors = {"plain": 0, "graceful": 0}
    cpu: dict[str, list[float]] = {"plain": [], "graceful": []}
    ratios: list[float] = []
    try:
        servers = {
            name: Gunicorn(processes, free_port(), args.worker, graceful=name == "graceful", args=HTTP2_ARGS, name=name)
            for name in rates
        }
        for server in servers.values():
            server.start()
            server.wait_ready()
        for round_ in range(args.rounds):
            order = ["plain", "graceful"] if round_ % 2 == 0 else ["graceful", "plain"]
            this: dict[str, float] = {}
            for name in order:
                before = cpu_seconds(servers[name].pid)
                rate, done, failed = run_h2load(servers[name].port, args.seconds, args.clients, args.streams)
                cpu[name].append((cpu_seconds(servers[name].pid) - before) / max(done, 1) * 1e6)
                this[name] = rate
                rates[name].append(rate)
                errors[name] += failed
                used = f"{cpu[name][-1]:6.1f} us CPU/request"
                print(f"round {round_ + 1} {name:8} {rate:10.1f} req/s  {used}  failed {failed}")
                time.sleep(0.5)
            ratios.append(this["graceful"] / this["plain"])
    finally:
        processes.cleanup()
    plain, graceful = statistics.median(rates["plain"]), statistics.median(rates["graceful"])
    ratio = statistics.median(ratios)
    load = f"h2load -c {args.clients} -m {args.streams}, {args.rounds} x {args.seconds:g} s each"
    print(f"\nHTTP/2 {args.worker}, {load}")
    print(f"plain    median {plain:10.1f} req/s  failed {errors['plain']}")
    print(f"graceful median {graceful:10.1f} req/s  failed {errors['graceful']}")
    print(f"graceful/plain (median of the rounds' ratios) {ratio:.3f}  (target >= 0.97)")
    plain_cpu, graceful_cpu = statistics.median(cpu["plain"]), statistics.median(cpu["graceful"])
    print(
        f"server CPU per request: plain {plain_cpu:.1f} us, graceful {graceful_cpu:.1f} us,"
        f" graceful/plain {graceful_cpu / plain_cpu:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
