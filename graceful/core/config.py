"""Configuration: one frozen dataclass, validated when it is built.

Every duration is in **seconds** (a float, unless the field says otherwise);
field names carry no unit suffix, this docstring is the one place that says so.
Paths are strings; an empty one turns its feature off.

Sources, highest precedence first:

1. keyword arguments (``Config(shutdown_delay=2)``, ``Config.load(shutdown_delay=2)``);
2. ``GRACEFUL_*`` environment variables (``GRACEFUL_SHUTDOWN_DELAY=2``);
3. a mapping of ``GRACEFUL_*`` keys, such as Flask's ``app.config``;
4. the defaults below.

The environment beats ``app.config`` so that an operator can change a deployed
application without changing its code. A bad value raises :class:`ConfigError`
(a ``ValueError``) naming the variable, the value and what is allowed.

A ``Config`` is a validated value: each field, and the adaptive delay's
settings against each other. Whether the whole shutdown fits
``grace_period`` also depends on the hooks an app registers, so it is checked
once, where a server starts (``Lifecycle.check_budget``), not here.
:func:`read_setting` reads one value alone (the system checks and ``graceful
check`` report every refused variable, not only the first).

Which process may set what, under a server of several processes (Gunicorn):
the master resolves the config once at start-up and its workers inherit it;
:data:`PER_PROCESS` are the fields a worker may still set for itself (its app's
own settings), every other one is the server's (:meth:`Config.server_differences`).

Runs in whatever process and thread builds it; a ``Config`` is immutable and
safe to share between threads.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from graceful.core.budget import Budget
from graceful.healthport.address import ALLOWED as _ADDRESSES
from graceful.healthport.address import HealthAddress, parse_address

__all__ = [
    "DEFAULT_TERMINATION_LOG",
    "PER_PROCESS",
    "Config",
    "ConfigError",
    "delay_problem",
    "env_name",
    "read_setting",
]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class ConfigError(ValueError):
    """A setting has a value graceful refuses; the message names it and the fix."""


def env_name(field: str) -> str:
    """Return the environment variable (and Flask config key) for a field."""
    return "GRACEFUL_" + field.upper()


@dataclasses.dataclass(frozen=True)
class _Rule:
    # float, int, bool, str (a path) or HealthAddress (an address, kept as its text)
    kind: type
    minimum: float = 0.0
    strictly_positive: bool = False
    # None (unset) is allowed: given as None or as an empty string.
    optional: bool = False

    def allowed(self) -> str:
        text = self._allowed()
        return f"{text}, or empty (unset)" if self.optional else text

    def _allowed(self) -> str:
        if self.kind is HealthAddress:
            return _ADDRESSES
        if self.kind is bool:
            return "one of true/false, yes/no, on/off, 1/0"
        if self.kind is str:
            return "a file path (no surrounding spaces, no NUL), or empty to turn it off"
        noun = "a whole number" if self.kind is int else "a finite number of seconds"
        op = ">" if self.strictly_positive else ">="
        return f"{noun} {op} {self.minimum:g}"


_RULES: dict[str, _Rule] = {
    "shutdown_delay": _Rule(float),
    "shutdown_delay_min": _Rule(float, optional=True),
    "quiet_period": _Rule(float, strictly_positive=True, optional=True),
    "drain_timeout": _Rule(float),
    "hook_timeout": _Rule(float, strictly_positive=True),
    "send_retry_after": _Rule(bool),
    "retry_after": _Rule(int),
    "grace_period": _Rule(float, strictly_positive=True),
    "max_in_flight": _Rule(int),
    "expose_check_errors": _Rule(bool),
    "health_bind": _Rule(HealthAddress),
    "report_file": _Rule(str),
    "termination_log": _Rule(str),
    "metrics_on_app_port": _Rule(bool),
}

#: Each field by its ``GRACEFUL_*`` name.
_NAMES = {env_name(name): name for name in _RULES}

#: The fields each serving process uses for itself alone: a worker's app may set them (its ``app.config``,
#: ``settings.GRACEFUL``) without its master knowing. The master acts on every other one (the delay, the
#: hooks' bound, the drain and ``graceful_timeout``, the retry-after mode, the health port, the record).
PER_PROCESS = frozenset({"retry_after", "max_in_flight", "metrics_on_app_port"})

#: Where Kubernetes reads a container's termination message (its default ``terminationMessagePath``).
DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def _bad(source: str, value: object, rule: _Rule) -> ConfigError:
    return ConfigError(f"{source}={value!r} is not allowed: expected {rule.allowed()}")


def _parse_path(source: str, raw: object, rule: _Rule) -> str:
    # Only the text: the file system is the server's (graceful check reads a pod's settings elsewhere);
    # graceful.process.termination checks the report file's directory when a server starts.
    if not isinstance(raw, (str, os.PathLike)):
        raise _bad(source, raw, rule)
    path = os.fspath(raw)
    if not isinstance(path, str) or "\0" in path or path != path.strip():
        raise _bad(source, raw, rule)
    return path


def _parse(source: str, raw: object, rule: _Rule) -> Any:
    """Turn a raw value (string from the environment, or a Python value) into a checked one."""
    if rule.optional and (raw is None or (isinstance(raw, str) and not raw.strip())):
        return None
    if rule.kind is str:
        return _parse_path(source, raw, rule)
    if rule.kind is HealthAddress:
        try:
            parse_address(source, raw)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return str(raw).strip()
    if rule.kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise _bad(source, raw, rule)
    if isinstance(raw, bool):  # bool is an int subclass: True seconds is a typo
        raise _bad(source, raw, rule)
    number: float
    if isinstance(raw, str):
        text = raw.strip()
        try:
            number = int(text) if rule.kind is int else float(text)
        except ValueError:
            raise _bad(source, raw, rule) from None
    elif isinstance(raw, (int, float)):
        number = raw
    else:
        raise _bad(source, raw, rule)
    if rule.kind is int and not float(number).is_integer():
        raise _bad(source, raw, rule)
    if math.isnan(number) or math.isinf(number):
        raise _bad(source, raw, rule)
    if number < rule.minimum or (rule.strictly_positive and number <= rule.minimum):
        raise _bad(source, raw, rule)
    return int(number) if rule.kind is int else float(number)


def read_setting(key: str, raw: object) -> Any:
    """One ``GRACEFUL_*`` value read alone, as :meth:`Config.load` reads it; ConfigError names what is wrong.

    For those that report every refused variable at once (the system checks,
    ``graceful check``): a value read alone is not checked against the
    others (:meth:`Config.delay_problem`) nor against the budget.
    """
    name = _NAMES.get(key)
    if name is None:
        raise ConfigError(_unknown(key))
    return _parse(key, raw, _RULES[name])


def delay_problem(maximum: float, floor: float | None, quiet_period: float | None) -> tuple[str, str] | None:
    """The variable and the message when the adaptive delay's settings disagree with each other, else None.

    ``maximum`` is ``shutdown_delay``, ``floor`` ``shutdown_delay_min``.
    """
    if floor is not None and floor > maximum:
        return env_name("shutdown_delay_min"), (
            f"{env_name('shutdown_delay_min')}={floor:g} is not allowed: expected at most"
            f" {env_name('shutdown_delay')} ({maximum:g}), the adaptive delay's maximum"
        )
    if quiet_period is not None and floor is None:
        return env_name("quiet_period"), (
            f"{env_name('quiet_period')}={quiet_period:g} is not allowed without"
            f" {env_name('shutdown_delay_min')}: the quiet period ends only the adaptive delay"
            " (set the floor, or unset the quiet period)"
        )
    return None


def _unknown(key: str) -> str:
    return f"{key} is not a graceful setting: expected one of {', '.join(sorted(_NAMES))}"


@dataclasses.dataclass(frozen=True)
class Config:
    """Every graceful setting; all durations in seconds.

    ``shutdown_delay``: keep serving this long after SIGTERM while ``/readyz``
    fails, so load balancers and kube-proxy stop routing here first.
    With ``shutdown_delay_min`` set it is the adaptive delay's maximum.
    ``shutdown_delay_min``: the adaptive delay's floor (None, the default:
    the delay is fixed at ``shutdown_delay``). The delay then ends once the
    floor has passed and nothing arrived for ``quiet_period``, at the latest
    at ``shutdown_delay`` (:mod:`graceful.core.delay`).
    ``quiet_period``: the adaptive delay's quiet period (None, the default:
    derived from the traffic, :mod:`graceful.core.delay`); needs the floor.
    ``drain_timeout``: bound on waiting for in-flight requests.
    ``hook_timeout``: default bound on each pre-shutdown hook and cleanup task.
    ``send_retry_after``: after the delay keep listening and answer new requests
    ``429`` with ``Retry-After`` until drained, instead of closing the listeners.
    ``retry_after``: the ``Retry-After`` value (whole seconds) on those 429s.
    ``grace_period``: the orchestrator's budget (``terminationGracePeriodSeconds``,
    systemd ``TimeoutStopSec``); the whole shutdown must fit in it.
    ``max_in_flight``: per-process admission limit (0 = off); when full, new
    requests get ``429`` at once instead of queueing.
    ``expose_check_errors``: show a failing check's reason in ``?verbose``
    output (off: ``reason withheld``; the real error always goes to the log).
    ``health_bind``: the health port's address, such as ``0.0.0.0:8081``
    (:mod:`graceful.healthport.address` lists the forms): probes answered on
    it by a thread that never waits for the app. Empty (the default): off.
    ``report_file``: write the shutdown record (JSON, :mod:`graceful.core.record`)
    here at the end of every server shutdown (empty: not written); a server
    refuses to start when its directory does not exist.
    ``termination_log``: write a one-paragraph summary of the shutdown here
    when the file exists and is writable (Kubernetes' ``terminationMessagePath``;
    empty: never).
    ``metrics_on_app_port``: answer ``/metrics`` on the app's own port too
    (read when the middleware is built; off: only on the health port or in
    the user's own prometheus_client registry).

    Raises :class:`ConfigError` for any value out of range, and for an
    adaptive delay whose settings disagree (:meth:`delay_problem`); the budget
    is checked where a server starts (:meth:`check_budget`).
    """

    shutdown_delay: float = 5.0
    shutdown_delay_min: float | None = None
    quiet_period: float | None = None
    drain_timeout: float = 15.0
    hook_timeout: float = 5.0
    send_retry_after: bool = False
    retry_after: int = 5
    grace_period: float = 30.0
    max_in_flight: int = 0
    expose_check_errors: bool = False
    health_bind: str = ""
    report_file: str = ""
    termination_log: str = DEFAULT_TERMINATION_LOG
    metrics_on_app_port: bool = False

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = _parse(field.name, getattr(self, field.name), _RULES[field.name])
            object.__setattr__(self, field.name, value)
        problem = self.delay_problem()
        if problem is not None:
            raise ConfigError(problem[1])

    def delay_problem(self) -> tuple[str, str] | None:
        """The variable and the message when the adaptive delay's settings disagree, else None."""
        return delay_problem(self.shutdown_delay, self.shutdown_delay_min, self.quiet_period)

    @property
    def adaptive_delay(self) -> bool:
        """True when the delay is adaptive (``shutdown_delay_min`` set)."""
        return self.shutdown_delay_min is not None

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        mapping: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> Config:
        """Build a config from keyword arguments, then the environment, then ``mapping``.

        ``environ`` defaults to ``os.environ``; ``mapping`` is e.g. Flask's
        ``app.config`` (only its ``GRACEFUL_*`` keys are read). Unknown
        ``GRACEFUL_*`` names are an error, so a misspelt variable is not ignored.
        """
        environ = os.environ if environ is None else environ
        for source in (environ, mapping or {}):
            for key in source:
                if key.startswith("GRACEFUL_") and key not in _NAMES:
                    raise ConfigError(_unknown(key))
        values: dict[str, Any] = {}
        for name, rule in _RULES.items():
            key = env_name(name)
            if name in overrides:
                values[name] = _parse(name, overrides.pop(name), rule)
            elif key in environ:
                values[name] = _parse(key, environ[key], rule)
            elif mapping is not None and key in mapping:
                values[name] = _parse(key, mapping[key], rule)
        if overrides:
            raise TypeError(f"unknown graceful setting(s): {', '.join(sorted(overrides))}")
        return cls(**values)

    @property
    def health_address(self) -> HealthAddress | None:
        """``health_bind`` parsed; None when the health port is off."""
        return parse_address(env_name("health_bind"), self.health_bind)

    def server_differences(self, other: Config) -> list[str]:
        """The fields other than :data:`PER_PROCESS` on which ``other`` differs from this config, in order."""
        return [
            field.name
            for field in dataclasses.fields(self)
            if field.name not in PER_PROCESS and getattr(self, field.name) != getattr(other, field.name)
        ]

    def replace(self, **changes: Any) -> Config:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def budget(
        self,
        pre_shutdown_timeouts: Iterable[float] = (),
        cleanup_timeouts: Iterable[float] = (),
    ) -> Budget:
        """Return the shutdown budget (:class:`graceful.core.budget.Budget`) for these hook timeouts.

        With no hooks given, each hook term is ``hook_timeout`` (what a hook
        registered later would get by default).
        """
        return Budget(
            shutdown_delay=self.shutdown_delay,
            longest_pre_shutdown_hook=max(pre_shutdown_timeouts, default=self.hook_timeout),
            drain_timeout=self.drain_timeout,
            longest_cleanup_task=max(cleanup_timeouts, default=self.hook_timeout),
        )

    def check_budget(
        self,
        pre_shutdown_timeouts: Iterable[float] = (),
        cleanup_timeouts: Iterable[float] = (),
    ) -> None:
        """Raise :class:`ConfigError` when the shutdown cannot fit ``grace_period`` (:mod:`graceful.core.budget`)."""
        problem = self.budget(pre_shutdown_timeouts, cleanup_timeouts).overrun(self.grace_period)
        if problem is not None:
            raise ConfigError(problem)
