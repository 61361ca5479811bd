"""Kubernetes-grade graceful shutdown for Python web servers: WSGI (Gunicorn, Werkzeug) and ASGI (Uvicorn).

See README.md for the timeline; ``graceful.core.lifecycle`` documents it in code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graceful.core.admission import AdmissionLimit
from graceful.core.config import Config, ConfigError
from graceful.core.default import (
    cleanup_task,
    default_lifecycle,
    liveness_check,
    post_start_hook,
    pre_shutdown_hook,
    readiness_check,
    request_shutdown,
)
from graceful.core.hooks import HookResult, Outcome, ShutdownReport
from graceful.core.lifecycle import Lifecycle, NullAdapter, ServerAdapter
from graceful.core.registry import DuplicateNameError, PhaseStartedError
from graceful.core.role import Role
from graceful.core.signals import LifecycleSignal
from graceful.core.waitgroup import SafeWaitGroup, WaitGroupClosed
from graceful.process.trap import SignalTrap
from graceful.wsgi.middleware import GracefulMiddleware, path_prefixes

if TYPE_CHECKING:
    from graceful.asgi.middleware import GracefulASGIMiddleware

__version__ = "0.3.0"


def __getattr__(name: str) -> object:
    """``graceful.GracefulASGIMiddleware``, imported on first use: a WSGI process never loads asyncio for it."""
    if name == "GracefulASGIMiddleware":
        from graceful.asgi.middleware import GracefulASGIMiddleware

        return GracefulASGIMiddleware
    raise AttributeError(f"module 'graceful' has no attribute {name!r}")


__all__ = [
    "AdmissionLimit",
    "Config",
    "ConfigError",
    "DuplicateNameError",
    "GracefulASGIMiddleware",
    "GracefulMiddleware",
    "HookResult",
    "Lifecycle",
    "LifecycleSignal",
    "NullAdapter",
    "Outcome",
    "PhaseStartedError",
    "Role",
    "SafeWaitGroup",
    "ServerAdapter",
    "ShutdownReport",
    "SignalTrap",
    "WaitGroupClosed",
    "__version__",
    "cleanup_task",
    "default_lifecycle",
    "liveness_check",
    "path_prefixes",
    "post_start_hook",
    "pre_shutdown_hook",
    "readiness_check",
    "request_shutdown",
]
