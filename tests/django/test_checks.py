"""graceful.django.checks: the budget with every registered hook, as a Django system check."""

from __future__ import annotations

import pytest

from graceful.core import default as _default
from graceful.core.config import Config, ConfigError
from graceful.core.lifecycle import Lifecycle
from graceful.django.checks import BUDGET, budget_messages, check_budget


class TestBudgetMessages:
    """graceful.E001 carries the start-up message of Lifecycle.check_budget, word for word."""

    def test_a_budget_that_fits_reports_nothing(self) -> None:
        """Defaults and a short cleanup task: no message."""
        lifecycle = Lifecycle(Config())
        lifecycle.cleanup_task("flush", timeout=2)(lambda: None)
        assert budget_messages(lifecycle) == []

    def test_a_cleanup_task_too_long_for_the_grace_period_is_an_error(self) -> None:
        """A 25 s cleanup task: max(5, 5) + 15 + 25 + 1 > 30 is graceful.E001 with check_budget's text."""
        lifecycle = Lifecycle(Config())
        lifecycle.cleanup_task("slow-flush", timeout=25)(lambda: None)
        with pytest.raises(ConfigError) as at_start_up:
            lifecycle.check_budget()
        (message,) = budget_messages(lifecycle)
        assert (message.id, message.msg) == (BUDGET, str(at_start_up.value))
        assert message.is_serious()
        assert "longest cleanup task 25s" in message.msg

    def test_a_pre_shutdown_hook_counts_too(self) -> None:
        """A 29 s pre-shutdown hook cannot fit either."""
        lifecycle = Lifecycle(Config())
        lifecycle.pre_shutdown_hook("deregister", timeout=29)(lambda: None)
        assert [m.id for m in budget_messages(lifecycle)] == [BUDGET]

    def test_the_registered_check_looks_at_the_default_lifecycle(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """check_budget (what manage.py check runs) reads graceful.default_lifecycle, the one the servers drive."""
        lifecycle = Lifecycle(Config())
        lifecycle.cleanup_task("slow-flush", timeout=25)(lambda: None)
        monkeypatch.setattr(_default, "default_lifecycle", lifecycle)
        assert [m.id for m in check_budget(None)] == [BUDGET]
