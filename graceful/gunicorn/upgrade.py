"""Binary upgrade (USR2): is another master serving this master's sockets right now?

Runs in a master, main thread, when it gets SIGTERM (``MasterShutdown.stops_alone``,
from :func:`graceful.core.sequences.master_on_term`).
Gunicorn 22-27 keep the same bookkeeping, read through
:class:`~graceful.gunicorn.adapter.arbiter.Arbiter`:

* USR2 makes the old master fork and exec a new one, its child, which
  inherits the listening sockets (one accept queue, both masters' workers
  take from it). The old master keeps the child's pid in ``reexec_pid`` and
  sets it back to 0 when it reaps it (the new master died: a rollback, or a
  failed boot).
* The new master keeps the old one's pid in ``master_pid`` until, in its
  main loop (at most a second later), it finds it was re-parented
  (``master_pid != os.getppid()``): the old master is gone, and it is
  promoted (``master_pid = 0``).

A peer that is alive means a TERM is a *process stop*, not the server's
shutdown: the port goes on being served, so no pre-shutdown hook runs, no
delay is needed and readiness does not change; only this master's workers
stop (they stop accepting on the shared sockets, finish their requests and
run their cleanup tasks). The last master standing gets the server's whole
timeline from its own TERM. Gunicorn refuses a second USR2 while a peer
exists, so there is at most one.
"""

from __future__ import annotations

import dataclasses
import os

from graceful.gunicorn.adapter.arbiter import Arbiter

__all__ = ["Peer", "live_peer"]


@dataclasses.dataclass(frozen=True)
class Peer:
    """The other master of a binary upgrade: ``new`` (our USR2 successor) or ``old`` (our predecessor)."""

    role: str
    pid: int


def live_peer(arbiter: Arbiter) -> Peer | None:
    """The other master serving these sockets, if it is alive now; master, main thread.

    Reaps exited children first: a successor that died is a zombie until
    then (``kill(pid, 0)`` would still find it) and ``reexec_pid`` is set
    back to 0 only when Gunicorn reaps it. The predecessor is alive while it
    is still our parent; ``master_pid`` alone stays set up to a second after
    it died.
    """
    arbiter.reap()
    successor = arbiter.successor_pid()
    if successor:
        return Peer("new", successor)
    predecessor = arbiter.predecessor_pid()
    if predecessor and predecessor == os.getppid():
        return Peer("old", predecessor)
    return None
