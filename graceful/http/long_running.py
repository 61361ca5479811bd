"""Long-running requests: streams, web sockets, long polls that the drain does not wait for.

A ``long_running`` predicate tells a request side which requests are not
counted in the drain nor limited by ``max_in_flight``. It is called with the
request as its side sees it: a WSGI environ, or an ASGI scope. The WSGI side's
long-running requests see ``environ["graceful.shutting_down"]`` to end
early; the ASGI side's are told to leave (:mod:`graceful.asgi.long_lived`).
Runs on the request thread (WSGI) or the event loop (ASGI).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LongRunning", "is_long_running", "path_prefixes"]

logger = logging.getLogger(__name__)

#: Tells whether a request (a WSGI environ or an ASGI scope) is long-running.
LongRunning = Callable[[Mapping[str, Any]], bool]


def path_prefixes(*prefixes: str) -> LongRunning:
    """Build a ``long_running`` predicate that matches requests under any of these paths.

    Matching is by whole path segments, on a WSGI environ's ``PATH_INFO`` or
    an ASGI scope's ``path``: ``path_prefixes("/stream")`` matches ``/stream``
    and ``/stream/news`` but not ``/streams``. Raises ``ValueError`` unless
    every prefix is a string starting with ``/``.
    """
    if not prefixes:
        raise ValueError("path_prefixes() needs at least one prefix, such as '/stream'")
    for prefix in prefixes:
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            raise ValueError(f"a path prefix must be a string starting with '/', got {prefix!r}")
    exact = frozenset(prefix.rstrip("/") for prefix in prefixes)
    under = tuple(prefix.rstrip("/") + "/" for prefix in prefixes)

    def long_running(request: Mapping[str, Any]) -> bool:
        path = request.get("PATH_INFO", request.get("path"))
        return isinstance(path, str) and (path in exact or path.startswith(under))

    return long_running


def is_long_running(long_running: LongRunning, request: Mapping[str, Any]) -> bool:
    """Ask the predicate; one that raises is logged and the request counted as usual."""
    try:
        return bool(long_running(request))
    except Exception:
        logger.exception("graceful: the long_running predicate raised; counting the request as usual")
        return False
