"""The shutdown record: what happened in one server shutdown, as JSON, and its one-paragraph summary.

Built at CleanupFinished from the lifecycle of each process that took part:
each process's part (:class:`ProcessPart`: its signals, hooks or cleanup
tasks, requests and samples) and, for the server, one
:class:`ShutdownRecord` with the totals. Under ``graceful serve`` the one
process is the whole server. Under Gunicorn each worker writes its part in
``worker_exit`` and the master merges them in ``on_exit``
(:mod:`graceful.gunicorn.master`); a recycled worker's part is only logged.

Every time in a record is in seconds since the server's ShutdownInitiated
(a worker's times are moved onto the master's: ``time.monotonic`` is one
clock for every process of a machine); ``started_unix`` says when that was.
The record (format 1)::

    format, version, server, worker_class, pid, started_unix, duration_s
    config      the settings in force (shutdown_delay, drain_timeout, ...)
    budget      its terms, total, grace_period, used_s, used_share
    signals     {name: seconds} (under Gunicorn InFlightRequestsDrained is the last worker's)
    hooks       [{kind, name, pid, outcome, started_s, duration_s, error}]
    requests    drained, drain_s, abandoned, arrived {delay, draining}, late,
                late_from_s, last_arrival_s, rejected {shutting_down, draining, max_in_flight,
                refused_stream (since 0.3)}
    samples     {interval_s, t_s, in_flight, arrived, rejected, truncated}: every process
                summed, every interval_s
    delay       how the shutdown delay ended: {end (fixed, quiet, maximum), ended_s,
                last_arrival_s, quiet_period_s, floor_s, maximum_s, text}; null or absent
                in a record of a server that never ran it (graceful.core.delay)
    parts       [{pid, role, ..., each process's own signals, hooks, requests, samples}]

:meth:`ShutdownRecord.from_json` reads one back and refuses anything else
with a :class:`RecordError` naming the field (``graceful timeline`` reads
records from files it must not trust). Pure data: no I/O here
(:mod:`graceful.process.termination` writes records).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from graceful.core.clock import unix_time
from graceful.core.delay import DelayEnd, DelayOutcome
from graceful.core.registry import CLEANUP_TASK, PRE_SHUTDOWN_HOOK
from graceful.core.stats import (
    LATE_SHARE,
    PHASE_DELAY,
    PHASE_DRAINING,
    PHASES,
    REASON_REFUSED_STREAM,
    REASONS,
    SAMPLE_INTERVAL,
)

if TYPE_CHECKING:
    from graceful.core.lifecycle import Lifecycle

__all__ = [
    "FORMAT",
    "MAX_MESSAGE_BYTES",
    "ROLE_MASTER",
    "ROLE_SERVER",
    "ROLE_WORKER",
    "HookEntry",
    "ProcessPart",
    "RecordError",
    "RequestFigures",
    "SampleSeries",
    "ShutdownRecord",
    "part_of",
    "record_of",
]

#: The record's format number; a reader refuses any other.
FORMAT = 1
#: Kubernetes keeps at most this much of a termination message.
MAX_MESSAGE_BYTES = 4096

# Bounds a record read from a file must keep (a record written by graceful always does).
_MAX_ITEMS = 100_000
_MAX_TEXT = 10_000
_MAX_SECONDS = 1e7
_MAX_COUNT = 10**15

ROLE_SERVER = "server"  # graceful serve: the one process
ROLE_MASTER = "master"  # a Gunicorn master: signals and pre-shutdown hooks, no requests
ROLE_WORKER = "worker"  # a Gunicorn worker: requests and cleanup tasks
_ROLES = (ROLE_SERVER, ROLE_MASTER, ROLE_WORKER)

_INFLIGHT_DRAINED = "InFlightRequestsDrained"


#: Rejection reasons a record written before graceful 0.3 does not have: read as 0.
_SINCE_0_3 = frozenset({REASON_REFUSED_STREAM})


class RecordError(ValueError):
    """A record that is not one: the message names the field and what was expected."""


# -- the parts ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HookEntry:
    """One hook or cleanup task's run: times in s since ShutdownInitiated (``started`` unknown: None)."""

    kind: str
    name: str
    pid: int
    outcome: str
    started: float | None
    duration: float
    error: str | None = None

    def shifted(self, offset: float) -> HookEntry:
        """The same run with its start ``offset`` seconds later."""
        started = None if self.started is None else self.started + offset
        return dataclasses.replace(self, started=started)

    def to_json(self) -> dict[str, Any]:
        """This run as JSON."""
        return {
            "kind": self.kind,
            "name": self.name,
            "pid": self.pid,
            "outcome": self.outcome,
            "started_s": _seconds(self.started),
            "duration_s": _seconds(self.duration),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: _Reader) -> HookEntry:
        """Read one run back; :class:`RecordError` when it is not one."""
        return cls(
            kind=data.text("kind"),
            name=data.text("name"),
            pid=data.count("pid"),
            outcome=data.text("outcome"),
            started=data.seconds("started_s", optional=True),
            duration=data.seconds("duration_s", signed=False),
            error=data.text("error", optional=True),
        )


@dataclasses.dataclass(frozen=True)
class RequestFigures:
    """What requests did in the shutdown of one process, or of the whole server (summed).

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

    @classmethod
    def total(cls, figures: Iterable[RequestFigures]) -> RequestFigures:
        """The server's figures: counts summed, the longest drain, the earliest window and the latest arrival."""
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
    def from_json(cls, data: _Reader) -> RequestFigures:
        """Read figures back; :class:`RecordError` when they are not."""
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
    """Samples over time: ``t`` in s since ShutdownInitiated, and the in-flight count, arrivals, rejections then."""

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
        step = max(interval, (end - start) / (_MAX_ITEMS - 1))
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
    def from_json(cls, data: _Reader) -> SampleSeries:
        """Read samples back: equally long series, times in order; :class:`RecordError` otherwise."""
        t = tuple(data.values("t_s", _Reader.seconds))
        columns = [tuple(data.values(name, _Reader.count)) for name in ("in_flight", "arrived", "rejected")]
        if any(len(column) != len(t) for column in columns):
            raise RecordError(f"{data.where('t_s')}: the sample series differ in length")
        if any(b < a for a, b in itertools.pairwise(t)):
            raise RecordError(f"{data.where('t_s')}: sample times go backwards")
        interval = data.seconds("interval_s", signed=False)
        if interval <= 0:
            raise RecordError(f"{data.where('interval_s')}: expected seconds > 0")
        return cls(t, columns[0], columns[1], columns[2], interval, data.flag("truncated"))


@dataclasses.dataclass(frozen=True)
class ProcessPart:
    """One process's share of a shutdown; its times in s since its own ``t0`` unless shifted.

    ``t0`` is the monotonic time of the process's ShutdownInitiated (the
    common scale of every process on a machine); ``offset`` says how far
    the times were moved onto the server's ShutdownInitiated (0 until then).
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

    def shifted_onto(self, server_t0: float) -> ProcessPart:
        """This part with its times in s since ``server_t0`` (monotonic) instead of its own ShutdownInitiated."""
        offset = self.t0 - server_t0 - self.offset
        return dataclasses.replace(
            self,
            signals={name: at + offset for name, at in self.signals.items()},
            hooks=tuple(h.shifted(offset) for h in self.hooks),
            requests=self.requests.shifted(offset),
            samples=self.samples.shifted(offset),
            offset=self.offset + offset,
        )

    def to_json(self) -> dict[str, Any]:
        """This part as JSON."""
        return {
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
        }

    @classmethod
    def from_json(cls, data: _Reader) -> ProcessPart:
        """Read a part back; :class:`RecordError` when it is not one."""
        role = data.text("role")
        if role not in _ROLES:
            raise RecordError(f"{data.where('role')}: expected one of {', '.join(_ROLES)}, got {role!r}")
        signals = data.child("signals")
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
        )

    @classmethod
    def read(cls, data: object, source: str = "part") -> ProcessPart:
        """A part from parsed JSON; :class:`RecordError` when it is not one."""
        return cls.from_json(_Reader.top(data, source))


def part_of(lifecycle: Lifecycle, pid: int, role: str) -> ProcessPart:
    """This process's part of the shutdown, from its lifecycle (after CleanupFinished, or as far as it got).

    A process whose ShutdownInitiated never fired (a Gunicorn worker stopped
    by recycling, HUP or TTOU) is measured from the start of its drain.
    Raises ``ValueError`` when it neither began a shutdown nor drained.
    """
    t0 = lifecycle.shutdown_initiated.fired_at
    drain = lifecycle.stats.drain
    if t0 is None:
        if drain is None:
            raise ValueError("this process never began a shutdown")
        t0 = drain.started_at
    stats = lifecycle.stats
    signals = {
        s.name: s.fired_at - t0
        for s in lifecycle.signals
        if s.fired_at is not None and s is not lifecycle.has_been_ready
    }
    hooks = tuple(
        HookEntry(
            r.kind,
            r.name,
            pid,
            r.outcome.value,
            None if r.started_at is None else r.started_at - t0,
            r.duration,
            r.error,
        )
        for r in lifecycle.report.results
    )
    late = stats.late_traffic()
    requests = RequestFigures(
        drained=drain.in_flight if drain is not None else 0,
        drain_seconds=None if drain is None or drain.ended_at is None else drain.ended_at - drain.started_at,
        abandoned=drain.abandoned if drain is not None else 0,
        arrived=stats.arrivals(),
        late=late.count if late is not None else 0,
        late_from=(1 - LATE_SHARE) * lifecycle.config.shutdown_delay if stats.shutdown_at is not None else None,
        last_arrival=None if stats.last_arrival_at is None else stats.last_arrival_at - t0,
        rejected=stats.rejections(),
    )
    samples = lifecycle.samples
    series = SampleSeries(
        t=tuple(s.at - t0 for s in samples),
        in_flight=tuple(s.in_flight for s in samples),
        arrived=tuple(s.arrived for s in samples),
        rejected=tuple(s.rejected for s in samples),
        truncated=lifecycle.samples_truncated,
    )
    budget = lifecycle.budget()
    return ProcessPart(
        pid=pid,
        role=role,
        t0=t0,
        signals=signals,
        hooks=hooks,
        requests=requests,
        samples=series,
        longest_pre_shutdown_hook=budget.longest_pre_shutdown_hook,
        longest_cleanup_task=budget.longest_cleanup_task,
    )


# -- the record ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShutdownRecord:
    """One server shutdown (see the module docstring); :meth:`to_json` and :meth:`from_json` convert it."""

    version: str
    server: str
    worker_class: str
    pid: int
    started_unix: float
    duration: float
    config: Mapping[str, float | int | bool]
    budget: Mapping[str, float]
    signals: Mapping[str, float]
    hooks: tuple[HookEntry, ...]
    requests: RequestFigures
    samples: SampleSeries
    parts: tuple[ProcessPart, ...]
    #: How the shutdown delay ended (None: unknown, e.g. a record written before it was kept).
    delay: DelayOutcome | None = None

    @property
    def ok(self) -> bool:
        """True when every hook and task returned normally and the drain abandoned nothing."""
        return all(h.outcome == "ok" for h in self.hooks) and not self.requests.abandoned

    def summary(self) -> str:
        """One paragraph for the termination message (at most :data:`MAX_MESSAGE_BYTES` in UTF-8)."""
        delay = self.config.get("shutdown_delay", 0)
        workers = sum(1 for p in self.parts if p.role == ROLE_WORKER)
        requests = self.requests
        drain = "" if requests.drain_seconds is None or not requests.drained else f" in {requests.drain_seconds:.1f} s"
        outcome = self.delay
        adaptive = outcome is not None and outcome.end is not DelayEnd.FIXED
        inside = [
            f"delay {outcome.ended_at:.1f} s of {delay:g} s at most: {outcome.describe()}"
            if outcome is not None and adaptive
            else f"delay {delay:g} s",
            _hooks_phrase([h for h in self.hooks if h.kind == PRE_SHUTDOWN_HOOK], "pre-shutdown hook"),
            f"drained {_plural(requests.drained, 'request')}{drain}, {requests.abandoned} abandoned",
            _hooks_phrase([h for h in self.hooks if h.kind == CLEANUP_TASK], "cleanup task")
            + (f" in {workers} workers" if workers > 1 else ""),
        ]
        head = "clean shutdown" if self.ok else "shutdown with problems"
        text = f"graceful: {head} in {self.duration:.1f} s ({'; '.join(inside)})"
        arrived = requests.arrived.get(PHASE_DELAY, 0)
        text += f"; {_plural(arrived, 'request')} arrived during the delay"
        if requests.last_arrival is not None and arrived:
            text += f", the last at {requests.last_arrival:.1f} s"
        after = requests.arrived.get(PHASE_DRAINING, 0)
        if after:
            text += f", {after} after it"
        rejected = [f"{count} {reason}" for reason, count in requests.rejected.items() if count]
        if rejected:
            text += f"; rejected: {', '.join(rejected)}"
        if requests.late and not (outcome is not None and outcome.end is DelayEnd.QUIET):
            # After a quiet end a longer delay would have changed nothing: traffic had stopped.
            text += (
                f"; {_plural(requests.late, 'request')} in the last tenth of the delay: it looks too short,"
                " raise GRACEFUL_SHUTDOWN_DELAY"
            )
        return _truncate(text, MAX_MESSAGE_BYTES)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON (see the module docstring)."""
        return {
            "format": FORMAT,
            "version": self.version,
            "server": self.server,
            "worker_class": self.worker_class,
            "pid": self.pid,
            "started_unix": self.started_unix,
            "duration_s": _seconds(self.duration),
            "ok": self.ok,
            "config": dict(self.config),
            "budget": dict(self.budget),
            "signals": {name: _seconds(at) for name, at in self.signals.items()},
            "hooks": [h.to_json() for h in self.hooks],
            "requests": self.requests.to_json(),
            "samples": self.samples.to_json(),
            "parts": [p.to_json() for p in self.parts],
            "delay": None if self.delay is None else self.delay.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, source: str = "record") -> ShutdownRecord:
        """Read a record back from parsed JSON; :class:`RecordError` for anything that is not one."""
        top = _Reader.top(data, source)
        found = top.raw("format")
        if found != FORMAT or isinstance(found, bool):
            raise RecordError(f"{top.where('format')}: expected {FORMAT} (a graceful shutdown record), got {found!r}")
        config, budget, signals = top.child("config"), top.child("budget"), top.child("signals")
        return cls(
            version=top.text("version"),
            server=top.text("server"),
            worker_class=top.text("worker_class"),
            pid=top.count("pid"),
            started_unix=top.number("started_unix", 0, 1e11),
            duration=top.seconds("duration_s", signed=False),
            config={name: config.scalar(name) for name in config.names()},
            budget={name: budget.seconds(name, signed=False) for name in budget.names()},
            signals={name: signals.seconds(name) for name in signals.names()},
            hooks=tuple(top.objects("hooks", HookEntry.from_json)),
            requests=RequestFigures.from_json(top.child("requests")),
            samples=SampleSeries.from_json(top.child("samples")),
            parts=tuple(top.objects("parts", ProcessPart.from_json)),
            delay=_delay_from_json(top),
        )


def record_of(lifecycle: Lifecycle, parts: Sequence[ProcessPart], version: str) -> ShutdownRecord:
    """The server's record from its own part (``parts[0]``, of ``lifecycle``) and the others'.

    Every part is moved onto the server's ShutdownInitiated. The server's
    signals are its own, but InFlightRequestsDrained is the last worker's
    when workers took part (the master's fires only as it exits).
    """
    if not parts:
        raise ValueError("a record needs the server's own part")
    server_t0 = parts[0].t0
    shifted = [part.shifted_onto(server_t0) for part in parts]
    own = shifted[0]
    signals = dict(own.signals)
    serving = [p for p in shifted if p.role != ROLE_MASTER] or [own]
    drained = [p.signals[_INFLIGHT_DRAINED] for p in serving if _INFLIGHT_DRAINED in p.signals]
    if drained and own.role == ROLE_MASTER:
        signals[_INFLIGHT_DRAINED] = max(drained)
    duration = max([0.0, *signals.values()])
    config = lifecycle.config
    budget = dataclasses.replace(
        lifecycle.budget(),
        longest_pre_shutdown_hook=own.longest_pre_shutdown_hook,
        longest_cleanup_task=max(p.longest_cleanup_task for p in serving),
    )
    return ShutdownRecord(
        version=version,
        server=lifecycle.server,
        worker_class=lifecycle.worker_class,
        pid=own.pid,
        started_unix=unix_time(server_t0),
        duration=duration,
        config={
            "shutdown_delay": config.shutdown_delay,
            "drain_timeout": config.drain_timeout,
            "hook_timeout": config.hook_timeout,
            "grace_period": config.grace_period,
            "send_retry_after": config.send_retry_after,
            "retry_after": config.retry_after,
            "max_in_flight": config.max_in_flight,
            # The adaptive delay's settings, when it is on (unset ones are not values a record holds).
            **{
                name: value
                for name, value in (
                    ("shutdown_delay_min", config.shutdown_delay_min),
                    ("quiet_period", config.quiet_period),
                )
                if value is not None
            },
        },
        budget={
            **{field.name: getattr(budget, field.name) for field in dataclasses.fields(budget)},
            "total": budget.total,
            "grace_period": config.grace_period,
            "used_s": round(duration, 6),
            "used_share": round(duration / config.grace_period, 6),
        },
        signals=signals,
        hooks=tuple(h for p in shifted for h in p.hooks),
        requests=RequestFigures.total(p.requests for p in serving),
        samples=SampleSeries.total([p.samples for p in serving]),
        parts=tuple(shifted),
        delay=lifecycle.delay_outcome,
    )


# -- helpers ----------------------------------------------------------------------------

_T = TypeVar("_T")


def _delay_from_json(top: _Reader) -> DelayOutcome | None:
    """The record's ``delay`` (None when absent or null); :class:`RecordError` for anything else."""
    if "delay" not in top.names() or top.raw("delay") is None:
        return None
    data = top.child("delay")
    end = data.text("end")
    if end not in {e.value for e in DelayEnd}:
        allowed = ", ".join(e.value for e in DelayEnd)
        raise RecordError(f"{data.where('end')}: expected one of {allowed}, got {end!r}")
    return DelayOutcome(
        end=DelayEnd(end),
        ended_at=data.seconds("ended_s", signed=False),
        last_arrival=data.seconds("last_arrival_s", optional=True),
        quiet_period=data.seconds("quiet_period_s", optional=True, signed=False),
        floor=data.seconds("floor_s", optional=True, signed=False),
        maximum=data.seconds("maximum_s", signed=False),
    )


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _plus(value: float | None, offset: float) -> float | None:
    return None if value is None else value + offset


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


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _hooks_phrase(entries: Sequence[HookEntry], noun: str) -> str:
    """``3 pre-shutdown hooks ok``, or ``2 cleanup tasks: 1 ok, 1 timed out (flush)``, or ``no cleanup tasks``."""
    if not entries:
        return f"no {noun}s"
    bad = [h for h in entries if h.outcome != "ok"]
    if not bad:
        return f"{_plural(len(entries), noun)} ok"
    outcomes: dict[str, list[str]] = {}
    for entry in bad:
        outcomes.setdefault(entry.outcome, []).append(entry.name)
    problems = ", ".join(
        f"{len(names)} {outcome} ({', '.join(sorted(set(names)))})" for outcome, names in outcomes.items()
    )
    return f"{_plural(len(entries), noun)}: {len(entries) - len(bad)} ok, {problems}"


def _truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, on a character boundary, marked with an ellipsis."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[: limit - len(b"...")].decode("utf-8", "ignore") + "..."


class _Reader:
    """Reads one JSON object of a record, refusing what a record cannot hold; ``where`` names the field."""

    def __init__(self, data: Mapping[str, object], path: str) -> None:
        self._data = data
        self._path = path

    @classmethod
    def top(cls, data: object, source: str) -> _Reader:
        if not isinstance(data, dict):
            raise RecordError(f"{source}: expected a JSON object, got {_kind(data)}")
        return cls(data, source)

    def where(self, key: str) -> str:
        return f"{self._path}.{key}" if key else self._path

    def names(self) -> list[str]:
        if len(self._data) > _MAX_ITEMS:
            raise RecordError(f"{self._path}: more than {_MAX_ITEMS} entries")
        return [str(key) for key in self._data]

    def raw(self, key: str) -> object:
        if key not in self._data:
            raise RecordError(f"{self.where(key)}: missing")
        return self._data[key]

    def child(self, key: str) -> _Reader:
        value = self.raw(key)
        if not isinstance(value, dict):
            raise RecordError(f"{self.where(key)}: expected a JSON object, got {_kind(value)}")
        return _Reader(value, self.where(key))

    def _list(self, key: str) -> list[object]:
        value = self.raw(key)
        if not isinstance(value, list):
            raise RecordError(f"{self.where(key)}: expected a list, got {_kind(value)}")
        if len(value) > _MAX_ITEMS:
            raise RecordError(f"{self.where(key)}: more than {_MAX_ITEMS} items")
        return value

    def objects(self, key: str, read: Callable[[_Reader], _T]) -> list[_T]:
        """A list of JSON objects, each read by ``read``."""
        items = self._list(key)
        return [read(_Reader({"": item}, f"{self.where(key)}[{i}]").child("")) for i, item in enumerate(items)]

    def values(self, key: str, read: Callable[[_Reader, str], _T]) -> list[_T]:
        """A list of scalars, each read by ``read(reader, key)`` (``_Reader.seconds``, ``_Reader.count``)."""
        items = self._list(key)
        return [read(_Reader({"": item}, f"{self.where(key)}[{i}]"), "") for i, item in enumerate(items)]

    def text(self, key: str, *, optional: bool = False) -> Any:
        value = self.raw(key)
        if value is None and optional:
            return None
        if not isinstance(value, str) or len(value) > _MAX_TEXT:
            raise RecordError(f"{self.where(key)}: expected a string of at most {_MAX_TEXT} characters")
        return value

    def flag(self, key: str) -> bool:
        value = self.raw(key)
        if not isinstance(value, bool):
            raise RecordError(f"{self.where(key)}: expected true or false, got {_kind(value)}")
        return value

    def number(self, key: str, low: float, high: float) -> float:
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"{self.where(key)}: expected a number, got {_kind(value)}")
        if not (math.isfinite(value) and low <= value <= high):
            raise RecordError(f"{self.where(key)}: expected a number from {low:g} to {high:g}, got {value!r}")
        return float(value)

    def seconds(self, key: str, *, optional: bool = False, signed: bool = True) -> Any:
        if optional and self.raw(key) is None:
            return None
        return self.number(key, -_MAX_SECONDS if signed else 0.0, _MAX_SECONDS)

    def count(self, key: str) -> int:
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
            raise RecordError(f"{self.where(key)}: expected a whole number from 0 to {_MAX_COUNT:g}")
        return value

    def scalar(self, key: str) -> float | int | bool:
        value = self.raw(key)
        if isinstance(value, bool):
            return value
        return self.number(key, -_MAX_SECONDS, _MAX_SECONDS)


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )
