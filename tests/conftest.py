"""Shared fixtures: starting helper processes and always cleaning them up by PID."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import importlib.util
import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import graceful
import graceful.core.default
from graceful.core.lifecycle import Lifecycle

ROOT = Path(__file__).resolve().parent.parent

#: The timeline in default mode when the pre-shutdown hooks end before the delay does.
QUICK_HOOKS_ORDER = [
    "ShutdownInitiated",
    "PreShutdownHooksStopped",
    "AfterShutdownDelayDuration",
    "NotAcceptingNewRequests",
    "HTTPServerStoppedListening",
    "InFlightRequestsDrained",
    "CleanupFinished",
]
LIVE = Path(__file__).resolve().parent / "live"

# tests/django needs Django, an optional extra: the django42 and django52 tox envs install it
# and run that folder alone (an env without Django collects no test there, and fails).
if importlib.util.find_spec("django") is None:
    collect_ignore = ["django"]


#: Where each process keeps the figures tables of its session: title -> (header, rows).
_FIGURES = pytest.StashKey[dict[str, tuple[list[str], list[list[str]]]]]()
#: Under pytest-xdist, the key of a worker's tables in what it sends the controller at its end.
_FIGURES_OUTPUT = "graceful_figures"


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_FIGURES] = {}
    parallel = config.getoption("numprocesses", None) and config.getoption("dist", None) == "loadgroup"
    if parallel and pytest.version_tuple[:2] >= (9, 2):
        xdist = tuple(int(part) for part in importlib.metadata.version("pytest-xdist").split(".")[:2])
        if xdist <= (3, 8):  # it would run the groups' tests on every worker, at once, and say nothing
            raise pytest.UsageError(
                f"pytest-xdist {'.'.join(map(str, xdist))} cannot group xdist_group tests on pytest"
                f" {pytest.__version__} (pytest-dev/pytest-xdist#1386): install pytest<9.2, or run with -n 0"
            )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of an xdist_group first (each group runs on one pytest-xdist worker, in order).

    The load suite's modules are such groups (``load-*``): at most one test of each puts the
    machine under load at a time, beside the other workers' tests. Their chains are the
    longest, so they start first; the other tests fill the other workers around them.
    """
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)  # stable: order kept within


def add_figures(config: pytest.Config, title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Add rows to the table ``title``, printed once in the session's final summary (shown without -s).

    Under pytest-xdist each worker's rows reach the controller, which prints the one table: a
    module's tests may run on several workers.
    """
    tables = config.stash[_FIGURES]
    tables.setdefault(title, (list(header), []))[1].extend([list(row) for row in rows])
    worker_output = getattr(config, "workeroutput", None)  # set on an xdist worker only
    if worker_output is not None:
        worker_output[_FIGURES_OUTPUT] = {name: [head, body] for name, (head, body) in tables.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the xdist controller: take in the tables of a worker that finished."""
    output = getattr(node, "workeroutput", {})
    for title, (header, rows) in output.get(_FIGURES_OUTPUT, {}).items():
        add_figures(node.config, title, header, rows)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    tables = config.stash[_FIGURES]
    if not tables or getattr(config, "workeroutput", None) is not None:
        return
    from tests.e2e_harness import markdown_table  # only sessions with figures need the harness

    for title, (header, rows) in tables.items():
        terminalreporter.write_sep("-", title)
        for line in markdown_table(header, rows):
            terminalreporter.write_line(line)


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
        """Kill each process's whole group (its workers too, even if it exited), then close pipes."""
        for proc in self.started:
            # start_new_session made each process a group leader: orphaned children
            # (a Gunicorn master's workers) are still in its group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        for proc in self.started:
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture(autouse=True)
def collector_unfrozen() -> Iterator[None]:
    """Every test leaves the garbage collector unfrozen: an exit path under test (worker_exit, on_exit) freezes it."""
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def default_lifecycle(monkeypatch: pytest.MonkeyPatch) -> Lifecycle:
    """Every test gets a fresh ``graceful.default_lifecycle``, so none leaves hooks, settings or fired signals behind.

    Flask's one claim on the default lifecycle is renewed with it: the first
    ``Graceful()`` of each test takes this one.
    """
    fresh = Lifecycle()
    monkeypatch.setattr(graceful.core.default, "default_lifecycle", fresh)
    monkeypatch.setattr(graceful, "default_lifecycle", fresh)
    extension = sys.modules.get("graceful.flask")
    if extension is not None:
        monkeypatch.setattr(extension, "_default_claims", itertools.count())
    return fresh


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Start processes in a test; every one is killed (by PID) at the end."""
    procs = Processes()
    try:
        yield procs
    finally:
        procs.cleanup()


class _Lines:
    """Reads a process's output on a thread, so no line is lost between select() and a buffer."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                self.queue.put(line.rstrip("\n"))
        except (ValueError, OSError):
            pass  # its owner closed the stream (the test's end, a cleanup): nothing more to read
        finally:
            self.queue.put(None)


_readers: dict[int, _Lines] = {}


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 30.0) -> list[str]:
    """Read lines from ``proc`` until one contains ``marker``; fail after ``timeout`` seconds."""
    reader = _readers.get(proc.pid)
    if reader is None:
        reader = _readers[proc.pid] = _Lines(proc)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            line = reader.queue.get(timeout=max(0.01, remaining))
        except queue.Empty:
            line = None
        if line is None or remaining <= 0:
            raise AssertionError(f"{marker!r} not seen within {timeout}s; output so far:\n" + "\n".join(lines))
        lines.append(line)
        if marker in line:
            return lines
