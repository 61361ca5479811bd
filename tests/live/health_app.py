"""load_app with graceful checks, for the health port tests (imported in each worker).

``HEALTH_APP_IMPORT_S``: importing this module takes that long (a worker booting).
``HEALTH_APP_WARM_S``: a post-start hook ``warm`` that sleeps that long.
``HEALTH_APP_FAIL_ONE=PATH``: the readiness check ``db`` raises in one worker only, the first to create PATH.
"""

from __future__ import annotations

import os
import time

from load_app import app

import graceful

__all__ = ["app"]

time.sleep(float(os.environ.get("HEALTH_APP_IMPORT_S", "0")))

_failing: list[bool] = []


@graceful.readiness_check("db")
def db() -> bool:
    """Passes, but in the one worker that created HEALTH_APP_FAIL_ONE's file first."""
    marker = os.environ.get("HEALTH_APP_FAIL_ONE")
    if marker and not _failing:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            _failing.append(True)
        except FileExistsError:
            _failing.append(False)
    if _failing and _failing[0]:
        raise RuntimeError("connection refused")
    return True


@graceful.post_start_hook("warm")
def warm() -> None:
    """Sleeps HEALTH_APP_WARM_S seconds (0 by default)."""
    time.sleep(float(os.environ.get("HEALTH_APP_WARM_S", "0")))
