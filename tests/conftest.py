"""Shared fixtures: starting helper processes and always cleaning them up by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIVE = Path(__file__).resolve().parent / "live"


class Processes:
    """Starts subprocesses for one test and kills whatever is left, by PID."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def python(self, script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``python tests/live/SCRIPT ARGS`` with the repo importable; text stdout pipe."""
        full_env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **(env or {}))
        return self.start([sys.executable, str(LIVE / script), *args], env=full_env)

    def start(
        self, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[str]:
        """Start ``argv`` in its own process group, stdout piped, stderr merged."""
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd or ROOT,
            start_new_session=True,
        )
        self.started.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Start processes in a test; every one is killed (by PID) at the end."""
    procs = Processes()
    try:
        yield procs
    finally:
        procs.cleanup()


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 30.0) -> list[str]:
    """Read lines from ``proc`` until one contains ``marker``; fail after ``timeout`` seconds."""
    import selectors
    import time

    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if marker in line:
                return lines
    finally:
        sel.unregister(proc.stdout)
    raise AssertionError(f"{marker!r} not seen within {timeout}s; output so far:\n" + "\n".join(lines))
