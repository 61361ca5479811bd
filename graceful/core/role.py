"""What part a process plays in its server's shutdown: one value, :class:`Role`.

Runs wherever a lifecycle does; a process's role changes only when it
becomes a Gunicorn master (``on_starting``) or a worker (at fork):
``Lifecycle.become_master`` and ``Lifecycle.become_worker``.
"""

from __future__ import annotations

import enum

__all__ = ["Role"]


class Role(enum.Enum):
    """A process's part in the shutdown; its value is the shutdown record's ``role``."""

    #: One process serves and runs the whole timeline: ``graceful serve``, any single-process WSGI server.
    SERVER = "server"
    #: A Gunicorn master: the signals, the delay and the pre-shutdown hooks; it serves no request.
    MASTER = "master"
    #: A Gunicorn worker: serves, drains, runs its cleanup tasks; its master runs the rest of the timeline.
    WORKER = "worker"

    @property
    def runs_pre_shutdown_hooks(self) -> bool:
        """True where the server's pre-shutdown hooks run (once per server: never in a worker)."""
        return self is not Role.WORKER

    @property
    def serves_requests(self) -> bool:
        """True where requests are served, so counted and sampled (not in a Gunicorn master)."""
        return self is not Role.MASTER
