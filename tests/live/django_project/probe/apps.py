"""The test project's own app: registers a cleanup task in ready(), as a user would.

With ``GT_PG_PORT`` (PostgreSQL with Django's connection pool) it also names
this process's connections ``graceful-test-<pid>`` and, at the very end of
the process (``atexit``: after graceful's cleanup tasks, before the
interpreter tears modules down), counts them in ``pg_stat_activity`` from a
connection of its own, writing ``pg-<pid>`` in ``GT_MARKER_DIR``.
"""

from __future__ import annotations

import atexit
import json
import os
import time

from django.apps import AppConfig
from django.conf import settings

import graceful

#: How long the exit probe waits for the server to see this process's connections gone.
EXIT_PROBE_WAIT = 5.0


class ProbeConfig(AppConfig):
    name = "probe"

    def ready(self) -> None:
        if os.environ.get("GT_LONG_CLEANUP"):
            # Longer than the default GRACEFUL_GRACE_PERIOD allows: `manage.py check` and the servers refuse it.
            graceful.cleanup_task("slow-flush", timeout=25)(lambda: None)
        marker_dir = os.environ.get("GT_MARKER_DIR")
        if not marker_dir:
            return

        @graceful.cleanup_task("probe-marker", timeout=2)
        def marker() -> None:
            # One file per process; a second run in the same process would add a line.
            with open(os.path.join(marker_dir, str(os.getpid())), "a") as file:
                file.write("cleanup\n")

        if "GT_PG_PORT" in os.environ:
            # Here, in each worker: the Gunicorn master imported the settings module before forking.
            settings.DATABASES["default"]["OPTIONS"]["application_name"] = _connection_name()
            atexit.register(_count_connections_at_exit, marker_dir)


def _connection_name() -> str:
    return f"graceful-test-{os.getpid()}"


def _count_connections_at_exit(marker_dir: str) -> None:
    """Count this process's connections as the server sees them, until none is left (at most EXIT_PROBE_WAIT)."""
    import psycopg

    started = time.monotonic()
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    with psycopg.connect(
        host="127.0.0.1", port=os.environ["GT_PG_PORT"], user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        while True:
            row = conn.execute(query, [_connection_name()]).fetchone()
            left = row[0] if row else -1
            # A closed connection's backend leaves pg_stat_activity a moment after the close.
            if left == 0 or time.monotonic() - started > EXIT_PROBE_WAIT:
                break
            time.sleep(0.05)
    result = {"connections": left, "waited": round(time.monotonic() - started, 3)}
    with open(os.path.join(marker_dir, f"pg-{os.getpid()}"), "w") as file:
        json.dump(result, file)
