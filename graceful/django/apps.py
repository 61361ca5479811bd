"""The Django app ``graceful.django``: what happens when Django starts.

See :mod:`graceful.django` for the whole picture. Runs on the main thread of
each process that calls ``django.setup()``: under Gunicorn each worker (and
the master too with ``preload_app``), under ``graceful serve`` its one
process, and every ``manage.py`` command.
"""

from __future__ import annotations

from django.apps import AppConfig

from graceful.core import default as _default
from graceful.django import checks, database, settings

__all__ = ["GracefulConfig"]


class GracefulConfig(AppConfig):
    """``graceful.django``: settings, database checks, the connection cleanup and the system checks."""

    name = "graceful.django"
    label = "graceful"
    verbose_name = "graceful"

    def ready(self) -> None:
        """Configure ``graceful.default_lifecycle`` and register on it; raise ConfigError for refused settings.

        The lifecycle is the one the Gunicorn integration and ``graceful
        serve`` drive. Other apps register their own hooks and checks on it
        in their ``ready()``, with the usual decorators.
        """
        lifecycle = _default.default_lifecycle
        settings.configure_lifecycle(lifecycle)
        self.tracker = database.install(lifecycle)
        checks.register()
