"""The whole server's health, from the snapshots its serving processes published, and its metrics.

The health port's :class:`~graceful.healthport.server.Responder`. Runs on the
port's thread (``graceful-health-port``): every answer comes from what is at
hand, in microseconds, waiting for nothing.

What each endpoint lists, kube-apiserver's way (the ``workers`` lines under
Gunicorn; ``health-runner`` in a single process)::

    /livez    ping
              master-loop     the Gunicorn master's loop ran within the liveness bound
              workers         some worker published within the liveness bound: fails only
                              when none has for that long (busy is not dead)
              health-runner   (single process) a snapshot within the liveness bound
              <liveness checks>                  as the best live worker reports them
    /readyz   ping
              workers-ready   some worker is ready: heard within ``stale_after``, not
                              stopping, post-start hooks returned, readiness checks passing
              health-runner   (single process) a snapshot within ``stale_after``
              poststarthook/<name>, <readiness checks>   as the best worker reports them
              shutdown        fails from the server's ShutdownInitiated on
    /healthz  the /livez lines, then workers-ready (or health-runner) and the readiness
              checks (no shutdown)
    /metrics  the merge (graceful.core.report.merge) of every process report Sources.metrics
              gives, rendered in Prometheus' text format (404 without prometheus_client):
              under Gunicorn graceful.gunicorn.metrics

Many workers, one answer: **the server passes a check when at least one
worker passes it**, because the server serves while one worker can. The
other rule, "every worker", would let one worker with a broken connection
pool fail the whole pod's readiness, and readiness never restarts a worker,
so the pod would stay out of the Service for good (and with a shared
database, every pod at once). The listing shows the *best* worker: a ready
one if any, else the one failing the fewest checks; its lines are then
exactly what a single process would say. A check the best worker passes but
others fail adds ``warn: <name> failing in 1 of 2 workers``, which does not
fail the probe; each failing worker logged the real reason when the check
started failing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from graceful.core.lifecycle import Lifecycle
from graceful.core.report import ProcessReport
from graceful.healthport.snapshot import ProcessHealth
from graceful.http.health import (
    HEALTHZ,
    LIVEZ,
    PING,
    READYZ,
    SHUTDOWN,
    CheckResult,
    FailureLog,
    HealthResponse,
    respond_with,
)
from graceful.http.probes import metrics_reply

__all__ = ["HEALTH_RUNNER", "MASTER_LOOP", "WORKERS", "WORKERS_READY", "Heard", "HealthView", "Sources"]

MASTER_LOOP = "master-loop"
WORKERS = "workers"
WORKERS_READY = "workers-ready"
HEALTH_RUNNER = "health-runner"

#: A snapshot and the monotonic time it arrived (on the port's clock).
Heard = tuple[ProcessHealth, float]


class Sources(Protocol):
    """Where the snapshots come from: the Gunicorn master's records, or one process's runner."""

    def heard(self) -> Sequence[Heard]:
        """The latest snapshot of each live serving process, with when it arrived."""
        ...

    def booting(self) -> int:
        """How many live serving processes have published nothing yet."""
        ...

    def last_heard(self) -> float:
        """When a live serving process last published (monotonic), or when the server started."""
        ...

    def master_idle(self) -> float | None:
        """Seconds since the Gunicorn master's loop last ran; None without a master loop."""
        ...

    def shutting_down(self) -> bool:
        """Whether the *server* is shutting down (an old master whose USR2 successor serves is not)."""
        ...

    def metrics(self) -> list[ProcessReport]:
        """The reports of the whole server's processes, to merge and render: read at hand, never waiting for one."""
        ...


class HealthView:
    """Answers probes for a server from its processes' snapshots; see the module docstring.

    ``liveness_bound`` (seconds): how long without a word from any worker (or
    from the master's loop) before ``/livez`` fails. ``stale_after``
    (seconds): how old a snapshot may be and still count for readiness.
    ``workers``: Gunicorn's lines (``workers``, ``workers-ready``); else one
    process's (``health-runner``). Used by one thread, the port's.
    """

    def __init__(
        self,
        lifecycle: Lifecycle,
        sources: Sources,
        *,
        liveness_bound: float,
        stale_after: float,
        workers: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lifecycle = lifecycle
        self.sources = sources
        self.liveness_bound = liveness_bound
        self.stale_after = stale_after
        self.workers = workers
        self._clock = clock
        self.failures = FailureLog()

    def respond(self, endpoint: str, check: str | None, query_string: str) -> HealthResponse:
        """One probe; never blocks, never raises for any query."""
        items, notes = self.lines(endpoint)
        return respond_with(
            self.lifecycle, items, endpoint, check, query_string, failure_log=self.failures, notes=notes
        )

    def metrics(self) -> tuple[int, bytes, str]:
        """``/metrics``: the server's metrics (:meth:`Sources.metrics`, merged), or 404 without prometheus_client."""
        return metrics_reply(snapshots=self.sources.metrics)

    def lines(self, endpoint: str) -> tuple[list[CheckResult], tuple[str, ...]]:
        """The checks of ``endpoint`` now, in order, and the ``warn:`` notes."""
        now = self._clock()
        heard = list(self.sources.heard())
        items = [CheckResult(PING, True)]
        notes: list[str] = []
        if endpoint in (LIVEZ, HEALTHZ):
            items.extend(self._alive(now))
            live = [snapshot for snapshot, at in heard if now - at <= self.liveness_bound]
            best = _best(live, lambda s: [r.name for r in s.liveness if not r.ok])
            if best is not None:
                items.extend(best.liveness)
                notes.extend(_disagreements(live, best, lambda s: s.liveness))
        if endpoint in (READYZ, HEALTHZ):
            fresh = [snapshot for snapshot, at in heard if now - at <= self.stale_after and not snapshot.stopping]
            best = _best(fresh, ProcessHealth.failing_readiness)
            items.append(self._ready(heard, fresh, best, now))
            if best is not None:
                if endpoint == READYZ:
                    items.extend(best.post_start_results())
                items.extend(best.readiness)
                notes.extend(_disagreements(fresh, best, lambda s: s.readiness))
        if endpoint == READYZ:
            down = self.sources.shutting_down()
            items.append(CheckResult(SHUTDOWN, not down, "server is shutting down" if down else None))
        return items, tuple(notes)

    def _alive(self, now: float) -> list[CheckResult]:
        """``master-loop`` and ``workers`` (Gunicorn), or ``health-runner`` (one process)."""
        bound = self.liveness_bound
        lines = []
        idle = self.sources.master_idle()
        if idle is not None:
            stuck = idle > bound
            reason = f"the master's loop has not run for {idle:.0f}s (bound {bound:g}s)" if stuck else None
            lines.append(CheckResult(MASTER_LOOP, not stuck, reason))
        silent = now - self.sources.last_heard()
        dead = silent > bound
        if self.workers:
            reason = f"no worker has published for {silent:.0f}s (bound {bound:g}s)" if dead else None
            lines.append(CheckResult(WORKERS, not dead, reason))
        else:
            reason = f"no health snapshot for {silent:.0f}s (bound {bound:g}s)" if dead else None
            lines.append(CheckResult(HEALTH_RUNNER, not dead, reason))
        return lines

    def _ready(
        self, heard: list[Heard], fresh: list[ProcessHealth], best: ProcessHealth | None, now: float
    ) -> CheckResult:
        """``workers-ready`` with counts of why not, or ``health-runner`` (one process)."""
        if not self.workers:
            ok = bool(fresh)
            return CheckResult(HEALTH_RUNNER, ok, None if ok else f"no health snapshot within {self.stale_after:g}s")
        if best is not None and best.ready():
            return CheckResult(WORKERS_READY, True)
        counts = (
            (self.sources.booting(), "booting"),
            (len(fresh), "not passing their checks"),
            (sum(1 for s, _ in heard if s.stopping), "stopping"),
            (sum(1 for s, at in heard if now - at > self.stale_after and not s.stopping), "silent"),
        )
        parts = ", ".join(f"{count} {what}" for count, what in counts if count)
        return CheckResult(WORKERS_READY, False, "no ready worker" + (f" ({parts})" if parts else ""))


def _best(snapshots: list[ProcessHealth], failing: Callable[[ProcessHealth], list[str]]) -> ProcessHealth | None:
    """The snapshot failing the fewest checks (the first among equals); None if there is none."""
    return min(snapshots, key=lambda s: len(failing(s)), default=None)


def _disagreements(
    snapshots: list[ProcessHealth], best: ProcessHealth, results: Callable[[ProcessHealth], tuple[CheckResult, ...]]
) -> list[str]:
    """``<name> failing in K of N workers`` for each check the best one passes and others fail."""
    if len(snapshots) < 2:
        return []
    notes = []
    for result in results(best):
        if result.ok:
            failing = sum(1 for s in snapshots if any(r.name == result.name and not r.ok for r in results(s)))
            if failing:
                notes.append(f"{result.name} failing in {failing} of {len(snapshots)} workers")
    return notes
