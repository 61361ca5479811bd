"""One serving process's health at one moment, and the record it travels in.

A :class:`Snapshot` is what the health port knows of one serving process (a
Gunicorn worker; the one process of ``graceful serve``): whether it is
stopping, each post-start hook's state, and the results of its liveness and
readiness checks, taken by its :class:`~graceful.healthport.runner.HealthRunner`.

The record format (a Gunicorn worker writes records into one pipe its
master reads)::

    2 bytes   length N of what follows, big-endian
    N bytes   compact JSON: {"v": 1, "pid": 12, "s": false,
                             "p": [[name, reason or null], ...],
                             "l": [[name, ok, reason or null], ...],
                             "r": [[name, ok, reason or null], ...]}

A whole record is at most ``PIPE_BUF`` (4096) bytes, so its one ``write()``
to a pipe is atomic and records of many writers never interleave. To fit,
reasons are cut to 200 characters, then to 40, then dropped; should a
process have more checks than even that leaves room for, its record says so
with one failing check, ``health-snapshot``, rather than leave checks out.
Any record that is not exactly this is refused by :meth:`Snapshot.decode`.

Built on the runner's thread, read on the port's thread; immutable.
"""

from __future__ import annotations

import dataclasses
import json
import select
import struct
from typing import Any

from graceful.wsgi.health import POST_START_PREFIX, CheckResult

__all__ = ["MAX_RECORD", "RecordReader", "Snapshot"]

_LENGTH = struct.Struct("!H")
_VERSION = 1
#: The longest record, length included: a pipe write of at most PIPE_BUF bytes is atomic.
MAX_RECORD = select.PIPE_BUF
_REASON_CUTS = (200, 40, 0)
#: The check a record carries instead of the real ones when they do not fit.
TOO_MANY = CheckResult("health-snapshot", False, "too many checks to publish in one record")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One process's health at one moment; see the module docstring."""

    pid: int
    stopping: bool
    #: Each post-start hook: its name, and None once it returned, else why it is not ready.
    post_start: tuple[tuple[str, str | None], ...]
    liveness: tuple[CheckResult, ...]
    readiness: tuple[CheckResult, ...]

    def post_start_results(self) -> tuple[CheckResult, ...]:
        """The post-start hooks as readiness lines, ``poststarthook/<name>``."""
        return tuple(CheckResult(POST_START_PREFIX + name, reason is None, reason) for name, reason in self.post_start)

    def failing_readiness(self) -> list[str]:
        """The names of the post-start hooks pending and of the readiness checks failing."""
        return [r.name for r in (*self.post_start_results(), *self.readiness) if not r.ok]

    def ready(self) -> bool:
        """Not stopping, every post-start hook returned and every readiness check passing."""
        return not self.stopping and not self.failing_readiness()

    # -- the record ---------------------------------------------------------------------

    def record(self) -> bytes:
        """The whole record (length, then JSON), at most :data:`MAX_RECORD` bytes."""
        for cut in _REASON_CUTS:
            data = json.dumps(self._plain(cut), separators=(",", ":"), ensure_ascii=False).encode()
            if _LENGTH.size + len(data) <= MAX_RECORD:
                return _LENGTH.pack(len(data)) + data
        bare = dataclasses.replace(self, post_start=(), liveness=(), readiness=(TOO_MANY,))
        data = json.dumps(bare._plain(len(TOO_MANY.reason or ""))).encode()
        return _LENGTH.pack(len(data)) + data

    def _plain(self, cut: int) -> dict[str, object]:
        def short(reason: str | None) -> str | None:
            return None if reason is None else reason[:cut]

        return {
            "v": _VERSION,
            "pid": self.pid,
            "s": self.stopping,
            "p": [[name, short(reason)] for name, reason in self.post_start],
            "l": [[r.name, r.ok, short(r.reason)] for r in self.liveness],
            "r": [[r.name, r.ok, short(r.reason)] for r in self.readiness],
        }

    @classmethod
    def decode(cls, data: bytes) -> Snapshot:
        """Read a record's JSON (without its length); raises ValueError for anything but :meth:`record`'s."""
        try:
            raw = json.loads(data)
            if not isinstance(raw, dict) or raw.get("v") != _VERSION:
                raise ValueError("not a version 1 health record")
            return cls(
                pid=_whole(raw["pid"]),
                stopping=_flag(raw["s"]),
                post_start=tuple((_text(name), _reason(reason)) for name, reason in raw["p"]),
                liveness=_results(raw["l"]),
                readiness=_results(raw["r"]),
            )
        except (KeyError, TypeError, UnicodeDecodeError) as exc:
            raise ValueError(f"malformed health record: {exc!r}") from None


class RecordReader:
    """Cuts a byte stream into records: :meth:`feed` what was read, get the snapshots now whole.

    A malformed record is skipped and counted (``malformed``); a length that
    no record can have means the stream is lost (only a foreign writer can
    cause it): the buffer is dropped and counted in ``lost``.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.malformed = 0
        self.lost = 0

    def feed(self, chunk: bytes) -> list[Snapshot]:
        """Add ``chunk``; return every snapshot whose record is now complete, in order."""
        buffer = self._buffer
        buffer += chunk
        out: list[Snapshot] = []
        while len(buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer)
            if not 0 < length <= MAX_RECORD - _LENGTH.size:
                self.lost += 1
                buffer.clear()
                break
            end = _LENGTH.size + length
            if len(buffer) < end:
                break
            data = bytes(buffer[_LENGTH.size : end])
            del buffer[:end]
            try:
                out.append(Snapshot.decode(data))
            except ValueError:
                self.malformed += 1
        return out


def _results(items: Any) -> tuple[CheckResult, ...]:
    return tuple(CheckResult(_text(name), _flag(ok), _reason(reason)) for name, ok, reason in items)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _reason(value: object) -> str | None:
    return None if value is None else _text(value)


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected a whole number, got {value!r}")
    return value
