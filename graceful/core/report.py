"""What one process did: its report, the one codec it travels in, and the one merge of several.

A :class:`ProcessReport` is everything a process can say about itself:
its signals, hook and cleanup-task runs, request counters (in flight,
arrivals, rejections, the drain), samples, health-check tallies, how its
shutdown delay ended and what serves it. :func:`report_of` reads one from a
:class:`~graceful.core.lifecycle.Lifecycle`, at any moment, on any thread
(every read is thread-safe). Everything that says what a process did renders
a report: the shutdown record (:mod:`graceful.core.record`: the merge of the
server's processes, with their reports as its ``parts``), ``/metrics``
(:mod:`graceful.metrics`) and, through the same codec, the health records
(:mod:`graceful.healthport.snapshot`).

Times are seconds since the report's origin ``t0`` (monotonic): its
ShutdownInitiated, the start of its drain (a process stopped alone), or 0
(the raw monotonic clock: a report taken for ``/metrics``).
``time.monotonic`` is one clock for every process of a machine, so the
merge moves every report onto the first one's origin; ``offset`` says how
far a report's times were moved.

One codec (:mod:`graceful.core.codec`): :meth:`ProcessReport.to_json`
and :meth:`ProcessReport.read` (files: a worker's part of the shutdown
record, its metrics file); pipes frame the same JSON. Whatever is read is
untrusted: it is refused with one :class:`~graceful.core.codec.ReportError`
naming the field (``requests.rejected.draining: missing``).

:func:`merge` (one rule per field; the caller puts the server's own report
first)::

    field                         rule                                        why
    ----------------------------  ------------------------------------------  ----------------------------------
    pid, role, t0, version,       the first report's                          the server's own (master, or the
    server, worker_class                                                      one process of graceful serve)
    signal HasBeenReady           the earliest                                the server was ready when its
                                                                              first process was
    ShutdownInitiated, After-     the owner's (master, serve), else the       the server's facts: a worker's
    ShutdownDelayDuration, Pre-   earliest                                    copy is when it heard of them
    ShutdownHooksStopped, Not-
    AcceptingNewRequests, HTTP-
    ServerStoppedListening
    InFlightRequestsDrained       the latest of the serving processes         drained when the last one is; a
                                  (worker, serve), else the owner's           master serves nothing and fires
                                                                              its own only as it exits
    CleanupFinished               the latest                                  done when the last process is
    in_flight, drained, aban-     summed                                      each process counts its own
    doned, arrived, late,
    rejected
    drain_s                       the longest                                 the server waited that long
    late_from                     the earliest                                the first process's late window
    last_arrival                  the latest                                  the server's last arrival
    hooks                         every run; the same run (kind, name, pid,   a hook runs once per process; a
                                  outcome, start, error) adds its ``runs``    retained total (counters_only)
                                  and keeps the longest duration              folds many runs into one entry
    checks                        per (endpoint, name): passing only when     readiness is the workers-ready
                                  every process passes; counts summed         view's job; this is the tally
    samples                       summed on a common grid                     the server's in-flight curve
    delay                         the first report's that has one             only the process that ran the
                                                                              delay has one
    longest pre-shutdown hook     the longest of the owners' (master, serve)  the hooks run there
    longest cleanup task          the longest of the serving processes'       the tasks that follow a drain run
                                  (worker, serve), else of all                there; a master's is its default
    ============================  ==========================================  ==================================

Pure data: no I/O, no prometheus_client.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from graceful.core.codec import MAX_ITEMS, FieldReader, ReportError
from graceful.core.delay import DelayEnd, DelayOutcome
from graceful.core.role import Role
from graceful.core.stats import LATE_SHARE, PHASES, REASON_REFUSED_STREAM, REASONS, SAMPLE_INTERVAL, CheckTally

if TYPE_CHECKING:
    from graceful.core.lifecycle import Lifecycle

__all__ = [
    "ROLE_MASTER",
    "ROLE_SERVER",
    "ROLE_WORKER",
    "HAS_BEEN_READY",
    "ROLES",
    "HookEntry",
    "ProcessReport",
    "RequestFigures",
    "SampleSeries",
    "delay_from_json",
    "merge",
    "report_of",
    "role_of",
]

ROLE_SERVER = Role.SERVER.value  # graceful serve: the one process
ROLE_MASTER = Role.MASTER.value  # a Gunicorn master: signals and pre-shutdown hooks, no requests
ROLE_WORKER = Role.WORKER.value  # a Gunicorn worker: requests and cleanup tasks
ROLES = (ROLE_SERVER, ROLE_MASTER, ROLE_WORKER)
#: The roles that own the server (its facts are theirs) and those that serve requests.
_OWNERS = frozenset({ROLE_SERVER, ROLE_MASTER})
_SERVING = frozenset({ROLE_SERVER, ROLE_WORKER})

HAS_BEEN_READY = "HasBeenReady"
IN_FLIGHT_DRAINED = "InFlightRequestsDrained"
CLEANUP_FINISHED = "CleanupFinished"

#: Rejection reasons a report written before graceful 0.3 does not have: read as 0.
_SINCE_0_3 = frozenset({REASON_REFUSED_STREAM})


# -- the pieces --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HookEntry:
    """A hook's or task's run: times in s since the origin (``started`` unknown: None).

    ``runs`` > 1 only in a total of processes that are gone (:meth:`ProcessReport.counters_only`).
    """

    kind: str
    name: str
    pid: int
    outcome: str
    started: float | None
    duration: float
    error: str | None = None
    runs: int = 1

    def shifted(self, offset: float) -> HookEntry:
        """The same run with its start ``offset`` seconds later."""
        return dataclasses.replace(self, started=_plus(self.started, offset))

    def to_json(self) -> dict[str, Any]:
        """This run as JSON (``runs`` only when not 1: a record's runs are one each)."""
        data = {
            "kind": self.kind,
            "name": self.name,
            "pid": self.pid,
            "outcome": self.outcome,
            "started_s": _seconds(self.started),
            "duration_s": _seconds(self.duration),
            "error": self.error,
        }
        if self.runs != 1:
            data["runs"] = self.runs
        return data

    @classmethod
    def from_json(cls, data: FieldReader) -> HookEntry:
        """Read one run back; :class:`ReportError` when it is not one."""
        return cls(
            kind=data.text("kind"),
            name=data.text("name"),
            pid=data.count("pid"),
            outcome=data.text("outcome"),
            started=data.seconds("started_s", optional=True),
            duration=data.seconds("duration_s", signed=False),
            error=data.text("error", optional=True),
            runs=data.count("runs") if data.has("runs") else 1,
        )


@dataclasses.dataclass(frozen=True)
class RequestFigures:
    """What requests did in the shutdown of one process, or of the whole server (merged).

    ``drained``: in flight when the drain began (``drain_seconds`` later all
    but ``abandoned`` were done); ``arrived``: after ShutdownInitiated, by
    phase; ``late``: of those, arrived in the last tenth of the delay, from
    ``late_from`` on; ``rejected``: by reason.
    """

    drained: int = 0
    drain_seconds: float | None = None
    abandoned: int = 0
    arrived: Mapping[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    late: int = 0
    late_from: float | None = None
    last_arrival: float | None = None
    rejected: Mapping[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(REASONS, 0))

    def shifted(self, offset: float) -> RequestFigures:
        """The same figures with their times ``offset`` seconds later."""
        return dataclasses.replace(
            self, late_from=_plus(self.late_from, offset), last_arrival=_plus(self.last_arrival, offset)
        )

    def counts_only(self) -> RequestFigures:
        """The counts, without the times."""
        return dataclasses.replace(self, drain_seconds=None, late_from=None, last_arrival=None)

    @classmethod
    def total(cls, figures: Iterable[RequestFigures]) -> RequestFigures:
        """Several processes' figures, each field by its rule (see the module docstring); times on one scale."""
        items = list(figures)
        return cls(
            drained=sum(f.drained for f in items),
            drain_seconds=_extreme(max, (f.drain_seconds for f in items)),
            abandoned=sum(f.abandoned for f in items),
            arrived={phase: sum(f.arrived.get(phase, 0) for f in items) for phase in PHASES},
            late=sum(f.late for f in items),
            late_from=_extreme(min, (f.late_from for f in items)),
            last_arrival=_extreme(max, (f.last_arrival for f in items)),
            rejected={reason: sum(f.rejected.get(reason, 0) for f in items) for reason in REASONS},
        )

    def to_json(self) -> dict[str, Any]:
        """These figures as JSON."""
        return {
            "drained": self.drained,
            "drain_s": _seconds(self.drain_seconds),
            "abandoned": self.abandoned,
            "arrived": dict(self.arrived),
            "late": self.late,
            "late_from_s": _seconds(self.late_from),
            "last_arrival_s": _seconds(self.last_arrival),
            "rejected": dict(self.rejected),
        }

    @classmethod
    def from_json(cls, data: FieldReader) -> RequestFigures:
        """Read figures back; :class:`ReportError` when they are not."""
        arrived, rejected = data.child("arrived"), data.child("rejected")
        present = set(rejected.names())
        return cls(
            drained=data.count("drained"),
            drain_seconds=data.seconds("drain_s", optional=True, signed=False),
            abandoned=data.count("abandoned"),
            arrived={phase: arrived.count(phase) for phase in PHASES},
            late=data.count("late"),
            late_from=data.seconds("late_from_s", optional=True),
            last_arrival=data.seconds("last_arrival_s", optional=True),
            rejected={
                reason: rejected.count(reason) if reason in present or reason not in _SINCE_0_3 else 0
                for reason in REASONS
            },
        )


@dataclasses.dataclass(frozen=True)
class SampleSeries:
    """Samples over time: ``t`` in s since the origin, and the in-flight count, arrivals, rejections then."""

    t: tuple[float, ...] = ()
    in_flight: tuple[int, ...] = ()
    arrived: tuple[int, ...] = ()
    rejected: tuple[int, ...] = ()
    interval: float = SAMPLE_INTERVAL
    truncated: bool = False

    def shifted(self, offset: float) -> SampleSeries:
        """The same samples ``offset`` seconds later."""
        return dataclasses.replace(self, t=tuple(t + offset for t in self.t))

    def at(self, moment: float) -> tuple[int, int, int]:
        """In flight, arrived, rejected at ``moment``: the last sample at or before it (in flight 0 outside them)."""
        index = _last_at_or_before(self.t, moment)
        if index < 0:
            return 0, 0, 0
        in_flight = self.in_flight[index] if moment <= self.t[-1] else 0
        return in_flight, self.arrived[index], self.rejected[index]

    @classmethod
    def total(cls, series: Sequence[SampleSeries], interval: float = SAMPLE_INTERVAL) -> SampleSeries:
        """Several processes' samples summed, every ``interval`` s over their whole span (at most 100,000 points)."""
        used = [s for s in series if s.t]
        if not used:
            return cls(interval=interval)
        start = min(s.t[0] for s in used)
        end = max(s.t[-1] for s in used)
        step = max(interval, (end - start) / (MAX_ITEMS - 1))
        points = int((end - start) // step) + 1
        times = [start + i * step for i in range(points)]
        if times[-1] < end:
            times.append(end)
        rows = [[sum(column) for column in zip(*(s.at(t) for s in used), strict=True)] for t in times]
        return cls(
            t=tuple(times),
            in_flight=tuple(r[0] for r in rows),
            arrived=tuple(r[1] for r in rows),
            rejected=tuple(r[2] for r in rows),
            interval=step,
            truncated=any(s.truncated for s in used),
        )

    def to_json(self) -> dict[str, Any]:
        """These samples as JSON (one list per series)."""
        return {
            "interval_s": self.interval,
            "t_s": [round(t, 4) for t in self.t],
            "in_flight": list(self.in_flight),
            "arrived": list(self.arrived),
            "rejected": list(self.rejected),
            "truncated": self.truncated,
        }

    @classmethod
    def from_json(cls, data: FieldReader) -> SampleSeries:
        """Read samples back: equally long series, times in order; :class:`ReportError` otherwise."""
        t = tuple(data.values("t_s", FieldReader.seconds))
        columns = [tuple(data.values(name, FieldReader.count)) for name in ("in_flight", "arrived", "rejected")]
        if any(len(column) != len(t) for column in columns):
            raise ReportError(f"{data.where('t_s')}: the sample series differ in length")
        if any(b < a for a, b in itertools.pairwise(t)):
            raise ReportError(f"{data.where('t_s')}: sample times go backwards")
        interval = data.seconds("interval_s", signed=False)
        if interval <= 0:
            raise ReportError(f"{data.where('interval_s')}: expected seconds > 0")
        return cls(t, columns[0], columns[1], columns[2], interval, data.flag("truncated"))


# -- the report ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProcessReport:
    """What one process did (or several, merged); its times in s since ``t0``, see the module docstring.

    ``t0``: the origin, monotonic s (its ShutdownInitiated, its drain's
    start, or 0). ``offset``: how far the times were moved onto another
    report's origin (0 until then). Immutable; built by :func:`report_of`,
    read back by :meth:`read`, combined by :func:`merge`.
    """

    pid: int
    role: str
    t0: float
    signals: Mapping[str, float]
    hooks: tuple[HookEntry, ...]
    requests: RequestFigures
    samples: SampleSeries
    longest_pre_shutdown_hook: float
    longest_cleanup_task: float
    offset: float = 0.0
    #: Requests in flight when the report was taken (counted ones, as the drain sees them).
    in_flight: int = 0
    #: Each health check evaluated by a probe, per endpoint: its last result and counts.
    checks: tuple[CheckTally, ...] = ()
    #: How the shutdown delay ended, in the process that ran it.
    delay: DelayOutcome | None = None
    version: str = ""
    server: str = ""
    worker_class: str = ""

    @classmethod
    def empty(cls, version: str = "", server: str = "", worker_class: str = "") -> ProcessReport:
        """A report of nothing (every count 0, no signal)."""
        return cls(
            pid=0,
            role=ROLE_WORKER,
            t0=0.0,
            signals={},
            hooks=(),
            requests=RequestFigures(),
            samples=SampleSeries(),
            longest_pre_shutdown_hook=0.0,
            longest_cleanup_task=0.0,
            version=version,
            server=server,
            worker_class=worker_class,
        )

    @property
    def origin(self) -> float:
        """The monotonic time its times count from, after any shift (``t0 - offset``)."""
        return self.t0 - self.offset

    def shifted_onto(self, origin: float) -> ProcessReport:
        """This report with its times in s since ``origin`` (monotonic) instead of its own."""
        offset = self.origin - origin
        if offset == 0:
            return self
        return dataclasses.replace(
            self,
            signals={name: at + offset for name, at in self.signals.items()},
            hooks=tuple(h.shifted(offset) for h in self.hooks),
            requests=self.requests.shifted(offset),
            samples=self.samples.shifted(offset),
            offset=self.offset + offset,
        )

    def counters_only(self) -> ProcessReport:
        """What a process that is gone counted, for a server's retained total.

        Keeps the counts (arrivals, rejections, the drain's, hook runs by
        outcome with their longest duration, check results) and drops what
        described it while it ran (in flight, signal times, samples, the
        delay, whether a check passes: kept as passing, which :func:`merge`
        reads as "no say"), so a total never goes backwards when one of a
        server's processes is replaced.
        """
        folded: dict[tuple[str, str, str], HookEntry] = {}
        for h in self.hooks:
            key = (h.kind, h.name, h.outcome)
            seen = folded.get(key)
            runs, duration = (
                (h.runs, h.duration) if seen is None else (seen.runs + h.runs, max(seen.duration, h.duration))
            )
            folded[key] = HookEntry(h.kind, h.name, 0, h.outcome, None, duration, None, runs)
        return dataclasses.replace(
            ProcessReport.empty(),
            hooks=tuple(folded.values()),
            requests=self.requests.counts_only(),
            checks=tuple(dataclasses.replace(c, ok=True) for c in self.checks),
        )

    def to_json(self) -> dict[str, Any]:
        """This report as JSON: the shutdown record's ``parts`` format (graceful 0.2's), and what it added."""
        data: dict[str, Any] = {
            "pid": self.pid,
            "role": self.role,
            "shutdown_initiated_monotonic": self.t0,
            "offset_s": _seconds(self.offset),
            "signals": {name: _seconds(at) for name, at in self.signals.items()},
            "hooks": [h.to_json() for h in self.hooks],
            "requests": self.requests.to_json(),
            "samples": self.samples.to_json(),
            "longest_pre_shutdown_hook_s": self.longest_pre_shutdown_hook,
            "longest_cleanup_task_s": self.longest_cleanup_task,
            "in_flight": self.in_flight,
            "checks": [[c.endpoint, c.name, c.ok, c.successes, c.errors] for c in self.checks],
            "delay": None if self.delay is None else self.delay.to_json(),
            "info": {"version": self.version, "server": self.server, "worker_class": self.worker_class},
        }
        return data

    @classmethod
    def from_json(cls, data: FieldReader) -> ProcessReport:
        """Read a report back; :class:`ReportError` when it is not one (a 0.2 part lacks the newer fields)."""
        role = data.text("role")
        if role not in ROLES:
            raise ReportError(f"{data.where('role')}: expected one of {', '.join(ROLES)}, got {role!r}")
        signals = data.child("signals")
        info = data.child("info") if data.has("info") else None
        return cls(
            pid=data.count("pid"),
            role=role,
            t0=data.number("shutdown_initiated_monotonic", 0, 1e12),
            signals={name: signals.seconds(name) for name in signals.names()},
            hooks=tuple(data.objects("hooks", HookEntry.from_json)),
            requests=RequestFigures.from_json(data.child("requests")),
            samples=SampleSeries.from_json(data.child("samples")),
            longest_pre_shutdown_hook=data.seconds("longest_pre_shutdown_hook_s", signed=False),
            longest_cleanup_task=data.seconds("longest_cleanup_task_s", signed=False),
            offset=data.seconds("offset_s"),
            in_flight=data.count("in_flight") if data.has("in_flight") else 0,
            checks=tuple(data.rows("checks", 5, _check)) if data.has("checks") else (),
            delay=delay_from_json(data),
            version="" if info is None else info.text("version"),
            server="" if info is None else info.text("server"),
            worker_class="" if info is None else info.text("worker_class"),
        )

    @classmethod
    def read(cls, data: object, source: str = "report") -> ProcessReport:
        """A report from parsed JSON (``json.loads``' result); :class:`ReportError` when it is not one."""
        return cls.from_json(FieldReader.top(data, source))


def role_of(lifecycle: Lifecycle) -> str:
    """The role of the process ``lifecycle`` runs in (:class:`graceful.core.role.Role`), as the record names it."""
    return lifecycle.role.value


def report_of(
    lifecycle: Lifecycle,
    pid: int,
    *,
    origin: float | None = None,
    samples: bool = True,
) -> ProcessReport:
    """This process's report now, from ``lifecycle`` (any thread: every read is thread-safe).

    Its role is the lifecycle's (:func:`role_of`). ``origin``: the
    monotonic time its times count from; None: its ShutdownInitiated, else
    the start of its drain (a process stopped alone), else 0. ``samples``:
    False leaves them out (``/metrics`` does not show them).
    """
    from graceful import __version__

    stats = lifecycle.stats
    drain = stats.drain
    if origin is None:
        origin = lifecycle.shutdown_initiated.fired_at
        if origin is None:
            origin = 0.0 if drain is None else drain.started_at
    t0 = origin
    hooks = tuple(
        HookEntry(r.kind, r.name, pid, r.outcome.value, _minus(r.started_at, t0), r.duration, r.error)
        for r in lifecycle.hook_results()
    )
    late = stats.late_traffic()
    requests = RequestFigures(
        drained=drain.in_flight if drain is not None else 0,
        drain_seconds=None if drain is None or drain.ended_at is None else drain.ended_at - drain.started_at,
        abandoned=drain.abandoned if drain is not None else 0,
        arrived=stats.arrivals(),
        late=late.count if late is not None else 0,
        # A process that serves no requests (a Gunicorn master) has no late window of its own.
        late_from=(
            None
            if stats.shutdown_at is None or not lifecycle.role.serves_requests
            else stats.shutdown_at + (1 - LATE_SHARE) * lifecycle.config.shutdown_delay - t0
        ),
        last_arrival=_minus(stats.last_arrival_at, t0),
        rejected=stats.rejections(),
    )
    taken = lifecycle.samples if samples else []
    series = SampleSeries(
        t=tuple(s.at - t0 for s in taken),
        in_flight=tuple(s.in_flight for s in taken),
        arrived=tuple(s.arrived for s in taken),
        rejected=tuple(s.rejected for s in taken),
        truncated=samples and lifecycle.samples_truncated,
    )
    budget = lifecycle.budget()
    return ProcessReport(
        pid=pid,
        role=role_of(lifecycle),
        t0=t0,
        signals={s.name: s.fired_at - t0 for s in lifecycle.signals if s.fired_at is not None},
        hooks=hooks,
        requests=requests,
        samples=series,
        longest_pre_shutdown_hook=budget.longest_pre_shutdown_hook,
        longest_cleanup_task=budget.longest_cleanup_task,
        in_flight=lifecycle.in_flight.count,
        checks=tuple(stats.health_checks()),
        delay=lifecycle.delay_outcome,
        version=__version__,
        server=lifecycle.server,
        worker_class=lifecycle.worker_class,
    )


# -- the merge --------------------------------------------------------------------------------


def merge(reports: Iterable[ProcessReport]) -> ProcessReport:
    """Several processes' reports as one, each field by its rule (the module docstring's table).

    Every report is moved onto the first one's origin; no report gives :meth:`ProcessReport.empty`.
    """
    items = list(reports)
    if not items:
        return ProcessReport.empty()
    first = items[0]
    shifted = [item.shifted_onto(first.origin) for item in items]
    return dataclasses.replace(
        first,
        signals=_merged_signals(shifted),
        hooks=_merged_hooks(h for item in shifted for h in item.hooks),
        requests=RequestFigures.total(item.requests for item in shifted),
        samples=SampleSeries.total([item.samples for item in shifted]),
        longest_pre_shutdown_hook=max(item.longest_pre_shutdown_hook for item in _owners_or_all(shifted)),
        longest_cleanup_task=max(item.longest_cleanup_task for item in _serving_or_all(shifted)),
        offset=first.offset,
        in_flight=sum(item.in_flight for item in shifted),
        checks=_merged_checks(c for item in shifted for c in item.checks),
        delay=next((item.delay for item in shifted if item.delay is not None), None),
    )


def _owners_or_all(items: Sequence[ProcessReport]) -> Sequence[ProcessReport]:
    return [item for item in items if item.role in _OWNERS] or items


def _serving_or_all(items: Sequence[ProcessReport]) -> Sequence[ProcessReport]:
    return [item for item in items if item.role in _SERVING] or items


def _merged_signals(items: Sequence[ProcessReport]) -> dict[str, float]:
    """Each signal by its rule: HasBeenReady the earliest, the server's facts the owner's, the drain's and the
    cleanup's the latest (see the module docstring)."""
    names = list(dict.fromkeys(name for item in items for name in item.signals))
    merged: dict[str, float] = {}
    for name in names:
        fired = [(item.role, item.signals[name]) for item in items if name in item.signals]
        every = [at for _, at in fired]
        if name == HAS_BEEN_READY:
            merged[name] = min(every)
        elif name == IN_FLIGHT_DRAINED:
            serving = [at for role, at in fired if role in _SERVING]
            merged[name] = max(serving) if serving else max(every)
        elif name == CLEANUP_FINISHED:
            merged[name] = max(every)
        else:
            owned = [at for role, at in fired if role in _OWNERS]
            merged[name] = min(owned or every)
    return merged


def _merged_hooks(hooks: Iterable[HookEntry]) -> tuple[HookEntry, ...]:
    """Every run in order; the same run (kind, name, pid, outcome, start, error) adds its runs, keeps the longest."""
    merged: dict[tuple[object, ...], HookEntry] = {}
    for h in hooks:
        key = (h.kind, h.name, h.pid, h.outcome, h.started, h.error)
        seen = merged.get(key)
        merged[key] = (
            h
            if seen is None
            else dataclasses.replace(seen, runs=seen.runs + h.runs, duration=max(seen.duration, h.duration))
        )
    return tuple(merged.values())


def _merged_checks(checks: Iterable[CheckTally]) -> tuple[CheckTally, ...]:
    """Per (endpoint, name): passing only when it passes everywhere; the counts summed."""
    merged: dict[tuple[str, str], CheckTally] = {}
    for c in checks:
        key = (c.endpoint, c.name)
        seen = merged.get(key)
        merged[key] = (
            c
            if seen is None
            else CheckTally(c.endpoint, c.name, seen.ok and c.ok, seen.successes + c.successes, seen.errors + c.errors)
        )
    return tuple(merged.values())


def delay_from_json(data: FieldReader) -> DelayOutcome | None:
    """The ``delay`` field (None when absent or null); :class:`ReportError` for anything else."""
    if not data.has("delay") or data.raw("delay") is None:
        return None
    delay = data.child("delay")
    end = delay.text("end")
    if end not in {e.value for e in DelayEnd}:
        allowed = ", ".join(e.value for e in DelayEnd)
        raise ReportError(f"{delay.where('end')}: expected one of {allowed}, got {end!r}")
    return DelayOutcome(
        end=DelayEnd(end),
        ended_at=delay.seconds("ended_s", signed=False),
        last_arrival=delay.seconds("last_arrival_s", optional=True),
        quiet_period=delay.seconds("quiet_period_s", optional=True, signed=False),
        floor=delay.seconds("floor_s", optional=True, signed=False),
        maximum=delay.seconds("maximum_s", signed=False),
    )


def _check(cells: list[FieldReader]) -> CheckTally:
    """``[endpoint, name, ok, successes, errors]``."""
    endpoint, name, ok, good, bad = cells
    return CheckTally(endpoint.text(""), name.text(""), ok.flag(""), good.count(""), bad.count(""))


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _plus(value: float | None, offset: float) -> float | None:
    return None if value is None else value + offset


def _minus(value: float | None, origin: float) -> float | None:
    return None if value is None else value - origin


def _extreme(pick: Callable[[list[float]], float], values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def _last_at_or_before(times: Sequence[float], moment: float) -> int:
    """Index of the last time <= ``moment`` (binary search), -1 if none."""
    low, high = 0, len(times)
    while low < high:
        middle = (low + high) // 2
        if times[middle] <= moment:
            low = middle + 1
        else:
            high = middle
    return low - 1
