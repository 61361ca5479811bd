"""Shutdown timings of ``gunicorn -c graceful/conf.py``, measured from outside with real signals.

    python bench/shutdown.py [--trials 5] [--worker-class gthread [sync gevent]] [--only overhead ...]

Three figures (targets in the README's benchmark table), each the median and the spread of
``--trials`` runs, every one a fresh Gunicorn serving tests/live/load_app.py:

overhead, in two cases
    The overhead is the master's actual exit (to the millisecond, via pidfd)
    minus what the shutdown must take: exit - (delay + in-flight remainder
    + longest cleanup). Target <= 50 ms in both cases. A delay of 1 s and
    one cleanup task of 0.5 s; the trials of each case alternate with plain
    Gunicorn's in the same run (same machine, same minutes).
    nothing in flight: SIGTERM to an idle server; expected exit: SIGTERM +
        delay + cleanup. Plain Gunicorn beside it: exit - SIGTERM.
    requests in flight: one request that outlives the delay by about 0.5 s;
        expected exit: the later of (SIGTERM + delay) and the request's
        end, plus the cleanup. Plain Gunicorn beside it: the same request
        in flight at SIGTERM, exit - the request's end (it has no delay and
        no cleanup).
cleanup
    Ten cleanup tasks of 1 s each: the cleanup phase of one
    ``graceful.Lifecycle`` in this process (target <= 1.1 s), and, for
    context, SIGTERM to exit of a Gunicorn with no delay running them.
second signal
    SIGTERM, then SIGTERM again 0.5 s into a 5 s delay: time from the
    second signal to the master's exit (status 1). Target <= 100 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import requests

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from tests.conftest import Processes
from tests.e2e_harness import WORKERS, Gunicorn, Record, fetch, free_port

#: Seconds after the first worker answers before a trial's SIGTERM: every worker has booted by then. A
#: worker still booting has the master's signal handlers, and plain Gunicorn 24+ loses its TERM (the
#: master then waits its graceful_timeout); graceful notes it, but the two must be measured alike.
BOOT_SETTLE = 1.0


def _instance(processes: Processes, worker_class: str, *, graceful: bool = True, **env: str) -> Gunicorn:
    instance = Gunicorn(processes, free_port(), worker_class, graceful=graceful, env=env, name="bench")
    instance.start()
    instance.wait_ready()
    time.sleep(BOOT_SETTLE)
    return instance


def _term_with_a_request_in_flight(instance: Gunicorn, after_term: float) -> tuple[float, float]:
    """SIGTERM while one request runs that ends ``after_term`` s later; (SIGTERM's time, the request's end).

    Raises with the log unless the master exits 0 and the request is served in full.
    """
    try:
        results: list[Record] = []
        lead = 0.2  # the request reaches a worker before the SIGTERM
        path = f"/slow?ms={int((lead + after_term) * 1000)}&bytes=4096"

        def request() -> None:
            with requests.Session() as session:
                session.trust_env = False
                results.append(fetch(session, instance.url, path, 4096))

        thread = threading.Thread(target=request, daemon=True)
        thread.start()
        time.sleep(lead)
        sigterm_at = instance.terminate()
        returncode = instance.wait_exit(timeout=after_term + 30)
        thread.join(15)
        if returncode != 0 or not results or not results[0].ok:
            raise RuntimeError(f"trial failed: exit {returncode}, {results}\n{instance.log()}")
        return sigterm_at, results[0].ended
    finally:
        instance.kill()


def overhead_once(processes: Processes, worker_class: str, delay: float = 1.0, cleanup: float = 0.5) -> float:
    """One trial, a request in flight: exit time minus (delay, in-flight remainder, cleanup), in seconds."""
    instance = _instance(
        processes, worker_class, GRACEFUL_SHUTDOWN_DELAY=f"{delay:g}", LOAD_APP_CLEANUP=f"1:{cleanup:g}"
    )
    sigterm_at, request_end = _term_with_a_request_in_flight(instance, delay + 0.5)
    assert instance.exited_at is not None
    return instance.exited_at - (max(sigterm_at + delay, request_end) + cleanup)


def plain_overhead_once(processes: Processes, worker_class: str, after_term: float = 1.5) -> float:
    """One trial of plain Gunicorn: exit time minus the end of the request in flight at SIGTERM, in seconds."""
    instance = _instance(processes, worker_class, graceful=False)
    sigterm_at, request_end = _term_with_a_request_in_flight(instance, after_term)
    assert instance.exited_at is not None
    return instance.exited_at - max(sigterm_at, request_end)


def _term_idle(instance: Gunicorn) -> float:
    """SIGTERM with nothing in flight; the seconds from it to the master's exit. Raises with the log unless exit 0."""
    try:
        sigterm_at = instance.terminate()
        returncode = instance.wait_exit(timeout=30)
        if returncode != 0:
            raise RuntimeError(f"trial failed: exit {returncode}\n{instance.log()}")
        assert instance.exited_at is not None
        return instance.exited_at - sigterm_at
    finally:
        instance.kill()


def idle_overhead_once(processes: Processes, worker_class: str, delay: float = 1.0, cleanup: float = 0.5) -> float:
    """One trial, nothing in flight: exit time minus (delay, cleanup), in seconds."""
    instance = _instance(
        processes, worker_class, GRACEFUL_SHUTDOWN_DELAY=f"{delay:g}", LOAD_APP_CLEANUP=f"1:{cleanup:g}"
    )
    return _term_idle(instance) - (delay + cleanup)


def plain_idle_overhead_once(processes: Processes, worker_class: str) -> float:
    """One trial of plain Gunicorn, nothing in flight: SIGTERM to exit, in seconds."""
    return _term_idle(_instance(processes, worker_class, graceful=False))


def overhead_beside_plain(processes: Processes, worker_class: str, count: int) -> tuple[list[float], list[float]]:
    """``count`` trials each of graceful's overhead and plain Gunicorn's, a request in flight, alternating."""
    graceful: list[float] = []
    plain: list[float] = []
    for _ in range(count):
        graceful.append(overhead_once(processes, worker_class))
        plain.append(plain_overhead_once(processes, worker_class))
    return graceful, plain


def idle_overhead_beside_plain(processes: Processes, worker_class: str, count: int) -> tuple[list[float], list[float]]:
    """``count`` trials each of graceful's overhead and plain Gunicorn's, nothing in flight, alternating."""
    graceful: list[float] = []
    plain: list[float] = []
    for _ in range(count):
        graceful.append(idle_overhead_once(processes, worker_class))
        plain.append(plain_idle_overhead_once(processes, worker_class))
    return graceful, plain


def cleanup_in_process(tasks: int = 10, seconds: float = 1.0) -> float:
    """Seconds one Lifecycle's cleanup phase takes for ``tasks`` tasks of ``seconds`` each."""
    lifecycle = Lifecycle(Config(shutdown_delay=0, drain_timeout=1, hook_timeout=seconds + 1, grace_period=30))
    for index in range(tasks):
        lifecycle.cleanup_task(f"sleep-{index}")(lambda: time.sleep(seconds))
    started = time.monotonic()
    report = lifecycle.drain_and_clean_up()
    elapsed = time.monotonic() - started
    if not report.ok:
        raise RuntimeError(f"cleanup failed: {report.summary()}")
    return elapsed


def cleanup_under_gunicorn(processes: Processes, worker_class: str, tasks: int = 10, seconds: float = 1.0) -> float:
    """SIGTERM to exit of a Gunicorn with no delay whose workers run ``tasks`` cleanup tasks."""
    return _term_idle(
        _instance(processes, worker_class, GRACEFUL_SHUTDOWN_DELAY="0", LOAD_APP_CLEANUP=f"{tasks}:{seconds:g}")
    )


def second_signal_once(processes: Processes, worker_class: str) -> float:
    """Seconds from a second SIGTERM (0.5 s into a 5 s delay) to the master's exit."""
    instance = _instance(processes, worker_class, GRACEFUL_SHUTDOWN_DELAY="5")
    try:
        instance.terminate()
        time.sleep(0.5)
        second_at = instance.terminate()
        returncode = instance.wait_exit(timeout=30)
        if returncode != 1:
            raise RuntimeError(f"second signal: exit {returncode}, expected 1\n{instance.log()}")
        assert instance.exited_at is not None
        return instance.exited_at - second_at
    finally:
        instance.kill()


def trials(measure: Callable[[], float], count: int) -> list[float]:
    """``count`` measurements, in order."""
    return [measure() for _ in range(count)]


#: The figures, in the order they are measured: ``--only`` picks some.
FIGURES = ("overhead", "cleanup", "second")
#: The overhead's two cases, each beside plain Gunicorn's figure from the same run.
IDLE, IDLE_PLAIN = "overhead, nothing in flight", "overhead, nothing in flight, plain gunicorn"
BUSY, BUSY_PLAIN = "overhead, requests in flight", "overhead, requests in flight, plain gunicorn"


def measure_all(
    processes: Processes, worker_class: str, count: int, only: tuple[str, ...] = FIGURES
) -> dict[str, list[float]]:
    """The figures of this module named in ``only``: name -> seconds per trial."""
    figures: dict[str, list[float]] = {}
    if "overhead" in only:
        figures[IDLE], figures[IDLE_PLAIN] = idle_overhead_beside_plain(processes, worker_class, count)
        figures[BUSY], figures[BUSY_PLAIN] = overhead_beside_plain(processes, worker_class, count)
    if "cleanup" in only:
        figures["cleanup in process"] = trials(cleanup_in_process, count)
        under = trials(lambda: cleanup_under_gunicorn(processes, worker_class), max(1, count // 2))
        figures["cleanup under gunicorn"] = under
    if "second" in only:
        figures["second signal"] = trials(lambda: second_signal_once(processes, worker_class), count)
    return figures


def describe(values: list[float]) -> str:
    """``median X ms, min A, max B (n=N)``."""
    low, high = min(values) * 1000, max(values) * 1000
    return f"median {statistics.median(values) * 1000:7.1f} ms   min {low:7.1f}   max {high:7.1f}   (n={len(values)})"


def main(argv: list[str] | None = None) -> None:
    """Measure and print one line per figure, per worker class."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=5, help="trials per figure (median and worst are shown)")
    parser.add_argument(
        "--worker-class", nargs="+", choices=("sync", "gthread", "gevent"), default=["gthread"], dest="worker_classes"
    )
    parser.add_argument("--only", nargs="+", choices=FIGURES, default=FIGURES, help="measure only these figures")
    args = parser.parse_args(argv)
    print("overhead = exit - (delay + in-flight remainder + longest cleanup); plain gunicorn's: exit - SIGTERM")
    print("(nothing in flight) or exit - the request's end (in flight); delay 1 s, one cleanup task of 0.5 s")
    for worker_class in args.worker_classes:
        processes = Processes()
        try:
            figures = measure_all(processes, worker_class, args.trials, tuple(args.only))
        finally:
            processes.cleanup()
        print(f"-- {worker_class} ({' '.join(WORKERS[worker_class])})")
        for name, values in figures.items():
            print(f"{name:<46} {describe(values)}")


if __name__ == "__main__":
    main()
