"""A framework's own app under the zero-loss harness: a Django project, Flask's tutorial app.

tests/e2e_harness.py's :class:`~tests.e2e_harness.Gunicorn` serves
tests/live/load_app.py; :class:`AppGunicorn` serves any app that answers
``/fast`` and ``/slow`` the same way (tests/live/django_project,
tests/live/flaskr), with the Gunicorn config and import path it needs.
:func:`sigterm_under_load` is the harness's direct-SIGTERM scenario for such an
instance, bounded like it (the load generator's own bounds, the exit wait).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import ROOT
from tests.e2e_harness import DIRECT, WORKERS, Gunicorn, LoadGenerator, Run, Starter, Termination
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


def sigterm_under_load(
    instance: Gunicorn,
    *,
    shutdown_delay: float,
    clients: int = 12,
    warm_up: float = 1.5,
    long_ms: int = 1500,
) -> Run:
    """``instance`` (started and ready) under load; SIGTERM; the load goes on until it exits.

    As :func:`tests.e2e_harness.direct_sigterm`: half a second before the
    delay ends two ``/slow`` requests of ``long_ms`` start, so the drain has
    work when the listeners close and the workers stop.
    """
    load = LoadGenerator(instance.url, clients=clients, duration=shutdown_delay + 30).start()
    started_at = time.monotonic()
    try:
        time.sleep(warm_up)
        sigterm_at = instance.terminate()
        time.sleep(max(0.0, shutdown_delay - 0.5))
        for _ in range(2):
            load.one_off(f"/slow?ms={long_ms}&bytes={load.slow_bytes}", load.slow_bytes)
        returncode = instance.wait_exit(timeout=shutdown_delay + 30)
    finally:
        records = load.stop()
    assert instance.exited_at is not None
    term = Termination(instance.name, instance.pid, sigterm_at, instance.exited_at, returncode)
    return Run(
        DIRECT,
        instance.worker_class,
        True,
        records,
        [term],
        started_at,
        time.monotonic(),
        [instance.log(40)],
        shutdown_delay,
    )


def assert_nothing_lost(run: Run, delay_edge: float = 0.1) -> None:
    """Exit 0; every request in flight at SIGTERM, sent during the delay, or long past it, succeeded."""
    assert run.terminations[0].returncode == 0, run.describe()
    in_flight = run.in_flight_at_sigterm()
    assert in_flight, "no request was in flight at SIGTERM"
    assert all(r.ok for r in in_flight), run.describe(in_flight)
    during = run.sent_during_delay(delay_edge)
    assert len(during) > 20, "too few requests sent during the delay to tell"
    assert all(r.ok for r in during), run.describe(during)
    long = [r for r in run.records if r.client == -1]
    assert len(long) == 2 and all(r.ok for r in long), run.describe(long)
    assert all(r.ended > run.terminations[0].sigterm_at + run.delay_window for r in long)
