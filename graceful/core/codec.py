"""The one codec of what graceful processes tell each other: JSON values, read with suspicion.

Whatever one process writes and another reads (a worker's report in a file,
its health record in a pipe, a shutdown record that ``graceful timeline``
opens) is untrusted when read: :class:`FieldReader` reads one JSON object,
refusing anything its reader does not expect with one :class:`ReportError`
naming the field (``record.requests.rejected.draining: missing``), within
bounds (:data:`MAX_ITEMS` entries, 10,000 characters, seconds up to 1e10:
a machine's uptime, whole numbers up to 1e15). The values are
:mod:`graceful.core.report`'s (the shutdown record, a worker's part and
metrics) and :mod:`graceful.healthport.snapshot`'s (a worker's health);
between a Gunicorn master and its workers they travel in the channel's
records (:mod:`graceful.gunicorn.channel`, which frames them). Pure data,
no I/O; any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["MAX_ITEMS", "FieldReader", "ReportError"]

# Bounds what is read must keep (what graceful writes always does). Seconds reach a machine's uptime
# (a report whose origin is the raw monotonic clock).
MAX_ITEMS = 100_000
_MAX_TEXT = 10_000
_MAX_SECONDS = 1e10
_MAX_COUNT = 10**15


class ReportError(ValueError):
    """What was read is not a report, a record or a health record: the message names the field and what was
    expected."""


_T = TypeVar("_T")
_MISSING = object()


class FieldReader:
    """Reads one JSON object of something untrusted, refusing what it cannot hold; ``where`` names the field."""

    def __init__(self, data: Mapping[str, object], path: str) -> None:
        self._data = data
        self._path = path

    @classmethod
    def top(cls, data: object, source: str) -> FieldReader:
        """The reader of a whole document named ``source`` (in messages)."""
        if not isinstance(data, dict):
            raise ReportError(f"{source}: expected a JSON object, got {_kind(data)}")
        return cls(data, source)

    def where(self, key: str) -> str:
        """The field's name in messages: ``record.requests.drained``."""
        return f"{self._path}.{key}" if key else self._path

    def has(self, key: str) -> bool:
        """Whether the field is there (a field newer than some writers)."""
        return key in self._data

    def names(self) -> list[str]:
        """The object's keys (at most :data:`MAX_ITEMS`)."""
        if len(self._data) > MAX_ITEMS:
            raise ReportError(f"{self._path}: more than {MAX_ITEMS} entries")
        return [str(key) for key in self._data]

    def raw(self, key: str) -> object:
        """The field as it is; :class:`ReportError` when missing."""
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            raise ReportError(f"{self.where(key)}: missing")
        return value

    def child(self, key: str) -> FieldReader:
        """The reader of an object field."""
        value = self.raw(key)
        if type(value) is not dict:
            raise ReportError(f"{self.where(key)}: expected a JSON object, got {_kind(value)}")
        return FieldReader(value, self.where(key))

    def _list(self, key: str) -> list[object]:
        value = self.raw(key)
        if type(value) is not list:
            raise ReportError(f"{self.where(key)}: expected a list, got {_kind(value)}")
        if len(value) > MAX_ITEMS:
            raise ReportError(f"{self.where(key)}: more than {MAX_ITEMS} items")
        return value

    def objects(self, key: str, read: Callable[[FieldReader], _T]) -> list[_T]:
        """A list of JSON objects, each read by ``read``."""
        items = self._list(key)
        return [read(FieldReader({"": item}, f"{self.where(key)}[{i}]").child("")) for i, item in enumerate(items)]

    def rows(self, key: str, width: int, read: Callable[[list[FieldReader]], _T]) -> list[_T]:
        """A list of compact rows (lists of ``width`` cells), each row's cells read by ``read``."""
        rows = []
        for i, item in enumerate(self._list(key)):
            where = f"{self.where(key)}[{i}]"
            if type(item) is not list or len(item) != width:
                raise ReportError(f"{where}: expected a list of {width} items, got {_kind(item)}")
            rows.append(read([FieldReader({"": cell}, f"{where}[{j}]") for j, cell in enumerate(item)]))
        return rows

    def values(self, key: str, read: Callable[[FieldReader, str], _T]) -> list[_T]:
        """A list of scalars, each read by ``read(reader, "")`` (``FieldReader.seconds``, ``FieldReader.count``)."""
        items = self._list(key)
        return [read(FieldReader({"": item}, f"{self.where(key)}[{i}]"), "") for i, item in enumerate(items)]

    # The readers of scalars take the common case first (the right type, in range) and build a message only
    # for a refusal: the health port reads every live worker's report at each scrape.

    def text(self, key: str, *, optional: bool = False) -> Any:
        """A string of at most 10,000 characters (None allowed when ``optional``)."""
        value = self.raw(key)
        if type(value) is str and len(value) <= _MAX_TEXT:
            return value
        if value is None and optional:
            return None
        raise ReportError(f"{self.where(key)}: expected a string of at most {_MAX_TEXT} characters")

    def flag(self, key: str) -> bool:
        """true or false."""
        value = self.raw(key)
        if type(value) is not bool:
            raise ReportError(f"{self.where(key)}: expected true or false, got {_kind(value)}")
        return value

    def number(self, key: str, low: float, high: float) -> float:
        """A finite number from ``low`` to ``high``."""
        value = self.raw(key)
        if type(value) is not int and type(value) is not float:
            raise ReportError(f"{self.where(key)}: expected a number, got {_kind(value)}")
        if not low <= value <= high:  # NaN fails every comparison; the infinities are out of range
            raise ReportError(f"{self.where(key)}: expected a number from {low:g} to {high:g}, got {value!r}")
        return float(value)

    def seconds(self, key: str, *, optional: bool = False, signed: bool = True) -> Any:
        """Seconds (negative ones when ``signed``; None allowed when ``optional``)."""
        value = self.raw(key)
        if type(value) is float and (-_MAX_SECONDS if signed else 0.0) <= value <= _MAX_SECONDS:
            return value
        if value is None and optional:
            return None
        return self.number(key, -_MAX_SECONDS if signed else 0.0, _MAX_SECONDS)

    def count(self, key: str) -> int:
        """A whole number from 0 to 10**15."""
        value = self.raw(key)
        if type(value) is not int or not 0 <= value <= _MAX_COUNT:
            raise ReportError(f"{self.where(key)}: expected a whole number from 0 to {_MAX_COUNT:g}")
        return value

    def scalar(self, key: str) -> float | int | bool:
        """true, false or a number of seconds' range."""
        value = self.raw(key)
        if type(value) is bool:
            return value
        return self.number(key, -_MAX_SECONDS, _MAX_SECONDS)


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )
