"""Fakes of the two Gunicorn adapters, so the master's and a worker's shutdown run in a unit test.

:class:`FakeArbiter` implements :class:`graceful.gunicorn.adapter.arbiter.Arbiter`
and :class:`FakeWorker` :class:`graceful.gunicorn.adapter.worker.Worker`. Each
records what graceful asked of it, in order, in ``calls``, and lets a test play
Gunicorn's part: deliver the main loop's TERM (:meth:`FakeArbiter.term`), a
pass of its loop (:meth:`FakeArbiter.loop_pass`), a HUP or TTOU, an OS
signal, workers that exit when TERMed or linger.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from graceful.gunicorn.adapter.arbiter import ExitStatus, GunicornHandler, OsSignalHandler
from graceful.gunicorn.adapter.gevent import GeventServers
from graceful.gunicorn.adapter.gthread import GthreadLoop
from graceful.gunicorn.adapter.worker import TermHandler
from graceful.gunicorn.http2 import Http2Drain, Http2Server


class FakeArbiter:
    """Gunicorn's arbiter as the master's part of graceful sees it."""

    def __init__(
        self,
        workers: tuple[int, ...] = (11, 12),
        *,
        graceful_timeout: float = 30.0,
        successor: int = 0,
        predecessor: int = 0,
        app_uri: str = "app:app",
        shared_listeners: bool = False,
        own_listeners: bool = False,
        exit_on: tuple[int, ...] = (signal.SIGTERM, signal.SIGQUIT, signal.SIGKILL),
        dirty: int = 0,
        dirty_graceful_timeout: float = 30.0,
        dirty_exit_on: tuple[int, ...] = (signal.SIGTERM, signal.SIGQUIT),
    ) -> None:
        #: Gunicorn 27's dirty arbiter's pid (0: none); it exits once sent one of ``dirty_exit_on``.
        self.dirty = dirty
        self._dirty_graceful_timeout = dirty_graceful_timeout
        self.dirty_exit_on = dirty_exit_on
        self.dirty_exited = False
        self.workers = set(workers)
        self._graceful_timeout = graceful_timeout
        self.successor = successor
        self.predecessor = predecessor
        self._app_uri = app_uri
        self.shared_listeners = shared_listeners
        self.own_listeners = own_listeners
        #: The signals the workers exit on when sent (the others they ignore).
        self.exit_on = exit_on
        self.calls: list[str] = []
        self.systemd: list[str] = []
        self.errors: list[str] = []
        self.environment: dict[str, str] = {}
        #: Set when the shutdown thread wakes the main loop to stop.
        self.woken = threading.Event()
        #: Called by reap (as a child exit or a signal arriving while the master reaps would).
        self.on_reap: Callable[[], object] | None = None
        #: Workers that exited and are not reaped yet, with how they ended (reap tells graceful, then forgets).
        self.exited: dict[int, ExitStatus] = {}
        self._on_worker_exit: list[Callable[[int, ExitStatus], object]] = []
        self._on_dirty_exit: list[Callable[[int, ExitStatus], object]] = []
        #: How the dirty arbiter ends when it exits (a TERM it obeys: status 0).
        self.dirty_status = ExitStatus(status=0)
        self._term: Callable[[], object] | None = None
        self._before: dict[str, list[Callable[[], object]]] = {}
        self._os_handler: OsSignalHandler | None = None
        self.gunicorn_os_signals: list[int] = []

    # -- Arbiter: facts ---------------------------------------------------------------------

    def worker_pids(self) -> set[int]:
        return set(self.workers)

    def listeners(self) -> list[socket.socket]:
        return []

    def graceful_timeout(self) -> float:
        return self._graceful_timeout

    def set_graceful_timeout(self, seconds: int) -> None:
        self._graceful_timeout = seconds

    def app_uri(self) -> str:
        return self._app_uri

    def workers_own_listeners(self) -> bool:
        return self.own_listeners

    def listeners_shared_with_others(self) -> bool:
        return self.shared_listeners

    def successor_pid(self) -> int:
        return self.successor

    def predecessor_pid(self) -> int:
        return self.predecessor

    def worker_timeout(self) -> float:
        return 30.0

    def binds(self) -> list[str]:
        return ["127.0.0.1:8000"]

    def worker_class_setting(self) -> str:
        return "gthread"

    def exec_environment(self) -> dict[str, str]:
        return self.environment

    # -- Arbiter: actions --------------------------------------------------------------------

    def reap(self) -> None:
        self.calls.append("reap")
        if self.on_reap is not None:
            self.on_reap()
        exited, self.exited = self.exited, {}
        for pid, status in exited.items():
            for callback in self._on_worker_exit:
                callback(pid, status)

    def signal_workers(self, signum: int) -> None:
        self.calls.append(f"kill {signal.Signals(signum).name}")
        if signum in self.exit_on:
            status = ExitStatus(signal=signum) if signum == signal.SIGKILL else ExitStatus(status=0)
            self.exited.update(dict.fromkeys(self.workers, status))
            self.workers.clear()

    def on_worker_exit(self, callback: Callable[[int, ExitStatus], object]) -> None:
        self._on_worker_exit.append(callback)

    def on_dirty_exit(self, callback: Callable[[int, ExitStatus], object]) -> None:
        self._on_dirty_exit.append(callback)

    def worker_ends(self, pid: int, status: ExitStatus) -> None:
        """Worker ``pid`` exits with ``status`` (not reaped until the next :meth:`reap`)."""
        self.workers.discard(pid)
        self.exited[pid] = status

    def wake(self) -> None:
        self.calls.append("wake")
        self.woken.set()

    def halt_gunicorn(self) -> None:
        self.calls.append("halt")

    def dirty_pid(self) -> int:
        return self.dirty

    def dirty_pool_configured(self) -> bool:
        return bool(self.dirty)

    def dirty_graceful_timeout(self) -> float:
        return self._dirty_graceful_timeout

    def set_dirty_graceful_timeout(self, seconds: int) -> None:
        self._dirty_graceful_timeout = seconds

    def signal_dirty(self, signum: int) -> None:
        self.calls.append(f"dirty {signal.Signals(signum).name}")
        if signum in self.dirty_exit_on:
            self.dirty_exited = True

    def reap_dirty(self) -> None:
        self.calls.append("reap dirty")
        if self.dirty_exited and self.dirty:
            for callback in self._on_dirty_exit:
                callback(self.dirty, self.dirty_status)
            self.dirty = 0

    def kill_dirty_tree(self) -> None:
        if self.dirty:
            self.calls.append("kill dirty tree")
            self.dirty = 0

    def notify_systemd(self, message: str) -> None:
        self.systemd.append(message)

    def log_error(self, message: str) -> None:
        self.errors.append(message)

    # -- Arbiter: interception -----------------------------------------------------------------

    def on_term(self, handler: Callable[[], object]) -> None:
        self._term = handler

    def after_loop_wait(self, callback: Callable[[], object]) -> None:
        self._before.setdefault("pass", []).append(callback)

    def before_reload(self, callback: Callable[[], object]) -> None:
        self._before.setdefault("hup", []).append(callback)

    def before_control_worker_kill(self, callback: Callable[[], object]) -> None:
        self._before.setdefault("control worker kill", []).append(callback)

    def before_stop(self, callback: Callable[[], object]) -> None:
        self._before.setdefault("stop", []).append(callback)

    def on_loop_tick(self, callback: Callable[[], object]) -> None:
        self._before.setdefault("tick", []).append(callback)

    def around_reexec(self, wrapper: Callable[[Callable[[], object]], object]) -> None:
        self._before.setdefault("reexec-wrapper", []).append(lambda: wrapper(lambda: self.calls.append("reexec")))

    def front_os_signals(self, signums: tuple[int, ...], handler: OsSignalHandler) -> None:
        self.calls.append("front " + " ".join(signal.Signals(s).name for s in signums))
        self._os_handler = handler

    # -- playing Gunicorn's part ------------------------------------------------------------------

    def term(self) -> None:
        """Gunicorn's main loop dispatching a TERM to its handler."""
        assert self._term is not None, "install() first"
        self._term()

    def loop_pass(self) -> None:
        """One pass of Gunicorn's main loop after its wait (at once when woken, else within a second)."""
        self._run("pass")

    @property
    def halted(self) -> bool:
        """True once graceful called Gunicorn's halt()."""
        return "halt" in self.calls

    def hup(self) -> None:
        """Gunicorn's main loop handling HUP (before its reload)."""
        self._run("hup")
        self.calls.append("reload")

    def control_worker_kill(self) -> None:
        """The control socket's ``worker kill PID`` (Gunicorn 25.1+), before it TERMs the worker."""
        self._run("control worker kill")
        self.calls.append("worker kill")

    def stop(self) -> None:
        """Gunicorn's ``stop()``."""
        self._run("stop")
        self.calls.append("stop")

    def os_signal(self, signum: int) -> None:
        """The OS delivering ``signum`` to the master: graceful's handler, in front of Gunicorn's."""
        assert self._os_handler is not None, "install() first"
        self._os_handler(signum, None, self._gunicorn_os_handler)

    def _gunicorn_os_handler(self, signum: int, _frame: FrameType | None) -> None:
        self.gunicorn_os_signals.append(signum)

    def _run(self, name: str) -> None:
        for callback in self._before.get(name, []):
            callback()


class FakeGthreadLoop:
    """gthread's main loop as the gthread stop sees it: ``connections`` open, closing on demand."""

    def __init__(self, connections: int = 0, max_requests: int = 1000) -> None:
        self.connections = connections
        self.limit = max_requests
        self.calls: list[str] = []

    def take_over_max_requests(self) -> int:
        self.calls.append("take over max_requests")
        return self.limit

    def open_connections(self) -> int:
        return self.connections

    def stop_accepting(self) -> None:
        self.calls.append("stop accepting")

    def wake(self) -> None:
        self.calls.append("wake")

    def wait_for_late_accepts(self, deadline: float, pause: threading.Event) -> None:
        self.calls.append("late accepts")

    def bound_gunicorn_drain(self, seconds: float) -> None:
        self.calls.append("bound drain")


class FakeWorker:
    """One Gunicorn worker as a worker's part of graceful sees it."""

    def __init__(
        self,
        kind: str | None = "sync",
        *,
        app: Callable[..., Any] | None = None,
        graceful_timeout: float = 30.0,
        max_requests: int = 1000,
        gthread: GthreadLoop | None = None,
        http2: Http2Server | None = None,
        asgi: Any = None,
    ) -> None:
        self.kind = kind
        #: An ASGI worker's loop (graceful.gunicorn.asgi_stop.AsgiLoop); None: a WSGI worker.
        self._asgi = asgi
        #: The worker's HTTP/2 connections (None: it serves no HTTP/2).
        self.http2_server = http2
        self.alive = True
        self.served = 0
        self.limit = max_requests
        self._graceful_timeout = graceful_timeout
        self.drain_bound: float | None = None
        self.wsgi: Any = app or (lambda environ, start_response: [b"ok"])
        self._gthread = gthread
        self.calls: list[str] = []
        self.term_notes: list[TermHandler] = []
        #: What guard_accept was given to call on a listener shut down (None: sync's pause).
        self.accept_guard: Callable[[], None] | None = None
        #: Set once the worker leaves its loop (Gunicorn's SIGTERM handler ran).
        self.left_loop = threading.Event()

    def stop_loop(self) -> None:
        self.calls.append("stop loop")
        self.alive = False
        self.left_loop.set()

    def is_alive(self) -> bool:
        return self.alive

    def requests_served(self) -> int:
        return self.served

    def max_requests(self) -> int:
        return self.limit

    def before_term_handler(self, note: TermHandler) -> None:
        self.term_notes.append(note)

    def sockets(self) -> list[Any]:
        return []

    def graceful_timeout(self) -> float:
        return self._graceful_timeout

    def bound_gunicorn_drain(self, seconds: float) -> None:
        self.drain_bound = seconds

    def app(self) -> Any:
        return self.wsgi

    def wrap_app(self, wrap: Callable[[Any], Any]) -> None:
        self.wsgi = wrap(self.wsgi)

    def guard_accept(self, stop_accepting: Callable[[], None] | None = None) -> None:
        self.calls.append("guard accept")
        self.accept_guard = stop_accepting

    def force_close(self, req: Any) -> None:
        req.force_close()

    def asgi_loop(self) -> Any:
        return self._asgi

    def gthread_loop(self) -> GthreadLoop | None:
        return self._gthread

    def gevent_servers(self) -> GeventServers | None:
        return None

    def http2(self, drain: Http2Drain) -> Http2Server | None:
        if self.http2_server is not None:
            drain.attach(self.http2_server)
        return self.http2_server

    @property
    def pid(self) -> int:
        return os.getpid()


def gunicorns_term_handler(worker: FakeWorker) -> GunicornHandler:
    """What Gunicorn's worker SIGTERM handler does: leave the loop."""

    def handle_exit(_signum: int, _frame: FrameType | None) -> None:
        worker.stop_loop()

    return handle_exit


def signal_this_process(signum: int) -> None:
    """Send the OS signal ``signum`` to this process's main thread (the test's); its handler has run on return.

    ``os.kill(os.getpid(), ...)`` leaves the Python handler to the
    interpreter's next check, which another thread's GIL hand-off can
    postpone (CPython 3.10) past the test's next long wait: the handler
    then runs only when that wait times out. ``pthread_kill`` checks at once.
    """
    main = threading.main_thread().ident
    assert main is not None and main == threading.get_ident(), "signals are handled in the main thread only"
    signal.pthread_kill(main, signum)
