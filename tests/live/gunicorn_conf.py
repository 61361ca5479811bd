"""A user's Gunicorn config composed with graceful's: `from graceful.conf import *`, then hooks."""

from __future__ import annotations

import os
import threading
import time

import graceful
from graceful.conf import *  # noqa: F403


def say(line: str) -> None:
    """Print one line with a single write: workers share this stdout."""
    os.write(1, (line + "\n").encode())



@graceful.pre_shutdown_hook("deregister", timeout=2)
def deregister() -> None:
    # Prints where it runs: it must be the master, once per shutdown.
    say(f"pre-shutdown deregister pid={os.getpid()} ppid={os.getppid()}")
    time.sleep(0.3)


if os.environ.get("GT_HUNG_HOOK"):

    @graceful.pre_shutdown_hook("hung", timeout=1)
    def hung() -> None:
        threading.Event().wait(3600)


if os.environ.get("GT_RAISING_HOOK"):

    @graceful.pre_shutdown_hook("raising")
    def raising() -> None:
        raise RuntimeError("registry unreachable")
