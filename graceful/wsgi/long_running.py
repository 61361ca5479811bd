"""Long-running requests: streams, web sockets, long polls that the drain does not wait for.

A ``long_running`` predicate tells the middleware which requests are not
counted in the drain nor limited by ``max_in_flight``; they see
``environ["graceful.shutting_down"]`` to end early. Runs on the request
thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

__all__ = ["LongRunning", "is_long_running", "path_prefixes"]

logger = logging.getLogger(__name__)

#: Tells whether a request is long-running (not counted in the drain, no admission limit).
LongRunning = Callable[["WSGIEnvironment"], bool]


def path_prefixes(*prefixes: str) -> LongRunning:
    """Build a ``long_running`` predicate that matches requests under any of these paths.

    Matching is by whole path segments on ``PATH_INFO``: ``path_prefixes("/stream")``
    matches ``/stream`` and ``/stream/news`` but not ``/streams``. Raises
    ``ValueError`` unless every prefix is a string starting with ``/``.
    """
    if not prefixes:
        raise ValueError("path_prefixes() needs at least one prefix, such as '/stream'")
    for prefix in prefixes:
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            raise ValueError(f"a path prefix must be a string starting with '/', got {prefix!r}")
    exact = frozenset(prefix.rstrip("/") for prefix in prefixes)
    under = tuple(prefix.rstrip("/") + "/" for prefix in prefixes)

    def long_running(environ: WSGIEnvironment) -> bool:
        path = environ.get("PATH_INFO")
        return isinstance(path, str) and (path in exact or path.startswith(under))

    return long_running


def is_long_running(long_running: LongRunning, environ: WSGIEnvironment) -> bool:
    """Ask the predicate; one that raises is logged and the request counted as usual."""
    try:
        return bool(long_running(environ))
    except Exception:
        logger.exception("graceful: the long_running predicate raised; counting the request as usual")
        return False
