"""The one codec of what graceful processes tell each other: JSON values, framed for pipes, read with suspicion.

Whatever one process writes and another reads (a worker's report in a file,
its health record in a pipe, a shutdown record that ``graceful timeline``
opens) is untrusted when read: :class:`FieldReader` reads one JSON object,
refusing anything its reader does not expect with one :class:`ReportError`
naming the field (``record.requests.rejected.draining: missing``), within
bounds (:data:`MAX_ITEMS` entries, 10,000 characters, seconds up to 1e10:
a machine's uptime, whole numbers up to 1e15). Pipes carry frames
(:func:`frame`): 2 bytes of length, big-endian, then compact JSON;
:class:`FrameReader` cuts a byte stream back into them. The values are
:mod:`graceful.core.report`'s (files) and
:mod:`graceful.healthport.snapshot`'s (the health pipe). Pure data, no I/O;
any thread.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["FRAME_HEADER", "MAX_ITEMS", "FieldReader", "FrameReader", "ReportError", "frame"]

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
_LENGTH = struct.Struct("!H")
#: The bytes of a frame's length prefix.
FRAME_HEADER = _LENGTH.size


def frame(payload: object) -> bytes:
    """``payload`` as one frame: 2 bytes of length (big-endian), then compact JSON (at most 65,535 bytes).

    Raises ValueError when it does not fit; the caller keeps a frame within
    ``PIPE_BUF`` when one ``write()`` must be atomic.
    """
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    if not 0 < len(data) < 1 << 16:
        raise ValueError(f"a frame holds 1 to 65535 bytes of JSON, got {len(data)}")
    return _LENGTH.pack(len(data)) + data


class FrameReader(Generic[_T]):
    """Cuts a byte stream of frames into payloads: :meth:`feed` what was read, get what is now whole.

    ``read(json, source)`` turns one payload (parsed JSON) into a value or
    raises :class:`ReportError`. A payload that is not one is skipped and
    counted (``malformed``); a length above ``max_frame`` means the stream
    is lost (only a foreign writer can cause it): the buffer is dropped and
    counted in ``lost``. Used by one thread.
    """

    def __init__(self, read: Callable[[object], _T], max_frame: int) -> None:
        self._read = read
        self._max = max_frame - FRAME_HEADER
        self._buffer = bytearray()
        self.malformed = 0
        self.lost = 0

    def feed(self, chunk: bytes) -> list[_T]:
        """Add ``chunk``; return every value whose frame is now complete, in order."""
        buffer = self._buffer
        buffer += chunk
        out: list[_T] = []
        while len(buffer) >= FRAME_HEADER:
            (length,) = _LENGTH.unpack_from(buffer)
            if not 0 < length <= self._max:
                self.lost += 1
                buffer.clear()
                break
            end = FRAME_HEADER + length
            if len(buffer) < end:
                break
            data = bytes(buffer[FRAME_HEADER:end])
            del buffer[:end]
            try:
                out.append(self._read(json.loads(data)))
            except (ValueError, RecursionError):  # ReportError; JSON or UTF-8 that does not decode, or nests deep
                self.malformed += 1
        return out


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
