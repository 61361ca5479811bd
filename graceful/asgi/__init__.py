"""The ASGI request side: what runs on every connection, on the event loop of every serving process.

- :mod:`.middleware` ``GracefulASGIMiddleware``: health paths, admission, the
  in-flight count of each HTTP request until its app returns
- :mod:`.long_lived` WebSockets and streams, told to leave during a shutdown
- :mod:`.lifespan` the app's lifespan: its startup gates readiness

What it shares with the WSGI side lives once, in :mod:`graceful.http` and
the lifecycle's :class:`~graceful.core.gate.Gate`.
"""

from __future__ import annotations

from graceful.asgi.long_lived import GoneAway, LongLived, goodbyes_of
from graceful.asgi.middleware import (
    LIFECYCLE_KEY,
    GracefulASGIMiddleware,
    find_asgi_middleware,
    has_asgi_middleware,
    is_asgi_app,
)

__all__ = [
    "LIFECYCLE_KEY",
    "GoneAway",
    "GracefulASGIMiddleware",
    "LongLived",
    "find_asgi_middleware",
    "goodbyes_of",
    "has_asgi_middleware",
    "is_asgi_app",
]
