"""Tests for graceful.core.codec: the reader that refuses what it does not expect."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from graceful.core.codec import FieldReader, ReportError


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
