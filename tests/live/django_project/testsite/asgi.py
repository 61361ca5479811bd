"""ASGI config as `django-admin startproject` writes it, with graceful's get_asgi_application."""

import os

from graceful.django import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testsite.settings")

application = get_asgi_application()
