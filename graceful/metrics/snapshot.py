"""A process's metrics are its report: the names ``/metrics`` and the Gunicorn wing use for it.

What ``/metrics`` shows is a rendering (:mod:`graceful.metrics.collector`) of
a :class:`~graceful.core.report.ProcessReport` (one process's, or the merge
of several): this module only names the report's functions the way metrics
code calls them. :func:`snapshot` takes a process's report for metrics (no
samples; times on the raw monotonic clock, so a report taken at rest and one
taken a second later compare equal when nothing changed);
:func:`merge` is the report's one merge, each field by its rule (the table
in :mod:`graceful.core.report`); :func:`counters_only` keeps what a process
that is gone counted; :func:`parse` reads a report back from JSON another
process wrote (:meth:`~graceful.core.report.ProcessReport.to_json`),
refusing anything that is not exactly one with a
:class:`~graceful.core.codec.ReportError` (a ValueError) naming the field.
Pure functions, no prometheus_client: they run wherever graceful runs.
Nothing is counted per request for them (see :mod:`graceful.core.stats`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from graceful.core.report import ProcessReport, merge, report_of

if TYPE_CHECKING:
    from graceful.core.lifecycle import Lifecycle

__all__ = ["Snapshot", "counters_only", "empty", "label", "merge", "parse", "snapshot"]

#: A process's metrics: its report.
Snapshot = ProcessReport


def label(text: str) -> str:
    """A kind or an outcome as a label value: ``pre-shutdown hook`` -> ``pre_shutdown_hook``, ``timed out`` ->
    ``timed_out``."""
    return text.replace("-", "_").replace(" ", "_")


def empty(version: str = "", server: str = "", worker_class: str = "") -> ProcessReport:
    """A report of nothing (every count 0)."""
    return ProcessReport.empty(version, server, worker_class)


def snapshot(lifecycle: Lifecycle) -> ProcessReport:
    """This process's report for metrics, now (any thread: every read is thread-safe); its role from ``lifecycle``."""
    return report_of(lifecycle, os.getpid(), origin=0.0, samples=False)


def counters_only(item: ProcessReport) -> ProcessReport:
    """What a process that is gone counted, for a server's retained total (:meth:`ProcessReport.counters_only`)."""
    return item.counters_only()


def parse(data: object) -> ProcessReport:
    """A report from JSON another process wrote (``json.loads``' result); ReportError (a ValueError) otherwise."""
    return ProcessReport.read(data, "metrics")
