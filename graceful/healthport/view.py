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
                              stopping, post-start hooks returned, readiness checks passing;
                              or, the server ready before, its workers replaced (below)
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

Replacing workers is not failing (``workers-ready`` through HUP, ``max_requests``
recycling, TTIN/TTOU, the control socket's ``worker kill``): Gunicorn stops
a worker and starts its replacement, and while the replacement boots no
worker may be ready, yet the server serves: its listener stays open, and
the connections queued meanwhile are served once the replacement accepts,
as a probe on the app's port is. So when no worker is ready and none fails a
check (every live worker is *booting*, not published yet; *starting*, its
post-start hooks not all returned, its readiness checks passing; or
*stopping*, a process stop finishing its requests; or there is none, for the
moment between a reap and the fork of its replacement), the last verdict
holds: the check passes, with a ``warn:`` line and without the starting
worker's post-start lines, if a worker was last seen ready within
``boot_bound`` (Gunicorn's ``timeout``, which bounds a worker's boot: Gunicorn
kills a worker silent for longer) and the server is not shutting down. It
fails at once when a fresh worker fails a readiness check (the verdict
stands until a worker is ready again), when a worker has gone silent,
before any worker was ever ready (start-up: post-start hooks gate readiness
then), and once ``boot_bound`` has passed with no worker ready.
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
    process's (``health-runner``). ``boot_bound`` (seconds, default
    ``liveness_bound``): how long the last ready verdict holds while workers
    are replaced (module docstring). Used by one thread, the port's.
    """

    def __init__(
        self,
        lifecycle: Lifecycle,
        sources: Sources,
        *,
        liveness_bound: float,
        stale_after: float,
        workers: bool,
        boot_bound: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lifecycle = lifecycle
        self.sources = sources
        self.liveness_bound = liveness_bound
        self.stale_after = stale_after
        self.workers = workers
        self.boot_bound = liveness_bound if boot_bound is None else boot_bound
        self._clock = clock
        self.failures = FailureLog()
        # When a worker was last seen ready (its snapshot's arrival); None before any was, and from
        # a verdict against readiness (a fresh worker failing a check) until one is ready again.
        self._last_ready: float | None = None

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
            ready, held = self._ready(heard, fresh, best, now)
            items.append(ready)
            notes.extend(held)
            if best is not None:
                if endpoint == READYZ and not held:  # held: its hooks are still starting, as booting ones are
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
    ) -> tuple[CheckResult, list[str]]:
        """``workers-ready`` with counts of why not, or ``health-runner`` (one process); and the note saying
        the last verdict holds (empty unless it does)."""
        if not self.workers:
            ok = bool(fresh)
            return CheckResult(
                HEALTH_RUNNER, ok, None if ok else f"no health snapshot within {self.stale_after:g}s"
            ), []
        if best is not None and best.ready():
            fresh_ready = (at for s, at in heard if s.ready() and now - at <= self.stale_after)
            self._last_ready = max(fresh_ready, default=now)
            return CheckResult(WORKERS_READY, True), []
        starting = sum(1 for s in fresh if not _failing_checks(s))
        silent = sum(1 for s, at in heard if now - at > self.stale_after and not s.stopping)
        counts = (
            (self.sources.booting(), "booting"),
            (starting, "starting"),
            (len(fresh) - starting, "not passing their checks"),
            (sum(1 for s, _ in heard if s.stopping), "stopping"),
            (silent, "silent"),
        )
        parts = ", ".join(f"{count} {what}" for count, what in counts if count)
        why = "no ready worker" + (f" ({parts})" if parts else "")
        if starting < len(fresh):
            self._last_ready = None  # a worker fails a check: that verdict stands until one is ready
        last = self._last_ready
        if last is None or starting < len(fresh) or silent or self.sources.shutting_down():
            return CheckResult(WORKERS_READY, False, why), []
        ago = now - last
        if ago > self.boot_bound:
            late = f"{why}; the last ready {ago:.0f}s ago, longer than a boot may take ({self.boot_bound:g}s)"
            return CheckResult(WORKERS_READY, False, late), []
        note = (
            f"workers-ready held: {why}; the last ready {ago:.1f}s ago, replacements boot within {self.boot_bound:g}s"
        )
        return CheckResult(WORKERS_READY, True), [note]


def _failing_checks(snapshot: ProcessHealth) -> list[str]:
    """The readiness checks ``snapshot`` fails (its pending post-start hooks left out: those say *starting*)."""
    return [r.name for r in snapshot.readiness if not r.ok]


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
