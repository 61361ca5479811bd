"""Ending the process even when a hook thread is hung.

Interpreter exit joins every ``ThreadPoolExecutor`` thread and every
non-daemon thread; a hook that never returns would keep the process alive past
its grace period until the orchestrator's SIGKILL. :func:`exit_process` flushes
logs and standard streams, then ends the process with ``os._exit``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_process"]


def exit_process(code: int) -> NoReturn:
    """Flush logging and stdio, then ``os._exit(code)`` without joining threads.

    Call from the thread that owns the process's exit (the main thread, or a
    Gunicorn worker's ``worker_exit``). Never returns.
    """
    for handler in list(logging.getLogger().handlers):
        try:
            handler.flush()
        except (OSError, ValueError):  # a closed stream: nothing left to flush
            continue
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            continue
    os._exit(code)
