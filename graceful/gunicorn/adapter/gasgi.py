"""Gunicorn's own ASGI worker (``-k asgi``, ASGIWorker; Gunicorn 25.1+) as graceful's stop sees it.

Runs in an ``-k asgi`` worker process; :func:`class_problem` in the master
(``on_starting``), on the class. Made by :meth:`GasgiLoop.probe` in
``post_worker_init`` (main thread: the app is loaded, the worker's event
loop made but not running yet). The logic of the stop is
:mod:`graceful.gunicorn.asgi_stop`'s; this module answers its questions and
carries out its steps on Gunicorn's worker:

================================  ===============================================================
what graceful touches             why
================================  ===============================================================
``worker.loop``                   the worker's event loop (``_setup_event_loop``): graceful's
                                  threads cross into it; its SIGTERM handler is removed (it sets
                                  ``alive = False`` at once: Gunicorn's stop would close the
                                  listeners, wait ``graceful_timeout`` for the connections and
                                  run the lifespan shutdown after the master's SIGKILL); its
                                  accept callback is guarded (:mod:`.event_loop`)
``worker.init_signals``           wrapped in ``post_fork``: a SIGTERM while the app loads is noted
``worker.servers``                the asyncio servers of its listeners: closed to stop accepting
``worker.nr_conns``               the connections it holds (WebSockets included)
``worker.nr``, ``max_requests``   its request count; its own ``max_requests`` stop is switched off
                                  (``sys.maxsize``): graceful's ``pre_request`` counts instead
``worker.lifespan``               the app's lifespan (``LifespanManager``): its ``shutdown()`` is
                                  run by graceful, bounded, and taken away from Gunicorn's stop
``worker.alive``, ``_serve``      the end of graceful's stop: ``alive = False``, and the task of
                                  ``_serve``, asleep in its one-second ``asyncio.sleep``, is
                                  cancelled to wake it (Gunicorn catches that and stops at once)
``worker._quick_shutdown``        set when the drain's deadline has passed: Gunicorn's stop would
                                  wait at least a second more for the connections left (its
                                  ``graceful_timeout`` is a whole number of seconds)
``request.must_close``            ``Connection: close`` from ``pre_request`` (its requests have no
                                  ``force_close``)
================================  ===============================================================

``-k asgi`` came with Gunicorn 25.1 (older releases are refused in one
line, as is a release whose worker lacks one of the names above).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

from graceful.gunicorn.adapter.event_loop import guard_accept, is_sleeping_in
from graceful.gunicorn.adapter.release import GunicornMissing, bound_worker_drain, gunicorn_release
from graceful.process.aio import close_servers

__all__ = ["OLDEST_GASGI", "GasgiLoop", "class_problem", "force_close"]

logger = logging.getLogger(__name__)

#: The first Gunicorn whose ``-k asgi`` graceful supports (stable from 25.1).
OLDEST_GASGI = (25, 1)

# What graceful uses on the class (probed in the master) and on the worker (probed in post_worker_init).
_CLASS_NEEDS = ("_serve", "_shutdown", "init_signals", "handle_exit_signal", "run")
_WORKER_NEEDS = ("loop", "servers", "nr_conns", "nr", "alive", "max_requests", "lifespan", "cfg", "_quick_shutdown")


def _release_tuple(text: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", text)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def class_problem(cls: type) -> str | None:
    """The master, ``on_starting``: the one-line refusal of this Gunicorn's ``-k asgi``, or None."""
    release = gunicorn_release()
    version = _release_tuple(release)
    if version is not None and version < OLDEST_GASGI:
        return (
            f"graceful: Gunicorn {release}'s -k asgi worker is not supported: graceful supports it from"
            f" Gunicorn {'.'.join(map(str, OLDEST_GASGI))}"
        )
    missing = [name for name in _CLASS_NEEDS if not callable(getattr(cls, name, None))]
    if missing:
        return str(GunicornMissing("-k asgi worker", missing))
    return None


class GasgiLoop:
    """One ``-k asgi`` worker's event loop behind :class:`graceful.gunicorn.asgi_stop.AsgiLoop`."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker
        self._loop: asyncio.AbstractEventLoop = worker.loop

    @classmethod
    def probe(cls, worker: Any) -> GasgiLoop:
        """``post_worker_init`` (main thread): the loop, prepared; GunicornMissing naming what it lacks."""
        missing = [name for name in _WORKER_NEEDS if not hasattr(worker, name)]
        loop = getattr(worker, "loop", None)
        if not missing and not callable(getattr(loop, "remove_signal_handler", None)):
            missing.append("loop.remove_signal_handler")
        if missing:
            raise GunicornMissing("-k asgi worker", missing)
        adapter = cls(worker)
        adapter._prepare()
        return adapter

    def _prepare(self) -> None:
        # Gunicorn's loop handler would begin its own stop at once: graceful's handler
        # (graceful.gunicorn.process_stop) is installed next, in its place.
        self._loop.remove_signal_handler(signal.SIGTERM)
        if not guard_accept(self._loop):
            logger.debug("graceful: worker %d: not asyncio's selector loop: accept left unguarded", os.getpid())

    # -- AsgiLoop ---------------------------------------------------------------------------------

    def running_loop(self) -> asyncio.AbstractEventLoop | None:
        """See :meth:`AsgiLoop.running_loop`."""
        return self._loop

    def take_over_max_requests(self) -> int:
        """See :meth:`AsgiLoop.take_over_max_requests`."""
        limit = int(self._worker.max_requests)
        self._worker.max_requests = sys.maxsize
        return limit

    def requests_served(self) -> int:
        """See :meth:`AsgiLoop.requests_served`."""
        return int(self._worker.nr)

    async def stop_accepting(self) -> None:
        """See :meth:`AsgiLoop.stop_accepting`: this process's servers close (the other processes keep theirs)."""
        await close_servers(list(self._worker.servers))

    def close_after_response(self) -> None:
        """See :meth:`AsgiLoop.close_after_response`: ``pre_request`` does it here (:func:`force_close`).

        A request already running when the stop began keeps its connection
        (Gunicorn offers no handle on it): the client's next request on it
        gets ``Connection: close``.
        """

    def open_connections(self) -> int:
        """See :meth:`AsgiLoop.open_connections`."""
        return int(self._worker.nr_conns)

    async def lifespan_shutdown(self, timeout: float) -> bool:
        """See :meth:`AsgiLoop.lifespan_shutdown`."""
        worker = self._worker
        lifespan, worker.lifespan = worker.lifespan, None  # Gunicorn's stop skips it now
        if lifespan is None:
            return True
        try:
            await asyncio.wait_for(lifespan.shutdown(), timeout)
        except asyncio.TimeoutError:
            return False
        except Exception:  # logged, as Gunicorn does: the worker stops all the same
            logger.exception("graceful: worker %d: the app's lifespan shutdown failed", os.getpid())
        return True

    def every_tick(self, callback: Callable[[], object]) -> None:
        """See :meth:`AsgiLoop.every_tick`: nothing to do, ``pre_request`` counts the requests here."""

    def finish(self, timeout: float) -> None:
        """See :meth:`AsgiLoop.finish`: ``alive = False``; ``_serve``'s sleep cut short (its wait too, if late)."""
        worker = self._worker
        bound_worker_drain(worker, timeout)
        if timeout <= 0:  # the drain's deadline passed: what is left is cut now, not a second later
            worker._quick_shutdown = True
        worker.alive = False
        serve = getattr(type(worker), "_serve", None)
        for task in asyncio.all_tasks(self._loop):
            if is_sleeping_in(task, serve):
                task.cancel()  # Gunicorn's _serve catches it and goes on to its (now empty) stop


def force_close(req: Any) -> None:
    """``pre_request`` (on the loop): this response says ``Connection: close`` (``-k asgi``'s requests)."""
    close = getattr(req, "force_close", None)
    if callable(close):
        close()
    else:
        req.must_close = True
