"""An ASGI worker's stop (``-k asgi``, UvicornWorker), carried out on its event loop; Gunicorn 25.1-27.

Runs in an ASGI worker process: made in ``post_worker_init`` (main
thread, before the worker's loop runs), carried out by the worker's
``graceful-stop`` thread (:mod:`.process_stop`), which hands the steps to
the worker's event loop and waits for them, bounded.

Why: left to themselves, Gunicorn's ``-k asgi`` closes its listeners and
waits up to ``graceful_timeout`` (as long as the master waits: its SIGKILL
comes first, before the app's lifespan shutdown), and never sends a
WebSocket close frame; Uvicorn's worker closes every connection at once
(1012 to WebSockets) and waits without a bound. So graceful takes the stop
over, for the server's shutdown and for a process stop alike:

1. the worker stops accepting (its listeners are shared: the kernel's queue
   is served by the other processes, or was emptied before the master's TERM);
2. the requests in flight finish, bounded by ``drain_timeout`` (the
   lifecycle's count, kept by :class:`~graceful.asgi.GracefulASGIMiddleware`);
   those still running at its deadline are recorded abandoned there, for
   good (the worker's own stop cancels their tasks, which ends their count);
3. the long-lived connections still open are told to leave (WebSockets 1001,
   streams ended at a chunk boundary: :func:`graceful.asgi.goodbyes_of`)
   and waited for, within the same deadline;
4. the worker's connections close: every response from the stop's start
   says ``Connection: close`` (a request already running included) and its
   connection closes after it; an idle keep-alive one at the server's
   keep-alive timeout (closing it at once would lose the request a client
   may be sending on it that moment), within the same deadline;
5. the app's lifespan shutdown runs, bounded by what the budget leaves
   before the cleanup tasks (which ``worker_exit`` runs after the loop ends);
6. the worker's own stop runs with nothing left to wait for: its loop ends,
   and ``worker_exit`` drains (nothing left), cleans up and exits 0.

The event loop's internals each worker class needs are its adapter's
(:mod:`.adapter.gasgi`, :mod:`.adapter.uvicorn_worker`): :class:`AsgiLoop`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Protocol

from graceful.core.lifecycle import Lifecycle

__all__ = ["AsgiLoop", "AsgiStop"]

logger = logging.getLogger(__name__)

#: Seconds between two looks at the in-flight count and the open connections while they finish.
POLL = 0.01
#: Seconds the stop leaves after the lifespan shutdown for the worker's own stop and exit.
EXIT_MARGIN = 0.5
#: Seconds the graceful-stop thread waits beyond the stop's own deadline before it gives up on the loop.
LOOP_GRACE = 1.0


def _nothing() -> None:
    """``at_deadline`` when nothing is to be counted there."""


class AsgiLoop(Protocol):
    """What the stop needs from an ASGI worker's event loop (:mod:`.adapter.gasgi`, :mod:`.adapter.uvicorn_worker`)."""

    def running_loop(self) -> asyncio.AbstractEventLoop | None:
        """Any thread: the worker's event loop once it serves, else None."""

    def take_over_max_requests(self) -> int:
        """``post_worker_init``: switch the worker's own ``max_requests`` stop off; the limit it chose (with jitter)."""

    def requests_served(self) -> int:
        """Any thread: how many requests the worker has served."""

    async def stop_accepting(self) -> None:
        """On the loop: stop taking connections on this worker's listeners (other processes keep theirs).

        Every connection already accepted is kept and served.
        """

    def close_after_response(self) -> None:
        """On the loop: the requests running now close their connection after their response.

        Later ones say ``Connection: close`` through the middleware (the
        gate's :meth:`~graceful.core.gate.Gate.close_connections`, called just
        before). Idle keep-alive connections are not closed here: a client may be
        sending its next request on one that very moment (it would be lost);
        they close after that request's response, or at the server's
        keep-alive timeout, as in normal operation.
        """

    def open_connections(self) -> int:
        """On the loop: the connections this worker holds (keep-alive, serving, WebSockets)."""

    async def lifespan_shutdown(self, timeout: float) -> bool:
        """On the loop: the app's lifespan shutdown now, bounded by ``timeout`` s; False if it did not end in time.

        The worker's own stop then skips it.
        """

    def finish(self, timeout: float) -> None:
        """On the loop: start the worker's own stop, its waits bounded by ``timeout`` s; the loop then ends."""

    def every_tick(self, callback: Callable[[], object]) -> None:
        """``post_worker_init``: call ``callback`` on the loop a few times a second (no ``pre_request`` there)."""


class AsgiStop:
    """One ASGI worker's stop (see the module docstring)."""

    def __init__(self, loop: AsgiLoop, lifecycle: Lifecycle, lifespan_until: float) -> None:
        self._loop = loop
        self._lifecycle = lifecycle
        #: Seconds after the stop's start by which the lifespan shutdown must have ended (the cleanup's share after).
        self.lifespan_until = lifespan_until
        #: The limit the worker chose (max_requests plus its jitter; sys.maxsize: none). graceful counts instead.
        self.max_requests = loop.take_over_max_requests()

    def reaches_max_requests(self, pending: int) -> bool:
        """True once the worker's served requests and ``pending`` reach its ``max_requests``. Any thread."""
        return self._loop.requests_served() + pending >= self.max_requests

    def stop_accepting_soon(self) -> None:
        """Any thread: the worker stops accepting, on its loop (a USR2 peer serves the same listeners)."""
        loop = self._loop.running_loop()
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nothing accepts any more
            asyncio.run_coroutine_threadsafe(self._loop.stop_accepting(), loop)

    def stop(
        self,
        started_at: float,
        drain_timeout: float,
        on_loop_gone: Callable[[], object],
        at_deadline: Callable[[], object] = _nothing,
    ) -> int:
        """``graceful-stop`` thread: carry out the stop on the loop; the connections still open at its deadline.

        ``started_at`` (monotonic) is when the stop began; the drain ends by
        ``started_at + drain_timeout``. When the loop is not running (the
        worker never served) or does not answer in time, ``on_loop_gone``
        (Gunicorn's own stop) is called instead. ``at_deadline`` is called on
        the loop when connections are still open at the drain's deadline,
        before the worker's own stop cuts them (HTTP/2: the streams abandoned
        are counted and named).
        """
        deadline = started_at + drain_timeout
        lifespan_deadline = max(deadline, started_at + self.lifespan_until)
        loop = self._serving_loop(deadline)
        if loop is None:
            on_loop_gone()
            return 0
        try:
            future = asyncio.run_coroutine_threadsafe(self._stop(deadline, lifespan_deadline, at_deadline), loop)
        except RuntimeError:  # the loop closed meanwhile
            on_loop_gone()
            return 0
        try:
            return future.result(timeout=max(0.0, lifespan_deadline - time.monotonic()) + LOOP_GRACE)
        except concurrent.futures.TimeoutError:
            future.cancel()
            logger.warning("graceful: the worker's event loop did not carry out its stop in time")
        except (concurrent.futures.CancelledError, RuntimeError):  # the loop ended first (a quick stop)
            pass
        except Exception:  # logged: the worker must still stop
            logger.exception("graceful: the worker's stop on its event loop failed")
        on_loop_gone()
        return 0

    def _serving_loop(self, deadline: float) -> asyncio.AbstractEventLoop | None:
        """``graceful-stop`` thread: the worker's loop, waited for until ``deadline`` (monotonic) if not serving yet.

        A stop may come while the worker is still starting (a HUP just after
        its boot): Uvicorn's worker has no loop until its startup ended, and
        handing over to Gunicorn's stop then would stop nothing (Uvicorn
        listens to no signal under graceful): the master's SIGKILL would.
        """
        loop = self._loop.running_loop()
        while loop is None and time.monotonic() < deadline:
            time.sleep(POLL)
            loop = self._loop.running_loop()
        return loop

    async def _stop(self, deadline: float, lifespan_deadline: float, at_deadline: Callable[[], object]) -> int:
        """On the loop: the steps of the module docstring."""
        from graceful.asgi import goodbyes_of  # imported here: the module loads no asyncio side in a WSGI worker

        loop = self._loop
        lifecycle = self._lifecycle
        await loop.stop_accepting()
        # A keep-alive client's next request would hold the worker until the drain's deadline: every
        # response from now says Connection: close (the middleware's, through the gate; running ones: the loop's).
        lifecycle.gate.close_connections()
        loop.close_after_response()
        in_flight = lifecycle.in_flight
        await _until(lambda: in_flight.count == 0, deadline)
        if in_flight.count:
            # Abandoned: the worker's own stop cancels their tasks, which ends their count. Recorded now
            # (figures, warning; a zero wait never blocks the loop), for good.
            lifecycle.drain(0.0)
            lifecycle.stats.drain_cut()
        goodbyes = goodbyes_of(lifecycle)
        if goodbyes.open:
            await goodbyes.leave_all(max(0.0, deadline - time.monotonic()))
        await _until(lambda: loop.open_connections() == 0, deadline)
        left = loop.open_connections()
        if left:
            # Said here, on the loop: once the worker's own stop runs, the process may end before its thread logs.
            logger.warning(
                "graceful: worker %d: %d connection(s) still open at the drain's deadline", os.getpid(), left
            )
            at_deadline()
        if not await loop.lifespan_shutdown(max(0.0, lifespan_deadline - time.monotonic())):
            logger.warning("graceful: the app's lifespan shutdown did not end within the budget")
        loop.finish(max(0.0, deadline - time.monotonic()))
        return left


async def _until(done: Callable[[], bool], deadline: float) -> None:
    """On the loop: return once ``done()`` or at ``deadline`` (monotonic), looking every :data:`POLL` s."""
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(POLL)
