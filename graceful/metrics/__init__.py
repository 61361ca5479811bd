"""graceful's Prometheus metrics: a rendering of the process reports, a collector and the text format.

    from prometheus_client import REGISTRY
    from graceful.metrics import GracefulCollector
    REGISTRY.register(GracefulCollector())       # in your own registry

    body = graceful.metrics.render_metrics()     # what graceful's /metrics answers

A process's metrics are its report (:mod:`graceful.core.report`; :mod:`.snapshot`
names it for metrics code, no prometheus_client needed): a Gunicorn worker's
can travel to the master and be merged there. :mod:`.collector` renders
reports with prometheus_client (the optional ``prometheus`` extra). See the README's "Metrics and the shutdown record".
"""

from __future__ import annotations

from graceful.metrics.collector import CONTENT_TYPE, GracefulCollector, MetricsUnavailable, render_metrics
from graceful.metrics.snapshot import Snapshot, empty, merge, snapshot

__all__ = [
    "CONTENT_TYPE",
    "GracefulCollector",
    "MetricsUnavailable",
    "Snapshot",
    "empty",
    "merge",
    "render_metrics",
    "snapshot",
]
