"""End-to-end: ``graceful serve`` of a Starlette app on a real Uvicorn process, real signals, real clients.

The scenario (tests/uvicorn/scenario.py) runs once on graceful and once on
plain Uvicorn (marker ``plain``: printed beside graceful's, never judged).
Delays are short (1.5 s) so each run takes about 5 s; they run in parallel.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Processes
from tests.e2e_harness import OutputTail, clean_env, free_port, wait_exit
from tests.uvicorn import scenario

pytestmark = [pytest.mark.e2e, pytest.mark.asgi]

DELAY = 1.5
SETTINGS = {
    "GRACEFUL_SHUTDOWN_DELAY": str(DELAY),
    "GRACEFUL_DRAIN_TIMEOUT": "5",
    "GRACEFUL_HOOK_TIMEOUT": "3",
    "GRACEFUL_GRACE_PERIOD": "15",
    "GRACEFUL_TERMINATION_LOG": "",
}
APP = "tests.live.asgi_app:app"


def graceful_serve(port: int, *options: str) -> list[str]:
    return [sys.executable, "-m", "graceful", "serve", APP, "--bind", f"127.0.0.1:{port}", "--no-access-log", *options]


def test_one_sigterm_under_load_keeps_every_promise(processes: Processes, tmp_path: Path) -> None:
    """In flight and sent during the delay all served, /readyz 503 from T0, WebSockets 1001 spread over the delay,
    SSE complete, lifespan shutdown run, exit 0 within the budget; the health port answers too."""
    health_port = free_port()
    figures = scenario.run(
        "graceful serve (Uvicorn)",
        lambda port: graceful_serve(port, "--health-bind", f"127.0.0.1:{health_port}"),
        lambda argv, env: processes.start(argv, env=env),
        tmp_path,
        SETTINGS,
        health_port=health_port,
    )
    print(figures.table())
    context = figures.table() + "\n" + figures.output
    assert figures.in_flight_at_term >= 1 and figures.in_flight_lost == 0, context
    assert figures.after_term_sent > 10 and figures.after_term_failed == 0, context
    assert figures.readyz_503_from_t0, context
    assert figures.health_port_after_term and set(figures.health_port_after_term) == {"503"}, context
    assert figures.ws_codes == [1001] * scenario.SOCKETS, context
    # Spread: told one after another inside the delay, not in the same instant.
    assert all(0 < at < DELAY + 0.5 for at in figures.ws_closed_at), context
    assert figures.ws_closed_at[-1] - figures.ws_closed_at[0] > 0.05, context  # plain Uvicorn: within 2 ms
    assert figures.sse_complete == [True] * scenario.STREAMS, context
    assert figures.lifespan == ["startup", "shutdown"], context
    assert figures.exit_status == 0 and not figures.killed, context
    assert figures.exit_after is not None and figures.exit_after < float(SETTINGS["GRACEFUL_GRACE_PERIOD"]), context
    assert "graceful: clean shutdown" in figures.output, context


@pytest.mark.plain
def test_plain_uvicorn_figures(processes: Processes, tmp_path: Path) -> None:
    """Plain Uvicorn under the same scenario, for the closing note: printed, never judged."""
    figures = scenario.run(
        "plain Uvicorn",
        lambda port: [sys.executable, "-m", "uvicorn", APP, "--port", str(port), "--no-access-log"],
        lambda argv, env: processes.start(argv, env=env),
        tmp_path,
        {},
        kill_after=5.0,  # with SSE open it never exits by itself: the kubelet's SIGKILL, sooner to keep CI cheap
    )
    print(figures.table())
    assert figures.exit_status is not None


def test_a_second_sigterm_exits_1_at_once(processes: Processes, tmp_path: Path) -> None:
    """SIGTERM, then SIGTERM again during the delay: exit 1 long before the delay would end."""
    port = free_port()
    proc = processes.start(
        graceful_serve(port),
        env=clean_env({**SETTINGS, "GRACEFUL_SHUTDOWN_DELAY": "30", "GRACEFUL_GRACE_PERIOD": "60"}),
    )
    tail = OutputTail(proc, "graceful")
    scenario.wait_ready(f"http://127.0.0.1:{port}", proc, tail)
    os.kill(proc.pid, signal.SIGTERM)
    assert tail.first("ShutdownInitiated") is not None or _wait_line(tail, "ShutdownInitiated")
    second = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    exited = wait_exit(proc, 10)
    print(f"second SIGTERM: exit {proc.returncode} after {exited - second:.3f}s")
    assert proc.returncode == 1, tail.text()


def _wait_line(tail: OutputTail, text: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tail.first(text) is not None:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.gunicorn
def test_gunicorn_refuses_an_asgi_app_on_a_wsgi_worker_in_one_line(processes: Processes) -> None:
    """gunicorn -c python:graceful.conf with an ASGI app (sync worker): the boot stops with one line, no 500s."""
    port = free_port()
    proc = processes.start(
        [sys.executable, "-m", "gunicorn", "-c", "python:graceful.conf", "-b", f"127.0.0.1:{port}", APP],
        env=clean_env({"GRACEFUL_TERMINATION_LOG": ""}),
    )
    try:
        output, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    refusals = [line for line in output.splitlines() if "the app is an ASGI app" in line]
    assert proc.returncode != 0, output
    assert len(refusals) >= 1 and "Traceback" not in output, output
