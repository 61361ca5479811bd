"""Why a Gunicorn worker stops, for its log line: the master says it, or the worker knows it itself.

A worker that is stopped while the server goes on serving logs
``graceful: worker PID stopping (REASON)``. Two reasons it knows itself:
``recycled`` (it reached ``max_requests``) and ``timeout`` (the master's
SIGABRT, after the worker missed its ``timeout``). The others come with a
SIGTERM from the master, which looks the same in every case; so the master
(main thread) sends the reason to every worker through their channel
(:mod:`graceful.gunicorn.channel`, a ``STOP_REASON`` fact) just before it
acts, and a worker reads it after its TERM (its ``graceful-stop`` thread):

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

Anything else (nothing sent yet: WINCH, a TERM sent to a worker by hand)
reads as ``stopped by the master``. The reason is never cleared: each TERM
follows the record that explains it (the record is in the worker's end of
the channel before the signal is sent), and a worker forked later gets the
latest as one of its first records. The server's own shutdown needs no
reason: a worker has the ShutdownInitiated fact by then.
"""

from __future__ import annotations

import enum

__all__ = ["SENT_BY_MASTER", "StopReason"]


class StopReason(str, enum.Enum):
    """Why a worker stops while its server goes on serving (the text of its log line)."""

    BY_MASTER = "stopped by the master"
    RELOAD = "reload"
    SCALE_IN = "scale-in"
    UPGRADE = "upgrade"
    CONTROL_KILL = "worker kill"
    RECYCLED = "recycled"
    TIMEOUT = "timeout"


#: The reasons the master sends; the others a worker knows itself.
SENT_BY_MASTER = frozenset(
    {StopReason.BY_MASTER, StopReason.RELOAD, StopReason.SCALE_IN, StopReason.UPGRADE, StopReason.CONTROL_KILL}
)
