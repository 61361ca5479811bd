"""graceful.django.settings: settings.GRACEFUL under the same precedence as Flask's app.config."""

from __future__ import annotations

import pytest
from django.test import override_settings

from graceful.core.config import Config, ConfigError
from graceful.core.lifecycle import Lifecycle
from graceful.core.role import Role
from graceful.django.settings import Problem, ProblemKind, configure_lifecycle, load_config, mapping, problems


class TestMapping:
    """settings.GRACEFUL keys are the GRACEFUL_* names without the prefix."""

    def test_keys_become_their_environment_names(self) -> None:
        """SHUTDOWN_DELAY is read as GRACEFUL_SHUTDOWN_DELAY."""
        assert mapping({"SHUTDOWN_DELAY": 3, "MAX_IN_FLIGHT": 8}) == {
            "GRACEFUL_SHUTDOWN_DELAY": 3,
            "GRACEFUL_MAX_IN_FLIGHT": 8,
        }

    def test_anything_but_a_dict_is_refused(self) -> None:
        """GRACEFUL = [...] fails naming settings.GRACEFUL and what is expected."""
        expected = r"settings\.GRACEFUL=\['SHUTDOWN_DELAY'\] is not allowed: expected a dict"
        with pytest.raises(ConfigError, match=expected):
            mapping(["SHUTDOWN_DELAY"])


class TestLoadConfig:
    """Keyword arguments, then the environment, then settings.GRACEFUL, then the defaults."""

    def test_without_the_setting_the_defaults_hold(self) -> None:
        """No GRACEFUL setting at all: the defaults."""
        assert load_config({}) == Config()

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 2, "SEND_RETRY_AFTER": True})
    def test_settings_are_read(self) -> None:
        """settings.GRACEFUL values are parsed like the environment's."""
        config = load_config({})
        assert (config.shutdown_delay, config.send_retry_after) == (2.0, True)

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 2, "DRAIN_TIMEOUT": 4})
    def test_the_environment_beats_the_settings(self) -> None:
        """GRACEFUL_SHUTDOWN_DELAY in the environment wins over settings.GRACEFUL; other keys still apply."""
        config = load_config({"GRACEFUL_SHUTDOWN_DELAY": "7"})
        assert (config.shutdown_delay, config.drain_timeout) == (7.0, 4.0)

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 2})
    def test_keyword_arguments_beat_the_environment(self) -> None:
        """A keyword argument wins over both."""
        assert load_config({"GRACEFUL_SHUTDOWN_DELAY": "7"}, shutdown_delay=1).shutdown_delay == 1.0

    @override_settings(GRACEFUL={"SHUTDOWN_DELY": 2})
    def test_an_unknown_key_fails_with_the_environments_message(self) -> None:
        """A misspelt key is refused with the very message a misspelt GRACEFUL_* variable gets."""
        with pytest.raises(ConfigError) as from_env:
            Config.load({"GRACEFUL_SHUTDOWN_DELY": "2"})
        with pytest.raises(ConfigError) as from_settings:
            load_config({})
        assert str(from_settings.value) == str(from_env.value)
        assert str(from_settings.value).startswith("GRACEFUL_SHUTDOWN_DELY is not a graceful setting: expected one of")

    @override_settings(GRACEFUL={"shutdown_delay": 2})
    def test_lower_case_keys_are_unknown(self) -> None:
        """Keys are upper-case, as Django settings are: shutdown_delay is no graceful setting."""
        with pytest.raises(ConfigError, match="GRACEFUL_shutdown_delay is not a graceful setting"):
            load_config({})

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": -1})
    def test_a_bad_value_names_the_setting_and_what_is_allowed(self) -> None:
        """A negative delay is refused naming GRACEFUL_SHUTDOWN_DELAY, the value and the range."""
        with pytest.raises(ConfigError, match=r"GRACEFUL_SHUTDOWN_DELAY=-1 is not allowed: expected .* >= 0"):
            load_config({})

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": -1})
    def test_a_bad_value_overridden_by_the_environment_is_not_read(self) -> None:
        """As for app.config: a settings value the environment overrides is never parsed."""
        assert load_config({"GRACEFUL_SHUTDOWN_DELAY": "1"}).shutdown_delay == 1.0

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 20, "DRAIN_TIMEOUT": 20})
    def test_a_budget_that_cannot_fit_is_refused_where_it_is_checked(self) -> None:
        """20 + 20 + 5 + 1 > 30: the config loads (a value), its budget check gives the message, every term named."""
        config = load_config({})
        with pytest.raises(ConfigError, match="graceful shutdown does not fit GRACEFUL_GRACE_PERIOD"):
            config.check_budget()


class TestConfigureLifecycle:
    """configure_lifecycle(lifecycle): it gets the config; a Gunicorn worker may not diverge from its master."""

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 2})
    def test_configures_the_lifecycle(self) -> None:
        """The lifecycle's config is the one loaded from the settings."""
        lifecycle = Lifecycle(Config())
        assert configure_lifecycle(lifecycle, {}) is lifecycle.config
        assert lifecycle.config.shutdown_delay == 2.0

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 2, "RETRY_AFTER": 3})
    def test_a_workers_own_settings_configure_it_the_worker_boot_judges_them(self) -> None:
        """In a worker the settings configure its lifecycle; whether they differ from the master's is
        judged once, at the worker's boot, for every framework (graceful.gunicorn.config.refusal)."""
        lifecycle = Lifecycle(Config(), role=Role.WORKER)
        assert configure_lifecycle(lifecycle, {}) == Config(shutdown_delay=2, retry_after=3)

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 2})
    def test_a_worker_whose_master_read_the_same_settings_is_configured(self) -> None:
        """The master read the same settings.GRACEFUL: the worker's config equals the master's."""
        lifecycle = Lifecycle(Config(shutdown_delay=2), role=Role.WORKER)
        assert configure_lifecycle(lifecycle, {}).shutdown_delay == 2.0


class TestProblems:
    """problems(): every refused setting with graceful.Config's own message, then the whole config's budget."""

    def test_valid_settings_have_none(self) -> None:
        """No GRACEFUL setting, and an empty environment: nothing."""
        assert problems({}) == []

    @override_settings(GRACEFUL={"SHUTDOWN_DELY": 1, "DRAIN_TIMEOUT": "soon", "RETRY_AFTER": 3})
    def test_each_unknown_key_and_bad_value_is_listed_with_configs_message(self) -> None:
        """Two problems in the settings: both, in settings order, each with what Config.load says of it alone."""
        with pytest.raises(ConfigError) as unknown:
            Config.load({"GRACEFUL_SHUTDOWN_DELY": "1"})
        with pytest.raises(ConfigError) as bad:
            Config.load({}, mapping={"GRACEFUL_DRAIN_TIMEOUT": "soon"})
        assert problems({}) == [
            Problem(ProblemKind.UNKNOWN, "settings.GRACEFUL['SHUTDOWN_DELY']", str(unknown.value)),
            Problem(ProblemKind.VALUE, "settings.GRACEFUL['DRAIN_TIMEOUT']", str(bad.value)),
        ]

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": -1})
    def test_environment_variables_are_read_first_and_override_the_settings(self) -> None:
        """A bad GRACEFUL_* variable is listed as the environment's; the settings key it overrides is not read."""
        (problem,) = problems({"GRACEFUL_SHUTDOWN_DELAY": "-2", "PATH": "/bin"})
        assert (problem.kind, problem.source, problem.in_environment) == (
            ProblemKind.VALUE,
            "GRACEFUL_SHUTDOWN_DELAY",
            True,
        )
        assert problem.message.startswith("GRACEFUL_SHUTDOWN_DELAY='-2' is not allowed")

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 25})
    def test_one_value_is_read_alone_without_the_budget(self) -> None:
        """SHUTDOWN_DELAY 25 is a good value whose budget needs the grace period it comes with: not a value problem."""
        assert problems({"GRACEFUL_GRACE_PERIOD": "60"}) == []

    @override_settings(GRACEFUL={"SHUTDOWN_DELAY": 25, "GRACE_PERIOD": 10})
    def test_a_budget_that_cannot_fit_is_one_budget_problem(self) -> None:
        """Good values, impossible together: one budget problem with the start-up message, of no single source."""
        with pytest.raises(ConfigError) as at_start_up:
            load_config({}).check_budget()
        assert problems({}) == [Problem(ProblemKind.BUDGET, None, str(at_start_up.value))]

    @override_settings(GRACEFUL={"SHUTDOWN_DELY": 1, "SHUTDOWN_DELAY": 25, "GRACE_PERIOD": 10})
    def test_the_budget_waits_for_every_value(self) -> None:
        """While a value is refused, the budget (of which values?) is not judged."""
        assert [problem.kind for problem in problems({})] == [ProblemKind.UNKNOWN]

    @override_settings(GRACEFUL="SHUTDOWN_DELAY=5")
    def test_anything_but_a_dict_is_the_one_problem(self) -> None:
        """GRACEFUL as a string: one problem naming settings.GRACEFUL, with mapping()'s message."""
        with pytest.raises(ConfigError) as refused:
            mapping("SHUTDOWN_DELAY=5")
        assert problems({}) == [Problem(ProblemKind.NOT_A_DICT, "settings.GRACEFUL", str(refused.value))]
