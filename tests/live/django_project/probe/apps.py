"""The test project's own app: registers a cleanup task in ready(), as a user would."""

from __future__ import annotations

import os

from django.apps import AppConfig

import graceful


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
