"""Tests for graceful.core.registry."""

from __future__ import annotations

import pytest

from graceful.core.hooks import Hook
from graceful.core.registry import CLEANUP_TASK, PRE_SHUTDOWN_HOOK, DuplicateNameError, PhaseStartedError, Registry


def one() -> None:
    """A hook."""


def two() -> None:
    """Another hook."""


class TestRegistry:
    def test_hooks_kept_in_registration_order(self) -> None:
        """hooks() lists a kind's hooks in the order they were registered."""
        r = Registry()
        r.register(Hook(CLEANUP_TASK, "b", one))
        r.register(Hook(CLEANUP_TASK, "a", two))
        assert [h.name for h in r.hooks(CLEANUP_TASK)] == ["b", "a"]

    def test_duplicate_name_of_other_function_is_an_error(self) -> None:
        """Two different functions under one name of one kind is a clear error."""
        r = Registry()
        r.register(Hook(CLEANUP_TASK, "db", one))
        with pytest.raises(DuplicateNameError, match="cleanup task named 'db' is already registered"):
            r.register(Hook(CLEANUP_TASK, "db", two))

    def test_same_name_in_another_kind_is_fine(self) -> None:
        """Names are unique per kind only."""
        r = Registry()
        r.register(Hook(CLEANUP_TASK, "db", one))
        r.register(Hook(PRE_SHUTDOWN_HOOK, "db", two))
        assert len(r.hooks(PRE_SHUTDOWN_HOOK)) == 1

    def test_same_definition_again_replaces(self) -> None:
        """Re-running the same definition (a config file re-executed on HUP) replaces, not duplicates."""
        r = Registry()
        namespace: dict[str, object] = {}
        source = "def hook():\n    pass\n"
        for _ in range(2):
            exec(compile(source, "/etc/app/gunicorn.conf.py", "exec"), namespace)
            r.register(Hook(PRE_SHUTDOWN_HOOK, "dereg", namespace["hook"]))  # type: ignore[arg-type]
        assert len(r.hooks(PRE_SHUTDOWN_HOOK)) == 1
        assert r.hooks(PRE_SHUTDOWN_HOOK)[0].fn is namespace["hook"]

    def test_register_after_phase_began_is_an_error(self) -> None:
        """Once a kind's phase has begun, registering more of it raises PhaseStartedError."""
        r = Registry()
        r.close(CLEANUP_TASK, "cleanup has begun")
        with pytest.raises(PhaseStartedError, match="cleanup has begun"):
            r.register(Hook(CLEANUP_TASK, "late", one))

    def test_bad_name_and_timeout_are_refused(self) -> None:
        """Empty names and non-positive timeouts are ValueErrors."""
        r = Registry()
        with pytest.raises(ValueError, match="non-empty"):
            r.register(Hook(CLEANUP_TASK, "", one))
        with pytest.raises(ValueError, match="timeout must be > 0"):
            r.register(Hook(CLEANUP_TASK, "x", one, timeout=0))

    def test_decorator_returns_the_function(self) -> None:
        """The decorator registers and returns the function unchanged."""
        r = Registry()
        assert r.decorator(CLEANUP_TASK, "x")(one) is one

    def test_forked_child_starts_with_no_phase_begun(self) -> None:
        """After reinit_after_fork (a Gunicorn worker forked mid-shutdown) registering works again."""
        r = Registry()
        r.close(CLEANUP_TASK, "cleanup has begun")
        r.reinit_after_fork()
        r.register(Hook(CLEANUP_TASK, "after-fork", one))
        assert [h.name for h in r.hooks(CLEANUP_TASK)] == ["after-fork"]
