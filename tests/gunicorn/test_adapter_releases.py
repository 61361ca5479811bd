"""The adapters' paths for other Gunicorn releases and rare events, on a real (unbound, unforked) arbiter and worker.

tests/gunicorn/test_adapter.py checks the adapters against the installed
Gunicorn; here its objects are given what an older release has (22/23's
signal list and self-pipe) or lacks, or meet what happens rarely (a dirty
arbiter with children, a listener closed under a worker). Where Gunicorn's
own method would signal a process, a recorder takes its place: nothing is
bound, forked or killed.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from graceful.gunicorn.adapter import arbiter as arbiter_module
from graceful.gunicorn.adapter.arbiter import ArbiterAdapter
from graceful.gunicorn.adapter.release import GunicornMissing, gunicorn_release
from graceful.gunicorn.adapter.worker import WorkerAdapter
from tests.gunicorn.test_adapter import app, arbiter_of, environment, worker_of, workers

__all__ = ["environment", "workers"]  # the fixtures, shared with test_adapter.py


class TestArbiterReleases:
    def test_an_arbiter_with_no_wakeup_is_refused(self, environment: None) -> None:
        """An arbiter without wakeup (every release 22-27 has one): refused in one line naming it."""
        server = arbiter_of()
        server.__class__ = type("Older", (type(server),), {"wakeup": Hidden()})
        assert not hasattr(server, "wakeup")
        with pytest.raises(GunicornMissing, match="wakeup"):
            ArbiterAdapter.probe(server)

    def test_wake_on_22_and_23_writes_the_pipe_and_queues_no_signal(self, environment: None) -> None:
        """Gunicorn 22/23 (a list plus a self-pipe): wake() writes the pipe through wakeup(); the list stays empty."""
        server = arbiter_of()
        order: list[object] = []
        server.SIG_QUEUE = SignalList(order)
        server.wakeup = lambda: order.append("wakeup")
        ArbiterAdapter.probe(server).wake()
        assert order == ["wakeup"] and list(server.SIG_QUEUE) == []

    def test_signal_workers_is_gunicorns_kill_workers(self, environment: None) -> None:
        """signal_workers sends the signal to every worker through Gunicorn's own kill_workers."""
        server = arbiter_of()
        server.WORKERS = {11: object(), 12: object()}
        killed: list[tuple[int, int]] = []
        server.kill_worker = lambda pid, signum: killed.append((pid, signum))
        ArbiterAdapter.probe(server).signal_workers(signal.SIGQUIT)
        assert killed == [(11, signal.SIGQUIT), (12, signal.SIGQUIT)]

    def test_error_log_handlers_are_gunicorns(self, environment: None) -> None:
        """graceful's lines go where Gunicorn's error log writes: its handlers, as a list."""
        server = arbiter_of()
        handlers = ArbiterAdapter.probe(server).error_log_handlers()
        assert handlers == list(server.log.error_log.handlers) and handlers


class Hidden:
    """A class attribute that reads as missing (``hasattr`` is False): an internal a release would lack."""

    def __get__(self, obj: object, owner: type | None = None) -> object:
        raise AttributeError("hidden")


class SignalList(list[object]):
    """Gunicorn 22/23's SIG_QUEUE: a plain list, appended to in order."""

    def __init__(self, order: list[object]) -> None:
        super().__init__()
        self._order = order

    def append(self, item: object) -> None:
        self._order.append(item)
        super().append(item)


class DirtyServer:
    """Gunicorn 27's arbiter as the dirty pool's part of the adapter uses it, recording what it is asked."""

    def __init__(self, dirty_pid: int) -> None:
        self.dirty_arbiter_pid = dirty_pid
        self.calls: list[str] = []

    def kill_dirty_arbiter(self, signum: int) -> None:
        self.calls.append(f"kill dirty {signal.Signals(signum).name}")

    def reap_dirty_arbiter(self) -> None:
        self.calls.append("reap dirty")


class TestDirtyPool:
    def test_signal_and_reap_reach_a_dirty_arbiter_only_when_there_is_one(self) -> None:
        """signal_dirty and reap_dirty go to Gunicorn's dirty arbiter; with none (pid 0) they do nothing."""
        running, none = DirtyServer(4321), DirtyServer(0)
        for server in (running, none):
            adapter = ArbiterAdapter(server)
            adapter.signal_dirty(signal.SIGTERM)
            adapter.reap_dirty()
        assert running.calls == ["kill dirty SIGTERM", "reap dirty"]
        assert none.calls == []

    def test_kill_dirty_tree_kills_its_workers_first_then_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The dirty arbiter's children get SIGKILL before it does (killed after, they would run on orphaned)."""
        server = DirtyServer(4321)
        killed: list[tuple[int, int]] = []

        def kill(pid: int, signum: int) -> None:
            killed.append((pid, signum))
            if pid == 4323:
                raise ProcessLookupError(pid)  # exited meanwhile: nothing to kill

        monkeypatch.setattr(arbiter_module, "_children", lambda pid: [4322, 4323] if pid == 4321 else [])
        monkeypatch.setattr(arbiter_module, "os", SimpleNamespace(kill=kill))
        ArbiterAdapter(server).kill_dirty_tree()
        assert killed == [(4322, signal.SIGKILL), (4323, signal.SIGKILL)]
        assert server.calls == ["kill dirty SIGKILL"]

    def test_children_are_read_from_proc_and_none_for_a_gone_process(self) -> None:
        """_children lists what /proc says (this process: pytest runs none here); a pid that is gone has none."""
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as listing:
            expected = [int(child) for child in listing.read().split()]
        assert arbiter_module._children(os.getpid()) == expected
        assert arbiter_module._children(2**22 + 1) == []  # above Linux's largest pid: no such process


class TestWorkerEdges:
    def test_sockets_and_app_are_the_workers(self, environment: None, workers: list[Any]) -> None:
        """sockets() copies the worker's listeners; app() is the WSGI app it loaded."""
        worker = worker_of(workers, arbiter_of())
        with socket.socket() as listener:
            worker.sockets = [listener]
            worker.wsgi = app
            adapter = WorkerAdapter.probe(worker)
            assert adapter.sockets() == [listener] and adapter.sockets() is not worker.sockets
        assert adapter.app() is app
        assert adapter.pid == os.getpid()

    def test_accept_errors_other_than_a_shut_down_listener_are_raised(
        self, environment: None, workers: list[Any]
    ) -> None:
        """guard_accept passes every other accept() error on to Gunicorn (a closed listener: EBADF)."""
        worker = worker_of(workers, arbiter_of())
        WorkerAdapter.probe(worker).guard_accept()
        listener = socket.socket()
        listener.close()
        with pytest.raises(OSError):
            worker.accept(listener)

    def test_a_worker_that_accepts_elsewhere_is_left_alone(self) -> None:
        """A worker with no accept method (gevent accepts in its servers): guard_accept changes nothing."""
        worker = SimpleNamespace()
        WorkerAdapter(worker).guard_accept()
        assert not hasattr(worker, "accept")


class TestRelease:
    def test_the_release_is_unknown_when_gunicorn_cannot_be_imported(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Messages name Gunicorn's release, or "(unknown)" when it cannot be imported."""
        assert gunicorn_release() == sys.modules["gunicorn"].__version__
        monkeypatch.setitem(sys.modules, "gunicorn", None)
        assert gunicorn_release() == "(unknown)"
