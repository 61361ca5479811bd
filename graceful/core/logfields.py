"""The structured fields on graceful's lifecycle log lines, for JSON formatters.

Every lifecycle line (a signal firing, a hook's outcome, a drain timeout,
late traffic, the shutdown record) is logged with ``extra=`` these fields, so
python-json-logger, structlog's stdlib bridge or any ``%(graceful_event)s``
format string gets them as attributes of the ``LogRecord``; the message text
is the same with or without them. The names start with ``graceful_`` so that
none clashes with a ``LogRecord`` attribute.

``graceful_event``
    what happened: ``signal``, ``hook``, ``hooks``, ``drain_timeout``,
    ``late_traffic``, ``record``, ``termination_message``, ``hung_hooks``
``graceful_signal``
    the lifecycle signal's name on a ``signal`` line, else None
``graceful_since_shutdown_s``
    seconds since ShutdownInitiated (None before it)
``graceful_pid``
    the process that logged it (under Gunicorn: the master or one worker)
"""

from __future__ import annotations

import os

__all__ = ["EVENT", "PID", "SIGNAL", "SINCE_SHUTDOWN", "log_fields"]

EVENT = "graceful_event"
SIGNAL = "graceful_signal"
SINCE_SHUTDOWN = "graceful_since_shutdown_s"
PID = "graceful_pid"


def log_fields(event: str, *, signal: str | None = None, since_shutdown: float | None = None) -> dict[str, object]:
    """The ``extra=`` mapping of one lifecycle log line (seconds rounded to the microsecond)."""
    since = None if since_shutdown is None else round(since_shutdown, 6)
    return {EVENT: event, SIGNAL: signal, SINCE_SHUTDOWN: since, PID: os.getpid()}
