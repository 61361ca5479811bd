"""Every duration graceful logs says what it measures: time waited, run, left, late, or the setting it is.

Read from the source (every logging call in ``graceful/`` whose constant
text prints seconds, ``%gs`` or ``%.3fs``), so a new log line with a bare
"after 5s" fails here. The lines whose numbers are computed are also
checked where they are logged (tests/core/test_lifecycle.py,
tests/gunicorn/test_master.py): this test checks the words around them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_LEVELS = {"debug", "info", "warning", "error", "exception", "critical", "log"}
#: A duration in a log text: a float directive followed by "s".
_DURATION = re.compile(r"%[-+ #0-9.]*[gf] ?s\b")
#: What may come right before a duration: what it measures, or the setting it is.
_BEFORE = re.compile(
    r"(after waiting|after running|waiting|every|pausing for|the|graceful_timeout|drain_timeout|"
    r"dirty_graceful_timeout|GRACEFUL_GRACE_PERIOD|with) \(?$"
)
#: ... or right after it.
_AFTER = re.compile(r"^ ?s? ?(after ShutdownInitiated|after it|left|late)\b")


def duration_lines() -> list[tuple[str, str]]:
    """(file:line, text) of every logging call in graceful/ whose constant text prints seconds."""
    found: list[tuple[str, str]] = []
    for path in sorted((ROOT / "graceful").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in _LEVELS or not (
                isinstance(node.func.value, ast.Name) and node.func.value.id == "logger"
            ):
                continue
            args = node.args[1:] if node.func.attr == "log" else node.args
            text = args[0].value if args and isinstance(args[0], ast.Constant) else None
            if isinstance(text, str) and _DURATION.search(text):
                found.append((f"{path.relative_to(ROOT)}:{node.lineno}", text))
    return found


LINES = duration_lines()


def test_the_source_has_duration_lines() -> None:
    """The scan finds graceful's duration lines (a scan that finds none would pass everything)."""
    texts = [text for _, text in LINES]
    assert any("drain timed out after waiting" in text for text in texts)
    assert len(LINES) >= 10


@pytest.mark.parametrize(("where", "text"), LINES, ids=[where for where, _ in LINES])
def test_each_duration_says_what_it_measures(where: str, text: str) -> None:
    """Each seconds figure is preceded by what it measures (waiting, running, a setting's name) or followed by it."""
    for match in _DURATION.finditer(text):
        before, after = text[: match.start()], text[match.end() - 1 :]
        assert _BEFORE.search(before) or _AFTER.search(after[1:]), (
            f"{where}: {match.group()!r} in {text!r} does not say what it measures (waited, run, left, late)"
        )
