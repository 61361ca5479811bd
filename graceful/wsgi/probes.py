"""The health paths over WSGI: which paths they are, and answering one with :class:`HealthChecks`.

``/livez``, ``/readyz``, ``/healthz`` and ``/<endpoint>/<check>``, exact
paths, GET and HEAD only (405 with ``Allow`` otherwise). They are matched
against ``PATH_INFO``, so an app mounted under a ``SCRIPT_NAME`` has them
under that prefix. An unexpected error becomes a logged 500, never an
exception. Runs on the request thread that answers the probe.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from graceful.wsgi.health import ENDPOINTS, HealthChecks, HealthResponse
from graceful.wsgi.replies import NOT_ALLOWED, reply

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

__all__ = ["CHECK_PREFIXES", "ROOT_PATHS", "answer_probe", "is_probe_path", "probe_target"]

logger = logging.getLogger(__name__)

#: ``/livez`` -> ``livez``, and so on.
ROOT_PATHS = {f"/{endpoint}": endpoint for endpoint in ENDPOINTS}
#: ``/livez/``, ...: the per-check paths start so.
CHECK_PREFIXES = tuple(f"/{endpoint}/" for endpoint in ENDPOINTS)


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


def answer_probe(
    health: HealthChecks, environ: WSGIEnvironment, start_response: StartResponse, path: str
) -> Iterable[bytes]:
    """Answer the health path ``path``; anything unexpected becomes a logged 500, never an exception."""
    try:
        endpoint, check = probe_target(path)
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return reply(environ, start_response, 405, NOT_ALLOWED, allow="GET, HEAD")
        query = environ.get("QUERY_STRING")
        response = health.respond(endpoint, check, query if isinstance(query, str) else "")
    except Exception:
        logger.exception("graceful: health endpoint %r failed", path)
        response = HealthResponse(500, "internal error\n")
    body = response.body.encode("utf-8", "replace")
    return reply(environ, start_response, response.status, body)
