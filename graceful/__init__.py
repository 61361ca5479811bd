"""Kubernetes-grade graceful shutdown for threaded WSGI servers (Gunicorn, Werkzeug).

See README.md for the timeline; ``graceful.lifecycle`` documents it in code.
"""

from __future__ import annotations

from graceful._default import (
    cleanup_task,
    default_lifecycle,
    liveness_check,
    post_start_hook,
    pre_shutdown_hook,
    readiness_check,
    request_shutdown,
)
from graceful.admission import AdmissionLimit
from graceful.config import Config, ConfigError
from graceful.hooks import HookResult, Outcome, ShutdownReport
from graceful.lifecycle import Lifecycle, LifecycleSignal, NullAdapter, ServerAdapter
from graceful.middleware import GracefulMiddleware, path_prefixes
from graceful.registry import DuplicateNameError, PhaseStartedError
from graceful.trap import SignalTrap
from graceful.waitgroup import SafeWaitGroup, WaitGroupClosed

__version__ = "0.1.0"

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
