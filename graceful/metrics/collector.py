"""graceful's metrics for Prometheus: a collector computed at scrape time, and the text format.

The metric families, each a rendering of a
:class:`~graceful.core.report.ProcessReport` (one process's, or several
merged by :func:`graceful.core.report.merge`)::

    graceful_requests_in_flight                           gauge   counted requests, as the drain sees them
    graceful_requests_rejected_total{reason}              counter shutting_down, draining, max_in_flight
    graceful_requests_during_shutdown_total{phase}        counter arrived after ShutdownInitiated: delay, draining
    graceful_lifecycle_signal_timestamp_seconds{signal}   gauge   Unix time each signal fired (fired ones only)
    graceful_shutdown_delay_seconds{end}                  gauge   how long the delay lasted, by how it ended:
                                                                  fixed, quiet, maximum (once it ended)
    graceful_hook_duration_seconds{kind,name}             gauge   the hook's (longest) run
    graceful_hook_runs_total{kind,name,outcome}           counter ok, failed, timed_out
    graceful_healthcheck{name,type}                       gauge   1 pass, 0 fail, at the last probe (type: livez...)
    graceful_healthchecks_total{name,type,status}         counter success, error
    graceful_drain_abandoned_requests_total               counter left running when drain_timeout ran out
    graceful_requests_lost_total                          counter in flight in a process that ended abnormally
                                                                  (at its last report; unknown ones not counted)
    graceful_processes_ended_abnormally_total{role,cause} counter a Gunicorn master's workers (and dirty arbiter)
                                                                  that ended abnormally in a shutdown: signal,
                                                                  killed, status, no_part
    graceful_long_lived_told_to_leave_total{kind}         counter ASGI WebSockets and streams told to leave;
                                                                  kind at_deadline: of those, the ones still
                                                                  open when the drain ended
    graceful_info{version,server,worker_class}            gauge   1

:class:`GracefulCollector` goes into a prometheus_client registry the user
already has; :func:`render_metrics` gives the text format that graceful's
own ``/metrics`` answers (the health port, or the app port when the operator
opts in). prometheus_client is an optional extra
(``pip install 'graceful-wsgi[prometheus]'``), imported only here, when
metrics are collected: without it :class:`MetricsUnavailable` says how to get
it. Runs on the scraping thread (under Gunicorn: the request thread that
answers ``/metrics``, or the health server's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from graceful.core.clock import unix_time
from graceful.core.report import ProcessReport, merge
from graceful.core.stats import LEFT, PHASES, REASONS
from graceful.metrics.snapshot import empty, label, snapshot

if TYPE_CHECKING:
    from graceful.core.lifecycle import Lifecycle

__all__ = ["CONTENT_TYPE", "GracefulCollector", "MetricsUnavailable", "render_metrics"]

#: The content type of :func:`render_metrics`'s text (Prometheus' text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_INSTALL = "prometheus_client is not installed: pip install 'graceful-wsgi[prometheus]'"


class MetricsUnavailable(ImportError):
    """prometheus_client is not installed; the message says how to install it."""


def _library() -> Any:
    try:
        import prometheus_client.core
    except ImportError:
        raise MetricsUnavailable(_INSTALL) from None
    return prometheus_client.core


class GracefulCollector:
    """A prometheus_client collector of graceful's metrics, computed at each scrape.

    ``GracefulCollector(lifecycle)`` reports one process's lifecycle
    (``graceful.default_lifecycle`` when None); ``snapshots`` instead gives a
    callable returning several processes' snapshots, which are merged (the
    health port's server under Gunicorn). Register it in your own registry::

        from prometheus_client import REGISTRY
        REGISTRY.register(GracefulCollector())

    Raises :class:`MetricsUnavailable` when prometheus_client is missing.
    Thread-safe.
    """

    def __init__(
        self,
        lifecycle: Lifecycle | None = None,
        *,
        snapshots: Callable[[], Iterable[ProcessReport]] | None = None,
    ) -> None:
        _library()
        if snapshots is None:
            if lifecycle is None:
                from graceful.core import default

                lifecycle = default.default_lifecycle
            chosen = lifecycle

            def own() -> Iterable[ProcessReport]:
                return [snapshot(chosen)]

            snapshots = own
        self._snapshots = snapshots

    def collect(self) -> Iterator[Any]:
        """The metric families, now (prometheus_client calls this at every scrape)."""
        return _families(merge(self._snapshots()))

    def describe(self) -> Iterator[Any]:
        """The metric families without samples (prometheus_client checks names with them at registration)."""
        return _families(empty(), samples=False)


def render_metrics(
    lifecycle: Lifecycle | None = None, *, snapshots: Callable[[], Iterable[ProcessReport]] | None = None
) -> bytes:
    """graceful's metrics in Prometheus' text format (:data:`CONTENT_TYPE`); arguments as :class:`GracefulCollector`.

    Raises :class:`MetricsUnavailable` when prometheus_client is missing.
    """
    collector = GracefulCollector(lifecycle, snapshots=snapshots)
    import prometheus_client
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return prometheus_client.generate_latest(registry)


def _families(data: ProcessReport, samples: bool = True) -> Iterator[Any]:
    core = _library()
    gauge, counter, info = core.GaugeMetricFamily, core.CounterMetricFamily, core.InfoMetricFamily

    in_flight = gauge("graceful_requests_in_flight", "Requests in flight, as the drain counts them.")
    rejected = counter("graceful_requests_rejected_total", "Requests graceful refused, by reason.", labels=["reason"])
    during = counter(
        "graceful_requests_during_shutdown_total",
        "Requests that arrived after ShutdownInitiated, by phase (delay, then draining).",
        labels=["phase"],
    )
    signals = gauge(
        "graceful_lifecycle_signal_timestamp_seconds",
        "Unix time each lifecycle signal fired.",
        labels=["signal"],
    )
    delay = gauge(
        "graceful_shutdown_delay_seconds",
        "Seconds the shutdown delay lasted, by how it ended: fixed, quiet (adaptive), maximum (adaptive).",
        labels=["end"],
    )
    duration = gauge(
        "graceful_hook_duration_seconds", "Seconds the hook's (longest) run took.", labels=["kind", "name"]
    )
    runs = counter("graceful_hook_runs_total", "Hook runs by outcome.", labels=["kind", "name", "outcome"])
    check = gauge(
        "graceful_healthcheck", "Result of the health check at its last probe: 1 pass, 0 fail.", labels=["name", "type"]
    )
    checks = counter(
        "graceful_healthchecks_total", "Health check results, by status.", labels=["name", "type", "status"]
    )
    abandoned = counter("graceful_drain_abandoned_requests_total", "Requests still running when the drain timed out.")
    lost = counter(
        "graceful_requests_lost_total",
        "Requests in flight (at its last report) in a process that ended abnormally during a shutdown.",
    )
    ended = counter(
        "graceful_processes_ended_abnormally_total",
        "Processes that ended abnormally during a shutdown (a Gunicorn master's workers), by cause.",
        labels=["role", "cause"],
    )
    left = counter(
        "graceful_long_lived_told_to_leave_total",
        "Long-lived connections (WebSockets, streams) told to leave; at_deadline: still open when the drain ended.",
        labels=["kind"],
    )
    about = info("graceful", "What serves the app.")
    families = (
        in_flight,
        rejected,
        during,
        signals,
        delay,
        duration,
        runs,
        check,
        checks,
        abandoned,
        lost,
        ended,
        left,
        about,
    )
    if not samples:
        yield from families
        return
    in_flight.add_metric([], data.in_flight)
    for reason in REASONS:
        rejected.add_metric([reason], data.requests.rejected.get(reason, 0))
    for phase in PHASES:
        during.add_metric([phase], data.requests.arrived.get(phase, 0))
    for name, at in data.signals.items():
        signals.add_metric([name], unix_time(data.origin + at))
    if data.delay is not None:
        delay.add_metric([data.delay.end.value], data.delay.ended_at)
    for (kind, name), (by_outcome, longest) in _hook_runs(data).items():
        duration.add_metric([kind, name], longest)
        for outcome, count in sorted(by_outcome.items()):
            runs.add_metric([kind, name, outcome], count)
    for result in data.checks:
        check.add_metric([result.name, result.endpoint], 1 if result.ok else 0)
        checks.add_metric([result.name, result.endpoint, "success"], result.successes)
        checks.add_metric([result.name, result.endpoint, "error"], result.errors)
    abandoned.add_metric([], data.requests.abandoned)
    lost.add_metric([], data.requests.lost)
    for kind in LEFT:
        left.add_metric([kind], data.requests.left.get(kind, 0))
    causes: dict[tuple[str, str], int] = {}
    for end in data.ended:
        key = (label(end.role), end.cause)
        causes[key] = causes.get(key, 0) + 1
    for (role, cause), count in sorted(causes.items()):
        ended.add_metric([role, cause], count)
    about.add_metric([], {"version": data.version, "server": data.server, "worker_class": data.worker_class})
    yield from families


def _hook_runs(data: ProcessReport) -> dict[tuple[str, str], tuple[dict[str, int], float]]:
    """Runs by outcome and the longest run's seconds, per (kind, name) as label values, in the order first run."""
    table: dict[tuple[str, str], tuple[dict[str, int], float]] = {}
    for hook in data.hooks:
        key = (label(hook.kind), hook.name)
        by_outcome, longest = table.get(key, ({}, 0.0))
        outcome = label(hook.outcome)
        by_outcome[outcome] = by_outcome.get(outcome, 0) + hook.runs
        table[key] = (by_outcome, max(longest, hook.duration))
    return table
