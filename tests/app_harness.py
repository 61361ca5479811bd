"""A framework's own app under the zero-loss harness: a Django project, Flask's tutorial app.

tests/e2e_harness.py's :class:`~tests.e2e_harness.Gunicorn` serves
tests/live/load_app.py; :class:`AppGunicorn` serves any app that answers
``/fast`` and ``/slow`` the same way (tests/live/django_project,
tests/live/flaskr), with the Gunicorn config and import path it needs.
:func:`tests.e2e_harness.sigterm_under_load` runs the direct-SIGTERM scenario
on such an instance.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import ROOT
from tests.e2e_harness import WORKERS, Gunicorn, Starter
from tests.gunicorn.test_gunicorn import _has_control_socket


class AppGunicorn(Gunicorn):
    """``gunicorn -c CONFIG APP`` with ``path`` importable, on 127.0.0.1:``port``."""

    def __init__(
        self,
        starter: Starter,
        port: int,
        worker_class: str,
        *,
        app: str,
        config: str,
        path: Sequence[Path] = (),
        env: dict[str, str] | None = None,
        name: str = "app",
    ) -> None:
        full_env = dict(env or {})
        full_env["PYTHONPATH"] = ":".join([str(ROOT), *(str(p) for p in path)])
        super().__init__(starter, port, worker_class, graceful=True, env=full_env, name=name)
        self.app = app
        self.config = config

    def argv(self) -> list[str]:
        """The command line: this app and config instead of load_app's."""
        argv = [sys.executable, "-m", "gunicorn", "-c", self.config, "-b", f"127.0.0.1:{self.port}"]
        argv += WORKERS[self.worker_class]
        if _has_control_socket():  # one per instance would share a path
            argv.append("--no-control-socket")
        return [*argv, self.app]
