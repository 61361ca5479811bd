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

One more fact flows from the master to the workers, why it stops them
(:class:`graceful.gunicorn.stop_reason.StopReasonSlot`: one byte of shared
memory, for the worker's log line).

Facts flow back through :class:`DrainReports` pipes, where workers write
their pid: a worker has drained (send_retry_after mode, where the master keeps
the listeners open until every worker is done), or has closed its own
listeners or stopped accepting on them (reuse_port, shared listeners).

Each worker's part of the shutdown record (:mod:`graceful.core.record`) goes
through :class:`PartsDirectory`: a private temporary directory the master
creates before the first fork; a worker writes its part there (atomically)
as it exits, the master reads them all in ``on_exit`` and removes it.

Fork safety: the master fires broadcasts from its shutdown thread while its
main thread may be forking a worker. ``os.register_at_fork`` holds a lock
across each fork and closes the inherited write ends in the child, so a child
can never keep a broadcast from firing.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable

from graceful.core.record import ProcessPart, RecordError
from graceful.gunicorn.stop_reason import StopReasonSlot
from graceful.process.termination import write_json_atomically

__all__ = ["Broadcast", "DrainReports", "PartsDirectory", "SharedState"]

logger = logging.getLogger(__name__)

#: A worker's part is small (its samples are bounded); anything bigger is not one.
_MAX_PART_BYTES = 32 << 20

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


class PartsDirectory:
    """Where workers leave their part of the shutdown record for the master (a private temporary directory)."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="graceful-parts-")

    def write(self, pid: int, part: ProcessPart) -> None:
        """In a worker (main thread, ``worker_exit``): leave this worker's part; a failure is logged."""
        try:
            write_json_atomically(os.path.join(self.path, f"worker-{pid}.json"), part.to_json())
        except (OSError, ValueError, TypeError) as exc:
            logger.warning("graceful: worker %d could not leave its part of the shutdown record: %s", pid, exc)

    def read_all(self) -> list[ProcessPart]:
        """In the master (``on_exit``): every part the workers left, by pid; unreadable ones are logged and skipped."""
        parts: list[ProcessPart] = []
        try:
            names = sorted(os.listdir(self.path))
        except OSError as exc:
            logger.warning("graceful: cannot read the workers' parts of the shutdown record: %s", exc)
            return parts
        for name in names:
            if not (name.startswith("worker-") and name.endswith(".json")):
                continue
            path = os.path.join(self.path, name)
            try:
                with open(path, encoding="utf-8") as stream:
                    text = stream.read(_MAX_PART_BYTES + 1)
                if len(text) > _MAX_PART_BYTES:
                    raise RecordError(f"{name}: larger than {_MAX_PART_BYTES} bytes")
                parts.append(ProcessPart.read(json.loads(text), name))
            except (OSError, ValueError) as exc:  # RecordError and JSONDecodeError are ValueErrors
                logger.warning("graceful: skipping a worker's part of the shutdown record: %s", exc)
        parts.sort(key=lambda part: part.pid)
        return parts

    def remove(self) -> None:
        """In the master: remove the directory and what is left in it."""
        shutil.rmtree(self.path, ignore_errors=True)


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
        #: Why the master stops the workers it stops next (reload, scale-in, upgrade).
        self.stop_reason = StopReasonSlot()
        #: Where each worker leaves its part of the shutdown record.
        self.parts = PartsDirectory()
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
