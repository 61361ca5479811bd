"""``settings.GRACEFUL``: a Django project's graceful settings.

::

    GRACEFUL = {"SHUTDOWN_DELAY": 10, "DRAIN_TIMEOUT": 20}

Keys are the :class:`graceful.Config` field names upper-cased: the
``GRACEFUL_*`` environment variables without their prefix. Sources, highest
precedence first, as for Flask's ``app.config``
(:mod:`graceful.core.config`): keyword arguments, ``GRACEFUL_*`` environment
variables, ``settings.GRACEFUL``, the defaults. A key is read as its
``GRACEFUL_*`` name, so an unknown key or a bad value raises
:class:`graceful.ConfigError` with that name in the message
(``SHUTDOWN_DELAY`` is ``GRACEFUL_SHUTDOWN_DELAY``).

Runs where the settings are read: in ``django.setup()`` (the main thread of
each process that imports Django) and, with :mod:`graceful.django.conf`, in
the Gunicorn master when its config loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from graceful.core.config import Config, ConfigError, env_name
from graceful.core.lifecycle import Lifecycle

__all__ = ["SETTING", "configure_lifecycle", "load_config", "mapping"]

#: The Django setting graceful reads.
SETTING = "GRACEFUL"

_PREFIX = env_name("")


def mapping(value: object) -> dict[str, Any]:
    """``settings.GRACEFUL``'s items under their ``GRACEFUL_*`` names; raise ConfigError if it is no dict."""
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"settings.{SETTING}={value!r} is not allowed: expected a dict of graceful settings,"
            " such as {'SHUTDOWN_DELAY': 5}"
        )
    return {_PREFIX + str(key): item for key, item in value.items()}


def load_config(environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
    """The config from ``overrides``, then ``environ`` (``os.environ``), then ``settings.GRACEFUL``.

    Raises :class:`graceful.ConfigError` for an unknown key or a refused
    value, and Django's ``ImproperlyConfigured`` when its settings are not
    configured (no ``DJANGO_SETTINGS_MODULE``).
    """
    return Config.load(environ, mapping=mapping(getattr(settings, SETTING, {})), **overrides)


def configure_lifecycle(lifecycle: Lifecycle, environ: Mapping[str, str] | None = None) -> Config:
    """Configure ``lifecycle`` from :func:`load_config`; return the config.

    In a Gunicorn worker (a lifecycle that does not run the pre-shutdown
    hooks: another process owns the server) the master chose its settings
    before any worker loaded Django; a ``settings.GRACEFUL`` that would change
    them raises :class:`graceful.ConfigError` naming the fix, rather than
    leaving the master on other values than the workers.
    """
    config = load_config(environ)
    if not lifecycle.run_pre_shutdown_hooks:
        _refuse_other_than_the_master(lifecycle.config, config)
    lifecycle.configure(config)
    return config


def _refuse_other_than_the_master(master: Config, ours: Config) -> None:
    differing = [
        field.name for field in dataclasses.fields(Config) if getattr(master, field.name) != getattr(ours, field.name)
    ]
    if not differing:
        return
    ours_text = ", ".join(f"{env_name(name)}={getattr(ours, name)!r}" for name in differing)
    master_text = ", ".join(f"{env_name(name)}={getattr(master, name)!r}" for name in differing)
    raise ConfigError(
        f"settings.{SETTING} gives {ours_text}, but the Gunicorn master runs with {master_text}: the master"
        " read its settings before any worker loaded Django; start Gunicorn with -c python:graceful.django.conf"
        f" (its master reads settings.{SETTING} too), or set these as environment variables"
    )
