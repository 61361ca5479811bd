"""One Gunicorn worker as graceful sees it: the only code that touches a worker's internals.

Runs in a worker process (sync, gthread or gevent; Gunicorn 22-27). Made in
``post_fork`` (worker main thread) by :meth:`WorkerAdapter.probe`, which
looks once for every internal every worker class has: a release without one
stops the worker at boot with one line naming the release and what is
missing. What each class adds is probed in ``post_worker_init``, when
Gunicorn has built it: gthread's main loop (:mod:`.gthread`), gevent's
servers (:mod:`.gevent`). The rest of graceful sees :class:`Worker`, so a
fake worker can drive a worker's whole stop in a unit test.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from graceful.gunicorn.adapter.gevent import GeventServers, record_servers
from graceful.gunicorn.adapter.gthread import GthreadLoop, probe_gthread
from graceful.gunicorn.adapter.http2 import probe_http2
from graceful.gunicorn.adapter.refusal import WorkerRefused
from graceful.gunicorn.adapter.release import GunicornMissing, bound_worker_drain, missing_attributes
from graceful.gunicorn.http2 import Http2Drain, Http2Server
from graceful.gunicorn.worker_classes import ASGI_KINDS, worker_kind

if TYPE_CHECKING:
    from graceful.gunicorn.asgi_stop import AsgiLoop

__all__ = ["TermHandler", "Worker", "WorkerAdapter"]

#: An OS-level SIGTERM handler: ``handler(signum, frame)``.
TermHandler = Callable[[int, "FrameType | None"], object]

# What graceful reads or calls on every worker class and release (probed in post_fork).
_NEEDED = ("alive", "nr", "max_requests", "sockets", "cfg", "handle_exit")
_NEEDED_CFG = ("graceful_timeout", "set")
#: Upper bound (s) on one pause of accept() on a listener that was shut down (a signal ends it sooner).
_ACCEPT_PAUSE = 0.01


class Worker(Protocol):
    """What a worker's part of graceful needs from Gunicorn's worker (worker process)."""

    kind: str | None

    def stop_loop(self) -> None:
        """What Gunicorn's SIGTERM handler does: the worker leaves its loop (``alive = False``). Any thread."""

    def is_alive(self) -> bool:
        """False once the worker is leaving its loop."""

    def requests_served(self) -> int:
        """Gunicorn's count of the requests this worker served (sync and gevent count after ``pre_request``)."""

    def max_requests(self) -> int:
        """The ``max_requests`` limit Gunicorn chose for this worker (with its jitter; ``sys.maxsize``: none)."""

    def before_term_handler(self, note: TermHandler) -> None:
        """``post_fork``: Gunicorn's SIGTERM handler calls ``note`` first (inside the OS handler)."""

    def sockets(self) -> list[Any]:
        """The listening sockets this worker accepts on (its copies of the master's, or its own)."""

    def graceful_timeout(self) -> float:
        """The master's ``graceful_timeout``: how long it waits for this worker once it TERMs it."""

    def bound_gunicorn_drain(self, seconds: float) -> None:
        """Bound Gunicorn's own drain in this worker to ``seconds`` (its copy of ``graceful_timeout``)."""

    def app(self) -> Any:
        """The WSGI (or ASGI) app this worker serves (loaded by ``post_worker_init``)."""

    def force_close(self, req: Any) -> None:
        """``pre_request``: the response to ``req`` says ``Connection: close`` and its connection closes after it."""

    def asgi_loop(self) -> AsgiLoop | None:
        """``post_worker_init`` of an ASGI worker: its event loop, prepared for graceful's stop; None for the others."""

    def wrap_app(self, wrap: Callable[[Any], Any]) -> None:
        """``post_worker_init``: serve ``wrap(app)`` instead of the app."""

    def guard_accept(self, stop_accepting: Callable[[], None] | None = None) -> None:
        """Make ``accept()`` on a listener that was shut down stop accepting, or idle briefly, instead of crashing.

        ``stop_accepting`` (gthread's): called instead of idling; the main loop then waits in its poller.
        """

    def gthread_loop(self) -> GthreadLoop | None:
        """``post_worker_init`` of a gthread worker: its main loop, or None."""

    def gevent_servers(self) -> GeventServers | None:
        """``post_worker_init`` of a gevent worker: its servers as Gunicorn builds them, or None."""

    def http2(self, drain: Http2Drain) -> Http2Server | None:
        """``post_worker_init``: drain this worker's HTTP/2 connections as ``drain`` says; None: no HTTP/2 here."""


class WorkerAdapter:
    """Gunicorn's worker behind :class:`Worker`, plus what the worker's boot needs. Made by :meth:`probe`."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker
        #: ``sync``, ``gthread``, ``gevent``, ``asgi`` or ``uvicorn``; None for a class graceful does not support
        #: (refused at start-up).
        self.kind = worker_kind(worker)
        # Gunicorn's -k asgi keeps its app as ``asgi``; every other class (Uvicorn's too) as ``wsgi``.
        self._app_attribute = "asgi" if self.kind == "asgi" else "wsgi"

    @classmethod
    def probe(cls, worker: Any) -> WorkerAdapter:
        """``post_fork``: the adapter, or GunicornMissing naming the release and the internals it lacks."""
        missing = missing_attributes(worker, _NEEDED)
        if not missing:
            missing = missing_attributes(worker.cfg, _NEEDED_CFG, prefix="cfg.")
        if missing:
            raise GunicornMissing("worker", missing)
        return cls(worker)

    # -- Worker ---------------------------------------------------------------------------------

    def stop_loop(self) -> None:
        """See :meth:`Worker.stop_loop`."""
        self._worker.alive = False

    def is_alive(self) -> bool:
        """See :meth:`Worker.is_alive`."""
        return bool(self._worker.alive)

    def requests_served(self) -> int:
        """See :meth:`Worker.requests_served`."""
        return int(self._worker.nr)

    def max_requests(self) -> int:
        """See :meth:`Worker.max_requests`."""
        return int(self._worker.max_requests)

    # -- boot (worker main thread) ---------------------------------------------------------------------

    def sockets(self) -> list[Any]:
        """The listening sockets this worker accepts on (its copies of the master's, or its own)."""
        return list(self._worker.sockets)

    def graceful_timeout(self) -> float:
        """The master's ``graceful_timeout``: how long it waits for this worker once it TERMs it."""
        return float(self._worker.cfg.graceful_timeout)

    def bound_gunicorn_drain(self, seconds: float) -> None:
        """Bound Gunicorn's own drain in this worker to ``seconds`` (its copy of ``graceful_timeout``)."""
        bound_worker_drain(self._worker, seconds)

    def app(self) -> Any:
        """The WSGI (or ASGI) app this worker serves (loaded by ``post_worker_init``)."""
        return getattr(self._worker, self._app_attribute)

    def wrap_app(self, wrap: Callable[[Any], Any]) -> None:
        """``post_worker_init``: serve ``wrap(app)`` instead of the app."""
        setattr(self._worker, self._app_attribute, wrap(self.app()))

    def force_close(self, req: Any) -> None:
        """See :meth:`Worker.force_close` (``-k asgi``'s requests have no ``force_close``: :mod:`.gasgi`)."""
        if self.kind == "asgi":
            from graceful.gunicorn.adapter.gasgi import force_close

            force_close(req)
        else:
            req.force_close()

    def asgi_loop(self) -> AsgiLoop | None:
        """See :meth:`Worker.asgi_loop`; WorkerRefused (one line) when this release's internals moved."""
        # Imported here: a WSGI worker loads no asyncio for them.
        from graceful.gunicorn.adapter.gasgi import GasgiLoop
        from graceful.gunicorn.adapter.uvicorn_worker import UvicornWorkerLoop

        try:
            if self.kind == "asgi":
                return GasgiLoop.probe(self._worker)
            if self.kind == "uvicorn":
                return UvicornWorkerLoop.probe(self._worker)
        except (GunicornMissing, ValueError) as exc:
            raise WorkerRefused(str(exc)) from None
        return None

    def before_term_handler(self, note: TermHandler) -> None:
        """``post_fork``: Gunicorn's SIGTERM handler (``handle_exit``) calls ``note`` first.

        Gunicorn installs it before the app loads, well before ``post_worker_init``.

        ``note`` runs inside the OS signal handler: plain attributes only.
        """
        if self.kind in ASGI_KINDS:
            # Their init_signals (after post_fork) resets SIGTERM: note it again after.
            wrap_init_signals(self._worker, note)
            return
        gunicorn_exit = self._worker.handle_exit
        if not callable(gunicorn_exit):
            return

        def handle_exit(signum: int, frame: FrameType | None) -> None:
            note(signum, frame)
            gunicorn_exit(signum, frame)

        self._worker.handle_exit = handle_exit

    def guard_accept(self, stop_accepting: Callable[[], None] | None = None) -> None:
        """Make ``accept()`` on a listener that was shut down stop accepting, or idle, instead of crashing.

        sync and gthread accept in a method (gevent in its servers: see
        :mod:`.gevent`). The master's TERM follows within milliseconds;
        exiting here instead would let Gunicorn fork a replacement in between.
        Called once, in ``post_worker_init``. With ``stop_accepting`` (gthread's
        main loop: :meth:`.gthread.GthreadLoop.stop_accepting`) the listeners
        leave the loop's poller, which the TERM's wake-up then ends at once.
        Without (sync), each accept pauses until a signal arrives, on the pipe
        Gunicorn's ``init_signals`` made the wakeup fd (its ``PIPE``, looked up
        here): the TERM ends the pause at once.
        """
        original: Callable[..., Any] | None = getattr(self._worker, "accept", None)
        if original is None:
            return
        pause = _signal_pause(self._worker)

        def accept(*args: Any) -> Any:
            try:
                return original(*args)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # The listener was shut down (this server stopped listening):
                # don't spin on it while waiting for the TERM.
                if stop_accepting is not None:
                    stop_accepting()
                else:
                    pause(_ACCEPT_PAUSE)
                return None

        self._worker.accept = accept

    def gthread_loop(self) -> GthreadLoop | None:
        """``post_worker_init`` of a gthread worker: its main loop, or None (warned) without the internals."""
        return probe_gthread(self._worker) if self.kind == "gthread" else None

    def gevent_servers(self) -> GeventServers | None:
        """``post_worker_init`` of a gevent worker, after its patch: its servers as Gunicorn builds them, or None."""
        return record_servers(self.is_alive) if self.kind == "gevent" else None

    def http2(self, drain: Http2Drain) -> Http2Server | None:
        """See :meth:`Worker.http2` (:mod:`.http2`)."""
        return probe_http2(self._worker, drain, self.kind)

    @property
    def pid(self) -> int:
        """This process's pid."""
        return os.getpid()


def _signal_pause(worker: Any) -> Callable[[float], None]:
    """``pause(seconds)``: wait up to ``seconds``, ending as soon as a signal arrives (worker main thread).

    Gunicorn's ``init_signals`` (every release) makes the write end of its
    ``PIPE`` the wakeup fd: Python's C-level handler writes each signal's
    number there at once, even while the main thread waits. The pause drains
    that pipe first (gthread never reads it; sync reads it only to wake, and
    a pause returns to its loop, which looks at ``alive``), then waits for the
    next byte. Without the pipe (not made yet, or another release's layout):
    a plain pause.
    """
    pipe = getattr(worker, "PIPE", None)
    wakeup = pipe[0] if isinstance(pipe, (list, tuple)) and len(pipe) == 2 and isinstance(pipe[0], int) else None
    if wakeup is None:
        event = threading.Event()

        def plain_pause(seconds: float) -> None:
            event.wait(seconds)

        return plain_pause

    def pause(seconds: float) -> None:
        with contextlib.suppress(OSError):  # empty (non-blocking: BlockingIOError), or closed
            while os.read(wakeup, 64):
                pass
        if worker.alive:  # the TERM's handler may have run already: its byte was just drained
            with contextlib.suppress(OSError, ValueError):  # closed under us: the worker is leaving
                select.select([wakeup], [], [], seconds)

    return pause


def wrap_init_signals(worker: Any, note: TermHandler) -> None:
    """``post_fork``: after the worker's own ``init_signals`` (which resets SIGTERM), a SIGTERM calls ``note``.

    ``note`` runs inside the OS handler until ``post_worker_init`` installs graceful's.
    Both ASGI worker classes (``-k asgi`` and Uvicorn's) set their signals there.
    """
    original = getattr(worker, "init_signals", None)
    if not callable(original):
        return

    def init_signals() -> None:
        original()
        signal.signal(signal.SIGTERM, note)

    worker.init_signals = init_signals
