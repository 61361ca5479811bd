"""The Django app ``graceful.django``: what happens when Django starts.

See :mod:`graceful.django` for the whole picture. Runs on the main thread of
each process that calls ``django.setup()``: under Gunicorn each worker (and
the master too with ``preload_app``), under ``graceful serve`` its one
process, and every ``manage.py`` command.

Refused settings: under ``manage.py`` (and ``django-admin``) the system
checks report them (:mod:`graceful.django.checks`: ``manage.py check``,
``runserver``, ``migrate``, every command that runs the checks, exit status
1); the lifecycle is left unconfigured, as no server drives it there (a
command that skips the checks runs: ``shell``, ``runserver --skip-checks``,
which has no shutdown timeline anyway). Any
other process that sets Django up is one that serves (a Gunicorn worker or
master, ``graceful serve``, another WSGI server) or one that skips the checks
(a script, a task queue worker): it must not run with half of its settings,
so ``ready()`` stops it with :class:`graceful.django.settings.SettingsError`,
which each server prints as one line.
"""

from __future__ import annotations

import inspect

from django.apps import AppConfig

from graceful.core import default as _default
from graceful.core.config import ConfigError
from graceful.django import checks, database, settings

__all__ = ["GracefulConfig"]


class GracefulConfig(AppConfig):
    """``graceful.django``: settings, database checks, the connection cleanup and the system checks."""

    name = "graceful.django"
    label = "graceful"
    verbose_name = "graceful"

    def ready(self) -> None:
        """Configure ``graceful.default_lifecycle`` and register on it; refused settings: see the module.

        The lifecycle is the one the Gunicorn integration and ``graceful
        serve`` drive. Other apps register their own hooks and checks on it
        in their ``ready()``, with the usual decorators. Raises
        :class:`graceful.django.settings.SettingsError` outside ``manage.py``
        when the settings are refused.
        """
        lifecycle = _default.default_lifecycle
        try:
            settings.configure_lifecycle(lifecycle)
        except ConfigError as error:
            if not _set_up_by_manage_py():
                raise settings.SettingsError(str(error)) from None
        self.tracker = database.install(lifecycle)
        checks.register()


def _set_up_by_manage_py() -> bool:
    """True when ``manage.py`` or ``django-admin`` (``ManagementUtility.execute``) is setting Django up.

    Django says so nowhere else: the command's own frame is on the stack.
    Imported here: only refused settings need it, and a server imports no
    management machinery.
    """
    from django.core.management import ManagementUtility

    execute = ManagementUtility.execute.__code__
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code is execute:
            return True
        frame = frame.f_back
    return False
