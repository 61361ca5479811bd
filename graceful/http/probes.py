"""The health paths, for both request sides: which paths they are, and the answer to one.

``/livez``, ``/readyz``, ``/healthz`` and ``/<endpoint>/<check>``, exact
paths, GET and HEAD only (405 with ``Allow`` otherwise); ``/metrics`` too
when the operator puts the metrics on the app port
(``GRACEFUL_METRICS_ON_APP_PORT``; :mod:`graceful.metrics`, 404 with one log
line when prometheus_client is missing). They are matched against
``PATH_INFO``, so an app mounted under a ``SCRIPT_NAME`` has them under that
prefix (the ASGI side: against ``scope["path"]``, under its ``root_path``).
An unexpected error becomes a logged 500, never an exception. Runs on the
request thread (WSGI) or event loop (ASGI) that answers the probe; a user
check runs on a thread of its own (:class:`HealthChecks`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from graceful.http.health import ENDPOINTS, HealthChecks, HealthResponse
from graceful.http.replies import NO_METRICS, NOT_ALLOWED, TEXT, Reply

if TYPE_CHECKING:
    from graceful.core.lifecycle import Lifecycle
    from graceful.metrics.snapshot import Snapshot

__all__ = [
    "CHECK_PREFIXES",
    "METRICS",
    "METRICS_PATH",
    "ROOT_PATHS",
    "answer_probe",
    "is_probe_path",
    "metrics_reply",
    "probe_target",
]

logger = logging.getLogger(__name__)

#: ``/livez`` -> ``livez``, and so on.
ROOT_PATHS = {f"/{endpoint}": endpoint for endpoint in ENDPOINTS}
#: ``/livez/``, ...: the per-check paths start so.
CHECK_PREFIXES = tuple(f"/{endpoint}/" for endpoint in ENDPOINTS)
#: The Prometheus metrics: on the health port, and on the app port only when the operator opts in.
METRICS_PATH = "/metrics"
#: ``/metrics`` as an endpoint name, as ``/livez`` is ``livez``.
METRICS = "metrics"


def is_probe_path(path: str) -> bool:
    """True for a health path (exactly; ``/readyzz`` is the app's)."""
    # Every health path has a "z", few others do: one quick test for the rest.
    return "z" in path and (path in ROOT_PATHS or path.startswith(CHECK_PREFIXES))


def probe_target(path: str) -> tuple[str, str | None]:
    """The endpoint and check a health path asks for: ``/readyz`` -> ``("readyz", None)``,
    ``/readyz/poststarthook/warm`` -> ``("readyz", "poststarthook/warm")`` (``""`` for ``/readyz/``).

    ``path`` must be one :func:`is_probe_path` accepts. The app's port and the health port both route so.
    """
    endpoint = ROOT_PATHS.get(path)
    if endpoint is not None:
        return endpoint, None
    endpoint, _, check = path[1:].partition("/")
    return endpoint, check


def answer_probe(health: HealthChecks, method: object, path: str, query: object) -> Reply:
    """The answer to a probe of ``path`` (a health path or ``/metrics``) with this method and query string.

    Protocol-free: the WSGI side passes ``REQUEST_METHOD`` and
    ``QUERY_STRING``, the ASGI side the scope's ``method`` and its decoded
    ``query_string``. Anything unexpected becomes a logged 500, never an exception.
    """
    try:
        endpoint, check = (METRICS, None) if path == METRICS_PATH else probe_target(path)
        if method not in ("GET", "HEAD"):
            return Reply(405, NOT_ALLOWED, allow="GET, HEAD")
        if endpoint == METRICS:
            status, body, content_type = metrics_reply(health.lifecycle)
            return Reply(status, body, content_type=content_type)
        response = health.respond(endpoint, check, query if isinstance(query, str) else "")
    except Exception:
        logger.exception("graceful: health endpoint %r failed", path)
        response = HealthResponse(500, "internal error\n")
    return Reply(response.status, response.body.encode("utf-8", "replace"))


def metrics_reply(
    lifecycle: Lifecycle | None = None, *, snapshots: Callable[[], Iterable[Snapshot]] | None = None
) -> tuple[int, bytes, str]:
    """The status, body and content type of ``/metrics``, on either port (arguments as :func:`render_metrics`).

    200 with Prometheus' text format; 404 with :data:`NO_METRICS` and one
    warning per process when prometheus_client is missing. Raises what the
    snapshots raise.
    """
    from graceful.metrics import CONTENT_TYPE, MetricsUnavailable, render_metrics

    try:
        return 200, render_metrics(lifecycle, snapshots=snapshots), CONTENT_TYPE
    except MetricsUnavailable as exc:
        _log_missing_library_once(str(exc))
        return 404, NO_METRICS, TEXT


_missing_library_logged: list[None] = []


def _log_missing_library_once(reason: str) -> None:
    if not _missing_library_logged:
        _missing_library_logged.append(None)
        logger.warning("graceful: /metrics answers 404: %s", reason)
