"""Where graceful's log lines go under Gunicorn (graceful.gunicorn.hooks, ``on_starting``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from graceful.gunicorn import hooks


class ErrorLog:
    """The part of ArbiterAdapter that names Gunicorn's error log handlers."""

    def __init__(self, handlers: list[logging.Handler]) -> None:
        self.handlers = handlers

    def error_log_handlers(self) -> list[Any]:
        return list(self.handlers)


@contextlib.contextmanager
def root_handlers(*handlers: logging.Handler) -> Iterator[None]:
    """The root logger with only ``handlers`` (pytest's own set aside, within the test's call, and put back)."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = handlers
    try:
        yield
    finally:
        root.handlers[:] = saved


@pytest.fixture
def ours() -> Iterator[logging.Logger]:
    """graceful's logger with no handler and no level of its own (restored after the test)."""
    logger = logging.getLogger("graceful")
    handlers, level = logger.handlers[:], logger.level
    logger.handlers.clear()
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)  # setLevel, not an assignment: it also clears the loggers' cached levels


class TestLogToGunicorn:
    def test_unconfigured_logging_goes_to_gunicorns_error_log_at_info(self, ours: logging.Logger) -> None:
        """Nothing configured: graceful's lines go to Gunicorn's error log handlers, INFO and above."""
        handler = logging.NullHandler()
        with root_handlers():
            hooks._log_to_gunicorn(ErrorLog([handler]))  # type: ignore[arg-type]  # the one method it calls
        assert ours.handlers == [handler]
        assert ours.level == logging.INFO

    def test_configured_logging_is_left_as_it_is(self, ours: logging.Logger) -> None:
        """The application configured logging (a root handler): graceful's logger is not touched."""
        with root_handlers(logging.NullHandler()):
            hooks._log_to_gunicorn(ErrorLog([logging.NullHandler()]))  # type: ignore[arg-type]
        assert ours.handlers == [] and ours.level == logging.NOTSET
