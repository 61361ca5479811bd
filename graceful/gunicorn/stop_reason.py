"""Why a Gunicorn worker stops, for its log line: one byte the master writes, every worker reads.

A worker that is stopped while the server goes on serving logs
``graceful: worker PID stopping (REASON)``. Two reasons it knows itself:
``recycled`` (it reached ``max_requests``) and ``timeout`` (the master's
SIGABRT, after the worker missed its ``timeout``). The others come with a
SIGTERM from the master, which looks the same in every case; so the master
(main thread) writes the reason into a one-byte slot in memory it shares
with its workers just before it acts, and a worker reads it after its TERM
(its ``graceful-stop`` thread):

``reload``
    HUP: Gunicorn's ``reload()`` starts new workers, then stops the old ones.
``scale-in``
    TTOU: one worker fewer.
``upgrade``
    a TERM to a master whose USR2 successor (or predecessor, in a rollback)
    serves the same sockets: only this master's workers stop.
``worker kill``
    the control socket's ``worker kill PID`` (Gunicorn 25.1+).

``scale-in`` also comes from the control socket's ``worker remove``.

Anything else (nothing written yet: WINCH, a TERM sent to a worker by hand)
reads as ``stopped by the master``. The slot is never cleared: each TERM
follows the write that explains it, and a late reader must not see it
cleared under it. The server's own shutdown needs no slot: a worker sees
the ShutdownInitiated broadcast (:mod:`graceful.gunicorn.shared`).

The slot is an anonymous shared ``mmap`` made before the first fork (in
``on_starting``); one writer, one byte, so no lock. Gunicorn 22-27 alike.
"""

from __future__ import annotations

import enum
import mmap

__all__ = ["StopReason", "StopReasonSlot"]


class StopReason(str, enum.Enum):
    """Why a worker stops while its server goes on serving (the text of its log line)."""

    BY_MASTER = "stopped by the master"
    RELOAD = "reload"
    SCALE_IN = "scale-in"
    UPGRADE = "upgrade"
    CONTROL_KILL = "worker kill"
    RECYCLED = "recycled"
    TIMEOUT = "timeout"


# The reasons the master writes, by their byte; byte 0 (nothing written) is BY_MASTER.
_WRITTEN = (
    StopReason.BY_MASTER,
    StopReason.RELOAD,
    StopReason.SCALE_IN,
    StopReason.UPGRADE,
    StopReason.CONTROL_KILL,
)


class StopReasonSlot:
    """One byte shared by the master (writes) and its forked workers (read)."""

    def __init__(self) -> None:
        # Anonymous and MAP_SHARED (mmap's default): the forked workers see every later write.
        self._byte = mmap.mmap(-1, 1)

    def write(self, reason: StopReason) -> None:
        """Master, main thread: say why the workers it stops next are stopped."""
        if reason not in _WRITTEN:
            raise ValueError(f"the master does not write {reason.value!r}: a worker knows it itself")
        self._byte[0] = _WRITTEN.index(reason)

    def read(self) -> StopReason:
        """Worker, any thread: the reason the master wrote last (``stopped by the master`` if none)."""
        code = self._byte[0]
        return _WRITTEN[code] if code < len(_WRITTEN) else StopReason.BY_MASTER
