"""End-to-end: faults during a shutdown under real Gunicorn (gthread, 2 workers x 4 threads), and what the record says.

Where an ASGI worker differs (its requests, reports and stop run on its
event loop, each adapter its own way), the case runs on Gunicorn's ASGI
workers too (marker ``asgi``; one class per adapter, or ``-k asgi`` alone
where the adapter does not matter), serving the faults app's ASGI twin.

Each test sends real signals to real processes and checks four things:
the master exits within the grace period, nothing it started is left
running, no request is lost that could have been kept, and the shutdown
record (GRACEFUL_REPORT_FILE) says what happened. The app is
tests/live/faults_app.py (tests/live/dirty_app.py for Gunicorn 27's dirty
pool). Delays, drains and grace periods are short; the module takes about
10 s with -n 4.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.gunicorn.test_gunicorn import WORKERS, Server, _has_control_socket
from tests.gunicorn.test_gunicorn import gunicorn as gunicorn
from tests.gunicorn.test_gunicorn27 import DIRTY_APP, dirty_options, dirty_pids, needs_dirty, wait_dirty_ready

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn]

APP = "tests.live.faults_app:app"
#: Its twin for Gunicorn's ASGI workers (any ``kind`` not in test_gunicorn.py's WORKERS).
ASGI_APP = "tests.live.faults_app:asgi"
#: Gunicorn's ASGI worker classes, one per adapter (uvicorn.workers' is uvicorn_worker's): an ``asgi`` test each.
ASGI = pytest.param(
    "asgi",
    marks=[
        pytest.mark.asgi,
        pytest.mark.skipif(not _has_control_socket(), reason="-k asgi came with Gunicorn 25.1"),
    ],
)
UVICORN = pytest.param("uvicorn_worker.UvicornWorker", marks=pytest.mark.asgi)
#: The grace period every test runs under (s): the master must be gone well within it.
GRACE_PERIOD = 10.0
#: Upper bound (s) on waiting for something that happens at once when things work.
SOON = 15.0

Start = Callable[..., Server]


@pytest.fixture
def start(gunicorn: Start, tmp_path: Path) -> Iterator[Start]:
    """Start Gunicorn with graceful and the faults app: start(env=..., workers=2, ready=True, kind="gthread").

    test_gunicorn.py's Gunicorn, with this module's settings. A ``kind`` not
    in WORKERS is an ASGI worker class: it serves the app's ASGI twin.
    """

    def run(
        env: dict[str, str] | None = None,
        workers: int = 2,
        ready: bool = True,
        kind: str = "gthread",
        app: str | None = None,
        args: tuple[str, ...] = (),
    ) -> Server:
        settings = {
            "GRACEFUL_SHUTDOWN_DELAY": "0.4",
            "GRACEFUL_DRAIN_TIMEOUT": "2",
            "GRACEFUL_HOOK_TIMEOUT": "1",
            "GRACEFUL_GRACE_PERIOD": f"{GRACE_PERIOD:g}",
            "GRACEFUL_REPORT_FILE": str(tmp_path / "record.json"),
            "GRACEFUL_TERMINATION_LOG": "",
            **(env or {}),
        }
        # The options after WORKERS[kind]'s win: the worker count, an ASGI class.
        options = ("-w", str(workers)) if kind in WORKERS else ("-k", kind, "-w", str(workers))
        app = app or (APP if kind in WORKERS else ASGI_APP)
        worker = kind if kind in WORKERS else "sync"
        server: Server = gunicorn(worker, env=settings, args=(*options, *args), app=app, ready=False)
        if ready:
            server.wait_ready()
            server.wait_for(r"Booting worker with pid", SOON, count=workers)
        return server

    yield run


def get(server: Server, path: str) -> requests.Response:
    return requests.get(server.url + path, timeout=30)


def outcome(future: Future[requests.Response]) -> int | str:
    """A request's status code, or ``"lost"`` when its connection broke."""
    try:
        return future.result().status_code
    except requests.ConnectionError:
        return "lost"


def worker_pids(server: Server) -> list[int]:
    """Every worker the master booted, in order."""
    return [int(pid) for line in server.matching(r"Booting worker with pid: \d+") for pid in re.findall(r"\d+$", line)]


def holders(server: Server, count: int) -> collections.Counter[int]:
    """Wait for ``count`` /hold requests to be in the app: how many each worker holds."""
    return collections.Counter(int(line.split()[1]) for line in server.wait_for(r"^hold \d+$", SOON, count))


def running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def assert_nothing_left(pids: list[int], timeout: float = SOON) -> None:
    """Every one of ``pids`` has ended (bounded)."""
    deadline = time.monotonic() + timeout
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in pids if running(pid)] == []


def finished(server: Server, term_at: float, orphans: tuple[int, ...] = ()) -> float:
    """The master's exit: status 0, within the grace period of its TERM, its workers gone; seconds after the TERM.

    ``orphans``: processes known to outlive it (an upstream limitation the test names), killed once it exited.
    """
    server.proc.wait(GRACE_PERIOD + 5)
    took = time.monotonic() - term_at
    for pid in orphans:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert server.exit_code() == 0, "\n".join(server.lines)
    assert took < GRACE_PERIOD, "\n".join(server.lines)
    assert_nothing_left([server.proc.pid, *worker_pids(server)])
    return took


def record_of(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "record.json").read_text())
    return data


def summary_line(server: Server) -> str:
    [line] = server.matching(r"graceful: (clean shutdown|shutdown with problems) in ")
    return line


class TestWorkersThatDie:
    # gevent too: its in-flight reports come from a greenlet, its requests from greenlets; the ASGI workers' from
    # their event loop (each adapter its own way).
    @pytest.mark.parametrize("kind", ["gthread", "gevent", ASGI, UVICORN])
    def test_a_worker_killed_during_the_drain_loses_exactly_its_requests(
        self, start: Start, tmp_path: Path, kind: str
    ) -> None:
        """SIGKILL (as the OOM killer) to a worker draining held requests: they are lost, named; the others served."""
        server = start(env={"GRACEFUL_DRAIN_TIMEOUT": "3"}, kind=kind)
        with ThreadPoolExecutor(4) as pool:
            held = [pool.submit(get, server, "/hold?ms=2500") for _ in range(4)]  # all still running at the kill
            victim, lost = holders(server, 4).most_common(1)[0]
            term_at = server.term()
            server.wait_for(r"graceful: stopping 2 worker\(s\)", SOON)
            os.kill(victim, signal.SIGKILL)
            outcomes = [outcome(future) for future in held]
        finished(server, term_at)
        assert sorted(outcomes, key=str) == sorted([200] * (4 - lost) + ["lost"] * lost, key=str)
        record = record_of(tmp_path)
        assert record["ok"] is False
        [end] = record["ended"]
        assert (end["pid"], end["cause"], end["signal"], end["in_flight"], end["replaced"]) == (
            victim,
            "signal",
            "SIGKILL",
            lost,
            False,
        )
        assert (record["requests"]["lost"], record["requests"]["lost_unknown"]) == (lost, 0)
        s = "" if lost == 1 else "s"
        assert (
            f"; ended abnormally: worker {victim} killed by SIGKILL without its part of the record while stopping:"
            f" {lost} request{s} in flight lost" in summary_line(server)
        )
        assert summary_line(server).split("graceful: ", 1)[1].startswith("shutdown with problems in ")

    # An ASGI worker too: its drain and lifespan run on its event loop, whose own waits must not outlast the master's.
    @pytest.mark.parametrize("kind", ["gthread", ASGI])
    def test_a_frozen_worker_is_killed_at_graceful_timeout_and_named(
        self, start: Start, tmp_path: Path, kind: str
    ) -> None:
        """SIGSTOP during the drain: the master SIGKILLs it at graceful_timeout; the record says so, 1 request lost."""
        server = start(env={"GRACEFUL_DRAIN_TIMEOUT": "1"}, kind=kind)
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(get, server, "/hold?ms=3000")
            [victim] = holders(server, 1)
            term_at = server.term()
            server.wait_for(r"graceful: stopping 2 worker\(s\)", SOON)
            os.kill(victim, signal.SIGSTOP)
            assert outcome(held) == "lost"
        finished(server, term_at)
        killing = r"graceful: 1 worker\(s\) still running after waiting \d+\.\ds \(graceful_timeout \d+s\): killing"
        assert server.matching(killing)
        record = record_of(tmp_path)
        [end] = record["ended"]
        assert (end["pid"], end["cause"], end["signal"], end["lost"]) == (victim, "killed", "SIGKILL", 1)
        assert record["ok"] is False and record["requests"]["lost"] == 1
        assert (
            f"worker {victim} killed by the master at graceful_timeout (SIGKILL) without its part of the record"
            " while stopping: 1 request in flight lost" in summary_line(server)
        )

    def test_a_worker_that_crashes_during_the_delay_is_replaced_by_one_that_is_not_ready(
        self, start: Start, tmp_path: Path
    ) -> None:
        """One worker exits 7 during the delay: Gunicorn forks another, which serves and fails /readyz; both named."""
        server = start(workers=1, env={"GRACEFUL_SHUTDOWN_DELAY": "2"})  # time for the replacement to boot
        [crashed] = worker_pids(server)
        term_at = server.term()
        server.wait_for(r"graceful: ShutdownInitiated", SOON)
        with pytest.raises(requests.ConnectionError):
            get(server, "/crash?status=7")
        server.wait_for(r"Booting worker with pid", SOON, count=2)
        replacement = worker_pids(server)[1]
        deadline = time.monotonic() + SOON
        while True:  # the replacement's first answer (it may still be loading the app)
            try:
                ready = get(server, "/readyz")
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert ready.status_code == 503  # it learned ShutdownInitiated from the master
        served = get(server, "/")
        assert served.status_code == 200 and served.headers["Connection"].lower() == "close"
        assert server.wait_for(r"graceful: NotAcceptingNewRequests", SOON)
        finished(server, term_at)
        record = record_of(tmp_path)
        [end] = record["ended"]
        assert (end["pid"], end["cause"], end["status"], end["replaced"]) == (crashed, "status", 7, True)
        assert end["lost"] == 1  # the /crash request, in flight at its last report
        assert record["ok"] is False
        assert [p["pid"] for p in record["parts"] if p["role"] == "worker"] == [replacement]
        assert (
            f"worker {crashed} exited with status 7 without its part of the record during the delay (replaced):"
            " 1 request in flight lost" in summary_line(server)
        )

    @needs_dirty
    def test_a_dirty_arbiter_killed_during_the_delay_is_named(self, start: Start, tmp_path: Path) -> None:
        """Gunicorn 27's dirty arbiter SIGKILLed during the delay: Gunicorn replaces it; the record names it."""
        server = start(env={"GRACEFUL_SHUTDOWN_DELAY": "1"}, app=DIRTY_APP, args=dirty_options())
        wait_dirty_ready(server)
        killed = dirty_pids(server)  # the dirty arbiter, then its workers
        term_at = server.term()
        server.wait_for(r"graceful: ShutdownInitiated", SOON)
        os.kill(killed[0], signal.SIGKILL)
        server.wait_for(r"Spawned dirty arbiter", SOON, count=2)
        # Its orphaned dirty worker (killed[1:]) runs on: Gunicorn 27's dirty workers never check their parent,
        # and once their arbiter is gone graceful cannot tell them from any other process. Killed here.
        finished(server, term_at, orphans=tuple(killed[1:]))
        assert_nothing_left(killed)
        record = record_of(tmp_path)
        [end] = record["ended"]
        assert (end["pid"], end["role"], end["cause"], end["signal"], end["replaced"]) == (
            killed[0],
            "dirty arbiter",
            "signal",
            "SIGKILL",
            True,
        )
        assert record["ok"] is False and record["requests"]["lost"] == 0
        assert (
            f"ended abnormally: dirty arbiter {killed[0]} killed by SIGKILL during the delay (replaced):"
            " its unfinished tasks are lost" in summary_line(server)
        )


class TestTheMasterDies:
    # Each ASGI adapter learns its parent is gone its own way (on its event loop).
    @pytest.mark.parametrize("kind", ["gthread", ASGI, UVICORN])
    def test_orphaned_workers_finish_their_requests_and_exit(self, start: Start, tmp_path: Path, kind: str) -> None:
        """The master SIGKILLed during the delay: its workers see their parent gone, serve what they hold, exit."""
        server = start(env={"GRACEFUL_SHUTDOWN_DELAY": "1"}, kind=kind)
        workers = worker_pids(server)
        with ThreadPoolExecutor(2) as pool:
            held = [pool.submit(get, server, "/hold?ms=1000") for _ in range(2)]
            holders(server, 2)
            server.term()
            server.wait_for(r"graceful: ShutdownInitiated", SOON)
            server.proc.kill()
            assert [outcome(future) for future in held] == [200, 200]
        assert_nothing_left(workers)
        assert not (tmp_path / "record.json").exists()  # only the master writes it


class TestStopsAtAwkwardMoments:
    def test_sigterm_while_the_app_is_still_loading(self, start: Start, tmp_path: Path) -> None:
        """TERM while each worker still imports the app: the server stops within its budget and records it."""
        server = start(env={"FT_IMPORT_S": "1.5"}, ready=False)
        server.wait_for(r"Booting worker with pid", SOON, count=2)
        term_at = server.term()
        finished(server, term_at)
        record = record_of(tmp_path)
        assert record["ended"] == [] and record["requests"]["lost"] == 0
        assert record["ok"] is True, summary_line(server)

    def test_hup_then_term(self, start: Start, tmp_path: Path) -> None:
        """TERM right after a HUP, under steady requests: every request answered, a clean record."""
        server = start()
        with ThreadPoolExecutor(1) as pool:

            def steady() -> list[int | str]:
                answers: list[int | str] = []
                while server.proc.poll() is None and len(answers) < 2000:
                    try:
                        answers.append(get(server, "/").status_code)
                    except requests.ConnectionError:
                        break  # the listener closed: the shutdown's end, not a lost request
                return answers

            load = pool.submit(steady)
            time.sleep(0.2)
            server.proc.send_signal(signal.SIGHUP)
            server.wait_for(r"Hang up", SOON)
            term_at = server.term()
            answers = load.result(timeout=SOON + GRACE_PERIOD)
        finished(server, term_at)
        assert answers and set(answers) == {200}
        record = record_of(tmp_path)
        assert record["ok"] is True and record["ended"] == [], "\n".join(server.lines)

    def test_a_slow_upload_at_the_drains_deadline_is_abandoned_after_the_whole_wait(
        self, start: Start, tmp_path: Path
    ) -> None:
        """An upload still arriving when drain_timeout ends: abandoned, logged with the time waited, not left."""
        server = start(env={"GRACEFUL_DRAIN_TIMEOUT": "1"})

        def trickle() -> Iterator[bytes]:
            for _ in range(100):  # 10 s at most, far past the drain's deadline
                yield b"x" * 10
                time.sleep(0.1)

        with ThreadPoolExecutor(1) as pool:
            upload = pool.submit(requests.post, server.url + "/upload", data=trickle(), timeout=30)
            time.sleep(0.3)  # in the app, reading its body
            term_at = server.term()
            assert get(server, "/").status_code == 200  # the delay: served
            finished(server, term_at)
            with pytest.raises(requests.RequestException):
                upload.result()
        [line] = server.matching(r"graceful: drain timed out after waiting")
        waited = float(re.findall(r"after waiting (\d+\.\d)s \(drain_timeout 1s\); abandoning 1 in-flight", line)[0])
        assert waited >= 0.9  # the whole drain_timeout, counted from the worker's TERM
        record = record_of(tmp_path)
        assert record["requests"]["abandoned"] == 1 and record["ok"] is False
        assert record["ended"] == []

    @pytest.mark.parametrize(("cleanup", "outcome_"), [("hang", "timed out"), ("raise", "failed")])
    def test_cleanup_tasks_that_hang_or_raise(self, start: Start, tmp_path: Path, cleanup: str, outcome_: str) -> None:
        """A cleanup task that hangs (or raises) in each worker: bounded, recorded per worker; nothing hangs."""
        server = start(env={"FT_CLEANUP": cleanup})
        workers = worker_pids(server)
        finished(server, server.term())
        record = record_of(tmp_path)
        tasks = sorted((h["pid"], h["name"], h["outcome"]) for h in record["hooks"] if h["kind"] == "cleanup task")
        name = {"hang": "hangs", "raise": "raises"}[cleanup]
        assert tasks == sorted([(pid, "flush", "ok") for pid in workers] + [(pid, name, outcome_) for pid in workers])
        assert record["ok"] is False and record["ended"] == []
        assert f"4 cleanup tasks: 2 ok, 2 {outcome_} ({name}) in 2 workers" in summary_line(server)

    def test_an_unwritable_record_path_is_one_line_and_the_shutdown_goes_on(self, start: Start, tmp_path: Path) -> None:
        """The record's directory is gone at exit: one warning naming the path and the error, exit 0, no traceback."""
        directory = tmp_path / "records"
        directory.mkdir()
        report = directory / "record.json"
        server = start(env={"GRACEFUL_REPORT_FILE": str(report)})
        directory.rmdir()
        finished(server, server.term())
        lines = server.matching(r"shutdown record")
        assert [line.split("graceful: ", 1)[1] for line in lines] == [
            f"could not write the shutdown record to GRACEFUL_REPORT_FILE={report}: [Errno 2] No such file or directory"
        ]
        assert not any("Traceback" in line for line in server.lines)
        assert summary_line(server)  # the summary is still logged
