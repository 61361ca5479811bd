"""Uvicorn's Gunicorn worker (``-k uvicorn_worker.UvicornWorker``, and the older ``uvicorn.workers.UvicornWorker``).

Runs in such a worker process; :func:`class_problem` in the master
(``on_starting``), on the class. Made by :meth:`UvicornWorkerLoop.probe` in
``post_worker_init`` (main thread, app loaded; the worker's ``run()`` has
not yet made its event loop, nor its ``uvicorn.Server``). The logic of the
stop is :mod:`graceful.gunicorn.asgi_stop`'s; this module answers its
questions and carries out its steps on Uvicorn's server:

================================  ===============================================================
what graceful touches             why
================================  ===============================================================
the worker module's ``Server``    replaced, in this process only, before ``_serve`` reads it, by a
                                  subclass that: captures no signal (Uvicorn's ``capture_signals``
                                  would replace graceful's SIGTERM handler, begin Uvicorn's stop at
                                  once, closing every connection and WebSocket with 1012, and
                                  re-raise the signal at exit); guards the loop's accept
                                  (:mod:`.event_loop`) and records the server and its loop at
                                  ``startup``; calls graceful on each ``on_tick`` (the
                                  ``max_requests`` count)
``worker.init_signals``           wrapped in ``post_fork``: a SIGTERM while the app loads is noted
``worker.config``                 ``limit_max_requests`` set to None (graceful counts and stops);
                                  ``timeout_graceful_shutdown``: what is left of the drain when
                                  Uvicorn's own stop runs, so it never waits without a bound
``Server.servers``                closed to stop accepting
``Server.server_state``           ``connections`` (open) and ``total_requests`` (served)
``Server.lifespan``               its ``shutdown()`` run by graceful, bounded; Uvicorn's stop then
                                  finds it done
``Server.should_exit``            set by graceful only, at the end of its stop
================================  ===============================================================

The oldest supported: uvicorn-worker 0.2.0 (0.1.0 is an empty package; 0.2.0
is the first with the worker, already built this way) and Uvicorn 0.29.0
(the first with ``Server.capture_signals``; ``uvicorn.workers`` is the same
worker). A release without one of these names is refused in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from graceful.gunicorn.adapter.event_loop import guard_accept

__all__ = ["OLDEST_UVICORN", "UvicornWorkerLoop", "class_problem"]

logger = logging.getLogger(__name__)

#: The oldest Uvicorn graceful drives in a Gunicorn worker (the first with ``Server.capture_signals``).
OLDEST_UVICORN = (0, 29)
_SERVER_NEEDS = ("serve", "startup", "shutdown", "on_tick", "capture_signals")
_CONFIG_NEEDS = ("limit_max_requests", "timeout_graceful_shutdown", "app")


def _release_of(module_name: str) -> str:
    module = sys.modules.get(module_name)
    return str(getattr(module, "__version__", "(unknown)"))


def _uvicorn_version() -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", _release_of("uvicorn"))
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def _refusal(cls: type, what: str) -> str:
    return (
        f"graceful: {cls.__module__}.{cls.__qualname__} (uvicorn {_release_of('uvicorn')}) is not supported: {what};"
        f" graceful supports uvicorn-worker 0.2.0+ on uvicorn {'.'.join(map(str, OLDEST_UVICORN))}+"
    )


def class_problem(cls: type) -> str | None:
    """The master, ``on_starting``: the one-line refusal of this worker class's release, or None."""
    version = _uvicorn_version()
    if version is not None and version < OLDEST_UVICORN:
        return _refusal(cls, "Uvicorn is too old")
    module = sys.modules.get(cls.__module__)
    server = getattr(module, "Server", None)
    if not inspect.isclass(server):
        return _refusal(cls, f"its module {cls.__module__} has no Server")
    missing = [f"Server.{name}" for name in _SERVER_NEEDS if not callable(getattr(server, name, None))]
    if not callable(getattr(cls, "_serve", None)):
        missing.append("_serve")
    if missing:
        return _refusal(cls, f"it has no {', '.join(missing)}")
    return None


class UvicornWorkerLoop:
    """One Uvicorn worker's server and loop behind :class:`graceful.gunicorn.asgi_stop.AsgiLoop`."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker
        #: Uvicorn's Server, once ``_serve`` made it; its loop once it started.
        self.server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Called on the loop at each of Uvicorn's ticks (every 0.1 s): graceful's max_requests count.
        self.on_tick: Callable[[], object] = _nothing

    @classmethod
    def probe(cls, worker: Any) -> UvicornWorkerLoop:
        """``post_worker_init`` (main thread): the adapter, its Server class in place; ValueError: what is missing."""
        config = getattr(worker, "config", None)
        missing = [f"config.{name}" for name in _CONFIG_NEEDS if not hasattr(config, name)]
        problem = class_problem(type(worker))
        if problem is None and missing:
            problem = _refusal(type(worker), f"it has no {', '.join(missing)}")
        if problem is not None:
            raise ValueError(problem)
        adapter = cls(worker)
        adapter._install_server_class()
        return adapter

    def _install_server_class(self) -> None:
        module: Any = sys.modules[type(self._worker).__module__]
        base = module.Server
        adapter = self

        class GracefulWorkerServer(base):  # type: ignore[misc, valid-type]  # Uvicorn's Server, found at run time
            """Uvicorn's Server under graceful: no signals of its own, its loop and count reported."""

            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                # graceful's SIGTERM handler stays: its stop decides when Uvicorn's begins.
                yield

            async def startup(self, sockets: Any = None) -> None:
                loop = asyncio.get_running_loop()
                guard_accept(loop)
                adapter.server = self
                await super().startup(sockets=sockets)
                adapter._loop = loop

            async def on_tick(self, counter: int) -> bool:
                adapter.on_tick()
                return bool(await super().on_tick(counter))

        module.Server = GracefulWorkerServer

    # -- AsgiLoop ---------------------------------------------------------------------------------

    def running_loop(self) -> asyncio.AbstractEventLoop | None:
        """See :meth:`AsgiLoop.running_loop`."""
        return self._loop

    def take_over_max_requests(self) -> int:
        """See :meth:`AsgiLoop.take_over_max_requests`: Uvicorn's ``limit_max_requests`` is switched off."""
        self._worker.config.limit_max_requests = None
        return int(self._worker.max_requests)

    def requests_served(self) -> int:
        """See :meth:`AsgiLoop.requests_served`."""
        server = self.server
        return 0 if server is None else int(server.server_state.total_requests)

    def stop_accepting(self) -> None:
        """See :meth:`AsgiLoop.stop_accepting`: this process's servers close (the other processes keep theirs)."""
        for server in list(getattr(self.server, "servers", ())):
            server.close()

    def open_connections(self) -> int:
        """See :meth:`AsgiLoop.open_connections`."""
        return len(self.server.server_state.connections)

    async def lifespan_shutdown(self, timeout: float) -> bool:
        """See :meth:`AsgiLoop.lifespan_shutdown`."""
        lifespan: Any = getattr(self.server, "lifespan", None)
        shutdown = getattr(lifespan, "shutdown", None)
        if not callable(shutdown):
            return True
        lifespan.shutdown = _done  # Uvicorn's stop calls it again: done by then
        try:
            await asyncio.wait_for(shutdown(), timeout)
        except asyncio.TimeoutError:
            return False
        except Exception:  # logged: the worker stops all the same
            logger.exception("graceful: worker %d: the app's lifespan shutdown failed", os.getpid())
        return True

    def every_tick(self, callback: Callable[[], object]) -> None:
        """See :meth:`AsgiLoop.every_tick`: at each of Uvicorn's ticks (every 0.1 s)."""
        self.on_tick = callback

    def finish(self, timeout: float) -> None:
        """See :meth:`AsgiLoop.finish`: Uvicorn's own stop, its wait bounded by ``timeout``."""
        self._worker.config.timeout_graceful_shutdown = max(0.0, timeout)
        self.server.should_exit = True


async def _done() -> None:
    """The lifespan's shutdown once graceful ran it."""


def _nothing() -> None:
    """``on_tick`` until the worker's part sets its own."""
