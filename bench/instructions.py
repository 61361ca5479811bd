"""Instructions per request that GracefulMiddleware adds, counted by callgrind: steady on a busy machine.

    python bench/instructions.py [--count 2000]

Timings on a shared 2-core machine move with whatever else runs; instruction
counts do not (the same binary, inputs and environment give the same count).
This runs, under ``valgrind --tool=callgrind``, one process per case that
serves ``--count`` requests as a server would (fresh environ, call, iterate,
``close()``) and one that serves none; the difference over ``count`` is the
instructions per request. Cases: a plain WSGI function bare and wrapped in
``GracefulMiddleware``, a Flask hello world without and with ``Graceful``;
with ``--metrics``, also both wrapped with metrics on (``metrics_on_app_port``
and a ``GracefulCollector`` registered in a registry: what metrics add to a
request, against 50 ns), and the plain app during the shutdown delay (the
checked path, which counts each request).

Instructions are not time (in Flask's company a Python frame costs more than
its instructions say: ``bench/middleware.py`` measures time), but the same
code path gives the same count, so comparing two trees (``--tree``) shows
whether a change added work per request. Needs valgrind (``apt-get install
valgrind``); Linux only.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

CASES = ("plain-bare", "plain-wrapped", "flask-bare", "flask-wrapped")
METRICS_CASES = ("plain-metrics", "flask-metrics", "plain-delay")
_TOTAL = re.compile(r"^summary:\s+(\d+)", re.MULTILINE)


def plain_app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The smallest useful WSGI app."""
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


def serve(case: str, count: int) -> None:
    """In the measured process: build the case's app, then serve ``count`` requests."""
    # Public names only, so that trees of other layouts can be compared.
    from graceful import Config, GracefulMiddleware, Lifecycle

    if case.endswith("metrics"):  # trees with graceful.metrics only
        from prometheus_client import CollectorRegistry

        from graceful.metrics import GracefulCollector

        lifecycle = Lifecycle(Config(metrics_on_app_port=True))
        CollectorRegistry().register(GracefulCollector(lifecycle))
    elif case.endswith("delay"):
        lifecycle = Lifecycle(Config(shutdown_delay=3600, grace_period=7200))
        lifecycle.serves_requests = False  # no sampler thread in the count
        lifecycle.initiate_shutdown()
    else:
        lifecycle = Lifecycle(Config())
    if case.startswith("plain"):
        app = GracefulMiddleware(plain_app, lifecycle) if not case.endswith("bare") else plain_app
    else:
        from flask import Flask

        flask = Flask("bench")
        flask.add_url_rule("/", "hello", lambda: "hello")
        if not case.endswith("bare"):
            from graceful.flask import Graceful

            Graceful(flask, lifecycle=lifecycle)
        app = flask  # type: ignore[assignment]
    base = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": None,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> None:
        return None

    # Two warm-up requests: first-response lookups are not what a request costs.
    for _ in range(2 + count):
        result = app(dict(base), start_response)  # type: ignore[arg-type]
        for _chunk in result:
            pass
        close = getattr(result, "close", None)
        if close is not None:
            close()


def count_instructions(tree: Path, case: str, count: int) -> int:
    """Total instructions of one measured process (callgrind's summary)."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}/cg.out",
                sys.executable,
                __file__,
                "--serve",
                case,
                "--count",
                str(count),
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=1800,
        )
        match = _TOTAL.search(Path(out, "cg.out").read_text())
        if match is None:
            raise RuntimeError("callgrind wrote no summary")
        return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="requests per measured process")
    parser.add_argument("--tree", action="append", type=Path, help="a checkout to measure (repeat to compare)")
    parser.add_argument("--plain-only", action="store_true", help="only the plain WSGI app (quick)")
    parser.add_argument("--metrics", action="store_true", help="also metrics on, and the shutdown delay")
    parser.add_argument("--serve", choices=CASES + METRICS_CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.count)
        return
    trees = args.tree or [Path(__file__).resolve().parent.parent]
    print(f"instructions per request (callgrind, {args.count} requests, difference from 0 requests)")
    for tree in trees:
        per: dict[str, float] = {}
        cases = CASES[:2] if args.plain_only else CASES
        if args.metrics:
            cases += METRICS_CASES[::2] if args.plain_only else METRICS_CASES
        for case in cases:
            per[case] = (count_instructions(tree, case, args.count) - count_instructions(tree, case, 0)) / args.count
        plain = per["plain-wrapped"] - per["plain-bare"]
        line = f"{tree}: plain {per['plain-bare']:.0f} -> {per['plain-wrapped']:.0f} (+{plain:.0f})"
        if not args.plain_only:
            flask = per["flask-wrapped"] / per["flask-bare"]
            line += f"; flask {per['flask-bare']:.0f} -> {per['flask-wrapped']:.0f} (x{flask:.4f})"
        if args.metrics:
            line += f"; metrics on: plain {per['plain-metrics'] - per['plain-wrapped']:+.0f}"
            if "flask-metrics" in per:
                line += f", flask {per['flask-metrics'] - per['flask-wrapped']:+.0f}"
            line += f"; in the delay: plain {per['plain-delay'] - per['plain-wrapped']:+.0f}"
        print(line)


if __name__ == "__main__":
    main()
