"""A container's graceful settings: its ``GRACEFUL_*`` env, validated as graceful does at start-up.

Runs only in the ``graceful check`` command. The values are checked with
:class:`graceful.core.config.Config` itself, so the checker and the server
never disagree about what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from graceful.core.config import Config, ConfigError
from graceful.kubernetes.manifests import mapping, mappings

__all__ = ["Settings", "read_env", "runs_graceful", "settings", "startup_refusal"]

_RUNS_GRACEFUL = re.compile(r"graceful/conf\.py|python:graceful\.conf|-m\s+graceful\b")


class _UnbudgetedConfig(Config):
    """A :class:`Config` whose values are validated but whose budget is not.

    The checker compares the budget with the pod's own grace period, and asks
    :class:`Config` separately whether graceful would refuse to start (GC009).
    """

    def check_budget(
        self,
        pre_shutdown_timeouts: Iterable[float] = (),
        cleanup_timeouts: Iterable[float] = (),
    ) -> None:
        """Skip the start-up budget check; :func:`startup_refusal` runs the real one."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """The graceful settings of one container, as far as they can be read."""

    config: Config  # refused and unreadable values fall back to their defaults
    env: Mapping[str, str]  # the readable, accepted GRACEFUL_* values
    refused: tuple[tuple[str, str], ...]  # (variable, graceful's error message)
    unreadable: tuple[str, ...]  # what could not be read, in words


def _env_text(value: object) -> str:
    """Return an env value as the container would see it (YAML may have parsed it as a number)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def read_env(container: Mapping[str, Any]) -> tuple[dict[str, str], list[str], set[str]]:
    """Return the readable ``GRACEFUL_*``/``GUNICORN_CMD_ARGS`` values, what cannot be read, and every name.

    Later entries win, as in the kubelet. ``valueFrom``, ``envFrom`` and
    ``$(VAR)`` references are resolved only at run time: they are unknown here.
    """
    env = mappings(container.get("env"))
    entries = {entry["name"]: entry for entry in env if isinstance(entry.get("name"), str)}
    values: dict[str, str] = {}
    unreadable: list[str] = []
    for name, entry in entries.items():
        if not (name.startswith("GRACEFUL_") or name == "GUNICORN_CMD_ARGS"):
            continue
        text = _env_text(entry.get("value", ""))
        if "valueFrom" in entry:
            unreadable.append(f"{name} (valueFrom)")
        elif "$(" in text:
            unreadable.append(f"{name} (a $(VAR) reference)")
        else:
            values[name] = text
    unreadable.extend(_env_from(entry) for entry in mappings(container.get("envFrom")))
    return values, unreadable, set(entries)


def _env_from(entry: Mapping[str, Any]) -> str:
    """Describe an ``envFrom`` entry: ``envFrom configMapRef settings``."""
    for kind in ("configMapRef", "secretRef"):
        ref = mapping(entry.get(kind))
        if ref is not None:
            return f"envFrom {kind} {ref.get('name', '<unnamed>')!s}"
    return "envFrom"


def settings(values: Mapping[str, str], unreadable: Sequence[str]) -> Settings:
    """Validate each ``GRACEFUL_*`` value the way graceful does at start-up, one at a time.

    One at a time, so that every refused variable is reported, and the others
    still count when the budget is computed.
    """
    accepted: dict[str, str] = {}
    refused: list[tuple[str, str]] = []
    for name, value in values.items():
        if not name.startswith("GRACEFUL_"):
            continue
        try:
            _UnbudgetedConfig.load({name: value})
        except ConfigError as exc:
            refused.append((name, str(exc)))
        else:
            accepted[name] = value
    config = _UnbudgetedConfig.load(accepted)
    return Settings(config, accepted, tuple(refused), tuple(unreadable))


def startup_refusal(settings: Settings) -> str | None:
    """Return graceful's own start-up error for accepted values (the budget check), if any."""
    try:
        Config.load(settings.env)
    except ConfigError as exc:
        return str(exc)
    return None


def runs_graceful(argv: Sequence[str], env: Mapping[str, str], names: Iterable[str]) -> bool:
    """Tell whether a container runs graceful: a ``GRACEFUL_*`` variable, or graceful's Gunicorn config."""
    if any(name.startswith("GRACEFUL_") for name in names):
        return True
    return bool(_RUNS_GRACEFUL.search(" ".join(argv)) or _RUNS_GRACEFUL.search(env.get("GUNICORN_CMD_ARGS", "")))
