"""Tests for graceful.process.exit: the collector frozen in this process, an exit that loses nothing in a subprocess."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

from graceful.process.exit import skip_exit_collections


class Cycle:
    """An object in a reference cycle with itself: only a garbage collection frees it."""

    def __init__(self) -> None:
        self.me = self


class TestSkipExitCollections:
    def test_objects_alive_now_are_left_out_of_collections(self) -> None:
        """A cycle made before the call survives a full collection; one made after it is collected."""
        before = Cycle()
        kept = weakref.ref(before)
        del before
        skip_exit_collections()
        after = Cycle()
        collected = weakref.ref(after)
        del after
        gc.collect()
        assert kept() is not None and collected() is None
        assert gc.get_freeze_count() > 0

    def test_the_exit_after_it_loses_nothing(self, tmp_path: Path) -> None:
        """A process that calls it then exits: its status, atexit handlers, stdout and an unclosed file all arrive."""
        unclosed, marker = tmp_path / "unclosed.txt", tmp_path / "atexit.txt"
        script = textwrap.dedent(
            f"""
            import atexit, pathlib, sys
            from graceful.process.exit import skip_exit_collections
            atexit.register(pathlib.Path({str(marker)!r}).write_text, "ran")
            log = open({str(unclosed)!r}, "w")  # never closed: its buffer is flushed when the module is released
            log.write("x" * 1000)
            sys.stdout.write("buffered")
            skip_exit_collections()
            sys.exit(3)
            """
        )
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert (run.returncode, run.stdout, run.stderr) == (3, "buffered", "")
        assert marker.read_text() == "ran"
        assert unclosed.read_text() == "x" * 1000
