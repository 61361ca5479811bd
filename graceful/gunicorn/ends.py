"""The workers that end abnormally while the master stops: how each ended, and the requests lost with it.

Runs in the master. From the first TERM (or a process stop's, with a USR2
peer serving on), every worker that ends is looked at from two sides:

* its exit status, read just before Gunicorn reaps it
  (:meth:`~graceful.gunicorn.adapter.arbiter.Arbiter.on_worker_exit`; on
  Gunicorn 22 and 23 inside the SIGCHLD handler: only a plain store there);
* its channel (:mod:`graceful.gunicorn.channel`) at end-of-file: whether it
  sent its part of the shutdown record, and its last in-flight count
  (``IN_FLIGHT`` records, sent by the worker at each sample of its shutdown).

:meth:`WorkerEnds.settle` (main thread: each pass of Gunicorn's loop, and at
exit before the record) puts them together. A worker ended abnormally when it
was killed by a signal (by the master at graceful_timeout, or by anything
else: the OOM killer's SIGKILL), exited with a status other than 0, or left
without its part while the master stopped the workers (during the delay a
worker recycled, or replaced on HUP, may exit 0 before it hears of the
shutdown: a process stop, not a loss). Each such end is logged once and kept in the master's
request statistics (:class:`~graceful.core.stats.ProcessEnd`): the shutdown
record, its summary line, the termination message and ``/metrics`` render
them. The requests it had in flight at its last report, when it sent no part,
are lost (unknown when it never reported). A worker that ended before the
master began stopping the workers (the shutdown delay) was replaced by
Gunicorn: it is named so.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Collection

from graceful.core.lifecycle import Lifecycle
from graceful.core.stats import END_KILLED, END_NO_PART, END_SIGNAL, END_STATUS, ProcessEnd
from graceful.gunicorn.adapter.arbiter import ExitStatus
from graceful.gunicorn.channel import Kind, MasterChannel, Received

__all__ = ["WorkerEnds", "in_flight_payload"]

logger = logging.getLogger(__name__)


def in_flight_payload(count: int) -> bytes:
    """An ``IN_FLIGHT`` record's payload."""
    return str(max(0, count)).encode("ascii")


def _in_flight(received: Received | None) -> int | None:
    """An ``IN_FLIGHT`` record's count (None: none was sent, or it is not a count)."""
    if received is None:
        return None
    text = received.payload.decode("ascii", "replace")
    return int(text) if text.isdigit() else None


class WorkerEnds:
    """The master's account of its workers' ends during a shutdown; see the module docstring.

    Made in ``on_starting`` (main thread). :meth:`exited` may run inside a
    signal handler, :meth:`_closed` on the ``graceful-channel`` thread; both
    only store. Everything else runs on the master's main thread.
    """

    def __init__(self, lifecycle: Lifecycle, channel: MasterChannel) -> None:
        self.lifecycle = lifecycle
        # Monotonic time the account began (None: not yet, ends are Gunicorn's own business).
        self._since: float | None = None
        # True once the master TERMed its workers: a worker ending before was replaced.
        self._stopping = False
        #: pid -> (seen at, replaced, its status), from the look before Gunicorn reaps it.
        self._exits: dict[int, tuple[float, bool, ExitStatus]] = {}
        #: pid -> (seen at, replaced, sent its part, its last in-flight count), at its channel's end-of-file.
        self._closed: dict[int, tuple[float, bool, bool, int | None]] = {}
        self._killed: set[int] = set()
        #: Gunicorn 27's dirty arbiter: pid -> (seen at, replaced, its status); and the one the master killed.
        self._dirty: dict[int, tuple[float, bool, ExitStatus]] = {}
        self._killed_dirty: int | None = None
        self._settled: set[int | tuple[str, int]] = set()
        channel.on_close(self._closed_channel)

    # -- main thread: what the master does ------------------------------------------------------

    def watch(self) -> None:
        """The first TERM (or a process stop): every worker that ends from now on is accounted for."""
        if self._since is None:
            self._since = self.lifecycle.clock.now()

    def stopping(self) -> None:
        """The master TERMs its workers now: none is replaced any more."""
        self._stopping = True

    def killing(self, pids: Collection[int]) -> None:
        """The master SIGKILLs these workers at graceful_timeout."""
        self._killed.update(pids)

    def killing_dirty(self, pid: int) -> None:
        """The master SIGKILLs the dirty arbiter ``pid`` (and its workers) at dirty_graceful_timeout."""
        self._killed_dirty = pid

    # -- what is seen (any thread; a signal handler) ---------------------------------------------

    def exited(self, pid: int, status: ExitStatus) -> None:
        """Worker ``pid`` exited with ``status`` (before Gunicorn reaps it; maybe in a signal handler)."""
        if self._since is not None:
            self._exits[pid] = (self.lifecycle.clock.now(), not self._stopping, status)

    def dirty_exited(self, pid: int, status: ExitStatus) -> None:
        """Gunicorn 27's dirty arbiter ``pid`` exited with ``status`` (main thread, as Gunicorn reaps it)."""
        if self._since is not None:
            self._dirty[pid] = (self.lifecycle.clock.now(), not self._stopping, status)

    def _closed_channel(self, pid: int, latest: dict[Kind, Received]) -> None:
        """The ``graceful-channel`` thread, under the channel's lock: worker ``pid``'s end is at end-of-file."""
        if self._since is not None:
            in_flight = _in_flight(latest.get(Kind.IN_FLIGHT))
            self._closed[pid] = (self.lifecycle.clock.now(), not self._stopping, Kind.PART in latest, in_flight)

    # -- main thread ------------------------------------------------------------------------------

    def settle(self, final: bool = False) -> list[ProcessEnd]:
        """Account for the workers seen gone from both sides (``final``: from either; at exit); the new ends.

        Each abnormal end is logged and kept in the lifecycle's statistics.
        """
        found = self._settle_dirty(final)
        for pid in sorted((set(self._exits) | set(self._closed)) - self._settled):
            exit_seen, closed = self._exits.get(pid), self._closed.get(pid)
            if not final and (exit_seen is None or closed is None):
                continue  # the other side is on its way
            self._settled.add(pid)
            end = self._end(pid, exit_seen, closed)
            if end is None:
                continue
            self._record(end)
            found.append(end)
        return found

    def _settle_dirty(self, final: bool) -> list[ProcessEnd]:
        """The dirty arbiter's ends: killed by the master, or any exit but status 0 (it sends no part)."""
        found: list[ProcessEnd] = []
        killed = self._killed_dirty
        if final and killed is not None and killed not in self._dirty:  # killed, then reaped unseen
            self._dirty[killed] = (self.lifecycle.clock.now(), False, ExitStatus(signal=signal.SIGKILL))
        for pid, (at, replaced, status) in sorted(self._dirty.items()):
            if ("dirty", pid) in self._settled or status.normal:
                continue
            self._settled.add(("dirty", pid))
            cause = END_SIGNAL if status.signal is not None else END_STATUS
            if pid == killed:
                cause = END_KILLED
            end = ProcessEnd(
                pid, cause, at, role="dirty arbiter", signal=status.signal_name, status=status.status, replaced=replaced
            )
            self._record(end)
            found.append(end)
        return found

    def _record(self, end: ProcessEnd) -> None:
        self.lifecycle.stats.process_ended(end)
        logger.warning("graceful: ended abnormally: %s", end.describe())

    def _end(
        self,
        pid: int,
        exit_seen: tuple[float, bool, ExitStatus] | None,
        closed: tuple[float, bool, bool, int | None] | None,
    ) -> ProcessEnd | None:
        """Worker ``pid``'s end, or None when it ended normally (status 0, or unknown, with its part)."""
        seen = [side[:2] for side in (exit_seen, closed) if side is not None]
        at, replaced = min(seen)
        status = ExitStatus() if exit_seen is None else exit_seen[2]
        part, in_flight = (False, None) if closed is None else closed[2:]
        if exit_seen is None and pid in self._killed and not part:
            status = ExitStatus(signal=signal.SIGKILL)  # SIGKILLed, then reaped unseen (by Gunicorn's stop)
        if status.signal is not None:
            killed = pid in self._killed and status.signal == signal.SIGKILL
            cause = END_KILLED if killed else END_SIGNAL
        elif status.status:
            cause = END_STATUS
        elif not part and not (replaced and status.normal):
            cause = END_NO_PART
        else:
            # Its part, and status 0 (or unknown); or, while the server still served, status 0 without
            # a part: a process stop (recycled, HUP, TTOU) that ended before it heard of the shutdown.
            return None
        return ProcessEnd(
            pid=pid,
            cause=cause,
            at=at,
            signal=status.signal_name,
            status=status.status,
            in_flight=in_flight,
            part=part,
            replaced=replaced,
        )
