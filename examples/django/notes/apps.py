"""The example's own app: its hooks and checks, registered in ready() with graceful's decorators."""

from __future__ import annotations

import logging

from django.apps import AppConfig

import graceful

logger = logging.getLogger(__name__)


class NotesConfig(AppConfig):
    name = "notes"

    def ready(self) -> None:
        # Runs in every process that loads Django (each Gunicorn worker).
        @graceful.cleanup_task("flush-counters", timeout=2)
        def flush_counters() -> None:
            # Process scope: once per worker, after its requests drained.
            logger.info("notes: flushed %d request counter(s)", len(_counters))

        @graceful.readiness_check("counters")
        def counters_ready() -> bool:
            return len(_counters) < 10_000


_counters: dict[str, int] = {}
