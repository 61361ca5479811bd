"""The shutdown record: what happened in one server shutdown, as JSON, and its one-paragraph summary.

A rendering of the merge (:func:`graceful.core.report.merge`) of the
:class:`~graceful.core.report.ProcessReport` of each process that took part,
built at CleanupFinished: under ``graceful serve`` the one process is the
whole server; under Gunicorn each worker leaves its report in ``worker_exit``
and the master merges them with its own in ``on_exit``
(:mod:`graceful.gunicorn.master`); a recycled worker's is only logged.
Each process's report is kept as one of the record's ``parts``.

Every time in a record is in seconds since the server's ShutdownInitiated
(a worker's times are moved onto the master's: ``time.monotonic`` is one
clock for every process of a machine); ``started_unix`` says when that was.
The record (format 1)::

    format, version, server, worker_class, pid, started_unix, duration_s
    config      the settings in force (shutdown_delay, drain_timeout, ...)
    budget      its terms, total, grace_period, used_s, used_share
    signals     {name: seconds}, each by the merge's rule (InFlightRequestsDrained: the last
                serving process's; the server's facts: the master's)
    hooks       [{kind, name, pid, outcome, started_s, duration_s, error}]
    requests    drained, drain_s, abandoned, arrived {delay, draining}, late,
                late_from_s, last_arrival_s, rejected {shutting_down, draining, max_in_flight,
                refused_stream (since 0.3)}, lost, lost_unknown (since 0.3), left {websocket,
                stream, at_deadline} (since 0.3: long-lived connections told to leave, and how
                many of them were still open at the drain's end)
    ended       (since 0.3) every process that ended abnormally during the shutdown (a
                Gunicorn master's workers, its dirty arbiter): [{pid, role, cause (signal,
                killed, status, no_part), at_s, signal, status, in_flight (at its last
                report; null: never reported), part, replaced, lost, text}]
    samples     {interval_s, t_s, in_flight, arrived, rejected, truncated}: every process
                summed, every interval_s
    delay       how the shutdown delay ended: {end (fixed, quiet, maximum), ended_s,
                last_arrival_s, quiet_period_s, floor_s, maximum_s, text}; null or absent
                in a record of a server that never ran it (graceful.core.delay)
    parts       [each process's report (ProcessReport.to_json): pid, role, signals, hooks,
                requests, samples, ...; since 0.3 also in_flight, checks, delay, info]

:meth:`ShutdownRecord.from_json` reads one back and refuses anything else
with a :class:`RecordError` (the codec's :class:`~graceful.core.codec.ReportError`)
naming the field (``graceful timeline`` reads records from files it must not
trust). Pure data: no I/O here (:mod:`graceful.process.termination` writes records).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from graceful.core.clock import unix_time
from graceful.core.codec import FieldReader, ReportError
from graceful.core.delay import DelayEnd, DelayOutcome
from graceful.core.registry import CLEANUP_TASK, PRE_SHUTDOWN_HOOK
from graceful.core.report import (
    HAS_BEEN_READY,
    ROLE_MASTER,
    ROLE_SERVER,
    ROLE_WORKER,
    HookEntry,
    ProcessReport,
    RequestFigures,
    SampleSeries,
    delay_from_json,
    end_from_json,
    end_to_json,
    merge,
    report_of,
)
from graceful.core.stats import LEFT_AT_DEADLINE, LEFT_STREAM, LEFT_WEBSOCKET, PHASE_DELAY, PHASE_DRAINING, ProcessEnd

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

#: A record that is not one (the one error of whatever graceful reads back).
RecordError = ReportError
#: A process's part of a record is its report (the name graceful 0.2 and the Gunicorn channels use).
ProcessPart = ProcessReport

#: The hooks a record lists: the shutdown's (post-start hooks ran at start-up).
_SHUTDOWN_KINDS = (PRE_SHUTDOWN_HOOK, CLEANUP_TASK)


def part_of(lifecycle: Lifecycle, pid: int) -> ProcessReport:
    """This process's report for the record (after CleanupFinished, or as far as it got).

    Its role is the lifecycle's (:attr:`~graceful.core.lifecycle.Lifecycle.role`).
    Timed from its ShutdownInitiated, or, when that never fired (a Gunicorn
    worker stopped by recycling, HUP or TTOU), from the start of its drain.
    Raises ``ValueError`` when it neither began a shutdown nor drained.
    """
    if lifecycle.shutdown_initiated.fired_at is None and lifecycle.stats.drain is None:
        raise ValueError("this process never began a shutdown")
    return _shutdown_only(report_of(lifecycle, pid))


def _shutdown_only(report: ProcessReport) -> ProcessReport:
    """A report as a record holds it: the shutdown's signals and hooks (not HasBeenReady, not post-start hooks)."""
    return dataclasses.replace(
        report,
        signals={name: at for name, at in report.signals.items() if name != HAS_BEEN_READY},
        hooks=tuple(h for h in report.hooks if h.kind in _SHUTDOWN_KINDS),
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
    parts: tuple[ProcessReport, ...]
    #: How the shutdown delay ended (None: unknown, e.g. a record written before it was kept).
    delay: DelayOutcome | None = None
    #: The processes that ended abnormally during the shutdown (a Gunicorn master's workers).
    ended: tuple[ProcessEnd, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every hook and task returned normally, the drain abandoned nothing and no process ended
        abnormally."""
        return all(h.outcome == "ok" for h in self.hooks) and not self.requests.abandoned and not self.ended

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
            f"drained {_plural(requests.drained, 'request')}{drain}, {requests.abandoned} abandoned"
            + _lost_phrase(requests),
            _hooks_phrase([h for h in self.hooks if h.kind == CLEANUP_TASK], "cleanup task")
            + (f" in {workers} workers" if workers > 1 else ""),
        ]
        head = "clean shutdown" if self.ok else "shutdown with problems"
        text = f"graceful: {head} in {self.duration:.1f} s ({'; '.join(inside)})"
        if self.ended:  # first after the figures: a termination message keeps only its first 4 KB
            text += f"; ended abnormally: {', '.join(end.describe() for end in self.ended)}"
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
        text += _left_phrase(requests)
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
            "ended": [end_to_json(end) for end in self.ended],
        }

    @classmethod
    def from_json(cls, data: object, source: str = "record") -> ShutdownRecord:
        """Read a record back from parsed JSON; :class:`RecordError` for anything that is not one."""
        top = FieldReader.top(data, source)
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
            parts=tuple(top.objects("parts", ProcessReport.from_json)),
            delay=delay_from_json(top),
            ended=tuple(top.objects("ended", end_from_json)) if top.has("ended") else (),
        )


def record_of(lifecycle: Lifecycle, parts: Sequence[ProcessReport], version: str) -> ShutdownRecord:
    """The server's record from its own report (``parts[0]``, of ``lifecycle``) and the others'.

    The totals are the reports' :func:`~graceful.core.report.merge`, on the
    server's ShutdownInitiated; each report is kept, moved onto it, as a part.
    The config and budget are ``lifecycle``'s.
    """
    if not parts:
        raise ValueError("a record needs the server's own part")
    origin = parts[0].t0
    shifted = [_shutdown_only(part).shifted_onto(origin) for part in parts]
    total = merge(shifted)
    duration = max([0.0, *total.signals.values()])
    config = lifecycle.config
    budget = dataclasses.replace(
        lifecycle.budget(),
        longest_pre_shutdown_hook=total.longest_pre_shutdown_hook,
        longest_cleanup_task=total.longest_cleanup_task,
    )
    return ShutdownRecord(
        version=version,
        server=lifecycle.server,
        worker_class=lifecycle.worker_class,
        pid=total.pid,
        started_unix=unix_time(origin),
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
        signals=total.signals,
        hooks=total.hooks,
        requests=total.requests,
        samples=total.samples,
        parts=tuple(shifted),
        delay=total.delay,
        ended=total.ended,
    )


# -- helpers ----------------------------------------------------------------------------


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _left_phrase(requests: RequestFigures) -> str:
    """``; told 3 WebSockets and 1 stream to leave (1 at the drain's deadline)``, or nothing when none was."""
    left = requests.left
    told = [
        _plural(count, noun)
        for count, noun in ((left.get(LEFT_WEBSOCKET, 0), "WebSocket"), (left.get(LEFT_STREAM, 0), "stream"))
        if count
    ]
    if not told:
        return ""
    late = left.get(LEFT_AT_DEADLINE, 0)
    return f"; told {' and '.join(told)} to leave" + (f" ({late} at the drain's deadline)" if late else "")


def _lost_phrase(requests: RequestFigures) -> str:
    """``, 4 lost``, ``, 4 lost and an unknown number in 1 worker``, or nothing when none was."""
    if not requests.lost and not requests.lost_unknown:
        return ""
    unknown = requests.lost_unknown
    return f", {requests.lost} lost" + (
        f" and an unknown number in {unknown} process{'' if unknown == 1 else 'es'}" if unknown else ""
    )


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
