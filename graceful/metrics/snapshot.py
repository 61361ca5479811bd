"""A process's metrics as plain data, and the sum of several: what the Prometheus collector renders.

:func:`snapshot` reads everything at once from a lifecycle (in-flight count,
rejections, arrivals during the shutdown, signal times, hook results, health
checks) into a :class:`Snapshot`: a JSON-able dict, so a Gunicorn worker can
publish its own and the health port's server (in the master) can
:func:`merge` them with the master's into one view of the whole server.
Pure functions, no prometheus_client: they run wherever graceful runs.
Nothing is counted per request for them (see :mod:`graceful.core.stats`).

How :func:`merge` sums (one row per metric of :mod:`graceful.metrics.collector`):

=====================================  =============================================
in flight, rejections, arrivals,       summed
drain-abandoned requests
signal times                           the earliest, but InFlightRequestsDrained and
                                       CleanupFinished: the latest (the server is
                                       drained when its last process is)
hook runs by outcome                   summed; the duration: the longest
health checks                          passing only when it passes in every process;
                                       the counts summed
the delay's length by how it ended     the longest (only the process that ran the delay
                                       has one: the Gunicorn master, or graceful serve)
info                                   the first snapshot's
=====================================  =============================================

A process that is gone still counted: :func:`counters_only` keeps what it
counted (rejections, arrivals, abandoned requests, hook runs and their
longest duration, health check results) and drops what described it while
it ran (in flight, signal times, whether a check passed), so a total of a
server's processes never goes backwards when one of them is replaced.
:func:`parse` reads a snapshot back from JSON that another process wrote,
refusing anything that is not exactly one (a hostile file included).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypedDict

from graceful.core.clock import unix_time
from graceful.core.stats import PHASES, REASONS

if TYPE_CHECKING:
    from graceful.core.lifecycle import Lifecycle

__all__ = [
    "CheckSnapshot",
    "HookSnapshot",
    "InfoSnapshot",
    "Snapshot",
    "counters_only",
    "empty",
    "label",
    "merge",
    "parse",
    "snapshot",
]

#: Signals whose server-wide time is the last process's, not the first's.
_LATEST = frozenset({"InFlightRequestsDrained", "CleanupFinished"})


class HookSnapshot(TypedDict):
    """One hook or task: its kind and name as label values, runs by outcome, the longest run's seconds."""

    kind: str
    name: str
    runs: dict[str, int]
    duration_s: float


class CheckSnapshot(TypedDict):
    """One health check at one endpoint (``type``): its last result and its results so far."""

    type: str
    name: str
    ok: bool
    success: int
    error: int


class InfoSnapshot(TypedDict):
    """What serves the app."""

    version: str
    server: str
    worker_class: str


class Snapshot(TypedDict):
    """One process's metrics, or several processes' summed (see the module docstring)."""

    in_flight: int
    rejected: dict[str, int]
    during_shutdown: dict[str, int]
    drain_abandoned: int
    signals: dict[str, float]
    #: Seconds the shutdown delay lasted, under how it ended (fixed, quiet, maximum); empty until it ended.
    delay: dict[str, float]
    hooks: list[HookSnapshot]
    healthchecks: list[CheckSnapshot]
    info: InfoSnapshot


def label(text: str) -> str:
    """A kind or an outcome as a label value: ``pre-shutdown hook`` -> ``pre_shutdown_hook``, ``timed out`` ->
    ``timed_out``."""
    return text.replace("-", "_").replace(" ", "_")


def empty(version: str = "", server: str = "", worker_class: str = "") -> Snapshot:
    """A snapshot of nothing (every count 0)."""
    return Snapshot(
        in_flight=0,
        rejected=dict.fromkeys(REASONS, 0),
        during_shutdown=dict.fromkeys(PHASES, 0),
        drain_abandoned=0,
        signals={},
        delay={},
        hooks=[],
        healthchecks=[],
        info=InfoSnapshot(version=version, server=server, worker_class=worker_class),
    )


def snapshot(lifecycle: Lifecycle) -> Snapshot:
    """This process's metrics now, from ``lifecycle`` (any thread: every read is thread-safe)."""
    from graceful import __version__

    stats = lifecycle.stats
    drain = stats.drain
    outcome = lifecycle.delay_outcome
    hooks = [
        HookSnapshot(kind=label(r.kind), name=r.name, runs={label(r.outcome.value): 1}, duration_s=r.duration)
        for r in lifecycle.hook_results()
    ]
    checks = [
        CheckSnapshot(type=t.endpoint, name=t.name, ok=t.ok, success=t.successes, error=t.errors)
        for t in stats.health_checks()
    ]
    return Snapshot(
        in_flight=lifecycle.in_flight.count,
        rejected=stats.rejections(),
        during_shutdown=stats.arrivals(),
        drain_abandoned=drain.abandoned if drain is not None else 0,
        signals={s.name: unix_time(s.fired_at) for s in lifecycle.signals if s.fired_at is not None},
        delay={} if outcome is None else {outcome.end.value: outcome.ended_at},
        hooks=hooks,
        healthchecks=checks,
        info=InfoSnapshot(version=__version__, server=lifecycle.server, worker_class=lifecycle.worker_class),
    )


def merge(snapshots: Iterable[Snapshot]) -> Snapshot:
    """Several processes' snapshots as one (see the module docstring); no snapshot gives :func:`empty`."""
    items = list(snapshots)
    if not items:
        return empty()
    total = empty()
    total["info"] = InfoSnapshot(**items[0]["info"])
    hooks: dict[tuple[str, str], HookSnapshot] = {}
    checks: dict[tuple[str, str], CheckSnapshot] = {}
    for item in items:
        total["in_flight"] += item["in_flight"]
        total["drain_abandoned"] += item["drain_abandoned"]
        for reason, count in item["rejected"].items():
            total["rejected"][reason] = total["rejected"].get(reason, 0) + count
        for phase, count in item["during_shutdown"].items():
            total["during_shutdown"][phase] = total["during_shutdown"].get(phase, 0) + count
        for name, at in item["signals"].items():
            known = total["signals"].get(name)
            pick = max if name in _LATEST else min
            total["signals"][name] = at if known is None else pick(known, at)
        for end, seconds in item["delay"].items():
            total["delay"][end] = max(seconds, total["delay"].get(end, 0.0))
        for hook in item["hooks"]:
            merged = hooks.setdefault(
                (hook["kind"], hook["name"]),
                HookSnapshot(kind=hook["kind"], name=hook["name"], runs={}, duration_s=0.0),
            )
            for outcome, runs in hook["runs"].items():
                merged["runs"][outcome] = merged["runs"].get(outcome, 0) + runs
            merged["duration_s"] = max(merged["duration_s"], hook["duration_s"])
        for check in item["healthchecks"]:
            key = (check["type"], check["name"])
            seen = checks.get(key)
            if seen is None:
                checks[key] = CheckSnapshot(**check)
            else:
                seen["ok"] = seen["ok"] and check["ok"]
                seen["success"] += check["success"]
                seen["error"] += check["error"]
    total["hooks"] = list(hooks.values())
    total["healthchecks"] = list(checks.values())
    return total


def counters_only(item: Snapshot) -> Snapshot:
    """What a process that is gone counted, for a server's retained total (see the module docstring).

    Its checks stay with their counts and as passing, which :func:`merge`
    reads as "no say" in whether the server's check passes.
    """
    kept = merge([item])
    kept["in_flight"] = 0
    kept["signals"] = {}
    kept["delay"] = {}
    kept["info"] = InfoSnapshot(version="", server="", worker_class="")
    for check in kept["healthchecks"]:
        check["ok"] = True
    return kept


def parse(data: object) -> Snapshot:
    """A snapshot from JSON another process wrote (``json.loads``' result); ValueError for anything else.

    Every field must be there with its type: counts whole numbers >= 0,
    times and durations finite numbers, names strings. Nothing is guessed.
    """
    raw = _fields(data, Snapshot, "snapshot")
    info = _fields(raw["info"], InfoSnapshot, "info")
    return Snapshot(
        in_flight=_count(raw["in_flight"]),
        rejected=_counts(raw["rejected"]),
        during_shutdown=_counts(raw["during_shutdown"]),
        drain_abandoned=_count(raw["drain_abandoned"]),
        signals={_text(name): _number(at) for name, at in _mapping(raw["signals"]).items()},
        delay={_text(end): _number(seconds) for end, seconds in _mapping(raw["delay"]).items()},
        hooks=[_hook(item) for item in _sequence(raw["hooks"])],
        healthchecks=[_check(item) for item in _sequence(raw["healthchecks"])],
        info=InfoSnapshot(
            version=_text(info["version"]), server=_text(info["server"]), worker_class=_text(info["worker_class"])
        ),
    )


def _hook(data: object) -> HookSnapshot:
    raw = _fields(data, HookSnapshot, "hook")
    return HookSnapshot(
        kind=_text(raw["kind"]),
        name=_text(raw["name"]),
        runs=_counts(raw["runs"]),
        duration_s=_number(raw["duration_s"]),
    )


def _check(data: object) -> CheckSnapshot:
    raw = _fields(data, CheckSnapshot, "health check")
    ok = raw["ok"]
    if not isinstance(ok, bool):
        raise ValueError(f"expected true or false, got {ok!r:.40}")
    return CheckSnapshot(
        type=_text(raw["type"]),
        name=_text(raw["name"]),
        ok=ok,
        success=_count(raw["success"]),
        error=_count(raw["error"]),
    )


def _fields(data: object, shape: type, what: str) -> dict[str, object]:
    """``data`` as a dict with exactly the keys of the TypedDict ``shape``."""
    raw = _mapping(data)
    wanted = set(shape.__annotations__)
    if set(raw) != wanted:
        raise ValueError(f"{what}: expected the keys {sorted(wanted)}, got {sorted(raw)[:20]}")
    return raw


def _mapping(data: object) -> dict[str, object]:
    if not isinstance(data, dict):
        raise ValueError(f"expected an object, got {type(data).__name__}")
    return data


def _sequence(data: object) -> list[object]:
    if not isinstance(data, list):
        raise ValueError(f"expected a list, got {type(data).__name__}")
    return data


def _counts(data: object) -> dict[str, int]:
    return {_text(name): _count(value) for name, value in _mapping(data).items()}


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a count (a whole number >= 0), got {value!r:.40}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r:.40}")
    return float(value)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r:.40}")
    return value
