"""The ``graceful-health`` thread of a serving process: its checks, then a snapshot for the health port.

The health port answers from results at hand; this makes them. One
:class:`HealthRunner` runs in each serving process (each Gunicorn worker; the
one process of ``graceful serve``): every ``period`` seconds it runs every
liveness and readiness check of the process at once, under the checks' own
timeout (:meth:`HealthChecks.run_user_checks`: the runs in progress and the
cache are shared with the probes of the app's port), and hands a
:class:`Snapshot` to ``publish`` (under Gunicorn one pipe write to the
master, :mod:`graceful.gunicorn.health`; in ``graceful serve`` an attribute).
The cheap facts (the post-start hooks returned, the process stopping) are
looked at every ``TICK`` and published at once when they change, so a probe
sees them within about 0.1 s, not a period.

Checks run here, in the serving process, where the app's connections are: a
database ping the app registers pings with that process's own pool. They run
whether or not probes come, once a period per process. A check's changes
are logged where it runs, once each (:class:`HealthChecks`).

Under gevent (``gunicorn -k gevent``) the worker has monkey-patched
``threading`` before it starts this, so the runner is a greenlet, and so
are the checks' own threads: every wait in it (its tick, the checks'
timeout) is a cooperative gevent wait and its one write is non-blocking, so
it never blocks the hub. A worker whose hub is blocked (a CPU-bound
request) publishes nothing until it yields, as Gunicorn's own heartbeat: the
health port then counts it silent (readiness, after 5 s) and dead only after
Gunicorn's ``timeout``, when Gunicorn kills it anyway.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from graceful.core.lifecycle import Lifecycle
from graceful.healthport.snapshot import Snapshot
from graceful.http.health import CheckResult, HealthChecks

__all__ = ["PERIOD", "TICK", "HealthRunner"]

logger = logging.getLogger(__name__)

#: Seconds between runs of the checks.
PERIOD = 1.0
#: Seconds between looks at the cheap facts.
TICK = 0.1


class HealthRunner:
    """Thread ``graceful-health`` of one serving process; see the module docstring.

    ``stopping()`` says whether this process is being stopped (a Gunicorn
    worker's own SIGTERM: recycled, replaced on HUP, or stopping with the
    server). ``publish`` runs on the runner's thread and must not block;
    so does ``every_period``, called after each run of the checks (a
    Gunicorn worker leaves its metrics for the master then).
    """

    def __init__(
        self,
        lifecycle: Lifecycle,
        checks: HealthChecks,
        publish: Callable[[Snapshot], None],
        *,
        stopping: Callable[[], bool] = lambda: False,
        every_period: Callable[[], None] | None = None,
        period: float = PERIOD,
        tick: float = TICK,
    ) -> None:
        self.lifecycle = lifecycle
        self.checks = checks
        self.publish = publish
        self.stopping = stopping
        self.every_period = every_period
        self.period = period
        self.tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> HealthRunner:
        """Start the thread: the first snapshot is published at once, then one a period and one per change."""
        self._thread = threading.Thread(target=self._run, name="graceful-health", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 1.0) -> None:
        """End the thread (waiting up to ``timeout`` s)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        results: tuple[tuple[CheckResult, ...], tuple[CheckResult, ...]] = ((), ())
        checked_at = float("-inf")
        published: tuple[object, ...] | None = None
        while not self._stop.is_set():
            try:
                if time.monotonic() - checked_at >= self.period:
                    checked_at = time.monotonic()
                    results = self.checks.run_user_checks()
                    published = None  # new results: publish them
                    if self.every_period is not None:
                        self.every_period()
                facts = (tuple(self.lifecycle.post_start_status().items()), bool(self.stopping()))
                if facts != published:
                    published = facts
                    self.publish(Snapshot(os.getpid(), facts[1], facts[0], *results))
            except Exception:
                logger.exception("graceful: the health runner failed a round; trying again")
            self._stop.wait(self.tick)
