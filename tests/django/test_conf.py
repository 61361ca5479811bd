"""graceful.django.conf, an alias of graceful.conf; and how a Gunicorn master finds a Django project's settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graceful.core.config import ConfigError
from graceful.django.discover import find_settings, mapping
from tests.django.project import PROJECT, project_env

PROBE = """
import json
import graceful.django.conf as conf
import graceful, graceful.conf
print(json.dumps({
    "same_hooks": conf.__all__ == graceful.conf.__all__
        and all(getattr(conf, name) is getattr(graceful.conf, name) for name in conf.__all__),
    "configured": graceful.default_lifecycle.configured,
    "graceful_timeout": conf.graceful_timeout,
    "settings_imported": "testsite.settings" in __import__("sys").modules,
}))
"""


class TestAlias:
    def test_it_is_graceful_conf_and_reads_nothing_at_import(self, tmp_path: Path) -> None:
        """Same hooks as graceful.conf; importing it reads no setting (graceful_timeout: derive it in on_starting)."""
        env = project_env(tmp_path, {"SHUTDOWN_DELY": 2})  # a bad key: nothing at import may read it
        out = subprocess.run(
            [sys.executable, "-c", PROBE], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {
            "same_hooks": True,
            "configured": False,
            "graceful_timeout": 0,
            "settings_imported": False,
        }


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on sys.path, for projects the tests write."""
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


class TestFindSettings:
    def test_the_environment_names_it_first(self, on_path: Path) -> None:
        """DJANGO_SETTINGS_MODULE wins over what wsgi.py says."""
        write(on_path / "site1" / "wsgi.py", "import os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'a.b')\n")
        found = find_settings("site1.wsgi:application", {"DJANGO_SETTINGS_MODULE": "x.settings"})
        assert found is not None
        assert (found.module, found.found_in) == ("x.settings", "DJANGO_SETTINGS_MODULE")

    @pytest.mark.parametrize(
        "line",
        [
            'os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site2.settings")',
            "os.environ['DJANGO_SETTINGS_MODULE'] = 'site2.settings'",
            'environ.setdefault("DJANGO_SETTINGS_MODULE", "site2.settings")',
        ],
        ids=["setdefault", "assignment", "bare-environ"],
    )
    def test_wsgi_py_names_it_as_generated(self, on_path: Path, line: str) -> None:
        """The literal wsgi.py sets is found by reading the file, which is never run."""
        path = write(on_path / "site2" / "wsgi.py", f"import os\nfrom os import environ\n{line}\nraise SystemExit(9)\n")
        found = find_settings("site2.wsgi:application", {})
        assert found is not None
        assert (found.module, found.found_in) == ("site2.settings", f"DJANGO_SETTINGS_MODULE in {path}")
        assert "site2" not in sys.modules and "site2.wsgi" not in sys.modules

    def test_a_package_init_is_never_run(self, on_path: Path) -> None:
        """Finding site3/wsgi.py does not import site3 (whose __init__ might start anything)."""
        write(on_path / "site3" / "__init__.py", "raise SystemExit('imported')\n")
        write(
            on_path / "site3" / "wsgi.py", "import os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 's3.settings')\n"
        )
        found = find_settings("site3.wsgi", {})
        assert found is not None and found.module == "s3.settings"

    @pytest.mark.parametrize(
        ("uri", "text"),
        [
            ("plain:app", "app = object()\n"),
            ("computed:app", "import os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'a' + '.settings')\n"),
            ("broken:app", "def (:\n"),
            ("missing.module:app", None),
            ("not a module:app", None),
            ("factory:create_app()", "def create_app(): ...\n"),
        ],
        ids=["not-django", "computed-name", "syntax-error", "missing", "not-an-identifier", "factory"],
    )
    def test_nothing_found_is_none(self, on_path: Path, uri: str, text: str | None) -> None:
        """No literal to read (or no file): None, never an error (the worker's import says what is wrong)."""
        if text is not None:
            write(on_path / (uri.partition(":")[0] + ".py"), text)
        assert find_settings(uri, {}) is None


class TestGracefulSetting:
    def test_the_settings_graceful_dict_under_graceful_names(self, on_path: Path) -> None:
        """settings.GRACEFUL's keys come back as GRACEFUL_* names, values untouched."""
        write(on_path / "site4" / "settings.py", "GRACEFUL = {'SHUTDOWN_DELAY': 2, 'HEALTH_BIND': ':8081'}\n")
        found = find_settings("x", {"DJANGO_SETTINGS_MODULE": "site4.settings"})
        assert found is not None
        assert found.graceful() == {"GRACEFUL_SHUTDOWN_DELAY": 2, "GRACEFUL_HEALTH_BIND": ":8081"}

    def test_no_graceful_setting_is_empty(self, on_path: Path) -> None:
        """A project without GRACEFUL: nothing to add to the environment's settings."""
        write(on_path / "site5" / "settings.py", "DEBUG = True\n")
        found = find_settings("x", {"DJANGO_SETTINGS_MODULE": "site5.settings"})
        assert found is not None and found.graceful() == {}

    def test_a_settings_module_that_fails_is_one_line(self, on_path: Path) -> None:
        """Its import error becomes one ConfigError line naming the module, where it was named, and the error."""
        write(on_path / "site6" / "settings.py", "raise RuntimeError('no SECRET_KEY')\n")
        found = find_settings("x", {"DJANGO_SETTINGS_MODULE": "site6.settings"})
        assert found is not None
        with pytest.raises(ConfigError) as refused:
            found.graceful()
        assert str(refused.value) == (
            "cannot read settings.GRACEFUL: importing site6.settings (DJANGO_SETTINGS_MODULE) failed:"
            " RuntimeError: no SECRET_KEY"
        )

    def test_anything_but_a_dict_is_refused(self) -> None:
        """settings.GRACEFUL must be a dict: the message names it and shows the expected form."""
        with pytest.raises(ConfigError, match=r"settings.GRACEFUL='SHUTDOWN_DELAY=5' is not allowed: expected a dict"):
            mapping("SHUTDOWN_DELAY=5")
