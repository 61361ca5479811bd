"""State shared between the Gunicorn master and its forked workers.

Two facts flow from the master to every worker: ShutdownInitiated and
NotAcceptingNewRequests. Each is a :class:`Broadcast`: a pipe whose write end
only the master holds; firing closes it, and every worker waiting on the read
end sees end-of-file at once. No polling, no shared memory to corrupt, and a
worker forked after the fact sees it already fired.

A third, HTTPServerStoppedListening, is for when the master cannot stop the
listening itself: with ``reuse_port`` each worker binds its own listener and
must close it; with listeners shared with another master (a USR2 successor,
systemd, ``fd://``) they must stay open, and each worker stops accepting on
its copies.

Arrivals flow from the workers to the master through the
:class:`ArrivalBoard`: the monotonic time of the latest request that reached
any worker during the shutdown, which the master's adaptive delay reads
(:mod:`graceful.core.delay`).

One more fact flows from the master to the workers, why it stops them
(:class:`graceful.gunicorn.stop_reason.StopReasonSlot`: one byte of shared
memory, for the worker's log line).

Facts flow back through :class:`DrainReports` pipes, where workers write
their pid: a worker has drained (send_retry_after mode, where the master keeps
the listeners open until every worker is done), or has closed its own
listeners or stopped accepting on them (reuse_port, shared listeners).

Files flow back through :class:`WorkerFiles`: a private temporary directory
the master creates before the first fork and removes at exit. A worker
leaves its part of the shutdown record there (:mod:`graceful.core.record`,
:class:`PartsDirectory`) as it exits, read by the master in ``on_exit``;
and, with the health port on, its latest metrics every second
(:mod:`graceful.gunicorn.metrics`), read by the master at each scrape.

Fork safety: the master fires broadcasts from its shutdown thread while its
main thread may be forking a worker. ``os.register_at_fork`` holds a lock
across each fork and closes the inherited write ends in the child, so a child
can never keep a broadcast from firing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import mmap
import os
import select
import shutil
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable

from graceful.core.record import ProcessPart
from graceful.gunicorn.stop_reason import StopReasonSlot
from graceful.process.termination import write_json_atomically

__all__ = ["ArrivalBoard", "Broadcast", "DrainReports", "PartsDirectory", "SharedState", "WorkerFiles"]

logger = logging.getLogger(__name__)

#: A worker's part is small (its samples are bounded); anything bigger is not one.
_MAX_PART_BYTES = 32 << 20
#: The name of a worker's part: ``worker-<pid>.json``.
_PART = "worker-"

_PID = struct.Struct("i")


class Broadcast:
    """A one-shot cross-process flag: fired by the parent, seen by every child."""

    def __init__(self, name: str, fork_lock: threading.Lock) -> None:
        self.name = name
        self._read, self._write = os.pipe()
        self._fork_lock = fork_lock
        self._write_open = True

    def fileno(self) -> int:
        """The read end, readable (at EOF) once fired."""
        return self._read

    def fire(self) -> None:
        """Fire (master only): close the write end; idempotent."""
        with self._fork_lock:  # no fork may copy the write end while it closes
            if self._write_open:
                self._write_open = False
                os.close(self._write)

    def forget_write_end(self) -> None:
        """In a forked child: close the inherited write end (called at fork)."""
        if self._write_open:
            self._write_open = False
            os.close(self._write)

    def is_fired(self, timeout: float = 0.0) -> bool:
        """True once fired; waits up to ``timeout`` seconds."""
        readable, _, _ = select.select([self._read], [], [], max(0.0, timeout))
        return bool(readable)


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


class DrainReports:
    """Workers tell the master something is done by writing their pid to a pipe."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._reported: set[int] = set()

    def report(self, pid: int) -> None:
        """In a worker: say this process has drained (an atomic pipe write)."""
        os.write(self._write, _PID.pack(pid))

    def wait_all(self, live_pids: Callable[[], set[int]], timeout: float) -> bool:
        """In the master: wait until every pid in ``live_pids()`` reported, up to ``timeout`` s.

        ``live_pids`` is asked again as reports arrive and at least every
        0.2 s: workers that die or are replaced change the set.
        """
        deadline = time.monotonic() + timeout
        while True:
            if not (live_pids() - self._reported):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            readable, _, _ = select.select([self._read], [], [], min(remaining, 0.2))
            if readable:
                data = os.read(self._read, _PID.size * 256)
                usable = len(data) - len(data) % _PID.size
                self._reported.update(pid for (pid,) in _PID.iter_unpack(data[:usable]))


class WorkerFiles:
    """A private temporary directory where workers leave JSON files for the master, each written atomically.

    Made by the master before the first fork (``on_starting``), removed by
    it at exit (``on_exit``). Two kinds of file go there, by name: each
    worker's part of the shutdown record (:class:`PartsDirectory`) and each
    worker's latest metrics (:mod:`graceful.gunicorn.metrics`). A worker
    writes through a temporary file and a rename, so a reader finds the old
    file or the new one, never half of one. What the master reads from here
    it checks: a file may be anything (truncated, huge, not even a file).
    """

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="graceful-workers-")

    def write(self, name: str, data: object) -> None:
        """Leave ``data`` as JSON under ``name``; raises OSError (ValueError, TypeError: not JSON)."""
        write_json_atomically(os.path.join(self.path, name), data)

    def names(self, prefix: str) -> list[str]:
        """The names of the JSON files starting with ``prefix``, sorted; raises OSError."""
        return sorted(n for n in os.listdir(self.path) if n.startswith(prefix) and n.endswith(".json"))

    def read(self, name: str, max_bytes: int) -> object:
        """The JSON in ``name``; ValueError for one that is not a regular file of at most ``max_bytes``
        bytes of JSON, OSError when it cannot be read. Never blocks (a FIFO is refused, not opened for reading)."""
        fd = os.open(os.path.join(self.path, name), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"{name}: not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as stream:
                data = stream.read(max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > max_bytes:
            raise ValueError(f"{name}: larger than {max_bytes} bytes")
        return json.loads(data)  # a JSONDecodeError and a UnicodeDecodeError are ValueErrors

    def discard(self, name: str) -> None:
        """Remove ``name`` if it is there."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.path, name))

    def remove(self) -> None:
        """In the master: remove the directory and what is left in it."""
        shutil.rmtree(self.path, ignore_errors=True)


class PartsDirectory:
    """Where workers leave their part of the shutdown record for the master (in :class:`WorkerFiles`)."""

    def __init__(self, files: WorkerFiles) -> None:
        self.files = files

    @property
    def path(self) -> str:
        """The directory."""
        return self.files.path

    def write(self, pid: int, part: ProcessPart) -> None:
        """In a worker (main thread, ``worker_exit``): leave this worker's part; a failure is logged."""
        try:
            self.files.write(f"{_PART}{pid}.json", part.to_json())
        except (OSError, ValueError, TypeError) as exc:
            logger.warning("graceful: worker %d could not leave its part of the shutdown record: %s", pid, exc)

    def read_all(self) -> list[ProcessPart]:
        """In the master (``on_exit``): every part the workers left, by pid; unreadable ones are logged and skipped."""
        parts: list[ProcessPart] = []
        try:
            names = self.files.names(_PART)
        except OSError as exc:
            logger.warning("graceful: cannot read the workers' parts of the shutdown record: %s", exc)
            return parts
        for name in names:
            try:
                parts.append(ProcessPart.read(self.files.read(name, _MAX_PART_BYTES), name))
            except (OSError, ValueError) as exc:  # RecordError is a ValueError
                logger.warning("graceful: skipping a worker's part of the shutdown record: %s", exc)
        parts.sort(key=lambda part: part.pid)
        return parts

    def remove(self) -> None:
        """In the master, at exit: remove the workers' directory (their metrics files too)."""
        self.files.remove()


class SharedState:
    """Everything the master shares with its workers; create it before the first fork."""

    def __init__(self) -> None:
        self._fork_lock = threading.Lock()
        self.shutdown_initiated = Broadcast("ShutdownInitiated", self._fork_lock)
        self.not_accepting = Broadcast("NotAcceptingNewRequests", self._fork_lock)
        #: The workers stop listening themselves: reuse_port, or listeners shared with another master.
        self.close_listeners = Broadcast("HTTPServerStoppedListening", self._fork_lock)
        self._broadcasts = (self.shutdown_initiated, self.not_accepting, self.close_listeners)
        #: send_retry_after: each worker's pid once its requests are done.
        self.drained = DrainReports()
        #: Each worker's pid once it has stopped listening (after close_listeners).
        self.listeners_closed = DrainReports()
        #: The latest request's arrival in any worker during the shutdown, for the adaptive delay.
        self.arrivals = ArrivalBoard()
        #: Why the master stops the workers it stops next (reload, scale-in, upgrade).
        self.stop_reason = StopReasonSlot()
        #: Where workers leave files for the master: their parts of the shutdown record, their metrics.
        self.files = WorkerFiles()
        #: Each worker's part of the shutdown record.
        self.parts = PartsDirectory(self.files)
        os.register_at_fork(
            before=self._fork_lock.acquire,
            after_in_parent=self._fork_lock.release,
            after_in_child=self._after_fork_in_child,
        )

    def _after_fork_in_child(self) -> None:
        # The child's copy of the lock was taken by ``before``: release it (the
        # callbacks hold this very lock object), so a fork in the child works.
        self._fork_lock.release()
        for broadcast in self._broadcasts:
            broadcast.forget_write_end()
