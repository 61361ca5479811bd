"""Tests for graceful.process.trap: injected signals in-process, real signals in a subprocess."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from graceful.process.trap import SignalTrap
from tests.conftest import QUICK_HOOKS_ORDER, Processes, read_until


class TestInjected:
    def test_first_signal_requests_shutdown_once(self) -> None:
        """The first signal calls on_first with its number, on the trap's thread."""
        calls: list[tuple[int, str]] = []
        done = threading.Event()

        def on_first(signum: int) -> None:
            calls.append((signum, threading.current_thread().name))
            done.set()

        trap = SignalTrap(on_first, exit=lambda code: None)
        trap.deliver(signal.SIGTERM)
        assert done.wait(5)
        trap.uninstall()
        assert calls == [(signal.SIGTERM, "graceful-signals")]

    def test_second_signal_exits_one(self) -> None:
        """A second signal, of either kind, calls exit(1) and not on_first again."""
        firsts: list[int] = []
        exits: list[int] = []
        exited = threading.Event()

        def fake_exit(code: int) -> None:
            exits.append(code)
            exited.set()

        trap = SignalTrap(firsts.append, exit=fake_exit)
        trap.deliver(signal.SIGTERM)
        trap.deliver(signal.SIGINT)
        assert exited.wait(5)
        assert firsts == [signal.SIGTERM] and exits == [1]

    def test_install_off_main_thread_is_refused(self) -> None:
        """Python only lets the main thread install handlers: say so clearly."""
        errors: list[BaseException] = []

        def install() -> None:
            try:
                SignalTrap(lambda s: None).install()
            except RuntimeError as exc:
                errors.append(exc)

        t = threading.Thread(target=install)
        t.start()
        t.join(5)
        assert errors and "main thread" in str(errors[0])

    def test_uninstall_restores_previous_handlers(self) -> None:
        """After uninstall, SIGTERM and SIGINT have the handlers they had before."""
        before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
        trap = SignalTrap(lambda s: None).install()
        assert signal.getsignal(signal.SIGTERM) != before[0]
        trap.uninstall()
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


@pytest.mark.e2e
class TestRealSignals:
    def test_sigterm_runs_the_whole_timeline_and_exits_zero(self, processes: Processes) -> None:
        """A real SIGTERM fires every signal in order and the process exits 0."""
        proc = processes.python("trap_app.py", "ok")
        read_until(proc, "ready")
        proc.send_signal(signal.SIGTERM)
        lines = read_until(proc, "exiting")
        assert proc.wait(30) == 0
        assert [line for line in lines if not line.startswith(("INFO", "WARNING", "exiting"))] == QUICK_HOOKS_ORDER

    def test_second_signal_exits_one_at_once(self, processes: Processes) -> None:
        """A second SIGTERM during a slow pre-shutdown hook exits 1 well before the hook ends."""
        proc = processes.python("trap_app.py", "slow-pre")
        read_until(proc, "ready")
        proc.send_signal(signal.SIGTERM)
        read_until(proc, "ShutdownInitiated")
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 1
        # The hook would hold the process 5 s; generous bound for a loaded machine.
        assert time.monotonic() - sent < 4

    def test_hung_cleanup_task_does_not_hold_the_process(self, processes: Processes) -> None:
        """A cleanup task that sleeps forever is abandoned at its timeout and the process exits 0."""
        proc = processes.python("trap_app.py", "hung-cleanup")
        read_until(proc, "ready")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        lines = read_until(proc, "exiting")
        assert proc.wait(20) == 0
        # delay 0.2 + drain 0 + task timeout 1; an hour if the thread were joined.
        assert time.monotonic() - sent < 10
        assert any("cleanup task 'hang' timed out after running 1.000s" in line for line in lines)
