"""Gunicorn config of the example Django project: graceful's, plus this project's own Gunicorn settings.

cd examples/django && gunicorn -c gunicorn_conf.py mysite.wsgi

The master reads settings.GRACEFUL itself in on_starting, from the settings module mysite/wsgi.py names.
"""

from __future__ import annotations

import os

from graceful.conf import *  # noqa: F403

bind = os.environ.get("BIND", "0.0.0.0:8000")
workers = 2
worker_class = "gthread"
threads = 4
