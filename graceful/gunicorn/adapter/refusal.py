"""The error a Gunicorn worker's boot is refused with, printed as one line (Gunicorn 22-27).

Runs in a worker, while its app loads or in ``post_worker_init``. Gunicorn
prints an ``AppImportError`` raised there as one line without a traceback,
ends the worker with its ``APP_LOAD_ERROR`` status, and the master then stops
("App failed to load", exit 4) instead of forking worker after worker.
"""

from __future__ import annotations

from gunicorn.errors import AppImportError

__all__ = ["WorkerRefused"]


class WorkerRefused(AppImportError):  # type: ignore[misc]  # Gunicorn has no type hints
    """A worker that must not serve: bad settings, or a budget its app's hooks break. The message is one line."""
