"""Settings of the example Django project: production-like (DEBUG off), sqlite, graceful installed.

Only what the example needs; see Django's deployment checklist for the rest.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-change-me")
DEBUG = False
# Probes carry the pod IP as Host: graceful answers /livez, /readyz and /healthz before
# Django sees them, so ALLOWED_HOSTS lists the real names only.
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")

INSTALLED_APPS = [
    "graceful.django",  # settings.GRACEFUL, a readiness check per database, closing connections at exit
    "notes",
]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "mysite.urls"
WSGI_APPLICATION = "mysite.wsgi.application"
ASGI_APPLICATION = "mysite.asgi.application"  # graceful.django.get_asgi_application(): mysite/asgi.py
USE_TZ = True

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_DB", str(BASE_DIR / "db.sqlite3")),
        "CONN_MAX_AGE": 60,  # persistent: graceful's cleanup task closes them as each worker exits
    }
}

# graceful's settings (keys: the GRACEFUL_* names without the prefix). GRACEFUL_* environment
# variables beat them: kubernetes.yaml sets the same values as variables, so that `graceful check`
# sees what the pods run (a test keeps the two equal); these apply where none is set (a local
# Gunicorn, `graceful serve mysite.wsgi`).
GRACEFUL = {
    "SHUTDOWN_DELAY": 5,
    "DRAIN_TIMEOUT": 20,
    "HOOK_TIMEOUT": 4,
    "GRACE_PERIOD": 30,
}
