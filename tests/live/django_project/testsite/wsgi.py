"""WSGI config as `django-admin startproject` writes it: nothing graceful here.

Under `gunicorn -c python:graceful.conf` each worker wraps the app itself, and the master reads the
settings module named below.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testsite.settings")

application = get_wsgi_application()
