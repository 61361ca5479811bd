"""Gunicorn config for a Django project: :mod:`graceful.conf`, with ``settings.GRACEFUL`` read in the master.

::

    DJANGO_SETTINGS_MODULE=mysite.settings gunicorn -c python:graceful.django.conf mysite.wsgi

or compose it with your own config, as with ``graceful.conf``::

    import os
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
    from graceful.django.conf import *

The master runs the shutdown delay and the pre-shutdown hooks and derives
``graceful_timeout`` when its config loads, before any worker imports
Django; so this module reads the project's settings (the settings module
only: no ``django.setup()``, no app, no database) and configures
``graceful.default_lifecycle`` with them first, then takes every hook of
:mod:`graceful.conf`. The workers, forked with that config, load Django and
find the same values. Plain ``-c python:graceful.conf`` works as well when
every graceful setting comes from ``GRACEFUL_*`` environment variables; a
``settings.GRACEFUL`` that would change the master's values then stops the
workers at boot, saying so.

The master imports the settings module once, here, and every worker it
forks inherits it, also after a HUP: a change to the settings needs a
restart (with plain Gunicorn a HUP would reload them in the new workers).

Runs in the Gunicorn master, main thread, when Gunicorn reads its config. A
missing ``DJANGO_SETTINGS_MODULE`` or a refused setting exits with one line.
"""

from __future__ import annotations

import sys

from django.core.exceptions import ImproperlyConfigured

from graceful.core.config import ConfigError
from graceful.core.default import default_lifecycle
from graceful.django.settings import load_config

if "graceful.gunicorn.hooks" in sys.modules:
    # Its graceful_timeout was derived from the config without the settings: too late to read them.
    sys.exit("graceful: import graceful.django.conf instead of graceful.conf, not after it")

try:
    default_lifecycle.configure(load_config())
except (ConfigError, ImproperlyConfigured) as _error:
    # Gunicorn prints a traceback for any other exception while reading a config.
    sys.exit(f"graceful: {_error}")

# Only now: graceful.gunicorn.hooks derives graceful_timeout from the config when imported.
from graceful.gunicorn import hooks as _hooks
from graceful.gunicorn.hooks import *  # noqa: F403 -- Gunicorn looks the hooks up by name in this module

__all__ = _hooks.__all__
