"""Reading manifest files: one readable reason instead of a traceback for what cannot be read.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

__all__ = ["Unreadable", "load"]


class Unreadable(Exception):
    """An input that is not a readable YAML file; the message says why, for the user."""


def load(path: str) -> tuple[str, list[Any]]:
    """Return an input's name for findings and its parsed documents; raise :class:`Unreadable`.

    ``-`` reads standard input.
    """
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as stream:
                text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise Unreadable(f"cannot read {source}: {reason}") from None
    try:
        return source, list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise Unreadable(f"{source} is not valid YAML: {_yaml_reason(exc)}") from None


def _yaml_reason(exc: yaml.YAMLError) -> str:
    """Return a one-line reason with the line and column, instead of PyYAML's multi-line text."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem or exc.context} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc).replace("\n", " ")
