"""graceful.healthport.snapshot: one process's health, and the record format it travels in."""

from __future__ import annotations

import json
import select

import pytest

from graceful.core.codec import ReportError
from graceful.healthport.snapshot import MAX_RECORD, TOO_MANY, Snapshot
from graceful.http.health import CheckResult


def snapshot(**changes: object) -> Snapshot:
    values: dict[str, object] = {
        "pid": 4242,
        "stopping": False,
        "post_start": (("warm", None), ("cache", "not finished")),
        "liveness": (CheckResult("deadlock", True),),
        "readiness": (CheckResult("db", False, "RuntimeError: connection refused"), CheckResult("queue", True)),
    }
    values.update(changes)
    return Snapshot(**values)  # type: ignore[arg-type]


class TestSnapshot:
    """What a snapshot says about readiness."""

    def test_failing_readiness_lists_pending_hooks_then_failing_checks(self) -> None:
        """Pending post-start hooks (as poststarthook/<name>) and failing readiness checks, in order."""
        assert snapshot().failing_readiness() == ["poststarthook/cache", "db"]

    def test_ready(self) -> None:
        """Ready: not stopping, every hook returned, every readiness check passing."""
        assert snapshot(post_start=(), readiness=()).ready()
        assert not snapshot(post_start=(), readiness=(), stopping=True).ready()
        assert not snapshot(readiness=()).ready()

    def test_post_start_results(self) -> None:
        """Post-start hooks as readiness lines, with the reason a pending one gives."""
        assert snapshot().post_start_results() == (
            CheckResult("poststarthook/warm", True),
            CheckResult("poststarthook/cache", False, "not finished"),
        )


class TestRecord:
    """record() and decode(): the format the module docstring describes."""

    def test_round_trip(self) -> None:
        """A record decodes to the snapshot it came from."""
        original = snapshot()
        assert Snapshot.decode(original.record()) == original

    def test_the_documented_format(self) -> None:
        """The compact JSON keys of the docstring."""
        data = json.loads(snapshot(post_start=(("warm", None),), readiness=()).record())
        assert data == {
            "v": 1,
            "pid": 4242,
            "s": False,
            "p": [["warm", None]],
            "l": [["deadlock", True, None]],
            "r": [],
        }

    def test_fits_pipe_buf(self) -> None:
        """The longest record is MAX_RECORD bytes (PIPE_BUF: one page), whatever the checks say."""
        assert MAX_RECORD == select.PIPE_BUF
        reasons = tuple(CheckResult(f"check-{i}", False, "x" * 1000) for i in range(30))
        record = snapshot(readiness=reasons).record()
        assert len(record) <= MAX_RECORD
        decoded = Snapshot.decode(record)
        assert [r.name for r in decoded.readiness] == [r.name for r in reasons]
        assert all(not r.ok and len(r.reason or "") <= 200 for r in decoded.readiness)

    def test_reasons_are_cut_before_checks_are_dropped(self) -> None:
        """Long reasons are cut to 200 characters first, when that is enough."""
        decoded = Snapshot.decode(snapshot(readiness=(CheckResult("db", False, "y" * 5000),)).record())
        assert decoded.readiness == (CheckResult("db", False, "y" * 200),)

    def test_too_many_checks_say_so(self) -> None:
        """Checks that cannot fit even without reasons become one failing health-snapshot check."""
        many = tuple(CheckResult(f"a-rather-long-check-name-{i:04d}", True) for i in range(400))
        record = snapshot(readiness=many).record()
        assert len(record) <= MAX_RECORD
        decoded = Snapshot.decode(record)
        assert decoded.readiness == (TOO_MANY,) and not decoded.ready()
        assert decoded.pid == 4242

    def test_non_ascii_names(self) -> None:
        """Check names and reasons in any script survive the trip."""
        original = snapshot(readiness=(CheckResult("café", False, "日本"),))
        assert Snapshot.decode(original.record()) == original

    @pytest.mark.parametrize(
        "data",
        [
            b"",
            b"not json",
            b"[]",
            b'{"v": 2, "pid": 1, "s": false, "p": [], "l": [], "r": []}',
            b'{"v": 1, "pid": "1", "s": false, "p": [], "l": [], "r": []}',
            b'{"v": 1, "pid": 1, "s": 0, "p": [], "l": [], "r": []}',
            b'{"v": 1, "pid": true, "s": false, "p": [], "l": [], "r": []}',
            b'{"v": 1, "pid": 1, "s": false, "p": [["a"]], "l": [], "r": []}',
            b'{"v": 1, "pid": 1, "s": false, "p": [], "l": [["a", true, 3]], "r": []}',
            b'{"v": 1, "pid": 1, "s": false, "p": [], "l": []}',
            b"\xff\xfe",
        ],
    )
    def test_anything_else_is_refused(self, data: bytes) -> None:
        """Malformed JSON, another version, wrong types or arity, missing keys: ValueError."""
        with pytest.raises(ValueError):
            Snapshot.decode(data)

    @pytest.mark.parametrize(
        ("data", "field"),
        [
            (b'{"v": 1, "pid": 1, "s": 0, "p": [], "l": [], "r": []}', r"health record\.s: expected true or false"),
            (b'{"v": 1, "pid": 1, "s": false, "p": [], "l": [["a", 1, null]], "r": []}', r"health record\.l\[0\]\[1\]"),
            (
                b'{"v": 1, "pid": 1, "s": false, "p": [["a"]], "l": [], "r": []}',
                r"health record\.p\[0\]: expected a list of 2",
            ),
            # Deeper than any Python's recursion bound for JSON (3.13+ allows more than 3.11's 1000).
            (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
            (b'{"v": 1, "pid"', "health record: not JSON: Expecting"),
            (b'{"v": "\xff"}', "health record: not JSON: 'utf-8' codec can't decode"),
        ],
    )
    def test_the_error_is_the_reports_naming_the_field(self, data: bytes, field: str) -> None:
        """A refused record raises the report codec's one error, naming the field that is wrong."""
        with pytest.raises(ReportError, match=field):
            Snapshot.decode(data)
