"""graceful.django.checks: refused settings and the budget with every registered hook, as Django system checks."""

from __future__ import annotations

import os

import pytest
from django.test import override_settings

from graceful.core import default as _default
from graceful.core.config import Config, ConfigError
from graceful.core.lifecycle import Lifecycle
from graceful.django.checks import (
    BAD_VALUE,
    BUDGET,
    NOT_A_DICT,
    UNKNOWN_SETTING,
    budget_messages,
    check_graceful,
    settings_messages,
)
from graceful.django.settings import problems


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


class TestSettingsMessages:
    """One error per refused setting: its id, where it was read as obj, graceful.Config's message."""

    @override_settings(GRACEFUL={"SHUTDOWN_DELY": 1, "DRAIN_TIMEOUT": -1})
    def test_unknown_keys_and_bad_values(self) -> None:
        """graceful.E003 for the unknown key, graceful.E004 for the bad value; messages are problems()'s."""
        messages = settings_messages({})
        assert [(m.id, m.obj, m.msg) for m in messages] == [
            (UNKNOWN_SETTING, "settings.GRACEFUL['SHUTDOWN_DELY']", problems({})[0].message),
            (BAD_VALUE, "settings.GRACEFUL['DRAIN_TIMEOUT']", problems({})[1].message),
        ]
        assert all(m.is_serious() for m in messages)
        assert "without the prefix" in (messages[0].hint or "")

    @override_settings(GRACEFUL=["SHUTDOWN_DELAY"])
    def test_a_list_is_graceful_e002(self) -> None:
        """GRACEFUL = [...]: graceful.E002 on settings.GRACEFUL."""
        assert [(m.id, m.obj) for m in settings_messages({})] == [(NOT_A_DICT, "settings.GRACEFUL")]

    def test_a_bad_environment_variable_says_it_comes_from_the_environment(self) -> None:
        """GRACEFUL_HOOK_TIMEOUT=0 in the environment: graceful.E004 on that variable, hinting where it was set."""
        (message,) = settings_messages({"GRACEFUL_HOOK_TIMEOUT": "0"})
        assert (message.id, message.obj) == (BAD_VALUE, "GRACEFUL_HOOK_TIMEOUT")
        assert "environment" in (message.hint or "")

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 25, "GRACE_PERIOD": 10})
    def test_a_settings_budget_is_graceful_e001_of_no_single_key(self) -> None:
        """Good values that cannot fit together: graceful.E001 with obj None (Django prints ?)."""
        (message,) = settings_messages({})
        assert (message.id, message.obj) == (BUDGET, None)
        assert message.msg.startswith("graceful shutdown does not fit GRACEFUL_GRACE_PERIOD")


@pytest.fixture
def too_long_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GRACEFUL_* in the environment; graceful.default_lifecycle has a 25 s cleanup task that cannot fit."""
    for name in [key for key in os.environ if key.startswith("GRACEFUL_")]:
        monkeypatch.delenv(name)
    lifecycle = Lifecycle(Config())
    lifecycle.cleanup_task("slow-flush", timeout=25)(lambda: None)
    monkeypatch.setattr(_default, "default_lifecycle", lifecycle)


@pytest.mark.usefixtures("too_long_a_task")
class TestCheckGraceful:
    """The registered check: the settings first; the default lifecycle's budget only when they pass."""

    def test_looks_at_the_default_lifecycles_budget(self) -> None:
        """Valid settings and the lifecycle the servers drive cannot fit its cleanup task: graceful.E001."""
        assert [m.id for m in check_graceful(None)] == [BUDGET]

    @override_settings(GRACEFUL={"SHUTDOWN_DELY": 1})
    def test_refused_settings_leave_the_lifecycle_unread(self) -> None:
        """With refused settings the lifecycle (left unconfigured by ready()) is not asked: only graceful.E003."""
        assert [m.id for m in check_graceful(None)] == [UNKNOWN_SETTING]
