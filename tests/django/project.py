"""The test Django project (tests/live/django_project) as the tests start it: paths and environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import LIVE, ROOT

PROJECT = LIVE / "django_project"
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
GRACEFUL = str(Path(sys.executable).with_name("graceful"))
#: The project's Gunicorn config: graceful.conf, whose master reads settings.GRACEFUL too.
DJANGO_CONF = "python:graceful.conf"


def hidden_settings_app(tmp_path: Path) -> str:
    """An app module (in ``tmp_path``, which must be on PYTHONPATH) that names its settings module in a way
    the master cannot read without running it; returns its Gunicorn app URI."""
    (tmp_path / "hidden_wsgi.py").write_text(
        "import os\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', '.'.join(['testsite', 'settings']))\n"
        "from django.core.wsgi import get_wsgi_application\n"
        "application = get_wsgi_application()\n"
    )
    return "hidden_wsgi:application"


def project_env(tmp_path: Path, graceful: dict[str, Any] | None = None, **extra: str) -> dict[str, str]:
    """The environment of one run: no GRACEFUL_* from outside, a fresh sqlite file, a marker folder."""
    (tmp_path / "db").mkdir(exist_ok=True)
    (tmp_path / "markers").mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
    env.update(
        PYTHONPATH=f"{ROOT}:{PROJECT}",
        PYTHONUNBUFFERED="1",
        DJANGO_SETTINGS_MODULE="testsite.settings",
        GT_DJANGO_DB=str(tmp_path / "db" / "db.sqlite3"),
        GT_MARKER_DIR=str(tmp_path / "markers"),
    )
    if graceful is not None:
        env["GT_GRACEFUL"] = json.dumps(graceful)
    env.update(extra)
    return env


def run(argv: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a command to its end in the project folder, output and errors merged."""
    return subprocess.run(
        argv, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python manage.py ARGS`` in the project."""
    return run([sys.executable, "manage.py", *args], env)
