"""Which Gunicorn this is, the one-line refusal when it lacks an internal graceful uses, one setting it writes.

Runs where the adapters probe: the master in ``on_starting``, each worker in
``post_fork``/``post_worker_init``. Each probe runs once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["GunicornMissing", "bound_worker_drain", "gunicorn_release", "missing_attributes"]

#: The Gunicorn releases graceful is tested on (the README's range).
SUPPORTED_RANGE = "22 to 27"


def gunicorn_release() -> str:
    """Gunicorn's version string, or ``"(unknown)"`` when it cannot be imported."""
    try:
        import gunicorn
    except ImportError:
        return "(unknown)"
    return str(getattr(gunicorn, "__version__", "(unknown)"))


class GunicornMissing(RuntimeError):
    """An internal graceful relies on is missing from this Gunicorn; the message is one line."""

    def __init__(self, side: str, missing: Iterable[str]) -> None:
        names = ", ".join(missing)
        super().__init__(
            f"graceful: Gunicorn {gunicorn_release()}'s {side} has no {names}: graceful supports Gunicorn"
            f" {SUPPORTED_RANGE}"
        )


def missing_attributes(obj: object, names: Iterable[str], prefix: str = "") -> list[str]:
    """The names in ``names`` that ``obj`` lacks, each with ``prefix``."""
    return [f"{prefix}{name}" for name in names if not hasattr(obj, name)]


def bound_worker_drain(worker: Any, seconds: float) -> None:
    """A worker (its main thread or a graceful thread): bound Gunicorn's own drain there to ``seconds``.

    That drain waits the worker's copy of ``graceful_timeout``, whose
    ``cfg.set`` validates a positive whole number of seconds.
    """
    worker.cfg.set("graceful_timeout", max(1, math.ceil(seconds)))
