"""The public API: what `import graceful` offers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import graceful
import graceful.core.default


class TestPublicApi:
    def test_all_is_sorted_and_importable(self) -> None:
        """Every name in graceful.__all__ exists, and the list is sorted."""
        assert graceful.__all__ == sorted(graceful.__all__)
        for name in graceful.__all__:
            assert hasattr(graceful, name), name

    def test_package_is_typed(self) -> None:
        """py.typed ships with the package, so type checkers use its hints."""
        assert (Path(graceful.__file__).parent / "py.typed").is_file()

    def test_decorators_register_on_the_default_lifecycle(self, default_lifecycle: graceful.Lifecycle) -> None:
        """graceful.readiness_check and friends register on the default lifecycle (this test's, see conftest)."""
        fresh = default_lifecycle
        assert graceful.default_lifecycle is fresh

        @graceful.readiness_check("db")
        def check() -> bool:
            return True

        graceful.cleanup_task("flush")(lambda: None)
        assert [h.name for h in fresh.registry.hooks("readiness check")] == ["db"]
        assert [h.name for h in fresh.registry.hooks("cleanup task")] == ["flush"]


class TestPublicPaths:
    """The documented import paths and commands keep working wherever the code behind them lives."""

    def test_gunicorn_config_module_exports_every_server_hook(self) -> None:
        """graceful.conf (``-c python:graceful.conf``, ``from graceful.conf import *``) has Gunicorn's hooks."""
        import graceful.conf
        import graceful.gunicorn.hooks

        expected = {
            "dirty_graceful_timeout",
            "graceful_timeout",
            "nworkers_changed",
            "on_exit",
            "on_reload",
            "on_starting",
            "post_fork",
            "post_worker_init",
            "pre_exec",
            "pre_fork",
            "pre_request",
            "when_ready",
            "worker_abort",
            "worker_exit",
        }
        assert set(graceful.conf.__all__) == expected
        for name in expected:
            assert getattr(graceful.conf, name) is getattr(graceful.gunicorn.hooks, name)

    def test_gunicorn_config_file_path_defines_the_hooks(self) -> None:
        """graceful/conf.py executed as a file (``-c graceful/conf.py``) leaves the hooks in its namespace."""
        path = Path(graceful.__file__).parent / "conf.py"
        namespace: dict[str, object] = {"__file__": str(path), "__name__": "__config__"}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        assert callable(namespace["on_starting"]) and callable(namespace["worker_exit"])
        assert isinstance(namespace["graceful_timeout"], int)

    def test_middleware_path(self) -> None:
        """graceful.middleware.GracefulMiddleware is the middleware graceful exports."""
        import graceful.middleware

        assert graceful.middleware.GracefulMiddleware is graceful.GracefulMiddleware
        assert graceful.middleware.path_prefixes is graceful.path_prefixes

    def test_flask_and_testing_paths(self) -> None:
        """graceful.flask.Graceful and graceful.testing's helpers import from their documented modules."""
        import graceful.flask
        import graceful.testing

        assert graceful.flask.Graceful.__name__ == "Graceful"
        assert graceful.testing.FakeClock.__name__ == "FakeClock"

    def test_python_dash_m_and_console_script(self, tmp_path: Path) -> None:
        """``python -m graceful --version`` and the ``graceful`` console script both answer."""
        from tests.conftest import ROOT

        env = dict(os.environ, PYTHONPATH=str(ROOT))
        module = subprocess.run(
            [sys.executable, "-m", "graceful", "--version"], capture_output=True, text=True, timeout=60, env=env
        )
        assert module.returncode == 0 and graceful.__version__ in module.stdout + module.stderr
        # The tests run where graceful is installed (tox installs it): the script is beside the interpreter.
        script = Path(sys.executable).parent / "graceful"
        result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0 and graceful.__version__ in result.stdout + result.stderr
