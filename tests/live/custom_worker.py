"""A third-party Gunicorn worker class, as a user might write one: graceful must refuse it at boot."""

from __future__ import annotations

import time

from gunicorn.workers.base import Worker


class CustomWorker(Worker):  # type: ignore[misc]  # Gunicorn is untyped
    """Serves nothing; it must never even be forked (``-k tests.live.custom_worker.CustomWorker``)."""

    def run(self) -> None:
        while self.alive:
            self.notify()
            time.sleep(1.0)
