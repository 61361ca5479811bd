"""Gunicorn config of the example Django project: graceful's, with settings.GRACEFUL read by the master.

cd examples/django && gunicorn -c gunicorn_conf.py mysite.wsgi
"""

from __future__ import annotations

import os

# graceful.django.conf reads the project's settings in the master, before any worker loads Django.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

from graceful.django.conf import *  # noqa: F403

bind = os.environ.get("BIND", "0.0.0.0:8000")
workers = 2
worker_class = "gthread"
threads = 4
