"""What a server leaves behind when its shutdown ends: the record file and Kubernetes' termination message.

:func:`leave_record` runs once per server shutdown, after CleanupFinished
(``graceful serve``: its main thread; Gunicorn: the master's ``on_exit``):

* it logs the record's one-paragraph summary (INFO, or WARNING when
  something went wrong), with the structured fields of
  :mod:`graceful.core.logfields`;
* with ``GRACEFUL_REPORT_FILE`` set it writes the whole record there as
  JSON (:func:`write_record`): a regular file, or a path that does not exist
  yet, atomically (a temporary file in the same directory, then a rename);
  anything else in place: a symlink is followed (the link is never replaced),
  a character device (``/dev/stdout``) or a FIFO is written to, within
  :data:`IN_PLACE_TIMEOUT` (a FIFO nobody reads is an error, not a hang);
  a failed write is one WARNING line naming the path and the error;
* when ``GRACEFUL_TERMINATION_LOG`` (``/dev/termination-log`` unless set;
  empty: never) exists and is writable, it writes the summary there, at most
  4 KB: Kubernetes shows it in ``kubectl describe pod`` and the pod's status.
  The file is never created: outside Kubernetes the default one does not
  exist, and that is only worth a DEBUG line (a path the operator chose
  that is missing, or one that is not writable, is a WARNING).

Nothing here raises: a write that fails is logged, and the process still
exits 0. :func:`write_json_atomically` is also how each Gunicorn worker
hands its part to the master (:mod:`graceful.gunicorn.shared`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import select
import stat
import tempfile
import time
from typing import Any

from graceful.core.config import DEFAULT_TERMINATION_LOG, Config, env_name
from graceful.core.logfields import log_fields
from graceful.core.record import MAX_MESSAGE_BYTES, ShutdownRecord

__all__ = [
    "IN_PLACE_TIMEOUT",
    "leave_record",
    "report_file_problem",
    "write_json_atomically",
    "write_record",
    "write_termination_message",
]

logger = logging.getLogger(__name__)

#: Upper bound (s) on writing the record in place (a FIFO whose reader is slow, a terminal on hold).
IN_PLACE_TIMEOUT = 2.0


def report_file_problem(path: str) -> str | None:
    """Why a server should not start with ``GRACEFUL_REPORT_FILE=path`` (its directory is missing), or None.

    Checked at start-up (Gunicorn's ``on_starting``, ``graceful serve``), not
    in :class:`graceful.Config`: the file system is the server's, and
    ``graceful check`` reads a pod's settings elsewhere.
    """
    if not path:
        return None
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{env_name('report_file')}={path!r} is a directory: name the file to write the shutdown record to"
    if not os.path.isdir(directory):
        return (
            f"{env_name('report_file')}={path!r} is not allowed: its directory {directory!r} does not exist"
            " (the shutdown record is written there when the server stops)"
        )
    return None


def write_json_atomically(path: str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename: readers never see half a file.

    Raises ``OSError`` (and ``TypeError``/``ValueError`` for data that is not JSON).
    """
    directory = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix=".graceful-", suffix=".tmp", dir=directory)
    try:
        os.fchmod(descriptor, 0o644)  # mkstemp's 0600 would hide it from a sidecar running as another user
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=1, allow_nan=False)
            stream.write("\n")
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the error being raised is the one to report
            os.unlink(temporary)
        raise


def write_record(path: str, data: Any) -> str:
    """Write ``data`` as JSON to ``path``; how it was written: ``"replaced"`` (atomically) or ``"in place"``.

    A regular file, or a path that does not exist yet, is replaced
    atomically (:func:`write_json_atomically`). Anything else is written
    in place: a symlink is followed (the link itself is never replaced), a
    character device (``/dev/stdout``) or a FIFO is opened for writing,
    never waiting for a reader, and written within :data:`IN_PLACE_TIMEOUT`.
    A regular file reached through a link is truncated first, unless it is
    this process's stdout or stderr: the record is then appended (a log
    file is never cut). Raises ``OSError`` (``TimeoutError`` for a write
    that took too long), and ``TypeError``/``ValueError`` for data that is not JSON.
    """
    if not os.path.islink(path):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            mode = stat.S_IFREG  # a file to create
        if stat.S_ISREG(mode):
            write_json_atomically(path, data)
            return "replaced"
    text = (json.dumps(data, indent=1, allow_nan=False) + "\n").encode("utf-8")
    _write_in_place(path, text)
    return "in place"


def _write_in_place(path: str, data: bytes) -> None:
    """Open ``path`` (following links) without waiting for a reader, and write ``data`` within the bound."""
    descriptor = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        found = os.fstat(descriptor)
        if stat.S_ISREG(found.st_mode):
            if _is_standard_stream(found):
                os.lseek(descriptor, 0, os.SEEK_END)
            else:
                os.ftruncate(descriptor, 0)
        deadline = time.monotonic() + IN_PLACE_TIMEOUT
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(descriptor, view) :]
                continue
            except BlockingIOError:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    errno.ETIMEDOUT, f"{len(data) - len(view)} of {len(data)} bytes written in {IN_PLACE_TIMEOUT:g}s"
                )
            select.select([], [descriptor], [], remaining)
    finally:
        os.close(descriptor)


def _is_standard_stream(found: os.stat_result) -> bool:
    """True when ``found`` is the file this process's stdout or stderr writes to."""
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            if os.path.samestat(found, os.fstat(fd)):
                return True
    return False


def write_termination_message(path: str, message: str) -> bool:
    """Write ``message`` (cut to 4 KB) to ``path`` when it exists and is writable; log and return False otherwise."""
    if not path:
        return False
    data = message.encode("utf-8")[:MAX_MESSAGE_BYTES]
    try:
        # No O_CREAT: the file is Kubernetes' (or the operator's) to create.
        descriptor = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except FileNotFoundError:
        # Outside Kubernetes the default path is missing: that is no news.
        level = logging.DEBUG if path == DEFAULT_TERMINATION_LOG else logging.WARNING
        logger.log(
            level,
            "graceful: no termination log at %s (not running in Kubernetes?): summary not written",
            path,
            extra=log_fields("termination_message"),
        )
        return False
    except OSError as exc:
        _log_failure(path, exc)
        return False
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
    except OSError as exc:
        _log_failure(path, exc)
        return False
    return True


def _reason(exc: Exception) -> str:
    """An error as the log line says it: ``[Errno 21] Is a directory`` without the path the line names already."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else exc.strerror
    return str(exc) or type(exc).__name__


def _log_failure(path: str, exc: OSError) -> None:
    reason = "not writable" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "could not be written"
    logger.warning(
        "graceful: termination log %s %s (%s): summary not written; set %s to another path, or empty",
        path,
        reason,
        exc.strerror or exc,
        env_name("termination_log"),
        extra=log_fields("termination_message"),
    )


def leave_record(record: ShutdownRecord, config: Config) -> None:
    """Log the record's summary, write the record file and the termination message; never raises."""
    summary = record.summary()
    since = record.duration
    level = logging.INFO if record.ok else logging.WARNING
    logger.log(level, "%s", summary, extra=log_fields("record", since_shutdown=since))
    if config.report_file:
        try:
            how = write_record(config.report_file, record.to_json())
        except (OSError, ValueError, TypeError) as exc:  # one line, no traceback: the shutdown goes on
            logger.warning(
                "graceful: could not write the shutdown record to %s=%s: %s",
                env_name("report_file"),
                config.report_file,
                _reason(exc),
                extra=log_fields("record", since_shutdown=since),
            )
        else:
            logger.info(
                "graceful: shutdown record written to %s (%s)",
                config.report_file,
                how,
                extra=log_fields("record", since_shutdown=since),
            )
    write_termination_message(config.termination_log, summary)
