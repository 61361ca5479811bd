"""Per-process admission limit (``max_in_flight``) backed by a ``BoundedSemaphore``.

When the limit is full the caller learns it at once (the middleware answers
``429`` with ``Retry-After``) instead of queueing behind slow requests. Under
Gunicorn each worker process has its own limit; request threads call
``try_acquire``/``release`` concurrently.
"""

from __future__ import annotations

import threading

__all__ = ["AdmissionLimit"]


class AdmissionLimit:
    """At most ``limit`` concurrent admissions; ``limit == 0`` admits everything."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"max_in_flight must be >= 0, got {limit!r}")
        self.limit = limit
        self._sem = threading.BoundedSemaphore(limit) if limit else None

    @property
    def enabled(self) -> bool:
        """True when a limit is in force."""
        return self._sem is not None

    def try_acquire(self) -> bool:
        """Take a slot without blocking; False when the limit is full."""
        return self._sem is None or self._sem.acquire(blocking=False)

    def release(self) -> None:
        """Give a slot back; ``ValueError`` if more releases than acquisitions."""
        if self._sem is not None:
            self._sem.release()
