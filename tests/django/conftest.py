"""Django for the tests of graceful.django: configured once per session, with sqlite databases.

``graceful.django`` itself is not in INSTALLED_APPS here: its ``ready()``
configures ``graceful.default_lifecycle`` of the process it runs in, so the
tests that need it run Django in a subprocess or under Gunicorn; here the
modules are tested with lifecycles of their own.
"""

from __future__ import annotations

from pathlib import Path

import django
import pytest
from django.conf import settings

#: A database alias whose folder does not exist: every connection to it fails.
UNREACHABLE = "unreachable"


@pytest.fixture(scope="session", autouse=True)
def django_settings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Configure Django once (two reachable sqlite files, one unreachable); return the databases' folder."""
    folder = tmp_path_factory.mktemp("django-db")
    if not settings.configured:
        settings.configure(
            DATABASES={
                "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(folder / "default.sqlite3")},
                "other": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(folder / "other.sqlite3")},
                UNREACHABLE: {"ENGINE": "django.db.backends.sqlite3", "NAME": str(folder / "gone" / "x.sqlite3")},
            },
            INSTALLED_APPS=[],
            USE_TZ=True,
        )
        django.setup()
    return folder
