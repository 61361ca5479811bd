"""Workers' parts of the shutdown record on disk (graceful.gunicorn.shared.PartsDirectory): failures never raise.

A worker leaves its part at ``worker_exit`` and the master reads them all at
``on_exit``; either side meeting a broken directory or a broken file logs one
warning and goes on, so the exit is never changed by the record.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import ROLE_WORKER, ProcessPart, part_of
from graceful.gunicorn.shared import PartsDirectory, WorkerFiles
from graceful.testing import FakeClock


@pytest.fixture
def parts() -> Iterator[PartsDirectory]:
    directory = PartsDirectory(WorkerFiles())
    yield directory
    directory.remove()


def drained_part(pid: int) -> ProcessPart:
    """A worker's part after a server shutdown (its lifecycle drained and cleaned up)."""
    worker = Lifecycle(Config(shutdown_delay=1), clock=FakeClock())
    worker.shutdown_initiated.fire()
    worker.drain_and_clean_up()
    return part_of(worker, pid, ROLE_WORKER)


class TestPartsDirectory:
    def test_parts_come_back_by_pid(self, parts: PartsDirectory) -> None:
        """Parts left by several workers are read back, ordered by pid."""
        for pid in (12, 11):
            parts.write(pid, drained_part(pid))
        assert [part.pid for part in parts.read_all()] == [11, 12]

    def test_a_broken_part_is_skipped_with_a_warning(
        self, parts: PartsDirectory, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A part that is not JSON (a worker killed mid-write elsewhere): skipped, named in a warning; the rest read."""
        for pid in (11, 12):
            parts.write(pid, drained_part(pid))
        [broken] = [name for name in os.listdir(parts.path) if "12" in name]
        with open(os.path.join(parts.path, broken), "w") as stream:
            stream.write("{not json")
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert [part.pid for part in parts.read_all()] == [11]
        [line] = [record.getMessage() for record in caplog.records]
        assert line.startswith("graceful: skipping a worker's part of the shutdown record:")

    def test_a_directory_gone_reads_as_no_parts_with_a_warning(
        self, parts: PartsDirectory, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The directory removed under the master: no parts, one warning, nothing raised."""
        shutil.rmtree(parts.path)
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert parts.read_all() == []
        assert "cannot read the workers' parts of the shutdown record" in caplog.text

    def test_a_part_that_cannot_be_left_is_a_warning_not_an_exit(
        self, parts: PartsDirectory, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The directory gone under a worker: its part is not left, one warning names the worker, nothing raised."""
        shutil.rmtree(parts.path)
        with caplog.at_level(logging.WARNING, logger="graceful"):
            parts.write(11, drained_part(11))
        [line] = [record.getMessage() for record in caplog.records]
        assert line.startswith("graceful: worker 11 could not leave its part of the shutdown record:")
