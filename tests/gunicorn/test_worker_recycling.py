"""Worker recycling under keep-alive load: max_requests, HUP, TTOU; graceful asserted, plain Gunicorn printed.

Each scenario runs graceful on whatever Gunicorn this environment has (tox
runs it on 22 to 27): 16 keep-alive clients (tests/e2e_harness.py's
LoadGenerator; half the requests slow, 0-100 ms) for a few seconds while
workers are recycled. A recycled worker is a process stop: graceful must
lose no request (Gunicorn 22-26's gthread worker closes keep-alive
connections under clients that are sending on them; a gevent worker must not
close its listener under a connection just accepted).

Plain Gunicorn through the same scenarios is marked ``load`` and ``plain``
(tox runs it on Python 3.11 with the newest Gunicorn): its count is printed
beside graceful's at the end of the module, never asserted: it is a race (0
on 27.0.1, where Gunicorn fixed it, on sync, which closes every connection,
and on gevent).
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import time
from collections.abc import Iterator

import gunicorn
import pytest

from tests.conftest import Processes, add_figures
from tests.e2e_harness import Gunicorn, LoadGenerator, Record, free_port, without_gevent_2130

# Under pytest-xdist one worker runs these (and the Flask tutorial under load) one after the other:
# each keeps 16 clients busy for 8 s (tests/conftest.py starts groups first).
pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn, pytest.mark.release, pytest.mark.xdist_group("load-recycling")]

#: Seconds of load per run, and keep-alive clients.
DURATION = 8.0
CLIENTS = 16
#: Seconds between two HUPs (or TTIN/TTOU) during a run.
SIGNAL_EVERY = 2.5

#: Gunicorn arguments of each scenario (max_requests: about 120 requests per worker, so that even a sync
#: run on a loaded machine, which gets through 600 requests, recycles every worker at least once).
ARGS = {
    "max_requests": ("--max-requests", "120", "--max-requests-jitter", "30"),
    "hup": (),
    "ttou": (),
}
#: What a graceful worker logs when it is stopped in each scenario.
REASON = {"max_requests": "recycled", "hup": "reload", "ttou": "scale-in"}


@dataclasses.dataclass
class RecyclingRun:
    """One run of a scenario: what the clients saw and what the server logged."""

    graceful: bool
    records: list[Record]
    log: list[str]
    returncode: int

    @property
    def failures(self) -> list[Record]:
        return [record for record in self.records if not record.ok]

    def summary(self) -> str:
        classes: dict[str, int] = {}
        for record in self.failures:
            classes[record.outcome] = classes.get(record.outcome, 0) + 1
        detail = ", ".join(f"{name} {count}" for name, count in sorted(classes.items()))
        return f"{len(self.failures)} / {len(self.records)}" + (f" ({detail})" if detail else "")


def run_scenario(processes: Processes, worker_class: str, scenario: str, *, graceful: bool) -> RecyclingRun:
    """Start Gunicorn (graceful or plain), load it, recycle its workers, stop it; every step bounded."""
    env = {"GRACEFUL_SHUTDOWN_DELAY": "0.5"} if graceful else {}
    instance = Gunicorn(processes, free_port(), worker_class, graceful=graceful, env=env, args=ARGS[scenario])
    try:
        instance.start()
        instance.wait_ready()
        time.sleep(0.5)  # every worker booted
        assert instance.proc is not None
        load = LoadGenerator(instance.url, clients=CLIENTS, duration=DURATION + 10, slow_max_ms=100).start()
        try:
            deadline = time.monotonic() + DURATION
            sent = 0
            while time.monotonic() + SIGNAL_EVERY < deadline:
                time.sleep(SIGNAL_EVERY)
                if scenario == "hup":
                    instance.proc.send_signal(signal.SIGHUP)
                elif scenario == "ttou":
                    instance.proc.send_signal(signal.SIGTTIN if sent % 2 == 0 else signal.SIGTTOU)
                sent += 1
            time.sleep(max(0.0, deadline - time.monotonic()))
        finally:
            records = load.stop()
        instance.terminate()
        try:
            # Plain Gunicorn's gevent worker may wait its whole graceful_timeout (30 s) here; what
            # it does after the load is not measured, so it is killed sooner.
            returncode = instance.wait_exit(timeout=30 if graceful else 10)
        except subprocess.TimeoutExpired:  # reported for plain Gunicorn; graceful's is asserted
            returncode = -1
        assert instance.output is not None
        return RecyclingRun(graceful, records, [line for _at, line in instance.output.lines], returncode)
    finally:
        instance.kill()


#: The scenarios: (worker class, scenario).
SCENARIOS = [
    ("gthread", "max_requests"),
    ("gthread", "hup"),
    ("gthread", "ttou"),
    ("sync", "max_requests"),
    ("sync", "hup"),
    ("gevent", "max_requests"),
    ("gevent", "hup"),
]


@pytest.fixture(scope="module")
def report(request: pytest.FixtureRequest) -> Iterator[dict[tuple[str, str], dict[str, str]]]:
    """Each scenario's summaries, plain and graceful, printed in the session's summary (shown without -s)."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    yield rows
    if rows:
        add_figures(
            request.config,
            "worker recycling under keep-alive load: client errors / requests",
            ["Gunicorn", "workers", "scenario", "plain", "graceful"],
            [
                [gunicorn.__version__, worker_class, scenario, seen.get("plain", "-"), seen.get("graceful", "-")]
                for (worker_class, scenario), seen in rows.items()
            ],
        )


@pytest.mark.parametrize(("worker_class", "scenario"), SCENARIOS)
def test_recycled_workers_lose_no_request(
    processes: Processes, report: dict[tuple[str, str], dict[str, str]], worker_class: str, scenario: str
) -> None:
    """Workers recycled under keep-alive load (max_requests, HUP, TTOU): no client sees an error with graceful."""
    ours = run_scenario(processes, worker_class, scenario, graceful=True)
    report.setdefault((worker_class, scenario), {})["graceful"] = ours.summary()
    examples = [f"{r.outcome} {r.path} {r.detail}" for r in ours.failures[:5]]

    assert len(ours.records) > 500, ours.summary()
    stopped = [line for line in ours.log if f"stopping ({REASON[scenario]})" in line]
    assert len(stopped) >= 2 if scenario != "ttou" else stopped, "no worker was recycled: the test tested nothing"
    assert ours.failures == [], f"{ours.summary()}: {examples}"
    log = without_gevent_2130(ours.log)
    tracebacks = [i for i, line in enumerate(log) if "Traceback" in line]
    assert tracebacks == [], "\n".join(log[max(0, tracebacks[0] - 3) : tracebacks[0] + 25] if tracebacks else [])
    assert ours.returncode == 0


@pytest.mark.load
@pytest.mark.plain
@pytest.mark.parametrize(("worker_class", "scenario"), SCENARIOS)
def test_plain_gunicorn_is_measured(
    processes: Processes, report: dict[tuple[str, str], dict[str, str]], worker_class: str, scenario: str
) -> None:
    """Plain Gunicorn through the same scenario: its client errors counted and printed, not judged."""
    plain = run_scenario(processes, worker_class, scenario, graceful=False)
    report.setdefault((worker_class, scenario), {})["plain"] = plain.summary()

    assert len(plain.records) > 500, plain.summary()
    assert [line for line in plain.log if "Booting worker" in line], "plain Gunicorn never booted a worker"
