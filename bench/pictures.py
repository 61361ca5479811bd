"""The README's two pictures, made from real runs: one shutdown under load, and a rolling restart behind HAProxy.

    python bench/pictures.py [--out docs] [--only shutdown|rolling]

``docs/shutdown-timeline.png``
    A Gunicorn (gthread, 2 workers x 8 threads, ``-c tests/live/gunicorn_conf.py``:
    graceful with a 0.3 s pre-shutdown hook, two 0.3 s cleanup tasks per worker,
    retry-after mode, a 3 s delay) under 24 keep-alive clients straight at it
    (tests/e2e_harness.py's load generator); SIGTERM to the master; the record
    it writes to ``GRACEFUL_REPORT_FILE`` drawn by ``graceful timeline``.
``docs/rolling-restart.png``
    tests/e2e_harness.py's rolling restart (two instances behind HAProxy, 24
    clients, SIGTERM to each in turn, its replacement started once it exited),
    once with plain Gunicorn and once with graceful: the requests that ended
    in each 100 ms, succeeded and failed, side by side.

Needs haproxy, matplotlib (``pip install 'graceful-wsgi[plot]'``) and about
two minutes. Traffic goes to 127.0.0.1 only; every process is killed by PID.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from graceful.timeline import draw, read_record
from tests.conftest import Processes
from tests.e2e_harness import LIVE, Gunicorn, LoadGenerator, Run, free_port, rolling_restart

ROOT = Path(__file__).resolve().parent.parent
#: Width (s) of one bar of the rolling-restart picture.
BIN = 0.1


def shutdown_record(processes: Processes, directory: Path) -> Path:
    """One graceful Gunicorn under load, SIGTERM; return the record it wrote."""
    report = directory / "shutdown.json"
    env = {
        "GRACEFUL_SHUTDOWN_DELAY": "3",
        "GRACEFUL_SEND_RETRY_AFTER": "true",
        "GRACEFUL_REPORT_FILE": str(report),
        "LOAD_APP_CLEANUP": "2:0.3",
    }
    instance = Gunicorn(
        processes,
        free_port(),
        "gthread",
        graceful=False,  # graceful comes with the config below, which adds a pre-shutdown hook
        env=env,
        args=("-c", str(LIVE / "gunicorn_conf.py")),
        name="picture",
    )
    instance.start()
    try:
        instance.wait_ready()
        load = LoadGenerator(instance.url, duration=40.0, pause_after_error=0.2).start()
        try:
            time.sleep(1.0)
            instance.terminate()
            status = instance.wait_exit(timeout=40)
        finally:
            records = load.stop()
    finally:
        instance.kill()
    if status != 0 or not report.exists():
        raise RuntimeError(f"the instance exited {status} without a record:\n{instance.log()}")
    print(f"shutdown under load: {len(records)} requests, record {report}")
    return report


def draw_rolling(runs: list[Run], output: Path) -> None:
    """Requests per 100 ms, succeeded vs failed, one panel per run, with each SIGTERM marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One time scale for both: a plain restart is quicker, and loses requests.
    figure, axes = plt.subplots(1, len(runs), figsize=(13, 4.2), sharex=True, sharey=True, layout="constrained")
    for axis, run in zip(axes, runs, strict=True):
        ok: collections.Counter[int] = collections.Counter()
        failed: collections.Counter[int] = collections.Counter()
        for record in run.records:
            bucket = int((record.ended - run.started_at) // BIN)
            (ok if record.ok else failed)[bucket] += 1
        last = max([*ok, *failed, 0]) + 1
        times = [i * BIN for i in range(last)]
        axis.bar(times, [ok[i] for i in range(last)], width=BIN, align="edge", color="#2e7d32", label="succeeded")
        axis.bar(
            times,
            [failed[i] for i in range(last)],
            width=BIN,
            align="edge",
            bottom=[ok[i] for i in range(last)],
            color="#c62828",
            label="failed",
        )
        for index, term in enumerate(run.terminations):
            axis.axvline(term.sigterm_at - run.started_at, color="#424242", linestyle="--", linewidth=0.9)
            axis.axvline(term.exited_at - run.started_at, color="#9e9e9e", linestyle=":", linewidth=0.9)
            axis.annotate(
                f"SIGTERM {term.name}",
                xy=(term.sigterm_at - run.started_at, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -10 - 10 * index),
                textcoords="offset points",
                fontsize=8,
            )
        lost = len(run.failures)
        axis.set_title(f"{run.mode} Gunicorn {run.worker_class}: {len(run.records)} requests, {lost} failed")
        axis.set_xlabel("seconds (dashed: SIGTERM, dotted: that instance exited)")
        axis.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(f"requests that ended per {BIN * 1000:.0f} ms")
    axes[0].legend(loc="lower left", fontsize=8)
    figure.suptitle("Rolling restart behind HAProxy (health checks on /readyz, no retries), 24 keep-alive clients")
    figure.savefig(output, dpi=80)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNGs go (default: docs/)")
    parser.add_argument("--only", choices=("shutdown", "rolling"), help="make one picture only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    processes = Processes()
    try:
        with tempfile.TemporaryDirectory(prefix="graceful-pictures-") as scratch:
            directory = Path(scratch)
            if args.only in (None, "shutdown"):
                report = shutdown_record(processes, directory)
                output = args.out / "shutdown-timeline.png"
                draw(read_record(str(report)), str(output))
                summary = json.loads(report.read_text())["requests"]
                print(f"wrote {output} ({output.stat().st_size // 1024} KB); requests: {summary}")
            if args.only in (None, "rolling"):
                runs = [rolling_restart(processes, directory, "gthread", graceful=g) for g in (False, True)]
                output = args.out / "rolling-restart.png"
                draw_rolling(runs, output)
                for run in runs:
                    print(
                        f"{run.mode}: {len(run.records)} requests, {len(run.failures)} failed: {dict(run.by_class())}"
                    )
                print(f"wrote {output} ({output.stat().st_size // 1024} KB)")
    finally:
        processes.cleanup()


if __name__ == "__main__":
    main()
