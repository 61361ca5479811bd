"""One serving process's health at one moment, and the record it travels in.

A :class:`ProcessHealth` (``Snapshot``, its older name, still works) is
what the health port knows of one serving process (a Gunicorn worker; the
one process of ``graceful serve``): whether it is stopping, each post-start
hook's state, and the results of its liveness and readiness checks, taken
by its :class:`~graceful.healthport.runner.HealthRunner`.

The record (a Gunicorn worker sends one through its channel to the master
every second, :mod:`graceful.gunicorn.channel`, which frames it)::

    compact JSON: {"v": 1, "pid": 12, "s": false,
                   "p": [[name, reason or null], ...],
                   "l": [[name, ok, reason or null], ...],
                   "r": [[name, ok, reason or null], ...]}

A record is at most :data:`MAX_RECORD` (4096) bytes, whatever the app's
checks say: reasons are cut to 200 characters, then to 40, then dropped;
should a process have more checks than even that leaves room for, its
record says so with one failing check, ``health-snapshot``, rather than
leave checks out. Read with the one codec (:class:`~graceful.core.codec.FieldReader`):
any record that is not exactly this is refused by :meth:`ProcessHealth.decode` with
the one :class:`~graceful.core.codec.ReportError` (a ValueError) naming the field.

Built on the runner's thread, read on the port's thread; immutable.
"""

from __future__ import annotations

import dataclasses
import json
import select

from graceful.core.codec import FieldReader, ReportError
from graceful.http.health import POST_START_PREFIX, CheckResult

__all__ = ["MAX_RECORD", "ProcessHealth", "Snapshot"]

_VERSION = 1
#: The longest record (bytes): one page, the channel's bound on a health record.
MAX_RECORD = select.PIPE_BUF
_REASON_CUTS = (200, 40, 0)
#: The check a record carries instead of the real ones when they do not fit.
TOO_MANY = CheckResult("health-snapshot", False, "too many checks to publish in one record")


@dataclasses.dataclass(frozen=True)
class ProcessHealth:
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
        """The record's compact JSON, at most :data:`MAX_RECORD` bytes."""
        for cut in _REASON_CUTS:
            data = _json(self._plain(cut))
            if len(data) <= MAX_RECORD:
                return data
        bare = dataclasses.replace(self, post_start=(), liveness=(), readiness=(TOO_MANY,))
        return _json(bare._plain(len(TOO_MANY.reason or "")))

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
    def read(cls, data: object) -> ProcessHealth:
        """A record's parsed JSON as a snapshot; :class:`ReportError` naming the field for anything else."""
        raw = FieldReader.top(data, "health record")
        if raw.raw("v") != _VERSION:
            raise ReportError(f"{raw.where('v')}: expected {_VERSION} (a health record)")
        return cls(
            pid=raw.count("pid"),
            stopping=raw.flag("s"),
            post_start=tuple(raw.rows("p", 2, lambda c: (c[0].text(""), c[1].text("", optional=True)))),
            liveness=tuple(raw.rows("l", 3, _result)),
            readiness=tuple(raw.rows("r", 3, _result)),
        )

    @classmethod
    def decode(cls, data: bytes) -> ProcessHealth:
        """Read a record; a ValueError (:class:`ReportError`) for anything but :meth:`record`'s."""
        try:
            parsed = json.loads(data)
        except RecursionError:
            raise ReportError("health record: nested too deep") from None
        except ValueError as exc:  # JSON's own error, and UTF-8's
            raise ReportError(f"health record: not JSON: {exc}") from None
        return cls.read(parsed)


#: The older name of :class:`ProcessHealth` (the Gunicorn channels use it).
Snapshot = ProcessHealth


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _result(cells: list[FieldReader]) -> CheckResult:
    """``[name, ok, reason or null]``."""
    return CheckResult(cells[0].text(""), cells[1].flag(""), cells[2].text("", optional=True))
