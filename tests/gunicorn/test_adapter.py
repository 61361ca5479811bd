"""Unit tests of graceful.gunicorn.adapter against the Gunicorn that is installed, in this process.

A real ``gunicorn.arbiter.Arbiter`` and real worker objects are built (as
Gunicorn builds them before it binds or forks) and probed: every tox
environment checks the adapter against its own Gunicorn release. Nothing is
bound, forked or run; a stand-in takes the real arbiter's place only where
Gunicorn's own method would act (reload, stop).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType, SimpleNamespace
from typing import Any

import gunicorn
import pytest
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.workers.sync import SyncWorker

from graceful.gunicorn.adapter import worker as worker_adapter
from graceful.gunicorn.adapter.arbiter import ArbiterAdapter, ExitStatus
from graceful.gunicorn.adapter.release import GunicornMissing
from graceful.gunicorn.adapter.worker import WorkerAdapter
from tests.gunicorn.fakes import signal_this_process

SOON = 10.0


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [])
    return [b"ok"]


#: How each child of the exit-status tests ends, as a Python program.
_ENDINGS = {
    "exit 0": "pass",
    "exit 5": "import sys; sys.exit(5)",
    "SIGKILL": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
}


class Application(BaseApplication):  # type: ignore[misc]  # Gunicorn has no type hints
    """A Gunicorn application configured in code, as an embedding program would."""

    def __init__(self, **options: object) -> None:
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for name, value in self.options.items():
            self.cfg.set(name, value)

    def load(self) -> Any:
        return app


@pytest.fixture
def environment() -> Iterator[None]:
    """Gunicorn's Arbiter writes SERVER_SOFTWARE into the environment: restore it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def arbiter_of(**options: object) -> Any:
    options.setdefault("bind", ["127.0.0.1:8123"])
    return Arbiter(Application(**options))


@pytest.fixture
def workers() -> Iterator[list[Any]]:
    """The workers a test builds; each one's heartbeat file (WorkerTmp) is closed at the end."""
    built: list[Any] = []
    yield built
    for worker in built:
        worker.tmp.close()


def worker_of(built: list[Any], arbiter: Any, cls: type = SyncWorker) -> Any:
    """A worker as the master builds it just before the fork."""
    worker = cls(1, os.getpid(), [], arbiter.app, arbiter.timeout, arbiter.cfg, arbiter.log)
    built.append(worker)
    return worker


@contextlib.contextmanager
def shut_down_listener() -> Iterator[socket.socket]:
    """A listening socket the way the master leaves one it stopped listening on (shut down for reading)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.shutdown(socket.SHUT_RD)
        yield listener


class TestArbiterProbe:
    def test_this_gunicorns_arbiter_has_everything(self, environment: None) -> None:
        """The installed Gunicorn passes the probe, and the facts read back as configured."""
        arbiter = arbiter_of(graceful_timeout=17, timeout=9, worker_class="gthread", threads=2)
        adapter = ArbiterAdapter.probe(arbiter)
        assert adapter.worker_pids() == set() and adapter.listeners() == []
        assert adapter.graceful_timeout() == 17 and adapter.worker_timeout() == 9
        assert adapter.binds() == ["127.0.0.1:8123"] and adapter.worker_class_setting() == "gthread"
        assert not adapter.workers_own_listeners() and not adapter.listeners_shared_with_others()
        assert adapter.successor_pid() == 0 and adapter.predecessor_pid() == 0

    def test_sockets_from_elsewhere_are_shared(self, environment: None) -> None:
        """Listeners passed as fd:// (or by systemd, or to a USR2 peer) must stay open for their other owner."""
        adapter = ArbiterAdapter.probe(arbiter_of(bind=["fd://3"]))
        assert adapter.listeners_shared_with_others()

    def test_a_missing_internal_is_refused_in_one_line(self) -> None:
        """An arbiter without an internal graceful uses: one line naming the release and what is missing."""
        incomplete = SimpleNamespace(cfg=SimpleNamespace())
        with pytest.raises(GunicornMissing) as refused:
            ArbiterAdapter.probe(incomplete)
        message = str(refused.value)
        assert message.startswith(f"graceful: Gunicorn {gunicorn.__version__}'s arbiter has no WORKERS, LISTENERS,")
        assert message.endswith(": graceful supports Gunicorn 22 to 27") and "\n" not in message


class TestArbiterActions:
    def test_wake_is_gunicorns_own_wakeup_and_forges_no_signal(self, environment: None) -> None:
        """The hand-over wakes Gunicorn's loop with its own wake-up (24+: WAKEUP_REQUEST; 22/23: the pipe), no TERM."""
        arbiter = arbiter_of()
        queue = arbiter.SIG_QUEUE
        if hasattr(queue, "get_nowait"):
            ArbiterAdapter.probe(arbiter).wake()
            assert queue.get_nowait() == arbiter.WAKEUP_REQUEST != signal.SIGTERM
        else:
            read, write = os.pipe()
            arbiter.PIPE = [read, write]  # made by Gunicorn's init_signals, which this test does not run
            try:
                ArbiterAdapter.probe(arbiter).wake()
                assert os.read(read, 1) and queue == []
            finally:
                os.close(read)
                os.close(write)

    def test_the_term_handler_replaces_gunicorns_and_raises_nothing(self, environment: None) -> None:
        """on_term: the main loop's TERM handling calls graceful's handler; nothing is raised for the loop."""
        arbiter = arbiter_of()
        calls: list[str] = []
        ArbiterAdapter.probe(arbiter).on_term(lambda: calls.append("term"))
        assert arbiter.handle_term() is None and calls == ["term"]

    def test_after_loop_wait_runs_before_each_murder_workers(self, environment: None) -> None:
        """after_loop_wait: the callback runs on each pass of the loop, before Gunicorn's murder_workers."""
        arbiter = arbiter_of()
        order: list[str] = []
        arbiter.murder_workers = lambda: order.append("murder")
        ArbiterAdapter.probe(arbiter).after_loop_wait(lambda: order.append("pass"))
        arbiter.murder_workers()
        arbiter.murder_workers()
        assert order == ["pass", "murder", "pass", "murder"]

    def test_each_workers_exit_status_is_seen_before_gunicorn_reaps_it(self, environment: None) -> None:
        """on_worker_exit: Gunicorn's own reap_workers reaps as always; graceful saw each status just before."""
        arbiter = arbiter_of()
        seen: dict[int, ExitStatus] = {}
        ArbiterAdapter.probe(arbiter).on_worker_exit(lambda pid, status: seen.__setitem__(pid, status))
        children = {}
        # Children spawned, not forked: a fork from this multi-threaded process warns on Python 3.12+.
        for how, code in _ENDINGS.items():
            pid = os.posix_spawn(sys.executable, [sys.executable, "-c", code], os.environ)
            children[how] = pid
            arbiter.WORKERS[pid] = SimpleNamespace(tmp=SimpleNamespace(close=lambda: None), pid=pid)
        for pid in children.values():  # each one has ended (not reaped: WNOWAIT)
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        arbiter.reap_workers()
        assert arbiter.WORKERS == {}  # Gunicorn reaped them all
        assert seen == {
            children["exit 0"]: ExitStatus(status=0),
            children["exit 5"]: ExitStatus(status=5),
            children["SIGKILL"]: ExitStatus(signal=signal.SIGKILL),
        }
        assert seen[children["SIGKILL"]].signal_name == "SIGKILL" and seen[children["exit 0"]].normal

    def test_the_dirty_arbiters_exit_status_is_seen_as_gunicorn_handles_it(self, environment: None) -> None:
        """on_dirty_exit: Gunicorn 27 hands the dirty arbiter's wait status to its handler, seen first; 22-26: none."""
        arbiter = arbiter_of()
        seen: list[tuple[int, ExitStatus]] = []
        handled = hasattr(arbiter, "handle_dirty_arbiter_exit")
        ArbiterAdapter.probe(arbiter).on_dirty_exit(lambda pid, status: seen.append((pid, status)))
        if not handled:  # Gunicorn 22-26: no dirty pool, nothing wrapped
            assert not hasattr(arbiter, "handle_dirty_arbiter_exit")
            return
        pid = os.posix_spawn(sys.executable, [sys.executable, "-c", _ENDINGS["SIGKILL"]], os.environ)
        _, status = os.waitpid(pid, 0)
        arbiter.dirty_arbiter_pid = pid
        arbiter.handle_dirty_arbiter_exit(pid, status)
        assert seen == [(pid, ExitStatus(signal=signal.SIGKILL))]
        assert arbiter.dirty_arbiter_pid == 0  # Gunicorn's own handling followed

    def test_halt_is_gunicorns_halt(self, environment: None) -> None:
        """halt_gunicorn: Gunicorn's own halt() (its stop, on_exit, exit 0), called once."""
        arbiter = arbiter_of()
        halted: list[str] = []
        arbiter.halt = lambda: halted.append("halt")
        ArbiterAdapter.probe(arbiter).halt_gunicorn()
        assert halted == ["halt"]

    def test_loop_ticks_are_seen_on_both_periodic_calls(self, environment: None) -> None:
        """murder_workers and reap_workers each tick before Gunicorn's own runs."""
        arbiter = arbiter_of()
        ticks: list[int] = []
        ArbiterAdapter.probe(arbiter).on_loop_tick(lambda: ticks.append(1))
        arbiter.murder_workers()
        arbiter.reap_workers()
        assert len(ticks) == 2

    def test_reload_stop_and_reexec_are_intercepted_in_order(self) -> None:
        """before_* callbacks run before Gunicorn's method; around_reexec wraps the re-exec."""
        calls: list[str] = []

        class StandIn:
            def handle_hup(self) -> None:
                calls.append("hup")

            def stop(self, graceful: bool = True) -> None:
                calls.append(f"stop({graceful})")

            def reexec(self) -> None:
                calls.append("reexec")

        server: Any = StandIn()
        adapter = ArbiterAdapter(server)
        adapter.before_reload(lambda: calls.append("reason reload"))
        adapter.before_stop(lambda: calls.append("hand the health port over"))

        def wrapper(reexec: Any) -> object:
            calls.append("pass the listener on")
            return reexec()

        adapter.around_reexec(wrapper)
        server.handle_hup()
        server.stop(False)
        server.reexec()
        assert calls == [
            "reason reload",
            "hup",
            "hand the health port over",
            "stop(False)",
            "pass the listener on",
            "reexec",
        ]

    def test_the_control_sockets_worker_kill_is_intercepted_once_it_starts(self) -> None:
        """Gunicorn starts its control socket in its loop: once it has, ``worker kill`` calls ours first."""
        calls: list[str] = []

        class Handlers:
            def worker_kill(self, pid: int) -> dict[str, object]:
                calls.append(f"TERM {pid}")
                return {"success": True}

        class StandIn:
            _control_server: Any = None

            def _start_control_server(self) -> None:
                self._control_server = SimpleNamespace(handlers=Handlers())

        server: Any = StandIn()
        ArbiterAdapter(server).before_control_worker_kill(lambda: calls.append("reason worker kill"))
        server._start_control_server()
        assert server._control_server.handlers.worker_kill(42) == {"success": True}
        assert calls == ["reason worker kill", "TERM 42"]

    def test_no_control_socket_no_interception(self, environment: None) -> None:
        """A release without the control socket, or one whose start failed, is left as it is."""
        ArbiterAdapter(SimpleNamespace()).before_control_worker_kill(lambda: None)
        server: Any = SimpleNamespace(_control_server=None)
        server._start_control_server = lambda: None
        ArbiterAdapter(server).before_control_worker_kill(lambda: None)
        server._start_control_server()
        assert server._control_server is None

    def test_the_dirty_pool_counts_only_when_configured(self, environment: None) -> None:
        """dirty_graceful_timeout enters the budget only with dirty workers and apps (Gunicorn 27+)."""
        adapter = ArbiterAdapter.probe(arbiter_of())
        assert adapter.dirty_graceful_timeout() == 0 and adapter.dirty_pid() == 0
        adapter.kill_dirty_tree()  # no dirty arbiter: nothing to kill, nothing raised
        configured = SimpleNamespace(cfg=SimpleNamespace(dirty_workers=2, dirty_apps=["a:B"], dirty_graceful_timeout=7))
        assert ArbiterAdapter(configured).dirty_graceful_timeout() == 7

    def test_front_os_signals_runs_ours_with_gunicorns_handler(self, environment: None) -> None:
        """A real OS signal reaches graceful's handler first, with Gunicorn's handler to pass it on to."""
        got: list[tuple[int, bool]] = []
        passed = threading.Event()

        def gunicorns(signum: int, frame: FrameType | None) -> None:
            passed.set()

        def ours(signum: int, frame: FrameType | None, gunicorn_handler: Any) -> None:
            got.append((signum, gunicorn_handler is gunicorns))
            gunicorn_handler(signum, frame)

        previous = signal.signal(signal.SIGUSR2, gunicorns)
        try:
            ArbiterAdapter.probe(arbiter_of()).front_os_signals((signal.SIGUSR2,), ours)
            signal_this_process(signal.SIGUSR2)
            assert passed.wait(SOON)
        finally:
            signal.signal(signal.SIGUSR2, previous)
        assert got == [(signal.SIGUSR2, True)]


class TestWorkerProbe:
    def test_this_gunicorns_sync_worker_has_everything(self, environment: None, workers: list[Any]) -> None:
        """A real sync worker passes the probe; its facts and its drain bound read and write through."""
        arbiter = arbiter_of(graceful_timeout=30)
        worker = worker_of(workers, arbiter)
        adapter = WorkerAdapter.probe(worker)
        assert adapter.kind == "sync" and adapter.requests_served() == 0
        assert adapter.max_requests() == sys.maxsize  # no max_requests configured
        assert adapter.graceful_timeout() == 30
        adapter.bound_gunicorn_drain(2.5)
        assert worker.cfg.graceful_timeout == 3  # Gunicorn wants a whole number of seconds
        assert adapter.is_alive()
        adapter.stop_loop()
        assert not adapter.is_alive()

    def test_a_term_is_noted_before_gunicorns_handler(self, environment: None, workers: list[Any]) -> None:
        """before_term_handler: graceful's note first, then Gunicorn's own handle_exit (alive = False)."""
        worker = worker_of(workers, arbiter_of())
        noted: list[bool] = []
        adapter = WorkerAdapter.probe(worker)
        adapter.before_term_handler(lambda signum, frame: noted.append(worker.alive))
        worker.handle_exit(signal.SIGTERM, None)
        assert noted == [True] and not worker.alive

    def test_accept_on_a_listener_shut_down_idles_instead_of_failing(
        self, environment: None, workers: list[Any]
    ) -> None:
        """guard_accept: EINVAL from a listener the master shut down returns nothing; the worker lives on."""
        worker = worker_of(workers, arbiter_of())
        WorkerAdapter.probe(worker).guard_accept()
        with shut_down_listener() as listener:
            with pytest.raises(OSError) as raw:
                listener.accept()
            assert raw.value.errno == errno.EINVAL  # what the guard is for
            assert worker.accept(listener) is None

    def test_the_pause_after_a_shut_down_listener_ends_when_a_signal_arrives(
        self, environment: None, workers: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """guard_accept's pause ends on a byte in Gunicorn's signal pipe (the wakeup fd), not at its 30 s bound."""
        worker = worker_of(workers, arbiter_of())
        read, write = os.pipe()
        os.set_blocking(read, False)
        worker.PIPE = [read, write]  # made by Gunicorn's init_process, which this test does not run
        monkeypatch.setattr(worker_adapter, "_ACCEPT_PAUSE", 30.0)
        WorkerAdapter.probe(worker).guard_accept()
        returned = threading.Event()

        def signals() -> None:  # what Python's C-level handler does for each signal, until the pause ends
            for _ in range(1000):
                os.write(write, bytes([signal.SIGTERM]))
                if returned.wait(0.01):
                    return

        sender = threading.Thread(target=signals)
        try:
            with shut_down_listener() as listener:
                started = time.monotonic()
                sender.start()
                assert worker.accept(listener) is None
                returned.set()
                assert time.monotonic() - started < 10  # woken, far before the 30 s bound
        finally:
            returned.set()
            sender.join(timeout=15)
            os.close(read)
            os.close(write)

    def test_with_stop_accepting_a_shut_down_listener_stops_the_accepting_instead_of_pausing(
        self, environment: None, workers: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """guard_accept(stop_accepting) (gthread): EINVAL calls it and returns at once, with no pause (30 s here)."""
        worker = worker_of(workers, arbiter_of())
        monkeypatch.setattr(worker_adapter, "_ACCEPT_PAUSE", 30.0)
        stopped: list[bool] = []
        WorkerAdapter.probe(worker).guard_accept(lambda: stopped.append(True))
        with shut_down_listener() as listener:
            started = time.monotonic()
            assert worker.accept(listener) is None
            assert time.monotonic() - started < 10 and stopped == [True]

    def test_a_worker_already_leaving_does_not_pause_and_earlier_signals_are_drained(
        self, environment: None, workers: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """alive False (TERM handled): no pause; bytes of earlier signals are read, so none ends a later pause."""
        worker = worker_of(workers, arbiter_of())
        read, write = os.pipe()
        os.set_blocking(read, False)
        worker.PIPE = [read, write]
        monkeypatch.setattr(worker_adapter, "_ACCEPT_PAUSE", 30.0)
        WorkerAdapter.probe(worker).guard_accept()
        os.write(write, bytes([signal.SIGUSR1, signal.SIGTERM]))
        worker.alive = False
        try:
            with shut_down_listener() as listener:
                started = time.monotonic()
                assert worker.accept(listener) is None
                assert time.monotonic() - started < 10  # no 30 s pause
            with pytest.raises(BlockingIOError):
                os.read(read, 1)  # drained
        finally:
            os.close(read)
            os.close(write)

    def test_a_missing_internal_is_refused_in_one_line(self) -> None:
        """A worker without an internal graceful uses: one line naming the release and what is missing."""
        incomplete = SimpleNamespace(alive=True, nr=0, max_requests=1, sockets=[], cfg=SimpleNamespace())
        with pytest.raises(GunicornMissing, match=r"'s worker has no handle_exit: graceful supports Gunicorn"):
            WorkerAdapter.probe(incomplete)
