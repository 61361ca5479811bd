"""Tests for graceful.core.config."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graceful.core.budget import BUDGET_MARGIN
from graceful.core.config import PER_PROCESS, Config, ConfigError, env_name, read_setting


class TestDefaults:
    def test_defaults_match_the_design_table(self) -> None:
        """The defaults are the README's table: 5 s delay, 15 s drain, 5 s hooks, 30 s grace, no limit."""
        c = Config()
        assert (c.shutdown_delay, c.drain_timeout, c.hook_timeout) == (5.0, 15.0, 5.0)
        assert (c.send_retry_after, c.retry_after, c.grace_period, c.max_in_flight) == (False, 5, 30.0, 0)
        assert (c.health_bind, c.health_address) == ("", None)  # the health port is off

    def test_env_names_are_prefixed_upper_case(self) -> None:
        """Each field's variable is GRACEFUL_ plus its upper-case name."""
        assert env_name("shutdown_delay") == "GRACEFUL_SHUTDOWN_DELAY"

    def test_config_is_frozen(self) -> None:
        """A Config cannot be changed after it is built."""
        with pytest.raises(AttributeError):
            Config().shutdown_delay = 1  # type: ignore[misc]


class TestPrecedence:
    def test_keyword_beats_environment_beats_mapping(self) -> None:
        """kwargs > GRACEFUL_* environment > app.config-style mapping > default."""
        env = {"GRACEFUL_SHUTDOWN_DELAY": "2", "GRACEFUL_DRAIN_TIMEOUT": "3"}
        mapping = {"GRACEFUL_SHUTDOWN_DELAY": 7, "GRACEFUL_DRAIN_TIMEOUT": 7, "GRACEFUL_HOOK_TIMEOUT": 4}
        c = Config.load(env, mapping, shutdown_delay=1)
        assert (c.shutdown_delay, c.drain_timeout, c.hook_timeout, c.grace_period) == (1.0, 3.0, 4.0, 30.0)

    def test_mapping_keys_other_than_graceful_are_ignored(self) -> None:
        """Flask's own keys in app.config do not disturb loading."""
        assert Config.load({}, {"SECRET_KEY": "x", "DEBUG": True}) == Config()

    def test_unknown_graceful_variable_is_an_error(self) -> None:
        """A misspelt GRACEFUL_ variable fails loudly instead of being ignored."""
        with pytest.raises(ConfigError, match="GRACEFUL_SHUTDOWN_DELAYY is not a graceful setting"):
            Config.load({"GRACEFUL_SHUTDOWN_DELAYY": "1"})

    def test_unknown_keyword_is_a_type_error(self) -> None:
        """A misspelt keyword argument is a TypeError naming it."""
        with pytest.raises(TypeError, match="shutdown_dealy"):
            Config.load({}, shutdown_dealy=1)


class TestValidation:
    @pytest.mark.parametrize(
        ("var", "value", "allowed"),
        [
            ("GRACEFUL_SHUTDOWN_DELAY", "abc", "a finite number of seconds >= 0"),
            ("GRACEFUL_SHUTDOWN_DELAY", "-1", "a finite number of seconds >= 0"),
            ("GRACEFUL_DRAIN_TIMEOUT", "nan", "a finite number of seconds >= 0"),
            ("GRACEFUL_DRAIN_TIMEOUT", "inf", "a finite number of seconds >= 0"),
            ("GRACEFUL_HOOK_TIMEOUT", "0", "a finite number of seconds > 0"),
            ("GRACEFUL_GRACE_PERIOD", "", "a finite number of seconds > 0"),
            ("GRACEFUL_SEND_RETRY_AFTER", "ture", "one of true/false"),
            ("GRACEFUL_RETRY_AFTER", "1.5", "a whole number >= 0"),
            ("GRACEFUL_MAX_IN_FLIGHT", "-3", "a whole number >= 0"),
            ("GRACEFUL_EXPOSE_CHECK_ERRORS", "2", "one of true/false"),
            ("GRACEFUL_HEALTH_BIND", ":8081", "write the host"),
            ("GRACEFUL_HEALTH_BIND", "8081", "HOST:PORT (such as 0.0.0.0:8081"),
            ("GRACEFUL_HEALTH_BIND", "::1:8081", "in brackets"),
        ],
    )
    def test_bad_environment_value_names_variable_value_and_form(self, var: str, value: str, allowed: str) -> None:
        """Each bad value raises a ValueError naming the variable, the value and the allowed form."""
        with pytest.raises(ValueError) as info:
            Config.load({var: value})
        message = str(info.value)
        assert var in message and repr(value) in message and allowed in message

    @pytest.mark.parametrize("text", ["1", "true", "TRUE", "yes", "On", " on "])
    def test_true_spellings(self, text: str) -> None:
        """The usual spellings of true are accepted, case-insensitively."""
        assert Config.load({"GRACEFUL_SEND_RETRY_AFTER": text}).send_retry_after is True

    @pytest.mark.parametrize("text", ["0", "false", "No", "OFF"])
    def test_false_spellings(self, text: str) -> None:
        """The usual spellings of false are accepted."""
        assert Config.load({"GRACEFUL_SEND_RETRY_AFTER": text}).send_retry_after is False

    def test_keyword_values_are_validated_too(self) -> None:
        """Config(...) refuses a negative delay given in code, naming the field."""
        with pytest.raises(ConfigError, match="shutdown_delay=-1"):
            Config(shutdown_delay=-1)

    def test_bool_is_not_a_number_of_seconds(self) -> None:
        """True as a duration is a typo, not 1 second."""
        with pytest.raises(ConfigError):
            Config(shutdown_delay=True)

    def test_numbers_in_strings_are_converted(self) -> None:
        """Environment strings become floats and ints."""
        c = Config.load({"GRACEFUL_SHUTDOWN_DELAY": " 2.5 ", "GRACEFUL_MAX_IN_FLIGHT": "10"})
        assert c.shutdown_delay == 2.5 and c.max_in_flight == 10 and isinstance(c.max_in_flight, int)

    def test_health_bind_from_each_source(self) -> None:
        """GRACEFUL_HEALTH_BIND from the environment, Flask's app.config or a keyword; parsed on request."""
        assert Config.load({"GRACEFUL_HEALTH_BIND": " 0.0.0.0:8081 "}).health_bind == "0.0.0.0:8081"
        from_mapping = Config.load({}, {"GRACEFUL_HEALTH_BIND": "[::]:9000"})
        assert str(from_mapping.health_address) == "[::]:9000"
        assert Config(health_bind="unix:/run/h.sock").health_address is not None

    def test_health_bind_must_be_text(self) -> None:
        """A number for health_bind (app.config) is refused with the forms allowed."""
        with pytest.raises(ConfigError, match=r"GRACEFUL_HEALTH_BIND=8081 is not allowed: expected HOST:PORT"):
            Config.load({}, {"GRACEFUL_HEALTH_BIND": 8081})

    @given(st.floats(allow_nan=True, allow_infinity=True))
    def test_any_float_is_accepted_or_refused_with_config_error(self, x: float) -> None:
        """A float for shutdown_delay is either valid (finite, >= 0) or a ConfigError; nothing else."""
        if math.isfinite(x) and 0 <= x <= 9:
            assert Config(shutdown_delay=x).shutdown_delay == x
        elif not (math.isfinite(x) and x > 9):
            with pytest.raises(ConfigError):
                Config(shutdown_delay=x)

    @given(st.text())
    def test_any_health_bind_is_parsed_or_refused_with_config_error(self, text: str) -> None:
        """Arbitrary text for GRACEFUL_HEALTH_BIND is an address, off, or a ConfigError naming it."""
        try:
            config = Config.load({"GRACEFUL_HEALTH_BIND": text})
        except ConfigError as exc:
            assert str(exc).startswith(f"GRACEFUL_HEALTH_BIND={text!r} is not allowed: ")
        else:
            assert (config.health_address is None) == (not text.strip())

    @given(st.text())
    def test_any_text_is_parsed_or_refused_with_config_error(self, text: str) -> None:
        """Arbitrary text for a variable never raises anything but ConfigError."""
        try:
            Config.load({"GRACEFUL_DRAIN_TIMEOUT": text})
        except ConfigError as exc:
            # Either the value is refused, or it is valid but breaks the budget.
            assert "GRACEFUL_DRAIN_TIMEOUT" in str(exc) or "drain_timeout" in str(exc)


class TestBudget:
    def test_default_budget_fits_default_grace_period(self) -> None:
        """5 + 15 + 5 + 1 = 26 <= 30."""
        assert Config().budget().total == 26.0

    def test_pre_shutdown_hooks_overlap_the_delay(self) -> None:
        """The budget counts max(delay, longest pre-shutdown hook), not their sum."""
        c = Config(shutdown_delay=5, grace_period=60)
        assert c.budget(pre_shutdown_timeouts=[3], cleanup_timeouts=[2]).total == 5 + 15 + 2 + BUDGET_MARGIN
        assert c.budget(pre_shutdown_timeouts=[9], cleanup_timeouts=[2]).total == 9 + 15 + 2 + BUDGET_MARGIN

    def test_a_config_is_a_value_and_the_budget_is_checked_apart(self) -> None:
        """An impossible budget still builds a Config (its values are each fine); check_budget refuses it."""
        config = Config(shutdown_delay=25, grace_period=10)
        assert config.budget().overrun(10) is not None
        with pytest.raises(ConfigError, match="does not fit GRACEFUL_GRACE_PERIOD"):
            config.check_budget()

    def test_over_budget_error_shows_each_term_and_the_sum(self) -> None:
        """The error lists delay, longest hook, drain, longest cleanup, margin, the sum and the grace period."""
        with pytest.raises(ConfigError) as info:
            Config(shutdown_delay=10, drain_timeout=20, grace_period=30).check_budget()
        message = str(info.value)
        for part in [
            "shutdown_delay 10s",
            "drain_timeout 20s",
            "longest cleanup task 5s",
            "margin 1s",
            "= 36s",
            "grace_period 30s",
        ]:
            assert part in message

    def test_long_hook_checked_against_budget(self) -> None:
        """A registered hook timeout longer than the budget allows is refused."""
        with pytest.raises(ConfigError, match="longest pre-shutdown hook 20s"):
            Config().check_budget(pre_shutdown_timeouts=[20])

    def test_replace_validates_again(self) -> None:
        """replace() builds a new validated config."""
        assert Config().replace(shutdown_delay=1).shutdown_delay == 1.0
        with pytest.raises(ConfigError):
            Config().replace(retry_after=-1)


class TestObservabilitySettings:
    def test_defaults(self) -> None:
        """No record file, Kubernetes' termination log, no metrics on the app port."""
        c = Config()
        assert (c.report_file, c.termination_log, c.metrics_on_app_port) == ("", "/dev/termination-log", False)

    def test_read_from_the_environment(self) -> None:
        """GRACEFUL_REPORT_FILE, GRACEFUL_TERMINATION_LOG and GRACEFUL_METRICS_ON_APP_PORT are read."""
        env = {
            "GRACEFUL_REPORT_FILE": "/var/run/graceful/shutdown.json",
            "GRACEFUL_TERMINATION_LOG": "",
            "GRACEFUL_METRICS_ON_APP_PORT": "yes",
        }
        c = Config.load(env)
        assert (c.report_file, c.termination_log, c.metrics_on_app_port) == (
            "/var/run/graceful/shutdown.json",
            "",
            True,
        )

    @pytest.mark.parametrize("value", [" /tmp/x.json", "/tmp/x.json ", "/tmp/\0x"])
    def test_a_bad_path_names_the_variable(self, value: str) -> None:
        """A path with surrounding spaces or a NUL is refused, naming the variable and what is allowed."""
        with pytest.raises(ConfigError) as caught:
            Config.load({"GRACEFUL_REPORT_FILE": value})
        assert str(caught.value) == (
            f"GRACEFUL_REPORT_FILE={value!r} is not allowed:"
            " expected a file path (no surrounding spaces, no NUL), or empty to turn it off"
        )

    def test_a_path_that_is_not_text_is_refused(self) -> None:
        """A keyword value that is no path (a number) is refused."""
        with pytest.raises(ConfigError, match="termination_log=3 is not allowed"):
            Config(termination_log=3)  # type: ignore[arg-type]

    def test_the_file_system_is_not_consulted(self) -> None:
        """A report file in a directory missing here is still a valid setting (graceful check reads pods' settings)."""
        assert (
            Config.load({"GRACEFUL_REPORT_FILE": "/no/such/dir/record.json"}).report_file == "/no/such/dir/record.json"
        )


class TestAdaptiveDelaySettings:
    def test_unset_by_default(self) -> None:
        """Without GRACEFUL_SHUTDOWN_DELAY_MIN the delay is fixed and the quiet period derived."""
        c = Config()
        assert (c.shutdown_delay_min, c.quiet_period, c.adaptive_delay) == (None, None, False)

    def test_read_from_the_environment_and_a_mapping(self) -> None:
        """The floor and the quiet period come from GRACEFUL_* variables or app.config-style keys."""
        c = Config.load(
            {"GRACEFUL_SHUTDOWN_DELAY_MIN": "1"},
            {"GRACEFUL_QUIET_PERIOD": 0.5, "GRACEFUL_SHUTDOWN_DELAY": 30, "GRACEFUL_GRACE_PERIOD": 60},
        )
        assert (c.shutdown_delay_min, c.quiet_period, c.shutdown_delay, c.adaptive_delay) == (1.0, 0.5, 30.0, True)

    def test_empty_means_unset(self) -> None:
        """An empty variable leaves the setting unset (so a manifest can blank it)."""
        assert Config.load({"GRACEFUL_SHUTDOWN_DELAY_MIN": " "}).shutdown_delay_min is None

    def test_floor_above_the_maximum_is_refused(self) -> None:
        """A floor longer than GRACEFUL_SHUTDOWN_DELAY fails naming both and the value."""
        with pytest.raises(ConfigError) as caught:
            Config.load({"GRACEFUL_SHUTDOWN_DELAY_MIN": "10", "GRACEFUL_SHUTDOWN_DELAY": "5"})
        assert str(caught.value) == (
            "GRACEFUL_SHUTDOWN_DELAY_MIN=10 is not allowed: expected at most GRACEFUL_SHUTDOWN_DELAY (5),"
            " the adaptive delay's maximum"
        )

    def test_quiet_period_without_a_floor_is_refused(self) -> None:
        """A quiet period with no floor would be ignored: it fails instead, naming the fix."""
        with pytest.raises(
            ConfigError, match=r"GRACEFUL_QUIET_PERIOD=2 is not allowed without GRACEFUL_SHUTDOWN_DELAY_MIN"
        ):
            Config.load({"GRACEFUL_QUIET_PERIOD": "2"})

    @pytest.mark.parametrize(
        ("var", "value", "allowed"),
        [
            ("GRACEFUL_SHUTDOWN_DELAY_MIN", "-1", "a finite number of seconds >= 0, or empty (unset)"),
            ("GRACEFUL_SHUTDOWN_DELAY_MIN", "soon", "a finite number of seconds >= 0, or empty (unset)"),
            ("GRACEFUL_QUIET_PERIOD", "0", "a finite number of seconds > 0, or empty (unset)"),
            ("GRACEFUL_QUIET_PERIOD", "inf", "a finite number of seconds > 0, or empty (unset)"),
        ],
    )
    def test_bad_values_name_the_variable_the_value_and_what_is_allowed(
        self, var: str, value: str, allowed: str
    ) -> None:
        """A bad floor or quiet period is one line: variable, value, what is allowed."""
        env = {"GRACEFUL_SHUTDOWN_DELAY_MIN": "1", var: value}
        with pytest.raises(ConfigError) as caught:
            Config.load(env)
        assert str(caught.value) == f"{var}={value!r} is not allowed: expected {allowed}"

    def test_the_budget_counts_the_maximum(self) -> None:
        """The adaptive delay may last its maximum: the budget counts shutdown_delay, not the floor."""
        with pytest.raises(ConfigError, match="grace"):
            Config(shutdown_delay=30, shutdown_delay_min=1, grace_period=30).check_budget()


class TestReadSetting:
    def test_one_value_is_read_as_load_reads_it(self) -> None:
        """read_setting parses one GRACEFUL_* value with the rule Config.load uses."""
        assert read_setting("GRACEFUL_SHUTDOWN_DELAY", "2.5") == 2.5
        assert read_setting("GRACEFUL_SEND_RETRY_AFTER", "yes") is True

    def test_a_bad_value_gets_loads_message(self) -> None:
        """The message names the variable, the value and what is allowed, word for word as Config.load's."""
        with pytest.raises(ConfigError) as alone:
            read_setting("GRACEFUL_DRAIN_TIMEOUT", "-1")
        with pytest.raises(ConfigError) as loaded:
            Config.load({"GRACEFUL_DRAIN_TIMEOUT": "-1"})
        assert str(alone.value) == str(loaded.value)

    @pytest.mark.parametrize("key", ["GRACEFUL_SHUTDOWN_DELY", "GRACEFUL_shutdown_delay", "SHUTDOWN_DELAY"])
    def test_an_unknown_name_is_refused_with_the_known_ones(self, key: str) -> None:
        """A misspelt or lower-case name is not a setting: refused, listing the names that are."""
        with pytest.raises(ConfigError, match=f"{key} is not a graceful setting: expected one of .*GRACEFUL_"):
            read_setting(key, "1")

    def test_values_read_alone_are_not_checked_together(self) -> None:
        """A floor above the default maximum passes alone; together, Config refuses it (delay_problem)."""
        assert read_setting("GRACEFUL_SHUTDOWN_DELAY_MIN", "9") == 9.0
        with pytest.raises(ConfigError, match="GRACEFUL_SHUTDOWN_DELAY_MIN=9 is not allowed"):
            Config(shutdown_delay_min=9)


class TestServerDifferences:
    def test_per_process_fields_may_differ(self) -> None:
        """max_in_flight, retry_after and metrics_on_app_port are each process's own: no difference for the server."""
        assert Config().server_differences(Config(max_in_flight=4, retry_after=9, metrics_on_app_port=True)) == []

    def test_every_other_field_is_the_servers(self) -> None:
        """The delay and the drain bound differ: both named, in field order."""
        assert Config().server_differences(Config(drain_timeout=3, shutdown_delay=1)) == [
            "shutdown_delay",
            "drain_timeout",
        ]

    def test_the_per_process_set_names_real_fields(self) -> None:
        """PER_PROCESS holds field names only (a typo would silently make a field the server's)."""
        assert {field.name for field in dataclasses.fields(Config)} >= PER_PROCESS
