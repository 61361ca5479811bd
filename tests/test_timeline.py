"""Tests for graceful.timeline (``graceful timeline``): pictures of real records, and refusals of anything else."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
import threading
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graceful.cli import main
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import HookEntry, part_of, record_of
from graceful.testing import FakeClock
from tests.conftest import ROOT

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def record_json(hooks: int = 0) -> dict[str, Any]:
    """A real record of a shutdown with a hook, a task, a timed-out hook and traffic (``hooks`` more runs)."""
    lc = Lifecycle(Config(shutdown_delay=1, drain_timeout=2), clock=FakeClock())
    hang = threading.Event()
    lc.pre_shutdown_hook("deregister")(lambda: None)
    lc.pre_shutdown_hook("stuck", timeout=0.5)(lambda: hang.wait(30))
    lc.cleanup_task("flush")(lambda: None)
    lc.in_flight.add()
    lc.request_shutdown()
    lc.stats.arrived(stopped=False)
    lc.stats.rejected("shutting_down")
    assert lc.cleanup_finished.event.wait(30)
    hang.set()
    record = record_of(lc, [part_of(lc, 42)], "1.0")
    extra = tuple(HookEntry("cleanup task", f"task-{i}", 40 + i % 3, "ok", 2.0, 0.1 * i) for i in range(hooks))
    return dataclasses.replace(record, hooks=record.hooks + extra).to_json()


@pytest.fixture(scope="module")
def record_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("record") / "record.json"
    path.write_text(json.dumps(record_json()))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["timeline", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


class TestPictures:
    def test_svg(self, record_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A record draws to a well-formed SVG with the signals named in it."""
        output = tmp_path / "timeline.svg"
        assert run(capsys, str(record_file), "-o", str(output)) == (0, "", "")
        root = ElementTree.parse(output).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert output.stat().st_size > 10_000

    def test_png(self, record_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A record draws to a PNG that reads back as an image of a sensible size."""
        import matplotlib.image

        output = tmp_path / "timeline.png"
        assert run(capsys, str(record_file), "-o", str(output)) == (0, "", "")
        assert output.read_bytes()[:8] == PNG_SIGNATURE
        height, width = matplotlib.image.imread(output).shape[:2]
        assert width > 800 and height > 300

    def test_many_hooks_are_drawn_per_hook(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A record with hundreds of runs (many workers) still draws, one bar per hook."""
        path = tmp_path / "record.json"
        path.write_text(json.dumps(record_json(hooks=300)))
        assert run(capsys, str(path), "-o", str(tmp_path / "many.png"))[0] == 0


class TestRefusals:
    @pytest.mark.parametrize(
        ("content", "expected"),
        [
            (b"", "not JSON"),
            (b"{", "not JSON"),
            (b"\xff\xfe", "not JSON"),
            (b"[1, 2]", "not a graceful shutdown record: record.json: expected a JSON object, got a list"),
            (b'{"format": 1}', "not a graceful shutdown record: record.json.config: missing"),
            (b'{"format": "1"}', "not a graceful shutdown record: record.json.format: expected 1"),
            (b'{"duration_s": NaN}', "not JSON: NaN is not a number a record holds"),
            (b"[" * 100_000, "not JSON"),
        ],
    )
    def test_malformed_record_is_one_line_and_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, expected: str
    ) -> None:
        """A file that is no record: exit status 2 and one line on standard error saying why."""
        path = tmp_path / "record.json"
        path.write_bytes(content)
        status, out, err = run(capsys, str(path), "-o", str(tmp_path / "out.svg"))
        assert (status, out) == (2, "")
        assert err.count("\n") == 1 and err.startswith("graceful timeline: error: ")
        assert expected in err
        assert not (tmp_path / "out.svg").exists()

    def test_a_field_of_the_wrong_kind_is_named(
        self, record_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A real record with one hook's duration made text names that field."""
        data = json.loads(record_file.read_text())
        data["hooks"][1]["duration_s"] = "slow"
        path = tmp_path / "record.json"
        path.write_text(json.dumps(data))
        status, _, err = run(capsys, str(path), "-o", str(tmp_path / "out.png"))
        assert status == 2
        assert err == (
            "graceful timeline: error: not a graceful shutdown record:"
            " record.json.hooks[1].duration_s: expected a number, got a string\n"
        )

    def test_missing_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A record that does not exist: exit 2, one line."""
        status, _, err = run(capsys, str(tmp_path / "nope.json"), "-o", str(tmp_path / "out.png"))
        assert status == 2 and err.startswith("graceful timeline: error: cannot read ") and err.count("\n") == 1

    def test_unknown_output_format(self, record_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An output that is neither .svg nor .png: exit 2, saying which are."""
        status, _, err = run(capsys, str(record_file), "-o", str(tmp_path / "out.jpg"))
        assert status == 2 and "the output must end in .svg or .png" in err

    def test_unwritable_output(self, record_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An output in a directory that does not exist: exit 2, one line."""
        status, _, err = run(capsys, str(record_file), "-o", str(tmp_path / "gone" / "out.png"))
        assert status == 2 and err.startswith("graceful timeline: error: cannot write ") and err.count("\n") == 1

    def test_without_matplotlib_says_how_to_install_it(
        self, record_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without matplotlib: one line naming the extra to install, exit 2."""
        monkeypatch.setitem(sys.modules, "matplotlib", None)
        monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
        status, _, err = run(capsys, str(record_file), "-o", str(tmp_path / "out.png"))
        assert (status, err) == (
            2,
            "graceful timeline: error: matplotlib is not installed: pip install 'graceful-wsgi[plot]'\n",
        )

    def test_no_traceback_from_the_command(self, tmp_path: Path) -> None:
        """The installed command on a hostile file prints one line and exits 2 (a real process)."""
        path = tmp_path / "record.json"
        path.write_text('{"format": 1, "samples": ' + "[" * 5000 + "]" * 5000 + "}")
        result = subprocess.run(
            [sys.executable, "-m", "graceful", "timeline", str(path), "-o", str(tmp_path / "out.png")],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``data``."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data[:3]):
            found += _paths(value, (*prefix, index))
    return found


_VALID = record_json()
_PATHS = _paths(_VALID)


class TestFuzz:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=_json)
    def test_any_json_is_drawn_or_refused_in_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], data: Any
    ) -> None:
        """Random JSON: exit 2 with one line (it is no record), never an exception."""
        path = tmp_path / "record.json"
        path.write_text(json.dumps(data))
        status, _, err = run(capsys, str(path), "-o", str(tmp_path / "out.svg"))
        assert status == 2 and err.count("\n") == 1

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(where=st.sampled_from(_PATHS), value=_json)
    def test_a_real_record_with_one_value_replaced(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: tuple[Any, ...], value: Any
    ) -> None:
        """A real record with any one value replaced by random JSON: drawn (0) or refused in one line (2)."""
        data = copy.deepcopy(_VALID)
        target = data
        for step in where[:-1]:
            target = target[step]
        target[where[-1]] = value
        path = tmp_path / "record.json"
        path.write_text(json.dumps(data))
        status, _, err = run(capsys, str(path), "-o", str(tmp_path / "out.svg"))
        assert (status == 0 and err == "") or (status == 2 and err.count("\n") == 1), err
