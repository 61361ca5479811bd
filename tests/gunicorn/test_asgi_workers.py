"""End-to-end: Gunicorn's ASGI workers (``-k asgi``, uvicorn-worker, ``uvicorn.workers``) under graceful.

Real Gunicorn, the Starlette app of every ASGI test (tests/live/asgi_app.py),
real clients. SIGTERM: the one-process scenario of tests/uvicorn/scenario.py
on one worker (its WebSockets' goodbyes are spread over the delay per
worker: one worker shows the spread), judged as for ``graceful serve``
(in-flight lost 0, sent-after-SIGTERM failed 0, /readyz 503 from T0,
WebSockets closed 1001 one after another within the delay, SSE ended
cleanly, the lifespan shutdown run, exit 0 within the budget); plain
Gunicorn's figures beside (marker ``plain``; its ``graceful_timeout`` is
PLAIN_GRACE s, not 30, so its runs stay short). Then, 2 workers sharing the
listener, the process stops under load: HUP, TTOU and max_requests
recycling (0 failed, workers recycled promptly); USR2 then TERM to the old
master; the control socket's ``worker kill`` and ``worker remove`` (the
stopped worker's requests served, its WebSockets told 1001, exit 0).

Every run's figures are also appended, one JSON object a line, to
FIGURES_FILE (pytest-xdist hides what a test prints): after a run,
``cat $TMPDIR/graceful-asgi-workers-figures.jsonl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gunicorn as gunicorn_package
import httpx
import pytest
import websockets
import websockets.sync.client

from tests.conftest import Processes
from tests.e2e_harness import _gunicorn_supports
from tests.gunicorn.test_gunicorn import (
    LIVE,
    SERVER_SIGNALS,
    Server,
    Traffic,
    _markers,
    _stop_foreign_master,
    _usr2,
    _wait_gone,
    _worker_pids,
    get,
)
from tests.gunicorn.test_gunicorn import gunicorn as gunicorn
from tests.gunicorn.test_gunicorn27 import needs_control_socket
from tests.gunicorn.test_health_port import gunicornc
from tests.uvicorn import scenario

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn, pytest.mark.asgi]

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
GUNICORN_RELEASE = tuple(int(part) for part in gunicorn_package.__version__.split(".")[:2])
CLASSES = [
    pytest.param(
        "asgi",
        marks=pytest.mark.skipif(
            GUNICORN_RELEASE < (25, 1),
            reason=f"-k asgi came with Gunicorn 25.1 (this is {gunicorn_package.__version__})",
        ),
    ),
    "uvicorn_worker.UvicornWorker",
    "uvicorn.workers.UvicornWorker",
]
#: The SIGTERM test's: -k asgi also in the middle Gunicorn envs (marker release), since its worker's internals
#: changed from 25.1 to 27; Uvicorn's workers are Uvicorn's code, run with the newest and the oldest Gunicorn.
SIGTERM_CLASSES = [
    pytest.param("asgi", marks=[*CLASSES[0].marks, pytest.mark.release]),  # type: ignore[union-attr]
    *CLASSES[1:],
]
#: One class per adapter (uvicorn.workers' worker is uvicorn_worker's, in graceful's adapter and in Uvicorn's code):
#: where what is judged is the adapter's, not the class's.
ADAPTERS = CLASSES[:2]
DELAY = 1.5  # the scenario sends new requests for scenario.AFTER_TERM s: all within the delay
DRAIN = 5.0
SETTINGS = {
    "GRACEFUL_SHUTDOWN_DELAY": str(DELAY),
    "GRACEFUL_DRAIN_TIMEOUT": str(DRAIN),
    "PYTHONWARNINGS": "ignore::DeprecationWarning",  # uvicorn.workers says it is deprecated
}
PLAIN_GRACE = 3
REQUESTS = 600  # the recycling scenario's: at most 70 a worker, so each worker recycles several times
LOAD_BOUND = 30.0  # seconds the recycling scenario's load may take at most (a starved machine)
APP = "tests.live.asgi_app:app"
FIGURES_FILE = Path(tempfile.gettempdir()) / "graceful-asgi-workers-figures.jsonl"


def lifespan(directory: Path) -> list[str]:
    """The app's lifespan marks so far in ``directory`` (``startup``, ``shutdown``: one per worker), in order."""
    marker = directory / "lifespan"
    return [line.split()[0] for line in marker.read_text().splitlines()] if marker.exists() else []


def record(who: str, figures: dict[str, Any]) -> None:
    """Append one run's figures to FIGURES_FILE (one write of one line: parallel runs do not mix)."""
    line = json.dumps({"who": who, **figures}) + "\n"
    fd = os.open(FIGURES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def one_worker(worker_class: str, graceful: bool) -> Callable[[int], list[str]]:
    """The scenario's command: Gunicorn with one worker of ``worker_class`` on ``port``, graceful's config or not."""

    def argv(port: int) -> list[str]:
        config = ["-c", "python:graceful.conf"] if graceful else ["--graceful-timeout", str(PLAIN_GRACE)]
        command = [GUNICORN, *config, "-k", worker_class, "-w", "1", "-b", f"127.0.0.1:{port}", "--keep-alive", "2"]
        if _gunicorn_supports("control_socket_disable"):  # 25+: every instance's would share one path
            command.append("--no-control-socket")
        return [*command, APP]

    return argv


def sigterm_run(worker_class: str, graceful: bool, processes: Processes, tmp_path: Path) -> scenario.Figures:
    """tests/uvicorn/scenario.py's SIGTERM under load, on Gunicorn with one worker of ``worker_class``."""
    who = "graceful" if graceful else "plain"
    figures = scenario.run(
        f"{who} -k {worker_class}",
        one_worker(worker_class, graceful),
        lambda argv, env: processes.start(argv, env=env),
        tmp_path,
        SETTINGS if graceful else {"PYTHONWARNINGS": SETTINGS["PYTHONWARNINGS"]},
    )
    print(figures.table())
    record(who, {key: value for key, value in dataclasses.asdict(figures).items() if key != "output"})
    return figures


@pytest.mark.parametrize("worker_class", SIGTERM_CLASSES)
def test_sigterm_keeps_the_promise(processes: Processes, tmp_path: Path, worker_class: str) -> None:
    """Under load at SIGTERM: nothing lost, /readyz 503 from T0, WebSockets 1001 spread, SSE clean, lifespan, exit 0."""
    figures = sigterm_run(worker_class, True, processes, tmp_path)
    context = figures.table() + "\n" + figures.output
    assert figures.in_flight_at_term >= 1 and figures.in_flight_lost == 0, context
    # How many go out in the delay depends on the client's CPU (dozens on a quiet machine, a few on a starved one).
    assert figures.after_term_sent >= 1 and figures.after_term_failed == 0, context
    assert figures.readyz_503_from_t0, context
    assert figures.ws_codes == [1001] * scenario.SOCKETS, context
    # Told over the delay, not at once. On a quiet machine each 0.1-0.2 s after the other; a starved worker
    # learns of the shutdown late and spreads them over what is left, and a starved client reads two at
    # once: so only "not all in one instant" is judged.
    assert all(0.0 < at <= DELAY + 0.5 for at in figures.ws_closed_at), context
    assert len({round(at, 2) for at in figures.ws_closed_at}) >= 2, context
    assert figures.sse_complete == [True] * scenario.STREAMS, context
    assert figures.lifespan == ["startup", "shutdown"], context
    assert figures.exit_status == 0 and not figures.killed, context
    assert figures.exit_after is not None and figures.exit_after < DELAY + DRAIN + 5, context  # far from the budget


@pytest.mark.plain
@pytest.mark.parametrize("worker_class", CLASSES)
def test_plain_gunicorn_figures(processes: Processes, tmp_path: Path, worker_class: str) -> None:
    """Plain Gunicorn under the same scenario: its figures, printed and recorded, never judged."""
    assert sigterm_run(worker_class, False, processes, tmp_path).exit_status is not None


async def keep_alive_load(port: int, requests: int, *signals: Callable[[], object]) -> tuple[int, int]:
    """4 keep-alive clients send ``requests`` in all (at most LOAD_BOUND s); ``signals`` spread over them.

    With two, the first is called after a third of the requests, the second after two thirds.
    """
    sent = failed = 0
    marks = [asyncio.Event() for _ in signals]
    end = time.monotonic() + LOAD_BOUND

    async def client() -> None:
        nonlocal sent, failed
        async with httpx.AsyncClient(timeout=10) as session:
            while sent < requests and time.monotonic() < end:
                sent += 1
                for index, mark in enumerate(marks):
                    if sent >= requests * (index + 1) // (len(marks) + 1):
                        mark.set()
                try:
                    if (await session.get(f"http://127.0.0.1:{port}/")).status_code != 200:
                        failed += 1
                except httpx.HTTPError:
                    failed += 1

    tasks = [asyncio.ensure_future(client()) for _ in range(4)]
    for mark, send in zip(marks, signals, strict=True):
        await asyncio.wait_for(mark.wait(), LOAD_BOUND)
        send()
    await asyncio.gather(*tasks)
    return sent, failed


def serving_workers(server: Server, tmp_path: Path) -> int:
    """Workers whose app started and that have not stopped, once a replacement being forked has started (5 s)."""
    deadline = time.monotonic() + 5
    while True:
        stopped = len(server.matching(r"graceful: worker \d+ stopped \("))
        serving = lifespan(tmp_path).count("startup") - stopped
        if serving >= 1 or time.monotonic() > deadline:
            return serving
        time.sleep(0.05)


@pytest.mark.parametrize("worker_class", CLASSES)
def test_hup_ttou_and_max_requests_without_a_failure(gunicorn, tmp_path: Path, worker_class: str) -> None:  # type: ignore[no-untyped-def]
    """max_requests 60 (jitter 10), a HUP then a TTOU under keep-alive load: every request 200, workers recycled."""
    server = asgi_server(gunicorn, worker_class, tmp_path, "--max-requests", "60", "--max-requests-jitter", "10")
    try:
        hup, ttou = (lambda: server.proc.send_signal(signal.SIGHUP)), (lambda: server.proc.send_signal(signal.SIGTTOU))
        sent, failed = asyncio.run(keep_alive_load(server.port, REQUESTS, hup, ttou))
        replaced = lifespan(tmp_path).count("startup") - 2
        log = "\n".join(server.lines)
        recycled = log.count("stopping (recycled)")
        scaled_in = log.count("stopping (scale-in)")
        held = log.count("still open at the drain's deadline")
        print(f"graceful -k {worker_class}: HUP, TTOU and max_requests: {failed} failed of {sent}; {replaced} replaced")
        record(
            "graceful",
            {
                "worker_class": worker_class,
                "scenario": "HUP, TTOU and max_requests",
                "sent": sent,
                "failed": failed,
                "replaced": replaced,
                "recycled": recycled,
                "held": held,
                "scaled_in": scaled_in,
            },
        )
        assert sent == REQUESTS and failed == 0
        # max_requests recycled workers (how many depends on how fast replacements boot); none was held by a
        # keep-alive client until the drain's deadline (each leaves after its next response).
        assert recycled >= 2 and held == 0, log[-3000:]
        # TTOU: one worker fewer for good (a worker stopped as scale-in, or one recycled meanwhile not replaced).
        assert scaled_in <= 1 and serving_workers(server, tmp_path) == 1, log[-3000:]
    finally:
        server.term()
    assert server.exit_code(30) == 0
    assert lifespan(tmp_path).count("shutdown") == lifespan(tmp_path).count("startup")


class HeldSocket:
    """A WebSocket to the app (a sync client), told which worker holds it; a thread reads it until it closes."""

    def __init__(self, port: int) -> None:
        self._closing = contextlib.ExitStack()  # websockets 17.1+: connect() only as a context manager
        self.ws = self._closing.enter_context(
            websockets.sync.client.connect(f"ws://127.0.0.1:{port}/ws", open_timeout=10)
        )
        self.ws.send("pid")
        deadline = time.monotonic() + 10
        while not (answer := str(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))).startswith("pid "):
            pass  # the app's ticks
        self.pid = int(answer.split()[1])
        self.code: int | None = None  # the close code received (1006: closed without one)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while True:
                self.ws.recv(timeout=60)
        except websockets.ConnectionClosed as closed:
            self.code = closed.rcvd.code if closed.rcvd is not None else 1006
        except TimeoutError:
            pass

    def closed_with(self, timeout: float = 10.0) -> int | None:
        """The close code, once the server closed it (None: still open after ``timeout`` s)."""
        self._reader.join(timeout)
        return self.code

    def close(self) -> None:
        self._closing.close()
        self._reader.join(10)


def sockets_on(port: int, pids: list[int], limit: int = 24) -> list[HeldSocket]:
    """WebSockets opened until each worker of ``pids`` holds one (at most ``limit``)."""
    sockets: list[HeldSocket] = []
    while not set(pids) <= {held.pid for held in sockets}:
        assert len(sockets) < limit, f"{limit} WebSockets, none on some of {pids}: {[h.pid for h in sockets]}"
        sockets.append(HeldSocket(port))
        time.sleep(0.02)  # each worker's loop may take the next connection
    return sockets


def asgi_server(
    gunicorn: Callable[..., Server],
    worker_class: str,
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    **options: Any,
) -> Server:
    """test_gunicorn.py's Gunicorn with 2 workers of ``worker_class`` serving the ASGI app, delay 0.5 s."""
    settings = {
        "GRACEFUL_SHUTDOWN_DELAY": "0.5",
        "GRACEFUL_DRAIN_TIMEOUT": "3",
        "GRACEFUL_HOOK_TIMEOUT": "5",  # the app's cleanup task's: graceful_timeout is derived from it
        "ASGI_APP_MARKER": str(tmp_path / "lifespan"),
        "PYTHONWARNINGS": "ignore::DeprecationWarning",  # uvicorn.workers says it is deprecated
        **(env or {}),
    }
    argv = ("-k", worker_class, "-w", "2", "--keep-alive", "2", *args)
    server = gunicorn(env=settings, args=argv, app=APP, **options)
    deadline = time.monotonic() + 20
    while lifespan(tmp_path).count("startup") < 2:  # both workers serve (/readyz 200 said one does)
        assert time.monotonic() < deadline, "\n".join(server.lines)
        time.sleep(0.05)
    return server


def ended_abnormally(server: Server, pids: list[int]) -> list[str]:
    """Gunicorn's lines for any of ``pids`` that exited with a status other than 0 or was killed by a signal."""
    return [line for pid in pids for line in server.matching(rf"Worker \(pid:{pid}\) (exited with code|was sent)")]


def held_by(server: Server, pids: list[int], pool: ThreadPoolExecutor, limit: int = 16) -> list[Future[Any]]:
    """Slow requests (1.5 s) sent until one is held by a worker of ``pids`` (at most ``limit``)."""
    requests_ = []
    while not any(server.matching(rf"^slow {pid}$") for pid in pids):
        assert len(requests_) < limit, f"{limit} slow requests, none held by {pids}"
        requests_.append(pool.submit(get, server, "/slow?seconds=1.5"))
        time.sleep(0.05)
    return requests_


@pytest.mark.parametrize("worker_class", ADAPTERS)
def test_usr2_then_term_to_the_old_master_loses_nothing(gunicorn, tmp_path: Path, worker_class: str) -> None:  # type: ignore[no-untyped-def]
    """USR2, then TERM to the old master under load: nothing fails, its workers serve what they hold and exit 0.

    Its workers stop as a process stop (``upgrade``): a slow request and a
    WebSocket they hold get their answer and a 1001; the new master serves
    on, and its own TERM later runs the pre-shutdown hook, once.
    """
    markers = tmp_path / "markers"
    markers.mkdir()
    config = str(LIVE / "gunicorn_conf.py")
    server = asgi_server(gunicorn, worker_class, tmp_path, env={"GT_MARKERS": str(markers)}, config=config)
    old = server.proc.pid
    old_workers = _worker_pids(server)
    new = _usr2(server)
    with contextlib.ExitStack() as cleanup, ThreadPoolExecutor(16) as pool:
        cleanup.callback(_stop_foreign_master, new)  # nothing to do once it stopped by itself
        traffic = Traffic(server).start()
        cleanup.callback(traffic.stop)
        sockets = sockets_on(server.port, old_workers[:1])
        cleanup.callback(lambda: [held.close() for held in sockets])
        slow = held_by(server, old_workers, pool)
        old_term = server.term()
        assert server.proc.wait(60) == 0
        old_gone = time.monotonic()
        assert [future.result().status_code for future in slow] == [200] * len(slow)
        codes = [held.closed_with() for held in sockets if held.pid in old_workers]
        time.sleep(1.0)  # the new master alone, on the same sockets
        new_term = time.monotonic()
        stopped = _stop_foreign_master(new)
    assert stopped, "the new master did not stop by itself"
    assert traffic.failures(before=new_term) == [] and traffic.outcomes("/", old_gone, new_term)
    assert set(traffic.outcomes("/readyz", old_term, old_gone)) == {"200"}
    assert codes and set(codes) == {1001}
    for pid in old_workers:
        assert server.matching(rf"graceful: worker {pid} stopped \(upgrade\)"), "\n".join(server.lines)
    assert ended_abnormally(server, old_workers) == []
    assert server.matching(rf"\[{old}\].*graceful: SIGTERM with a live new master \(pid {new}\)")
    assert server.matching(rf"\[{old}\].*{SERVER_SIGNALS}") == []
    assert _markers(markers) == {"pre": {new: 1}, "cleanup": {old: 2, new: 2}}
    assert sorted(lifespan(tmp_path)) == ["shutdown"] * 4 + ["startup"] * 4


@needs_control_socket
@pytest.mark.parametrize(
    ("command", "reason", "worker_class"),
    [("kill", "worker kill", "asgi"), ("remove", "scale-in", "uvicorn_worker.UvicornWorker")],
)
def test_control_socket_kill_and_remove_lose_nothing(  # type: ignore[no-untyped-def]
    gunicorn, tmp_path: Path, command: str, reason: str, worker_class: str
) -> None:
    """The control socket's ``worker kill PID`` / ``worker remove`` under load: nothing fails, its WebSocket 1001.

    The stopped worker logs why and exits 0; the other worker's WebSocket
    stays open; the server's own signals are not logged. (The reason's
    path is the same for every class: one class each.)
    """
    control = tmp_path / "g.ctl"
    server = asgi_server(gunicorn, worker_class, tmp_path, "--control-socket", str(control), control_socket=True)
    workers = _worker_pids(server)
    sockets = sockets_on(server.port, workers)
    traffic = Traffic(server).start()
    try:
        deadline = time.monotonic() + 10
        while True:  # the control socket starts after the workers
            try:
                gunicornc(control, "worker", command, *([str(workers[0])] if command == "kill" else []))
                break
            except subprocess.CalledProcessError:
                assert time.monotonic() < deadline, "\n".join(server.lines)
                time.sleep(0.1)
        [line] = server.wait_for(rf"graceful: worker \d+ stopped \({reason}\)")
        stopped = int(re.findall(r"worker (\d+) stopped", line)[0])
        assert _wait_gone(stopped)
        codes = {held: held.closed_with(10 if held.pid == stopped else 0) for held in sockets}
        time.sleep(0.5)  # served on without it
        served_until = time.monotonic()
    finally:
        traffic.stop()
        for held in sockets:
            held.close()
    assert command == "remove" or stopped == workers[0]
    assert traffic.failures(before=served_until) == [] and traffic.outcomes("/", 0, served_until)
    assert {code for held, code in codes.items() if held.pid == stopped} == {1001}
    assert {code for held, code in codes.items() if held.pid != stopped} == {None}  # still open
    assert ended_abnormally(server, [stopped]) == []
    assert server.matching(SERVER_SIGNALS) == []
    server.term()
    assert server.exit_code() == 0
