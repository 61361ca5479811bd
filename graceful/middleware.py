"""Public path of the WSGI middleware: ``from graceful.middleware import GracefulMiddleware``.

The code lives in :mod:`graceful.wsgi.middleware` (the request side); this
module keeps the documented import path working.
"""

from __future__ import annotations

from graceful.wsgi.middleware import (
    LIFECYCLE_KEY,
    SHUTTING_DOWN_KEY,
    GracefulMiddleware,
    LongRunning,
    find_middleware,
    path_prefixes,
)

__all__ = [
    "LIFECYCLE_KEY",
    "SHUTTING_DOWN_KEY",
    "GracefulMiddleware",
    "LongRunning",
    "find_middleware",
    "path_prefixes",
]
