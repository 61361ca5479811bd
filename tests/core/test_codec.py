"""Tests for graceful.core.codec: frames for pipes, and the reader that refuses what it does not expect."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from graceful.core.codec import FieldReader, FrameReader, ReportError, frame


class TestFrames:
    def test_frames_in_any_chunks(self) -> None:
        """Frames cut anywhere come back whole and in order."""
        stream = frame({"n": 1}) + frame({"n": 2})
        for cut in range(len(stream) + 1):
            reader = FrameReader(lambda data: data, 4096)
            assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == [{"n": 1}, {"n": 2}]

    def test_a_malformed_frame_is_skipped_and_counted(self) -> None:
        """A frame whose JSON is not a value (or nests too deep, or fails its read) is skipped, the next read."""
        deep = b"[" * 3000
        stream = b"\x00\x03{x}" + len(deep).to_bytes(2, "big") + deep + frame("bad") + frame({"n": 1})

        def read(data: object) -> object:
            if data == "bad":
                raise ReportError("bad: expected an object")
            return data

        reader = FrameReader(read, 4096)
        assert reader.feed(stream) == [{"n": 1}]
        assert (reader.malformed, reader.lost) == (3, 0)

    def test_a_length_no_frame_has_drops_the_stream(self) -> None:
        """A length above the bound (only a foreign writer makes one) drops the buffer and counts it lost."""
        reader = FrameReader(lambda data: data, 64)
        assert reader.feed(b"\x01\x00" + b"x" * 300) == []
        assert reader.lost == 1

    def test_too_big_to_frame(self) -> None:
        """A payload over 65,535 bytes of JSON cannot be framed."""
        with pytest.raises(ValueError, match="1 to 65535 bytes"):
            frame("x" * 70_000)


class TestFieldReader:
    @pytest.mark.parametrize(
        ("read", "value", "message"),
        [
            (lambda r: r.count("n"), -1, r"doc\.n: expected a whole number from 0"),
            (lambda r: r.count("n"), True, r"doc\.n: expected a whole number"),
            (lambda r: r.seconds("n"), float("inf"), r"doc\.n: expected a number from -1e\+10 to 1e\+10"),
            (lambda r: r.seconds("n", signed=False), -0.5, r"doc\.n: expected a number from 0"),
            (lambda r: r.seconds("n"), "1", r"doc\.n: expected a number, got a string"),
            (lambda r: r.text("n"), "x" * 10_001, r"doc\.n: expected a string of at most 10000"),
            (lambda r: r.flag("n"), 1, r"doc\.n: expected true or false, got int"),
            (lambda r: r.child("n"), [], r"doc\.n: expected a JSON object, got a list"),
        ],
    )
    def test_refusals_name_the_field(self, read: Callable[[FieldReader], object], value: object, message: str) -> None:
        """Each kind of value refuses what it cannot hold, naming the field and what was expected."""
        with pytest.raises(ReportError, match=message):
            read(FieldReader.top({"n": value}, "doc"))

    def test_accepts_what_it_expects(self) -> None:
        """The right type in range is returned as it is (a whole number of seconds as a float)."""
        reader = FieldReader.top({"c": 3, "s": 2, "t": "x", "f": False, "o": None}, "doc")
        assert (reader.count("c"), reader.seconds("s"), reader.text("t"), reader.flag("f")) == (3, 2.0, "x", False)
        assert reader.seconds("o", optional=True) is None and reader.text("o", optional=True) is None

    def test_missing(self) -> None:
        """A missing field says so."""
        with pytest.raises(ReportError, match=r"doc\.gone: missing"):
            FieldReader.top({}, "doc").count("gone")
