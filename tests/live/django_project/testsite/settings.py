"""A small production-like Django project for the end-to-end tests (DEBUG off, sqlite).

Read from the environment, so each test shapes its own run:

``GT_DJANGO_DB``        the sqlite file (its folder can be moved away to make the database unreachable)
``GT_GRACEFUL``         settings.GRACEFUL as JSON (default: no GRACEFUL setting)
``GT_MARKER_DIR``       where the probe app's cleanup task writes one file per worker pid
``GT_CONN_MAX_AGE``     CONN_MAX_AGE (default 60: persistent connections, for the cleanup task to close)
``GT_PG_PORT``          instead of sqlite, PostgreSQL on 127.0.0.1 at this port (user postgres, trust), with
                        Django's connection pool (Django 5.1+, psycopg[pool]); the probe app names each
                        worker's connections and counts them at its exit (tests/django/test_pools.py)
"""

from __future__ import annotations

import json
import os

SECRET_KEY = "graceful-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["graceful.django", "probe"]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "testsite.urls"
WSGI_APPLICATION = "testsite.wsgi.application"
USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("GT_DJANGO_DB", "/nonexistent/graceful-tests/db.sqlite3"),
        "CONN_MAX_AGE": int(os.environ.get("GT_CONN_MAX_AGE", "60")),
    }
}
if "GT_GRACEFUL" in os.environ:
    GRACEFUL = json.loads(os.environ["GT_GRACEFUL"])
if "GT_PG_PORT" in os.environ:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": os.environ["GT_PG_PORT"],
            # A pool keeps no connection per request thread: CONN_MAX_AGE must be 0.
            "CONN_MAX_AGE": 0,
            "OPTIONS": {"pool": {"min_size": 2, "max_size": 4, "timeout": 10}},
        }
    }
