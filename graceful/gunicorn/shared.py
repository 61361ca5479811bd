"""The server's latest arrival, shared by the Gunicorn master and its forked workers as memory.

Everything else the master and its workers tell each other goes through
their channel (:mod:`graceful.gunicorn.channel`). Arrivals do not: a worker
notes the time of every request that arrives during the shutdown, on the
request path, where a record sent through a socket (a system call, a lock
shared with the worker's other threads) would cost every request; one
8-byte store into shared memory costs nothing measurable. The master's
adaptive delay (:mod:`graceful.core.delay`) reads the latest of them.
"""

from __future__ import annotations

import math
import mmap

__all__ = ["ArrivalBoard"]


class ArrivalBoard:
    """The server's latest arrival: 8 bytes of anonymous shared memory, written by every worker.

    Made by the master before the first fork. A worker's request statistics
    write ``time.monotonic()`` of each request that arrives during the
    shutdown into :attr:`slot` (``slot[0] = now``: one aligned 8-byte store,
    no lock, no syscall on the request path); the master reads :meth:`last`.
    Every process of a machine shares ``CLOCK_MONOTONIC``, so the times
    compare with the master's. The last writer wins: two workers writing at
    once may leave the older of two times a few microseconds apart, which
    moves the start of the quiet by as much; the adaptive delay looks every
    50 ms, so this never matters.
    """

    def __init__(self) -> None:
        # Anonymous and MAP_SHARED (mmap's default): the forked workers share it; page-aligned.
        self._memory = mmap.mmap(-1, mmap.PAGESIZE)
        #: The one double every worker writes (``slot[0]``).
        self.slot = memoryview(self._memory).cast("B").cast("d")[:1]

    def last(self) -> float | None:
        """Master, any thread: the monotonic time of the latest arrival written, None before the first."""
        value = float(self.slot[0])
        return value if math.isfinite(value) and value > 0 else None
