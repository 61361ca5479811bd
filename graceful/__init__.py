"""Kubernetes-grade graceful shutdown for threaded WSGI servers (Gunicorn, Werkzeug).

See README.md for the timeline; ``graceful.core.lifecycle`` documents it in code.
"""

from __future__ import annotations

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

__version__ = "0.3.0"

__all__ = [
    "AdmissionLimit",
    "Config",
    "ConfigError",
    "DuplicateNameError",
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
