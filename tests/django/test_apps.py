"""graceful.django as an installed app: what django.setup() does, `manage.py check`, and what is never imported."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT
from tests.django.project import GRACEFUL, manage, project_env, run
from tests.e2e_harness import free_port


def python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with the repository importable."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


class TestImport:
    def test_importing_graceful_imports_no_django(self) -> None:
        """graceful, its Gunicorn config, the Flask wing and graceful.django itself load no django module."""
        out = python(
            """
            import sys
            import graceful, graceful.conf, graceful.flask, graceful.serve.server, graceful.django
            print(sorted(name for name in sys.modules if name.split('.')[0] == 'django'))
            """
        )
        assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr


class TestGracefulConfig:
    def test_setup_configures_the_default_lifecycle_and_registers(self) -> None:
        """django.setup() configures graceful.default_lifecycle from settings.GRACEFUL and registers on it."""
        out = python(
            """
            import json, django
            from django.conf import settings
            settings.configure(
                INSTALLED_APPS=["graceful.django"],
                DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
                GRACEFUL={"SHUTDOWN_DELAY": 2, "MAX_IN_FLIGHT": 4},
            )
            django.setup()
            from django.apps import apps
            from django.core import checks
            import graceful
            from graceful.core.registry import CLEANUP_TASK, READINESS_CHECK
            lifecycle = graceful.default_lifecycle
            print(json.dumps({
                "name": apps.get_app_config("graceful").name,
                "config": [lifecycle.config.shutdown_delay, lifecycle.config.max_in_flight],
                "readiness": [h.name for h in lifecycle.registry.hooks(READINESS_CHECK)],
                "cleanup": [h.name for h in lifecycle.registry.hooks(CLEANUP_TASK)],
                "tagged": "graceful" in checks.registry.registry.tags_available(),
            }))
            """
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {
            "name": "graceful.django",
            "config": [2.0, 4],
            "readiness": ["django-db-default"],
            "cleanup": ["django-db-connections"],
            "tagged": True,
        }


def serve_error(env: dict[str, str]) -> str:
    """What `graceful serve` of the project says when it refuses to start (exit 2, one line)."""
    out = run([GRACEFUL, "serve", "testsite.wsgi", "--bind", "127.0.0.1:0"], env)
    assert out.returncode == 2, out.stdout
    (line,) = out.stdout.splitlines()
    prefix = "graceful serve: error: "
    assert line.startswith(prefix), line
    return line[len(prefix) :]


def check_and_serve(env: dict[str, str]) -> tuple[list[str], str]:
    """``manage.py check``'s output lines (it must exit 1, without a traceback) and `graceful serve`'s one line."""
    out = manage(env, "check")
    assert out.returncode == 1, out.stdout
    assert "Traceback" not in out.stdout
    return out.stdout.splitlines(), serve_error(env)


class TestManagePyCheck:
    def test_a_fitting_budget_passes(self, tmp_path: Path) -> None:
        """The project as it is: no issue."""
        out = manage(project_env(tmp_path), "check")
        assert out.returncode == 0, out.stdout
        assert out.stdout.strip() == "System check identified no issues (0 silenced)."

    def test_a_cleanup_task_too_long_is_graceful_e001_with_the_start_up_message(self, tmp_path: Path) -> None:
        """A 25 s cleanup task in an app's ready(): graceful.E001, with the text graceful serve stops with."""
        lines, message = check_and_serve(project_env(tmp_path, GT_LONG_CLEANUP="1"))
        assert message.startswith("graceful shutdown does not fit GRACEFUL_GRACE_PERIOD")
        assert f"?: (graceful.E001) {message}" in lines

    def test_an_unknown_key_is_graceful_e003_with_the_start_up_message_and_no_traceback(self, tmp_path: Path) -> None:
        """A misspelt GRACEFUL key: check exits 1 with graceful.E003 naming the key, in serve's words, no traceback."""
        lines, message = check_and_serve(project_env(tmp_path, {"SHUTDOWN_DELY": 1}))
        assert message.startswith("GRACEFUL_SHUTDOWN_DELY is not a graceful setting")
        assert f"settings.GRACEFUL['SHUTDOWN_DELY']: (graceful.E003) {message}" in lines

    def test_every_refused_setting_is_listed(self, tmp_path: Path) -> None:
        """An unknown key, a bad value and a bad GRACEFUL_* variable: three errors in one run, exit 1."""
        env = project_env(tmp_path, {"SHUTDOWN_DELY": 1, "DRAIN_TIMEOUT": -1}, GRACEFUL_RETRY_AFTER="soon")
        out = manage(env, "check")
        assert out.returncode == 1
        ids = re.findall(r"^(\S+): \((graceful\.E\d+)\) ", out.stdout, re.MULTILINE)
        assert sorted(ids) == [
            ("GRACEFUL_RETRY_AFTER", "graceful.E004"),
            ("settings.GRACEFUL['DRAIN_TIMEOUT']", "graceful.E004"),
            ("settings.GRACEFUL['SHUTDOWN_DELY']", "graceful.E003"),
        ]
        assert "System check identified 3 issues" in out.stdout
        assert "Traceback" not in out.stdout

    def test_a_budget_the_settings_cannot_fit_is_graceful_e001(self, tmp_path: Path) -> None:
        """SHUTDOWN_DELAY 25 in a GRACE_PERIOD of 10: graceful.E001 with the budget's message, as serve says it."""
        lines, message = check_and_serve(project_env(tmp_path, {"SHUTDOWN_DELAY": 25, "GRACE_PERIOD": 10}))
        assert message.startswith("graceful shutdown does not fit GRACEFUL_GRACE_PERIOD: max(shutdown_delay 25s")
        assert f"?: (graceful.E001) {message}" in lines

    def test_commands_that_skip_the_checks_still_run(self, tmp_path: Path) -> None:
        """A command without checks (diffsettings) runs with refused settings: only servers must not."""
        out = manage(project_env(tmp_path, {"SHUTDOWN_DELY": 1}), "diffsettings")
        assert out.returncode == 0, out.stdout
        assert "GRACEFUL = {'SHUTDOWN_DELY': 1}" in out.stdout

    def test_runserver_stops_at_its_checks_without_a_traceback(self, tmp_path: Path) -> None:
        """runserver (no autoreloader) runs the checks first: exit 1 with graceful.E003, no traceback, never serves."""
        env = project_env(tmp_path, {"SHUTDOWN_DELY": 1})
        out = manage(env, "runserver", "--noreload", f"127.0.0.1:{free_port()}")
        assert out.returncode == 1
        assert "SystemCheckError: System check identified some issues" in out.stdout
        assert "(graceful.E003) GRACEFUL_SHUTDOWN_DELY is not a graceful setting" in out.stdout
        assert "Traceback" not in out.stdout
        assert "Starting development server" not in out.stdout


class TestOutsideManagePy:
    def test_django_setup_raises_one_error_every_server_prints_as_one_line(self) -> None:
        """django.setup() in a script refuses a misspelt key: a ConfigError, an AppImportError, a RuntimeError."""
        out = python(
            """
            import django
            from django.conf import settings
            from gunicorn.errors import AppImportError
            from graceful import ConfigError
            settings.configure(INSTALLED_APPS=["graceful.django"], DATABASES={}, GRACEFUL={"SHUTDOWN_DELY": 1})
            try:
                django.setup()
            except ConfigError as exc:
                print(isinstance(exc, AppImportError), isinstance(exc, RuntimeError), exc)
            """
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("True True GRACEFUL_SHUTDOWN_DELY is not a graceful setting: expected one of ")
