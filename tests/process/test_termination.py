"""Tests for graceful.process.termination: the record file, the termination message, the start-up check."""

from __future__ import annotations

import errno
import json
import logging
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import ShutdownRecord, part_of, record_of
from graceful.process.termination import (
    leave_record,
    report_file_problem,
    write_json_atomically,
    write_record,
    write_termination_message,
)
from graceful.testing import FakeClock, run_shutdown

#: A file that exists and refuses writing even to root (sysfs enforces its 0444).
SYSFS_READ_ONLY = "/sys/devices/system/cpu/online"


def read_only_file(tmp_path: Path) -> str:
    """A path that exists and cannot be written by this process (a 0444 file, or for root a sysfs file)."""
    if os.geteuid() != 0:
        path = tmp_path / "termination-log"
        path.write_text("")
        path.chmod(0o444)
        return str(path)
    try:
        os.close(os.open(SYSFS_READ_ONLY, os.O_WRONLY))
    except PermissionError:
        return SYSFS_READ_ONLY
    raise AssertionError(f"running as root, and {SYSFS_READ_ONLY} is writable: no read-only file to test with")


def a_record() -> ShutdownRecord:
    lc = Lifecycle(Config(shutdown_delay=1), clock=FakeClock())
    lc.cleanup_task("flush")(lambda: None)
    run_shutdown(lc)
    return record_of(lc, [part_of(lc, os.getpid())], "1.0")


def events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "graceful_event", None) == event]


class TestTerminationMessage:
    def test_written_to_a_file_that_exists(self, tmp_path: Path) -> None:
        """The message replaces the file's content."""
        path = tmp_path / "termination-log"
        path.write_text("old content that is longer than the message")
        assert write_termination_message(str(path), "graceful: clean shutdown")
        assert path.read_text() == "graceful: clean shutdown"

    def test_at_most_4096_bytes(self, tmp_path: Path) -> None:
        """A longer message is cut to Kubernetes' 4096 bytes."""
        path = tmp_path / "termination-log"
        path.write_text("")
        write_termination_message(str(path), "x" * 10_000)
        assert path.stat().st_size == 4096

    def test_a_missing_file_is_not_created(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A path the operator chose that does not exist is left alone, with a warning naming it."""
        path = tmp_path / "missing"
        assert not write_termination_message(str(path), "graceful: clean shutdown")
        assert not path.exists()
        (line,) = events(caplog, "termination_message")
        assert line.levelno == logging.WARNING
        assert line.getMessage().startswith(f"graceful: no termination log at {path}")

    def test_the_missing_default_is_only_a_debug_line(self, caplog: pytest.LogCaptureFixture) -> None:
        """Outside Kubernetes /dev/termination-log is missing: logged at DEBUG, no warning."""
        if os.path.exists("/dev/termination-log"):
            pytest.fail("/dev/termination-log exists here: this test needs a machine outside Kubernetes")
        caplog.set_level(logging.DEBUG, "graceful")
        assert not write_termination_message("/dev/termination-log", "graceful: clean shutdown")
        (line,) = events(caplog, "termination_message")
        assert line.levelno == logging.DEBUG

    def test_a_read_only_file_is_logged_not_raised(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A file that cannot be written gives a warning that says so and how to change the path."""
        path = read_only_file(tmp_path)
        assert not write_termination_message(path, "graceful: clean shutdown")
        (line,) = events(caplog, "termination_message")
        assert line.levelno == logging.WARNING
        assert f"graceful: termination log {path} not writable" in line.getMessage()
        assert "GRACEFUL_TERMINATION_LOG" in line.getMessage()

    def test_empty_means_never(self, caplog: pytest.LogCaptureFixture) -> None:
        """An empty path writes nothing and logs nothing."""
        assert not write_termination_message("", "graceful: clean shutdown")
        assert not events(caplog, "termination_message")


class TestRecordFile:
    def test_written_atomically_as_json(self, tmp_path: Path) -> None:
        """The JSON lands whole under its name; no temporary file is left; others can read it."""
        path = tmp_path / "record.json"
        write_json_atomically(str(path), {"a": [1, 2]})
        assert json.loads(path.read_text()) == {"a": [1, 2]}
        assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
        assert path.stat().st_mode & 0o777 == 0o644

    def test_a_failed_write_leaves_no_temporary_file(self, tmp_path: Path) -> None:
        """Data that is not JSON raises, and the temporary file is removed."""
        with pytest.raises(ValueError):
            write_json_atomically(str(tmp_path / "record.json"), {"a": float("nan")})
        assert list(tmp_path.iterdir()) == []

    def test_report_file_problem(self, tmp_path: Path) -> None:
        """A report file in a missing directory, or a directory, is refused at start-up, naming the variable."""
        assert report_file_problem("") is None
        assert report_file_problem(str(tmp_path / "record.json")) is None
        missing = report_file_problem(str(tmp_path / "nope" / "record.json"))
        assert missing is not None and missing.startswith("GRACEFUL_REPORT_FILE=") and "does not exist" in missing
        directory = report_file_problem(str(tmp_path))
        assert directory is not None and "is a directory" in directory


class TestWhereTheRecordGoes:
    """GRACEFUL_REPORT_FILE: a regular file is replaced atomically; anything else is written in place."""

    def test_a_regular_file_is_replaced(self, tmp_path: Path) -> None:
        """An existing regular file (or a new path) gets a new inode: the rename, never a half-written file."""
        path = tmp_path / "record.json"
        path.write_text("old")
        before = path.stat().st_ino
        assert write_record(str(path), {"a": 1}) == "replaced"
        assert json.loads(path.read_text()) == {"a": 1} and path.stat().st_ino != before
        assert write_record(str(tmp_path / "new.json"), {"b": 2}) == "replaced"

    def test_a_symlink_is_followed_and_never_replaced(self, tmp_path: Path) -> None:
        """The link stays a link to the same file; the file it names holds the record (and nothing of before)."""
        target, link = tmp_path / "target.json", tmp_path / "record.json"
        target.write_text("x" * 1000)
        link.symlink_to(target)
        assert write_record(str(link), {"a": 1}) == "in place"
        assert link.is_symlink() and os.readlink(link) == str(target)
        assert json.loads(target.read_text()) == {"a": 1}

    def test_a_dangling_symlink_creates_its_target(self, tmp_path: Path) -> None:
        """A link to a file that does not exist yet: the file is made where the link points."""
        target, link = tmp_path / "target.json", tmp_path / "record.json"
        link.symlink_to(target)
        assert write_record(str(link), {"a": 1}) == "in place"
        assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}

    def test_a_fifo_is_written_to_its_reader(self, tmp_path: Path) -> None:
        """A FIFO stays a FIFO; its reader gets the whole record (bigger than a pipe's buffer)."""
        fifo = tmp_path / "record.fifo"
        os.mkfifo(fifo)
        # The reader's end is open before the write (a thread's blocking open might come after it).
        end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        received: list[bytes] = []

        def read_until_the_writer_closes() -> None:
            chunks: list[bytes] = []
            # Readable once data comes, or once a writer came and went (Linux reports no end before a writer).
            while select.select([end], [], [], 10)[0]:
                try:
                    chunk = os.read(end, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                chunks.append(chunk)
            received.append(b"".join(chunks))

        reader = threading.Thread(target=read_until_the_writer_closes)
        reader.start()
        data = {"samples": list(range(30000))}  # ~200 KB: the writer waits for the reader
        try:
            assert write_record(str(fifo), data) == "in place"
        finally:
            reader.join(10)
            os.close(end)
        assert json.loads(received[0]) == data
        assert fifo.is_fifo()

    def test_a_fifo_nobody_reads_is_an_error_not_a_hang(self, tmp_path: Path) -> None:
        """No reader: the open fails at once (ENXIO) instead of waiting for one."""
        fifo = tmp_path / "record.fifo"
        os.mkfifo(fifo)
        with pytest.raises(OSError) as failed:
            write_record(str(fifo), {"a": 1})
        assert failed.value.errno == errno.ENXIO and fifo.is_fifo()

    def test_dev_stdout_redirected_to_a_log_file_is_appended_to(self, tmp_path: Path) -> None:
        """/dev/stdout (a link to the process's fd 1) naming a log file: the record follows the log, cutting nothing."""
        log = tmp_path / "server.log"
        log.write_text("an earlier log line\n")
        code = "from graceful.process.termination import write_record; print(write_record('/dev/stdout', {'a': 1}))"
        with log.open("a") as stdout:
            subprocess.run([sys.executable, "-c", code], stdout=stdout, check=True, timeout=60)
        first, *rest = log.read_text().splitlines(keepends=True)
        assert first == "an earlier log line\n"
        assert rest[-1] == "in place\n" and json.loads("".join(rest[:-1])) == {"a": 1}

    def test_failures_are_one_line_and_the_shutdown_goes_on(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A directory, a path under a file, a FIFO nobody reads: one WARNING each, naming the path and the error."""
        caplog.set_level(logging.INFO, "graceful")
        fifo = tmp_path / "record.fifo"
        os.mkfifo(fifo)
        (tmp_path / "file").write_text("")
        record = a_record()
        for path, error in (
            (tmp_path, "[Errno 21] Is a directory"),
            (tmp_path / "file" / "record.json", "[Errno 20] Not a directory"),
            (fifo, "[Errno 6] No such device or address"),
        ):
            caplog.clear()
            leave_record(record, Config(report_file=str(path), termination_log=""))
            [line] = [r for r in events(caplog, "record") if r.levelno == logging.WARNING]
            assert (
                line.getMessage()
                == f"graceful: could not write the shutdown record to GRACEFUL_REPORT_FILE={path}: {error}"
            )
            assert line.exc_info is None
            assert not [r for r in caplog.records if "written" in r.getMessage()]


class TestLeaveRecord:
    def test_logs_writes_the_record_and_the_message(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """The summary is logged, the record written to GRACEFUL_REPORT_FILE, the message to the termination log."""
        caplog.set_level(logging.INFO, "graceful")
        record = a_record()
        report, message = tmp_path / "record.json", tmp_path / "termination-log"
        message.write_text("")
        leave_record(record, Config(report_file=str(report), termination_log=str(message)))
        assert ShutdownRecord.from_json(json.loads(report.read_text())).to_json() == record.to_json()
        assert message.read_text() == record.summary()
        lines = [r.getMessage() for r in events(caplog, "record")]
        assert lines == [record.summary(), f"graceful: shutdown record written to {report} (replaced)"]

    def test_failures_are_logged_never_raised(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """An unwritable record file and a read-only termination log: two warnings, no exception."""
        record = a_record()
        unwritable = tmp_path / "gone" / "record.json"
        leave_record(record, Config(report_file=str(unwritable), termination_log=read_only_file(tmp_path)))
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2
        assert warnings[0].startswith(
            f"graceful: could not write the shutdown record to GRACEFUL_REPORT_FILE={unwritable}"
        )
        assert "not writable" in warnings[1]
