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


def mark(name: str) -> None:
    """Append a line to the marker file ``name`` in $GT_MARKERS: a record that outlives the process."""
    with open(os.path.join(os.environ["GT_MARKERS"], name), "a") as marker:
        marker.write(f"{time.time()}\n")


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


if os.environ.get("GT_MARKERS"):

    @graceful.pre_shutdown_hook("marker", timeout=2)
    def pre_shutdown_marker() -> None:
        # Server scope: pre-<master pid>, once per server shutdown.
        mark(f"pre-{os.getpid()}")

    @graceful.cleanup_task("marker", timeout=2)
    def cleanup_marker() -> None:
        # Process scope: cleanup-<worker pid>-<its master's pid>, in every worker as it exits.
        mark(f"cleanup-{os.getpid()}-{os.getppid()}")
