"""``settings.GRACEFUL``: a Django project's graceful settings.

::

    GRACEFUL = {"SHUTDOWN_DELAY": 10, "DRAIN_TIMEOUT": 20}

Keys are the :class:`graceful.Config` field names upper-cased: the
``GRACEFUL_*`` environment variables without their prefix. Sources, highest
precedence first, as for Flask's ``app.config``
(:mod:`graceful.core.config`): keyword arguments, ``GRACEFUL_*`` environment
variables, ``settings.GRACEFUL``, the defaults. A key is read as its
``GRACEFUL_*`` name, so an unknown key or a bad value gets graceful.Config's
own message with that name in it (``SHUTDOWN_DELAY`` is
``GRACEFUL_SHUTDOWN_DELAY``).

:func:`problems` lists every refused setting for the system checks
(:mod:`graceful.django.checks`); :func:`load_config` raises the first, as
the servers meet it at start-up.

Runs where the settings are read: in ``django.setup()`` (the main thread of
each process that imports Django), in the process that runs the system
checks and, with :mod:`graceful.django.conf`, in the Gunicorn master when its
config loads.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from graceful.core.config import Config, ConfigError, env_name, read_setting
from graceful.core.lifecycle import Lifecycle
from graceful.django.discover import SETTING, mapping
from graceful.gunicorn.adapter.refusal import WorkerRefused

__all__ = [
    "SETTING",
    "Problem",
    "ProblemKind",
    "SettingsError",
    "configure_lifecycle",
    "load_config",
    "mapping",
    "problems",
]

_PREFIX = env_name("")
#: Every GRACEFUL_* name graceful.Config reads.
_KNOWN = frozenset(env_name(field.name) for field in dataclasses.fields(Config))


class SettingsError(ConfigError, WorkerRefused, RuntimeError):
    """Refused graceful settings met while Django starts outside ``manage.py``: one line in each server.

    Its message is graceful.Config's own. It is each kind of error a server
    prints as one line without a traceback when it loads an app: ``graceful
    serve`` a :class:`graceful.ConfigError` (exit 2); a Gunicorn worker an
    ``AppImportError``, after which the master stops ("App failed to load",
    exit 4) instead of forking worker after worker; the Gunicorn master
    (``preload_app``) a ``RuntimeError`` (exit 1).
    """


class ProblemKind(enum.Enum):
    """What is wrong with a graceful setting; each kind has its system check id (graceful.django.checks)."""

    NOT_A_DICT = "settings.GRACEFUL is not a dict"
    UNKNOWN = "an unknown key or GRACEFUL_* variable"
    VALUE = "a value graceful refuses"
    BUDGET = "a shutdown budget that cannot fit the grace period"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One refused setting: its kind, where it was read, and graceful.Config's own message."""

    kind: ProblemKind
    #: Where it was read: ``settings.GRACEFUL['SHUTDOWN_DELY']``, ``GRACEFUL_SHUTDOWN_DELY`` (an
    #: environment variable), ``settings.GRACEFUL`` (not a dict); None for the budget, of every source.
    source: str | None
    message: str
    #: True when read from an environment variable.
    in_environment: bool = False


def load_config(environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
    """The config from ``overrides``, then ``environ`` (``os.environ``), then ``settings.GRACEFUL``.

    Raises :class:`graceful.ConfigError` for an unknown key or a refused
    value, and Django's ``ImproperlyConfigured`` when its settings are not
    configured (no ``DJANGO_SETTINGS_MODULE``).
    """
    return Config.load(environ, mapping=mapping(getattr(settings, SETTING, {})), **overrides)


def problems(environ: Mapping[str, str] | None = None) -> list[Problem]:
    """Every refused graceful setting, each with graceful.Config's message; empty when the config loads.

    Reads what :func:`load_config` reads, with the same precedence: each
    ``GRACEFUL_*`` variable of ``environ`` (``os.environ``), then each
    ``settings.GRACEFUL`` key the environment does not override (the
    environment's value wins: the key is not read). Only when every value
    passes, the whole config: its values together, then its budget. Any thread; reads, never configures.
    """
    environ = os.environ if environ is None else environ
    value = getattr(settings, SETTING, {})
    try:
        mapping(value)
    except ConfigError as exc:
        return [Problem(ProblemKind.NOT_A_DICT, f"settings.{SETTING}", str(exc))]
    found: list[Problem] = []
    for key, raw in environ.items():
        if key.startswith(_PREFIX):
            found += _read_alone(key, raw, key, in_environment=True)
    for setting, raw in value.items():
        key = _PREFIX + str(setting)
        if key not in environ:
            found += _read_alone(key, raw, f"settings.{SETTING}[{setting!r}]", in_environment=False)
    if found:
        return found
    try:
        config = load_config(environ)
    except ConfigError as exc:  # values that pass alone but not together (the adaptive delay's)
        return [Problem(ProblemKind.VALUE, None, str(exc))]
    try:
        config.check_budget()
    except ConfigError as exc:
        return [Problem(ProblemKind.BUDGET, None, str(exc))]
    return []


def _read_alone(key: str, raw: object, source: str, *, in_environment: bool) -> list[Problem]:
    """``key``'s one value (read at ``source``) as graceful.Config reads it: its problem, if any."""
    try:
        read_setting(key, raw)
    except ConfigError as exc:
        kind = ProblemKind.VALUE if key in _KNOWN else ProblemKind.UNKNOWN
        return [Problem(kind, source, str(exc), in_environment=in_environment)]
    return []


def configure_lifecycle(lifecycle: Lifecycle, environ: Mapping[str, str] | None = None) -> Config:
    """Configure ``lifecycle`` from :func:`load_config`; return the config.

    In a Gunicorn worker the master resolved the server's settings before any
    worker loaded Django, ``settings.GRACEFUL`` included
    (:mod:`graceful.gunicorn.config`); the worker refuses to boot, in one
    line, should this config differ from the master's on the server's
    settings.
    """
    config = load_config(environ)
    lifecycle.configure(config)
    return config
