"""Gunicorn 27's dirty pool and 25.1's control socket under graceful, with real processes and signals.

The dirty pool (``--dirty-workers``, ``--dirty-app``) runs blocking tasks
for the HTTP workers in processes of its own, under a dirty arbiter the
master forks. graceful stops it only after the HTTP workers (and their
requests waiting on it) are done, and a second TERM leaves none of it
behind. The control socket's ``worker kill`` and ``worker remove`` are
logged with their reasons. Skipped, with the reason, on older Gunicorn.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.gunicorn.test_gunicorn import ALL_WORKERS, Server, _gunicorn_version, get
from tests.gunicorn.test_gunicorn import gunicorn as gunicorn

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn]

DIRTY_APP = "tests.live.dirty_app:app"


def dirty_options(graceful_timeout: tuple[str, ...] = ("--dirty-graceful-timeout", "5")) -> tuple[str, ...]:
    """The dirty pool's options, with a process name of the test's own: Gunicorn keeps the dirty arbiter's
    pid in a file named after it (in the temporary directory every test shares), and kills the pid it
    finds there at start-up as an orphan: two tests with one name would kill each other's."""
    return (
        *("--name", f"graceful-dirty-{uuid.uuid4().hex}"),
        *("--dirty-workers", "1", "--dirty-app", "tests.live.dirty_app:Sleeper", *graceful_timeout),
    )


needs_dirty = pytest.mark.skipif(_gunicorn_version() < (27, 0), reason="dirty workers exist from Gunicorn 27")
needs_control_socket = pytest.mark.skipif(
    _gunicorn_version() < (25, 1), reason="the control socket exists from Gunicorn 25.1"
)


def dirty_pids(server: Server) -> list[int]:
    """The dirty arbiter's pid and its workers' (children in /proc), as they are now."""
    [line] = server.wait_for(r"Spawned dirty arbiter \(pid: (\d+)\)")
    match = re.search(r"Spawned dirty arbiter \(pid: (\d+)\)", line)
    assert match is not None
    arbiter = int(match.group(1))
    with open(f"/proc/{arbiter}/task/{arbiter}/children") as listing:
        return [arbiter, *(int(pid) for pid in listing.read().split())]


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_dirty_ready(server: Server) -> None:
    """Until one dirty call succeeds (its worker has loaded the app); bounded."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if get(server, "/dirty?ms=1").status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError("the dirty pool never answered:\n" + "\n".join(server.lines))


@needs_dirty
class TestDirtyPool:
    @pytest.mark.parametrize("kind", ALL_WORKERS)
    def test_requests_waiting_on_dirty_tasks_complete(self, gunicorn, kind: str) -> None:  # type: ignore[no-untyped-def]
        """SIGTERM with two requests waiting on 2 s dirty tasks: both answered; the pool stops after the workers."""
        server = gunicorn(kind, args=dirty_options(), app=DIRTY_APP, env={"GRACEFUL_SHUTDOWN_DELAY": "0.5"})
        wait_dirty_ready(server)
        with ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(get, server, "/dirty?ms=2000") for _ in range(2)]
            time.sleep(0.3)  # both waiting on the dirty pool
            server.term()
            assert [(r.status_code, r.text) for r in (c.result() for c in calls)] == [(200, "2000")] * 2
        assert server.exit_code() == 0
        lines = server.lines
        last_worker = max(i for i, line in enumerate(lines) if "Worker exiting" in line)
        dirty_exit = next(i for i, line in enumerate(lines) if re.search(r"Dirty arbiter \(pid:\d+\) exited", line))
        assert dirty_exit > last_worker, "\n".join(lines)

    def test_gracefuls_defaults_boot_with_a_dirty_pool(self, gunicorn) -> None:  # type: ignore[no-untyped-def]
        """No --dirty-graceful-timeout, graceful's drain and hook timeouts: it boots, the pool gets what the grace
        period leaves (30 - 0.5 - 21 s), and a SIGTERM with a dirty call in flight answers it and exits 0."""
        defaults = {"GRACEFUL_SHUTDOWN_DELAY": "0.5", "GRACEFUL_DRAIN_TIMEOUT": "15", "GRACEFUL_HOOK_TIMEOUT": "5"}
        server = gunicorn("gthread", args=dirty_options(graceful_timeout=()), app=DIRTY_APP, env=defaults)
        server.wait_for(r"graceful: dirty_graceful_timeout derived: 8s, .* \(21s\)")
        wait_dirty_ready(server)
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(get, server, "/dirty?ms=1000")
            time.sleep(0.3)  # waiting on the dirty pool
            server.term()
            assert (call.result().status_code, call.result().text) == (200, "1000")
        assert server.exit_code() == 0

    def test_hup_does_not_fail_dirty_calls_in_flight(self, gunicorn) -> None:  # type: ignore[no-untyped-def]
        """HUP while requests wait on 1.5 s dirty tasks: the dirty pool reloads, and both calls are answered."""
        server = gunicorn("gthread", args=dirty_options(), app=DIRTY_APP)
        wait_dirty_ready(server)
        with ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(get, server, "/dirty?ms=1500") for _ in range(2)]
            time.sleep(0.3)  # both waiting on the dirty pool
            server.proc.send_signal(signal.SIGHUP)
            server.wait_for(r"Reloading dirty workers")
            assert [(r.status_code, r.text) for r in (c.result() for c in calls)] == [(200, "1500")] * 2
        server.term()
        assert server.exit_code() == 0

    def test_a_second_term_leaves_no_dirty_process(self, gunicorn) -> None:  # type: ignore[no-untyped-def]
        """A second SIGTERM exits 1 at once and kills the dirty arbiter and its workers with the master."""
        server = gunicorn("gthread", args=dirty_options(), app=DIRTY_APP, env={"GRACEFUL_SHUTDOWN_DELAY": "5"})
        wait_dirty_ready(server)
        dirty = dirty_pids(server)
        assert len(dirty) >= 2  # the arbiter and its worker
        server.term()
        server.wait_for(r"graceful: ShutdownInitiated")
        server.term()
        assert server.proc.wait(10) == 1  # the master alone: its output ends only when the dirty processes' does
        # SIGKILLed before the master exits: gone at once. Left alone, the dirty arbiter runs on until
        # its own loop notices the master is gone (about a second), then stops its workers.
        deadline = time.monotonic() + 0.5
        while not all(gone(pid) for pid in dirty) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [pid for pid in dirty if not gone(pid)] == []
        assert server.exit_code(10) == 1


@needs_control_socket
class TestControlSocket:
    def ctl(self, socket_path: Path, *command: str) -> str:
        argv = [str(Path(sys.executable).parent / "gunicornc"), "-s", str(socket_path), "-c", " ".join(command)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout

    @pytest.mark.parametrize(("command", "reason"), [("kill", "worker kill"), ("remove", "scale-in")])
    def test_worker_kill_and_remove_say_why(self, gunicorn, tmp_path: Path, command: str, reason: str) -> None:  # type: ignore[no-untyped-def]
        """``worker kill PID`` and ``worker remove`` stop a worker that logs why, as a process stop."""
        socket_path = tmp_path / "g.ctl"
        server = gunicorn("sync", args=("--control-socket", str(socket_path)), control_socket=True)
        server.wait_for(r"Booting worker with pid: \d+", count=2)
        time.sleep(0.5)  # the control socket starts after the workers
        pids = sorted(int(p) for p in re.findall(r"Booting worker with pid: (\d+)", "\n".join(server.lines)))
        self.ctl(socket_path, "worker", command, *([str(pids[0])] if command == "kill" else []))
        [line] = server.wait_for(rf"graceful: worker \d+ stopped \({re.escape(reason)}\)")
        assert "ShutdownInitiated" not in "\n".join(server.lines)
        server.term()
        assert server.exit_code() == 0
        assert line
