"""Gunicorn's gevent worker (``-k gevent``, GeventWorker): its servers, recorded; Gunicorn 22-27, gevent 23.9+.

Runs in a gevent worker process. ``GeventWorker.init_process`` calls
gevent's ``monkey.patch_all()`` before ``post_worker_init``, so by then
``threading.Thread`` starts greenlets and ``threading.Event`` and
``threading.Lock`` make cooperative ones: graceful's ``graceful-watch`` and
``graceful-stop`` threads, its hook threads and every wait of theirs
(``select``, ``time.sleep``) run on the hub without blocking it.
:func:`record_servers` (``post_worker_init``, the main greenlet) does the
rest (the worker's part renews the lifecycle's events and locks first,
:meth:`graceful.Lifecycle.renew_after_patch`):

* The worker accepts through one gevent ``StreamServer`` per listener,
  built in ``run()`` from the module global
  ``gunicorn.workers.ggevent.StreamServer``. Before ``run()`` reads it, it
  is replaced, in this process only, by a subclass that records each
  server (:class:`GeventServers`) and can stop accepting for good without
  closing its socket. When the master shuts a listener down
  (``shutdown(SHUT_RD)``: the server stopped listening), the ``EINVAL`` of
  ``accept()`` stops it accepting, with one INFO line, instead of gevent's
  traceback and its "failed with [Errno 22]" line.

* ``run()`` ticks with ``gevent.sleep(1.0)``: once a second while it serves
  (looking at ``alive``), once a second while its connections finish. Its
  module global ``gevent`` is replaced, in this process only, by a stand-in
  whose ``sleep`` ends early (:class:`WorkerLoopTicks`): the serving tick when
  the worker stops accepting, the draining tick when the servers' pools are
  empty. Without it the worker leaves its loop up to a second after its TERM,
  and exits up to a second after its last request.

Never close a server's socket early: a connection accepted just before,
whose greenlet has not started yet, would find its listener gone
(``getsockname()``: EBADF) and be reset. Gunicorn's own stop closes them at
``alive = False`` (at most a second later), answers the next request on
every keep-alive connection with ``Connection: close`` and waits for its
connections; :meth:`GeventServers.stop_accepting` stops the accepting at
once where graceful knows the worker is stopping. A cleanup task or hook
that blocks in C, without yielding to the hub, cannot be timed out here.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from graceful.gunicorn.adapter.release import gunicorn_release

__all__ = ["GeventServers", "WorkerLoopTicks", "record_servers"]

logger = logging.getLogger(__name__)


class GeventServers:
    """This worker's gevent ``StreamServer`` objects, recorded as Gunicorn builds them."""

    def __init__(self) -> None:
        self.servers: list[Any] = []
        #: Set once the servers stopped accepting: the worker's serving tick ends (made after gevent's patch).
        self.stopped = threading.Event()

    def stop_accepting(self) -> None:
        """No server accepts here any more; the sockets stay open (Gunicorn closes them). Any greenlet; idempotent."""
        for server in list(self.servers):
            server.stop_accepting_for_good()
        self.stopped.set()

    def wait_empty(self, timeout: float) -> None:
        """Main greenlet: wait until no server's pool holds a connection, up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        for server in list(self.servers):
            pool = getattr(server, "pool", None)
            if pool is not None:
                pool.join(timeout=max(0.0, deadline - time.monotonic()))


class WorkerLoopTicks:
    """``gevent`` as Gunicorn's gevent worker ``run()`` sees it: a ``sleep`` that ends on the event, not the tick.

    Everything but ``sleep`` is gevent's. ``run()`` calls ``gevent.sleep(1.0)``
    only in its two loops (main greenlet): while ``alive()``, the tick ends
    when the servers stop accepting (the worker's stop, or a listener the
    master shut down); if the worker still serves then (it stops accepting on
    sockets another process serves, before its TERM), the tick runs its
    course. Once not ``alive()``, Gunicorn waits for its connections: the
    tick ends when the pools are empty. Every tick keeps its bound.
    """

    def __init__(self, gevent: Any, servers: GeventServers, alive: Callable[[], bool]) -> None:
        self._gevent = gevent
        self._servers = servers
        self._alive = alive

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gevent, name)

    def sleep(self, seconds: float = 0, *args: Any, **kwargs: Any) -> None:
        """Main greenlet: Gunicorn's tick, ended early by what it is waiting for."""
        started = time.monotonic()
        if not self._alive():
            self._servers.wait_empty(seconds)  # Gunicorn's drain looks at the pools next
        elif not self._servers.stopped.wait(seconds) or self._alive():
            # Still serving (or never stopped): the rest of the tick, as gevent's own sleep.
            self._gevent.sleep(max(0.0, seconds - (time.monotonic() - started)), *args, **kwargs)


def record_servers(alive: Callable[[], bool] = lambda: True) -> GeventServers | None:
    """``post_worker_init`` of a gevent worker (main greenlet): record and quiet the servers it will build.

    Returns the recorded servers, or None (logged once) when this Gunicorn's
    gevent worker does not build its servers from
    ``gunicorn.workers.ggevent.StreamServer``. Its loop's ticks end on their
    events (:class:`WorkerLoopTicks`; ``alive``: the worker's ``alive``) where
    the module calls ``gevent.sleep``.
    """
    module = sys.modules.get("gunicorn.workers.ggevent")
    base = getattr(module, "StreamServer", None)
    if not isinstance(base, type) or not callable(getattr(base, "do_read", None)):
        logger.warning(
            "graceful: worker %d: Gunicorn %s's gevent worker has no StreamServer to record: when the"
            " listeners shut down, gevent logs an 'Errno 22' traceback per listener (nothing is lost)",
            os.getpid(),
            gunicorn_release(),
        )
        return None
    recorded = GeventServers()
    pid = os.getpid()

    class QuietStreamServer(base):  # type: ignore[misc, valid-type]  # gevent's StreamServer, found at run time
        """gevent's StreamServer; recorded, and able to stop accepting for good, quietly."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            #: True once it accepts no more (its socket stays open until Gunicorn closes it).
            self.stopped_accepting = False
            recorded.servers.append(self)

        def stop_accepting_for_good(self) -> None:
            self.stopped_accepting = True
            self.stop_accepting()

        def start_accepting(self) -> None:
            # gevent re-arms a started server's accepting whenever its pool frees a slot.
            if not self.stopped_accepting:
                super().start_accepting()

        def do_read(self) -> Any:
            try:
                return super().do_read()
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # The master shut the listener down: this server stopped listening for good.
                if not self.stopped_accepting:
                    logger.info("graceful: worker %d: listener %s shut down; stopped accepting", pid, self.address)
                self.stop_accepting_for_good()
                return None

    module.StreamServer = QuietStreamServer  # type: ignore[union-attr]  # found above
    gevent = getattr(module, "gevent", None)
    if callable(getattr(gevent, "sleep", None)) and not isinstance(gevent, WorkerLoopTicks):
        module.gevent = WorkerLoopTicks(gevent, recorded, alive)  # type: ignore[union-attr]  # found above
    return recorded
