"""Where hooks and health checks are registered, by kind and unique name.

Kinds: ``pre-shutdown hook`` (server scope), ``cleanup task`` (process scope),
``post-start hook``, ``readiness check``, ``liveness check``. A name is unique
within its kind. Registering the same definition again (same function name in
the same file, as when Gunicorn re-executes a config file on HUP) replaces the
earlier one instead of failing. Once a kind's phase has begun, registering
more of it raises :class:`PhaseStartedError`.

Thread-safe; registration normally happens at import time in the main thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from graceful.core.hooks import Hook

__all__ = [
    "CLEANUP_TASK",
    "KINDS",
    "LIVENESS_CHECK",
    "POST_START_HOOK",
    "PRE_SHUTDOWN_HOOK",
    "READINESS_CHECK",
    "DuplicateNameError",
    "PhaseStartedError",
    "Registrations",
    "Registry",
]

PRE_SHUTDOWN_HOOK = "pre-shutdown hook"
CLEANUP_TASK = "cleanup task"
POST_START_HOOK = "post-start hook"
READINESS_CHECK = "readiness check"
LIVENESS_CHECK = "liveness check"
KINDS = (PRE_SHUTDOWN_HOOK, CLEANUP_TASK, POST_START_HOOK, READINESS_CHECK, LIVENESS_CHECK)

F = TypeVar("F", bound=Callable[[], object])


class DuplicateNameError(ValueError):
    """Two different callables were registered under one name of one kind."""


class PhaseStartedError(RuntimeError):
    """A hook was registered after the phase that runs it had begun."""


class Registry:
    """Hooks and checks of one lifecycle, grouped by kind, in registration order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hooks: dict[str, dict[str, Hook]] = {kind: {} for kind in KINDS}
        self._closed: dict[str, str] = {}

    def register(self, hook: Hook) -> None:
        """Add ``hook``; raise if its name is taken by another definition or its phase began."""
        if hook.kind not in self._hooks:
            raise ValueError(f"unknown hook kind {hook.kind!r}: expected one of {KINDS}")
        if not hook.name or not isinstance(hook.name, str):
            raise ValueError(f"a {hook.kind} needs a non-empty string name, got {hook.name!r}")
        if hook.timeout is not None and not hook.timeout > 0:
            raise ValueError(f"{hook.kind} {hook.name!r}: timeout must be > 0 seconds, got {hook.timeout!r}")
        with self._lock:
            existing = self._hooks[hook.kind].get(hook.name)
            if hook.kind in self._closed and existing is not None and existing.origin() == hook.origin():
                # The same definition again (a config file re-executed by a HUP
                # during the shutdown): the one already running stays.
                return
            if hook.kind in self._closed:
                raise PhaseStartedError(f"cannot register {hook.kind} {hook.name!r}: {self._closed[hook.kind]}")
            if existing is not None and existing.origin() != hook.origin():
                raise DuplicateNameError(
                    f"a {hook.kind} named {hook.name!r} is already registered"
                    f" ({existing.origin()[1]}); names are unique per kind"
                )
            self._hooks[hook.kind][hook.name] = hook

    def decorator(self, kind: str, name: str, timeout: float | None = None) -> Callable[[F], F]:
        """Return a decorator that registers the function it wraps and returns it unchanged."""

        def register(fn: F) -> F:
            self.register(Hook(kind, name, fn, timeout))
            return fn

        return register

    def hooks(self, kind: str) -> list[Hook]:
        """The hooks of ``kind`` in registration order (a copy)."""
        with self._lock:
            return list(self._hooks[kind].values())

    def reinit_after_fork(self) -> None:
        """In a forked child: a fresh lock (a parent thread may have held it) and no phase begun.

        The parent's phases (its shutdown, say) have not begun in the child.
        """
        self._lock = threading.Lock()
        self._closed = {}

    def renew_after_patch(self) -> None:
        """A new lock of the kind ``threading`` makes now (after gevent's monkey-patching); nothing else changes."""
        self._lock = threading.Lock()

    def close(self, kind: str, phase: str) -> list[Hook]:
        """Refuse further registrations of ``kind`` (``phase`` says why) and return its hooks."""
        with self._lock:
            self._closed.setdefault(kind, phase)
            return list(self._hooks[kind].values())


class Registrations:
    """The five registration decorators, registering on the class's ``registry``.

    Mixed into :class:`graceful.Lifecycle` (its own registry) and
    ``graceful.flask.Graceful`` (its lifecycle's); ``graceful.pre_shutdown_hook``
    and its siblings call the default lifecycle's. Each decorator returns the
    function unchanged.
    """

    registry: Registry

    def pre_shutdown_hook(self, name: str, timeout: float | None = None) -> Callable[[F], F]:
        """Register a server-scope hook run once at ShutdownInitiated, alongside the delay.

        Under Gunicorn these run in the master: register them where the master
        sees them (the Gunicorn config, or the app module with ``preload_app``).
        """
        return self.registry.decorator(PRE_SHUTDOWN_HOOK, name, timeout)

    def cleanup_task(self, name: str, timeout: float | None = None) -> Callable[[F], F]:
        """Register a process-scope task run after the drain, before each serving process exits."""
        return self.registry.decorator(CLEANUP_TASK, name, timeout)

    def post_start_hook(self, name: str) -> Callable[[F], F]:
        """Register a hook run once the listener is bound; ``/readyz`` fails until it returns."""
        return self.registry.decorator(POST_START_HOOK, name)

    def readiness_check(self, name: str) -> Callable[[F], F]:
        """Register a ``/readyz`` and ``/healthz`` check: it passes unless it returns False or raises."""
        return self.registry.decorator(READINESS_CHECK, name)

    def liveness_check(self, name: str) -> Callable[[F], F]:
        """Register a ``/livez`` and ``/healthz`` check: it passes unless it returns False or raises."""
        return self.registry.decorator(LIVENESS_CHECK, name)
