"""Every benchmark figure of the README's table, measured side by side in one run, printed as one table.

    python bench/run.py [--quick]

Runs, in this order, on this machine:

1. bench/middleware.py: GracefulMiddleware's cost per request, bare vs wrapped
   (a plain WSGI function and a Flask hello-world app);
2. bench/gunicorn_throughput.py: Gunicorn gthread, graceful vs plain, wrk,
   alternating runs;
3. bench/shutdown.py: shutdown overhead, 10 cleanup tasks of 1 s, second signal.

Then prints a Markdown table (figure, measured, target, met) headed by the
machine it ran on, ready to paste into the README. Takes about two minutes
(``--quick``: under one). Not part of the tests: timings on shared CI
machines are too noisy to assert.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gunicorn_throughput
import middleware
import shutdown

from tests.conftest import Processes
from tests.e2e_harness import markdown_table

Row = tuple[str, str, str, str]


def machine() -> str:
    """One line: CPU, cores, kernel, Python, Gunicorn, wrk, load average."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as info:
            names = re.findall(r"^model name\s*:\s*(.+)$", info.read(), re.MULTILINE)
        if names:
            cpu = names[0]
    import gunicorn

    wrk = "none"
    if shutil.which("wrk"):
        run = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10)
        wrk = (run.stdout or run.stderr).split(" [")[0].replace("wrk ", "")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, CPython {platform.python_version()},"
        f" Gunicorn {gunicorn.__version__}, wrk {wrk}; load average at start {load}"
    )


def met(ok: bool) -> str:
    """The table's last column."""
    return "yes" if ok else "**no**"


def middleware_rows(rounds: int, number: int) -> list[Row]:
    """bench/middleware.py's two comparisons, as rows."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        middleware.compare_both(rounds, number)
    # Lines are keyed by their first two words: "plain median", "flask paired", ...
    lines = {" ".join(line.split()[:2]): line for line in out.getvalue().splitlines() if line.strip()}

    def field(line: str, key: str) -> float:
        match = re.search(rf"{key}\s+([-+]?[\d.]+)", lines.get(line, ""))
        if match is None:
            raise RuntimeError(f"unexpected bench/middleware.py output for {line!r}: {out.getvalue()!r}")
        return float(match.group(1))

    added = field("plain median", "added")
    ratio = field("flask paired", "ratio")
    return [
        (
            "Middleware: time added per request, plain WSGI app (median round)",
            f"{added:+.0f} ns ({field('plain median', 'bare'):.0f} -> {field('plain median', 'wrapped'):.0f} ns)",
            "<= 1000 ns",
            met(added <= 1000),
        ),
        (
            "Middleware: Flask hello world, with / without Graceful (paired rounds)",
            f"{ratio:.3f} (best rounds {field('flask best', 'ratio'):.3f})",
            "<= 1.03",
            met(ratio <= 1.03),
        ),
    ]


def throughput_rows(processes: Processes, rounds: int, seconds: float) -> list[Row]:
    """bench/gunicorn_throughput.py, as a row."""
    plain, graceful, client = gunicorn_throughput.measure(processes, rounds, seconds, connections=32)
    ratios = sorted(g / p for g, p in zip(graceful.rates, plain.rates, strict=True))
    ratio = gunicorn_throughput.paired_ratio(plain, graceful)
    cpu = gunicorn_throughput.cpu_ratio(plain, graceful)
    errors = plain.errors + graceful.errors
    return [
        (
            f"Throughput, Gunicorn gthread, {client}: graceful / plain",
            f"{ratio:.3f} (rounds {ratios[0]:.2f}-{ratios[-1]:.2f}; plain {plain.median:.0f},"
            f" graceful {graceful.median:.0f} req/s; {rounds} x {seconds:g} s each"
            + (f"; {errors} errors" if errors else "")
            + ")",
            ">= 0.97",
            met(ratio >= 0.97 and not errors),
        ),
        (
            "Server CPU time per request, same runs: graceful / plain",
            f"{cpu:.3f} (plain {statistics.median(plain.cpu_per_request) * 1e6:.0f},"
            f" graceful {statistics.median(graceful.cpu_per_request) * 1e6:.0f} us)",
            "<= 1.03",
            met(cpu <= 1.03),
        ),
    ]


def shutdown_rows(processes: Processes, trials: int) -> list[Row]:
    """bench/shutdown.py's figures, as rows."""
    figures = shutdown.measure_all(processes, "gthread", trials)

    def ms(name: str) -> tuple[str, float]:
        values = figures[name]
        worst = max(values)
        return f"median {statistics.median(values) * 1000:.0f} ms, worst {worst * 1000:.0f} ms (n={len(values)})", worst

    overhead_rows: list[Row] = []
    for case, plain_case, label in (
        (shutdown.IDLE, shutdown.IDLE_PLAIN, "nothing in flight"),
        (shutdown.BUSY, shutdown.BUSY_PLAIN, "requests in flight"),
    ):
        overhead, overhead_worst = ms(case)
        plain = figures[plain_case]
        overhead += f"; plain Gunicorn, same run: median {statistics.median(plain) * 1000:.0f} ms"
        overhead_rows.append(
            (
                f"Shutdown overhead, {label}: exit - (delay + in-flight remainder + longest cleanup), gthread",
                overhead,
                "<= 50 ms",
                met(overhead_worst <= 0.05),
            )
        )
    second, second_worst = ms("second signal")
    cleanup = figures["cleanup in process"]
    under = figures["cleanup under gunicorn"]
    return [
        *overhead_rows,
        (
            "10 cleanup tasks of 1 s: cleanup phase",
            f"median {statistics.median(cleanup):.3f} s, worst {max(cleanup):.3f} s",
            "<= 1.1 s",
            met(max(cleanup) <= 1.1),
        ),
        (
            "10 cleanup tasks of 1 s under Gunicorn: SIGTERM to exit, no delay",
            f"median {statistics.median(under):.3f} s (n={len(under)})",
            "(context)",
            "-",
        ),
        ("Second SIGTERM to exit (status 1), gthread", second, "<= 100 ms", met(second_worst <= 0.1)),
    ]


def main(argv: list[str] | None = None) -> None:
    """Run every benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and trials (about a minute)")
    args = parser.parse_args(argv)
    header = machine()
    steps: list[tuple[str, Callable[[Processes], list[Row]]]] = [
        ("middleware", lambda _p: middleware_rows(3 if args.quick else 9, 50_000 if args.quick else 200_000)),
        ("throughput", lambda p: throughput_rows(p, 4 if args.quick else 10, 2.0 if args.quick else 3.0)),
        ("shutdown", lambda p: shutdown_rows(p, 2 if args.quick else 5)),
    ]
    rows: list[Row] = []
    processes = Processes()
    try:
        for name, step in steps:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            rows += step(processes)
    finally:
        processes.cleanup()
    print(f"Machine: {header}")
    print()
    for line in markdown_table(("Figure", "Measured", "Target", "Met"), rows):
        print(line)


if __name__ == "__main__":
    main()
