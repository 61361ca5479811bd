"""The one module-level lifecycle, used by the decorators in ``graceful``.

Under Gunicorn, the master creates it when the config imports graceful, and
every worker inherits a copy at fork. Code that needs two independent servers
in one process builds its own :class:`graceful.Lifecycle` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from graceful.core.lifecycle import Lifecycle

__all__ = [
    "cleanup_task",
    "default_lifecycle",
    "liveness_check",
    "post_start_hook",
    "pre_shutdown_hook",
    "readiness_check",
    "request_shutdown",
]

F = TypeVar("F", bound=Callable[[], object])

default_lifecycle = Lifecycle()


def pre_shutdown_hook(name: str, timeout: float | None = None) -> Callable[[F], F]:
    """Register a server-scope hook on the default lifecycle (see ``Lifecycle.pre_shutdown_hook``)."""
    return default_lifecycle.pre_shutdown_hook(name, timeout)


def cleanup_task(name: str, timeout: float | None = None) -> Callable[[F], F]:
    """Register a process-scope cleanup task on the default lifecycle."""
    return default_lifecycle.cleanup_task(name, timeout)


def post_start_hook(name: str) -> Callable[[F], F]:
    """Register a post-start hook on the default lifecycle."""
    return default_lifecycle.post_start_hook(name)


def readiness_check(name: str) -> Callable[[F], F]:
    """Register a readiness check on the default lifecycle."""
    return default_lifecycle.readiness_check(name)


def liveness_check(name: str) -> Callable[[F], F]:
    """Register a liveness check on the default lifecycle."""
    return default_lifecycle.liveness_check(name)


def request_shutdown() -> None:
    """Start the default lifecycle's shutdown, as a first SIGTERM would."""
    default_lifecycle.request_shutdown()
