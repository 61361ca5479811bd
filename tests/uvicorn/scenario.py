"""One SIGTERM under load, measured the same way on ``graceful serve`` (Uvicorn) and on plain Uvicorn.

The scenario of issue 30, made cheap: a Starlette app (tests/live/asgi_app.py),
``KEEP_ALIVE_CLIENTS`` keep-alive clients asking ``/`` in a loop, a 2 s
request in flight at SIGTERM, ``SOCKETS`` WebSockets (a real ``websockets``
client) and ``STREAMS`` server-sent-event streams (an ``httpx`` streaming
client) open, and from SIGTERM on, for ``AFTER_TERM`` seconds, a new request on
a new connection every ``AFTER_TERM_INTERVAL`` seconds (as kube-proxy sends
until the endpoint is gone) and a ``/readyz`` probe every ``PROBE_INTERVAL``.
:func:`run` returns the :class:`Figures`; the tests print them side by side.
Every client runs on its own thread, bounded; times are ``time.monotonic()``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import requests
import websockets.exceptions
import websockets.sync.client

from tests.e2e_harness import OutputTail, clean_env, free_port, wait_exit

KEEP_ALIVE_CLIENTS = 8
SOCKETS = 2
STREAMS = 2
SLOW_SECONDS = 2.0
AFTER_TERM = 1.0
AFTER_TERM_INTERVAL = 0.01
PROBE_INTERVAL = 0.05
CLIENT_TIMEOUT = 10.0
START_TIMEOUT = 20.0


@dataclasses.dataclass
class Figures:
    """What one run measured; times in seconds after the SIGTERM (T0)."""

    name: str
    in_flight_at_term: int = 0
    in_flight_lost: int = 0
    after_term_sent: int = 0
    after_term_failed: int = 0
    after_term_failures: list[str] = dataclasses.field(default_factory=list)
    readyz_after_term: list[str] = dataclasses.field(default_factory=list)
    health_port_after_term: list[str] = dataclasses.field(default_factory=list)
    ws_codes: list[int | None] = dataclasses.field(default_factory=list)
    ws_closed_at: list[float] = dataclasses.field(default_factory=list)
    sse_complete: list[bool] = dataclasses.field(default_factory=list)
    sse_ended_at: list[float] = dataclasses.field(default_factory=list)
    lifespan: list[str] = dataclasses.field(default_factory=list)
    exit_status: int | None = None
    exit_after: float | None = None
    killed: bool = False
    output: str = ""

    @property
    def readyz_503_from_t0(self) -> bool:
        """Every /readyz probe sent after the serving process's T0 that got an answer got 503 (and at least one did)."""
        answered = [status for status in self.readyz_after_term if status.isdigit()]
        return bool(answered) and all(status == "503" for status in answered)

    def table(self) -> str:
        """The figures in a few lines, as the closing note quotes them."""
        spread = max(self.ws_closed_at) - min(self.ws_closed_at) if self.ws_closed_at else 0.0
        return "\n".join(
            [
                f"--- {self.name}",
                f"in flight at SIGTERM lost:      {self.in_flight_lost} of {self.in_flight_at_term}",
                f"sent in the {AFTER_TERM:g}s after SIGTERM failed: {self.after_term_failed} of {self.after_term_sent}"
                + (f" ({sorted(set(self.after_term_failures))})" if self.after_term_failures else ""),
                f"/readyz 503 from T0:            {self.readyz_503_from_t0}"
                f" (first answers: {self.readyz_after_term[:3]})",
                f"WebSocket close codes:          {self.ws_codes} at {[round(t, 3) for t in self.ws_closed_at]}"
                f" (spread {spread:.3f}s)",
                f"SSE streams ended cleanly:      {self.sse_complete} at {[round(t, 3) for t in self.sse_ended_at]}",
                f"lifespan marks:                 {self.lifespan}",
                f"exit status {self.exit_status} after {self.exit_after and round(self.exit_after, 3)}s"
                + (" (SIGKILLed: it did not exit by itself)" if self.killed else ""),
            ]
        )


def _get(url: str, timeout: float = CLIENT_TIMEOUT) -> str:
    """One GET on a new connection: the status as text, or the kind of failure."""
    try:
        response = requests.get(url, timeout=timeout)
    except requests.ConnectionError as exc:
        return "refused" if "refused" in str(exc).lower() else "connection error"
    except requests.RequestException as exc:
        return type(exc).__name__
    return str(response.status_code)


def run(
    name: str,
    argv: Callable[[int], list[str]],
    start: Callable[[list[str], dict[str, str]], subprocess.Popen[str]],
    tmp_path: Path,
    env: dict[str, str],
    *,
    health_port: int | None = None,
    kill_after: float = 8.0,
) -> Figures:
    """Start the server, load it, SIGTERM it, measure until it exits (SIGKILL ``kill_after`` s after T0)."""
    figures = Figures(name)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    marker = tmp_path / f"{name}-lifespan.txt"
    proc = start(argv(port), clean_env({**env, "ASGI_APP_MARKER": str(marker)}))
    tail = OutputTail(proc, name)
    try:
        wait_ready(base, proc, tail)
        stop = threading.Event()
        threads: list[threading.Thread] = []
        records: list[tuple[float, float, bool]] = []  # keep-alive load: started, ended, ok

        def client() -> None:
            with requests.Session() as session:
                session.trust_env = False
                while not stop.is_set():
                    started = time.monotonic()
                    try:
                        ok = session.get(base + "/", timeout=CLIENT_TIMEOUT).text == "hello"
                    except requests.RequestException:
                        ok = False
                    records.append((started, time.monotonic(), ok))
                    if not ok:
                        stop.wait(0.05)

        slow: list[tuple[float, float, bool]] = []

        def slow_request() -> None:
            started = time.monotonic()
            status = _get(f"{base}/slow?seconds={SLOW_SECONDS:g}")
            slow.append((started, time.monotonic(), status == "200"))

        ws_closes: list[tuple[int | None, float]] = []
        opened = threading.Barrier(SOCKETS + STREAMS + 1, timeout=START_TIMEOUT)

        def websocket() -> None:
            with websockets.sync.client.connect(f"ws://127.0.0.1:{port}/ws", open_timeout=CLIENT_TIMEOUT) as ws:
                opened.wait()
                try:
                    while True:
                        ws.recv(timeout=kill_after + CLIENT_TIMEOUT)
                except websockets.exceptions.ConnectionClosed as exc:
                    ws_closes.append((exc.rcvd.code if exc.rcvd is not None else None, time.monotonic()))
                except TimeoutError:
                    ws_closes.append((None, time.monotonic()))

        sse_ends: list[tuple[bool, float]] = []

        def stream() -> None:
            with httpx.Client(timeout=httpx.Timeout(CLIENT_TIMEOUT, read=kill_after + CLIENT_TIMEOUT)) as http:
                complete = False
                try:
                    with http.stream("GET", base + "/sse", headers={"Accept": "text/event-stream"}) as response:
                        lines = response.iter_lines()
                        next(lines)
                        opened.wait()
                        for _line in lines:
                            pass
                    complete = True
                except (httpx.HTTPError, threading.BrokenBarrierError):
                    complete = False
                sse_ends.append((complete, time.monotonic()))

        for target in [websocket] * SOCKETS + [stream] * STREAMS:
            threads.append(threading.Thread(target=target, daemon=True))
        for _ in range(KEEP_ALIVE_CLIENTS):
            threads.append(threading.Thread(target=client, daemon=True))
        for thread in threads:
            thread.start()
        opened.wait()
        slow_thread = threading.Thread(target=slow_request, daemon=True)
        slow_thread.start()
        time.sleep(0.3)  # the load runs, the slow request is in flight

        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)

        after: list[str] = []
        probes: list[str] = []
        health: list[str] = []

        def after_term() -> None:
            while time.monotonic() < t0 + AFTER_TERM:
                after.append(_get(base + "/"))
                time.sleep(AFTER_TERM_INTERVAL)

        def probe() -> None:
            # From T0 as the serving process knows it: the app's own "SIGNAL ShutdownInitiated" line,
            # printed where it is served (graceful serve's one process at its T0; a Gunicorn worker once
            # the master's channel brought it, a few ms after the master's). Plain servers print none:
            # from the kill, 0.2 s later at the most.
            while tail.first("SIGNAL ShutdownInitiated") is None and time.monotonic() < t0 + 0.2:
                time.sleep(0.005)
            while time.monotonic() < t0 + AFTER_TERM:
                probes.append(_get(base + "/readyz", timeout=2.0))
                if health_port is not None:
                    health.append(_get(f"http://127.0.0.1:{health_port}/readyz", timeout=2.0))
                time.sleep(PROBE_INTERVAL)

        extra = [threading.Thread(target=after_term, daemon=True), threading.Thread(target=probe, daemon=True)]
        for thread in extra:
            thread.start()
        try:
            exited = wait_exit(proc, kill_after)
        except subprocess.TimeoutExpired:
            figures.killed = True
            os.kill(proc.pid, signal.SIGKILL)
            exited = wait_exit(proc, 10)
        figures.exit_status = proc.returncode
        figures.exit_after = exited - t0
        stop.set()
        for thread in [*threads, *extra, slow_thread]:
            thread.join(CLIENT_TIMEOUT + kill_after)
        in_flight = [ok for started, ended, ok in records + slow if started < t0 < ended]
        figures.in_flight_at_term = len(in_flight)
        figures.in_flight_lost = in_flight.count(False)
        figures.after_term_sent = len(after)
        failures = [status for status in after if status != "200"]
        figures.after_term_failed = len(failures)
        figures.after_term_failures = failures
        figures.readyz_after_term = probes
        figures.health_port_after_term = health
        figures.ws_codes = [code for code, _ in ws_closes]
        figures.ws_closed_at = sorted(at - t0 for _, at in ws_closes)
        figures.sse_complete = [complete for complete, _ in sse_ends]
        figures.sse_ended_at = sorted(at - t0 for _, at in sse_ends)
        # "startup PID" / "shutdown PID" lines, one per process: the words, in order.
        figures.lifespan = [line.split()[0] for line in marker.read_text().splitlines()] if marker.exists() else []
        tail.join()
        figures.output = tail.text(80)
        return figures
    finally:
        if proc.poll() is None:
            proc.kill()


def wait_ready(base: str, proc: subprocess.Popen[str], tail: OutputTail) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}:\n{tail.text()}")
        if _get(base + "/", timeout=1.0) == "200":
            return
        time.sleep(0.05)
    raise AssertionError(f"the server did not answer within {START_TIMEOUT}s:\n{tail.text()}")
