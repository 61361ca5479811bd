"""Ending the process: at once when a hook thread is hung, or normally without the final collections.

Interpreter exit joins every ``ThreadPoolExecutor`` thread and every
non-daemon thread; a hook that never returns would keep the process alive past
its grace period until the orchestrator's SIGKILL. :func:`exit_process` flushes
logs and standard streams, then ends the process with ``os._exit``.

A normal interpreter exit then tears the interpreter down, and most of that
time is full garbage collections over every object still alive: 30-100 ms for
a Gunicorn process with graceful and a small app on a busy 2-core machine,
once in each worker and again in the master, after the last cleanup task
(``bench/shutdown.py``). :func:`skip_exit_collections`, called just before,
leaves those objects out of the collections and nothing else out of the exit.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_process", "skip_exit_collections"]


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


def skip_exit_collections() -> None:
    """Let the coming interpreter exit skip the garbage collections over every object alive now.

    Call last, when the process exits next anyway (a Gunicorn worker's
    ``worker_exit``, the master's ``on_exit``; main thread). ``gc.freeze()``
    moves those objects to the permanent generation, which collections skip.
    The exit itself is unchanged: non-daemon threads are joined, atexit
    handlers run (logging's flush and close among them), standard streams are
    flushed, module globals are released and every object whose last
    reference goes runs its ``__del__`` (an unclosed file flushes its buffer).
    What no longer happens is collecting reference cycles among these objects:
    their memory goes back with the process, and a ``__del__`` on such a cycle
    does not run, which Python does not promise at exit either (the data
    model's ``object.__del__``). Objects made after the call are collected as
    usual.
    """
    gc.freeze()
