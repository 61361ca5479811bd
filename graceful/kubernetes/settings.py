"""A container's graceful settings: its ``GRACEFUL_*`` env, validated as graceful does at start-up.

The values are checked with :class:`graceful.core.config.Config` itself, so
the checker and the server never disagree about what is allowed; the budget
is :meth:`Config.budget`, never recomputed here.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from graceful.core.config import Config, ConfigError, delay_problem, env_name, read_setting
from graceful.kubernetes.manifests import Container

__all__ = ["HEALTH_BIND", "Settings", "health_port"]

_DEFAULTS = Config()

#: The variable that moves probes to their own port (the health port issue); read by GC016.
HEALTH_BIND = "GRACEFUL_HEALTH_BIND"


@dataclasses.dataclass(frozen=True)
class Settings:
    """The graceful settings of one container, as far as they can be read."""

    config: Config  # refused and unreadable values fall back to their defaults
    env: Mapping[str, str]  # the readable, accepted GRACEFUL_* values
    refused: tuple[tuple[str, str], ...]  # (variable, graceful's error message)
    unreadable: tuple[str, ...]  # what could not be read, in words
    startup_refusal: str | None  # graceful's own start-up error for the accepted values (its budget check)

    @classmethod
    def of(cls, container: Container) -> Settings:
        """Validate each literal ``GRACEFUL_*`` value of a container the way graceful does, one at a time.

        One at a time, so that every refused variable is reported, and the
        others still count when the budget is computed. ``valueFrom``,
        ``envFrom`` and ``$(VAR)`` references are resolved only at run time:
        they are listed as unreadable and graceful's defaults are assumed.
        """
        accepted: dict[str, str] = {}
        parsed: dict[str, Any] = {}  # the accepted values, as graceful reads them
        refused: list[tuple[str, str]] = []
        unreadable: list[str] = []
        for name, value in container.env.items():
            if not name.startswith("GRACEFUL_"):
                continue
            if value is None:
                unreadable.append(f"{name} (valueFrom)")
                continue
            if "$(" in value:
                unreadable.append(f"{name} (a $(VAR) reference)")
                continue
            try:
                parsed[name] = read_setting(name, value)
            except ConfigError as exc:
                refused.append((name, str(exc)))
            else:
                accepted[name] = value
        unreadable.extend(container.env_from)
        # The floor against the maximum, the quiet period against the floor: together, as graceful reads them.
        # Refusing the floor can leave a quiet period without one: look again (each look drops a variable).
        while (problem := _delay_problem(parsed)) is not None:
            refused.append(problem)
            del accepted[problem[0]], parsed[problem[0]]
        config = Config.load(accepted)
        try:
            config.check_budget()
        except ConfigError as exc:
            refusal: str | None = str(exc)
        else:
            refusal = None
        return cls(config, accepted, tuple(refused), tuple(unreadable), refusal)


def _delay_problem(parsed: Mapping[str, Any]) -> tuple[str, str] | None:
    """The adaptive delay's settings that disagree, of values that each passed alone (defaults for the unset)."""

    def value(name: str) -> Any:
        return parsed.get(env_name(name), getattr(_DEFAULTS, name))

    return delay_problem(value("shutdown_delay"), value("shutdown_delay_min"), value("quiet_period"))


def health_port(container: Container) -> int | None:
    """Return the port of ``GRACEFUL_HEALTH_BIND`` (``host:port``, ``[::]:port`` or a port alone), if set."""
    value = container.env_text(HEALTH_BIND).strip()
    port = value.rpartition(":")[2] if ":" in value else value
    return int(port) if port.isdecimal() and len(port) <= 5 and 0 < int(port) <= 65535 else None
