"""What both ASGI worker adapters do to the asyncio event loop they serve on; asyncio's selector loop.

Runs in an ASGI worker process (``-k asgi``, UvicornWorker), on its main
thread, which runs the event loop.

* :func:`guard_accept`: when the master shuts a shared listener down (it
  stopped listening once the kernel's queue was empty), ``accept()`` fails
  with ``EINVAL`` on every turn of the loop: asyncio's selector loop
  re-raises it from its accept callback, logging a traceback per turn,
  until the master's TERM comes. Guarded here, that listener leaves the
  loop with one INFO line. uvloop (no ``_accept_connection``) is left as it is.
* closing the servers without dropping a connection accepted a moment
  before is :func:`graceful.process.aio.close_servers` (graceful serve
  uses it too).
* :func:`is_sleeping_in`: whether a task is waiting in ``asyncio.sleep``
  inside a given coroutine function: the one place a worker's main loop
  may be woken by cancelling it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from typing import Any

__all__ = ["guard_accept", "is_sleeping_in"]

logger = logging.getLogger(__name__)


def guard_accept(loop: asyncio.AbstractEventLoop) -> bool:
    """Main thread (the loop's), before it serves: a listener shut down leaves the loop quietly. False: uvloop."""
    original: Any = getattr(loop, "_accept_connection", None)
    remove_reader: Any = getattr(loop, "remove_reader", None)
    if not callable(original) or not callable(remove_reader):
        return False
    pid = os.getpid()

    def accept_connection(protocol_factory: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(protocol_factory, sock, *args, **kwargs)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            # The master shut the listener down (it stopped listening): stop watching it.
            remove_reader(sock.fileno())
            logger.info("graceful: worker %d: listener %s shut down; stopped accepting", pid, _name(sock))
            return None

    loop._accept_connection = accept_connection  # type: ignore[attr-defined]  # asyncio's selector loop
    return True


def _name(sock: Any) -> str:
    try:
        return str(sock.getsockname())
    except OSError:
        return "(closed)"


def is_sleeping_in(task: asyncio.Task[Any], function: Any) -> bool:
    """On the loop: True when ``task`` runs ``function``'s coroutine and waits in ``asyncio.sleep`` there."""
    coro: Any = task.get_coro()
    code = getattr(function, "__code__", None)
    if code is None or getattr(coro, "cr_code", None) is not code:
        return False
    awaited = getattr(coro, "cr_await", None)
    return getattr(awaited, "cr_code", None) is asyncio.sleep.__code__
