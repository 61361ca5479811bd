"""An alias of :mod:`graceful.conf`, kept for configs written for graceful 0.2.

``gunicorn -c python:graceful.conf mysite.wsgi`` reads ``settings.GRACEFUL``
in the master now (:mod:`graceful.gunicorn.config`,
:mod:`graceful.django.discover`): from ``DJANGO_SETTINGS_MODULE``, or from
the generated ``wsgi.py`` that sets it. This module adds nothing to that;
importing it reads no setting and never exits.
"""

from __future__ import annotations

from graceful.gunicorn import hooks as _hooks
from graceful.gunicorn.hooks import *  # noqa: F403 -- Gunicorn looks the hooks up by name in this module

__all__ = _hooks.__all__
