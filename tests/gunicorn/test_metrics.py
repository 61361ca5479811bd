"""graceful.gunicorn.metrics in process: workers' metrics files, the master's sum, the retained total, hostile files."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.gunicorn.metrics import MAX_FILE_BYTES, PREFIX, ServerMetrics, WorkerMetrics
from graceful.gunicorn.shared import PartsDirectory, WorkerFiles
from graceful.metrics.snapshot import Snapshot, merge
from graceful.testing import FakeClock


@pytest.fixture
def files() -> Iterator[WorkerFiles]:
    made = WorkerFiles()
    try:
        yield made
    finally:
        made.remove()


def lifecycle() -> Lifecycle:
    return Lifecycle(Config(), clock=FakeClock())


class Workers:
    """A fake Gunicorn: its live worker pids, and which processes exist."""

    def __init__(self) -> None:
        self.live: set[int] = set()
        self.existing: set[int] = set()

    def boot(self, files: WorkerFiles, pid: int) -> tuple[Lifecycle, WorkerMetrics]:
        """A worker of pid ``pid``: its lifecycle and its metrics file."""
        self.live.add(pid)
        self.existing.add(pid)
        worker = lifecycle()
        return worker, WorkerMetrics(files, worker, pid=pid)

    def reap(self, pid: int) -> None:
        self.live.discard(pid)
        self.existing.discard(pid)

    def master(self, files: WorkerFiles, master: Lifecycle | None = None) -> ServerMetrics:
        return ServerMetrics(master or lifecycle(), files, lambda: self.live, exists=self.existing.__contains__)


def total(metrics: ServerMetrics) -> Snapshot:
    return merge(metrics.snapshots())


def metrics_files(files: WorkerFiles) -> list[str]:
    return files.names(PREFIX)


class TestWorkerFiles:
    """WorkerFiles: one private directory of JSON files, read with bounds."""

    def test_writes_and_reads_json(self, files: WorkerFiles) -> None:
        """What is written under a name reads back; names lists by prefix; discard removes, twice is fine."""
        files.write("metrics-1-2.json", {"a": [1, 2]})
        files.write("worker-1.json", {})
        assert files.names(PREFIX) == ["metrics-1-2.json"]
        assert files.read("metrics-1-2.json", 100) == {"a": [1, 2]}
        files.discard("metrics-1-2.json")
        files.discard("metrics-1-2.json")
        assert files.names(PREFIX) == []

    def test_private(self, files: WorkerFiles) -> None:
        """The directory is the owner's only."""
        assert os.stat(files.path).st_mode & 0o077 == 0

    def test_refuses_a_huge_file(self, files: WorkerFiles) -> None:
        """A file over the bound is a ValueError, read no further than the bound."""
        with open(os.path.join(files.path, "metrics-1-1.json"), "w") as stream:
            stream.write(" " * 200 + "{}")
        with pytest.raises(ValueError, match="larger than 100 bytes"):
            files.read("metrics-1-1.json", 100)

    def test_refuses_a_fifo_without_blocking(self, files: WorkerFiles) -> None:
        """A FIFO (no writer) is refused at once, not waited on."""
        os.mkfifo(os.path.join(files.path, "metrics-1-1.json"))
        with pytest.raises(ValueError, match="not a regular file"):
            files.read("metrics-1-1.json", 100)

    def test_refuses_a_symlink(self, files: WorkerFiles, tmp_path: object) -> None:
        """A symbolic link is not followed."""
        os.symlink("/etc/hostname", os.path.join(files.path, "metrics-1-1.json"))
        with pytest.raises(OSError):
            files.read("metrics-1-1.json", 100)

    def test_parts_share_the_directory(self, files: WorkerFiles) -> None:
        """The shutdown parts live in the same directory, and their remove() removes it."""
        parts = PartsDirectory(files)
        assert parts.path == files.path and parts.read_all() == []
        parts.remove()
        assert not os.path.exists(files.path)


class TestWorkerMetrics:
    """WorkerMetrics: one worker's file, written when it changed, and a last time at exit."""

    def test_writes_when_changed_only(self, files: WorkerFiles) -> None:
        """The first publish writes; an unchanged one does not; a new rejection does."""
        worker, metrics = Workers().boot(files, 11)
        metrics.publish()
        (name,) = metrics_files(files)
        assert name.startswith("metrics-11-") and name == metrics.name
        mtime = os.stat(os.path.join(files.path, name)).st_mtime_ns
        os.utime(os.path.join(files.path, name), ns=(0, 0))
        metrics.publish()
        assert os.stat(os.path.join(files.path, name)).st_mtime_ns == 0  # not rewritten
        worker.stats.rejected("max_in_flight")
        metrics.publish()
        assert os.stat(os.path.join(files.path, name)).st_mtime_ns >= mtime
        assert files.read(name, MAX_FILE_BYTES)["requests"]["rejected"]["max_in_flight"] == 1  # type: ignore[index]

    def test_nothing_after_the_final_write(self, files: WorkerFiles) -> None:
        """final() writes the last counts; a periodic publish after it writes nothing."""
        worker, metrics = Workers().boot(files, 12)
        worker.stats.rejected("draining")
        metrics.final()
        worker.stats.rejected("draining")
        metrics.publish()
        assert files.read(metrics.name, MAX_FILE_BYTES)["requests"]["rejected"]["draining"] == 1  # type: ignore[index]

    def test_a_failing_write_is_logged_once(self, files: WorkerFiles, caplog: pytest.LogCaptureFixture) -> None:
        """The directory gone: the worker logs one warning however often it publishes, and raises nothing."""
        worker, metrics = Workers().boot(files, 13)
        files.remove()
        for _ in range(3):
            worker.stats.rejected("draining")
            metrics.publish()
        warned = [r for r in caplog.records if "cannot publish its metrics" in r.getMessage()]
        assert len(warned) == 1

    def test_a_new_name_per_boot(self, files: WorkerFiles) -> None:
        """Two workers of one pid (a reused pid) write two files."""
        _, first = Workers().boot(files, 14)
        _, second = Workers().boot(files, 14)
        assert first.name != second.name


class TestServerMetrics:
    """ServerMetrics: the master's own, the live workers', and what exited workers counted."""

    def test_adds_the_master_and_the_live_workers(self, files: WorkerFiles) -> None:
        """The sum has each live worker's rejections and in-flight, and the master's probe counts."""
        fleet = Workers()
        master = lifecycle()
        master.stats.checked("livez", [("ping", True)])
        metrics = fleet.master(files, master)
        for pid, rejected in ((21, 2), (22, 3)):
            worker, published = fleet.boot(files, pid)
            for _ in range(rejected):
                worker.stats.rejected("max_in_flight")
            worker.in_flight.add()
            published.publish()
        data = total(metrics)
        assert data.requests.rejected["max_in_flight"] == 5 and data.in_flight == 2
        assert [(c.endpoint, c.name, c.successes) for c in data.checks] == [("livez", "ping", 1)]

    def test_a_recycled_workers_counters_stay(self, files: WorkerFiles) -> None:
        """A worker reaped after its final write: its counters stay in the total, its in-flight goes, its file too;
        its replacement's add on top; the total never goes backwards."""
        fleet = Workers()
        metrics = fleet.master(files)
        old, old_metrics = fleet.boot(files, 31)
        old.stats.rejected("max_in_flight")
        old.in_flight.add()
        old_metrics.publish()
        assert total(metrics).requests.rejected["max_in_flight"] == 1
        old.stats.rejected("max_in_flight")  # after its last periodic write
        old_metrics.final()
        fleet.reap(31)
        new, new_metrics = fleet.boot(files, 32)
        new.stats.rejected("max_in_flight")
        new_metrics.publish()
        seen = [total(metrics) for _ in range(2)]
        assert [d.requests.rejected["max_in_flight"] for d in seen] == [3, 3]
        assert [d.in_flight for d in seen] == [0, 0]
        assert metrics_files(files) == [new_metrics.name]
        assert metrics.retained.requests.rejected["max_in_flight"] == 2

    def test_a_reused_pid(self, files: WorkerFiles) -> None:
        """A live pid with two files (it booted again before the master looked): the older one is folded."""
        fleet = Workers()
        metrics = fleet.master(files)
        old, old_metrics = fleet.boot(files, 41)
        old.stats.rejected("draining")
        old.in_flight.add()
        old_metrics.final()
        new, new_metrics = fleet.boot(files, 41)
        new.stats.rejected("draining")
        new_metrics.publish()
        data = total(metrics)
        assert (data.requests.rejected["draining"], data.in_flight) == (2, 0)
        assert metrics_files(files) == [new_metrics.name]

    def test_a_gone_process_never_seen_live_is_folded(self, files: WorkerFiles) -> None:
        """A worker that lived and died between two looks: no such process, so it is folded."""
        fleet = Workers()
        metrics = fleet.master(files)
        worker, published = fleet.boot(files, 51)
        worker.stats.rejected("shutting_down")
        published.final()
        fleet.reap(51)
        assert total(metrics).requests.rejected["shutting_down"] == 1
        assert metrics_files(files) == []

    def test_a_child_not_yet_in_workers_is_left(self, files: WorkerFiles) -> None:
        """A file of a process that exists but is not a live worker yet (just forked) is neither counted nor
        removed."""
        fleet = Workers()
        metrics = fleet.master(files)
        worker, published = fleet.boot(files, 61)
        fleet.live.discard(61)
        worker.stats.rejected("shutting_down")
        published.publish()
        assert total(metrics).requests.rejected["shutting_down"] == 0
        assert metrics_files(files) == [published.name]
        fleet.live.add(61)
        assert total(metrics).requests.rejected["shutting_down"] == 1

    def test_folds_when_workers_change_without_a_scrape(self, files: WorkerFiles) -> None:
        """on_workers_changed folds an exited worker's file when the live set changed; else it leaves the files."""
        fleet = Workers()
        metrics = fleet.master(files)
        worker, published = fleet.boot(files, 71)
        worker.stats.rejected("draining")
        published.final()
        metrics.on_workers_changed()
        assert metrics_files(files) == [published.name]
        fleet.reap(71)
        metrics.on_workers_changed()
        assert metrics_files(files) == []
        assert metrics.retained.requests.rejected["draining"] == 1

    @pytest.mark.parametrize(
        "content",
        [
            b'{"in_flight": 1, "rejec',  # truncated
            b"\xff\xfe not utf-8",
            b"[1, 2, 3]",
            b'{"in_flight": "many"}',
            b" " * (MAX_FILE_BYTES + 1),
        ],
        ids=["truncated", "not-utf8", "a-list", "wrong-types", "huge"],
    )
    def test_a_hostile_live_file_is_skipped_and_logged_once(
        self, files: WorkerFiles, caplog: pytest.LogCaptureFixture, content: bytes
    ) -> None:
        """A live worker's file that is not a snapshot: the rest still adds up, one warning for many scrapes."""
        fleet = Workers()
        metrics = fleet.master(files)
        good, published = fleet.boot(files, 81)
        good.stats.rejected("draining")
        published.publish()
        fleet.boot(files, 82)
        with open(os.path.join(files.path, "metrics-82-5.json"), "wb") as stream:
            stream.write(content)
        with caplog.at_level(logging.WARNING, logger="graceful.gunicorn.metrics"):
            for _ in range(3):
                assert total(metrics).requests.rejected["draining"] == 1
        warned = [r.getMessage() for r in caplog.records if "skipping the metrics file" in r.getMessage()]
        assert len(warned) == 1 and "metrics-82-5.json" in warned[0]

    def test_a_hostile_file_of_a_gone_worker_is_removed(
        self, files: WorkerFiles, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An exited worker's file that is not a snapshot: logged, removed, nothing folded."""
        fleet = Workers()
        metrics = fleet.master(files)
        with open(os.path.join(files.path, "metrics-91-1.json"), "w") as stream:
            json.dump({"in_flight": 5}, stream)
        assert total(metrics).in_flight == 0
        assert metrics_files(files) == []
        assert any("metrics-91-1.json" in r.getMessage() for r in caplog.records)

    def test_other_names_are_skipped(self, files: WorkerFiles, caplog: pytest.LogCaptureFixture) -> None:
        """A metrics-*.json whose name is not metrics-<pid>-<start>.json is skipped (logged once) and left."""
        fleet = Workers()
        metrics = fleet.master(files)
        files.write("metrics-../x.json".replace("/", "_"), {})
        files.write("metrics-0-1.json", {})
        for _ in range(2):
            total(metrics)
        warned = [r for r in caplog.records if "not a metrics file's name" in r.getMessage()]
        assert len(warned) == 2
        assert len(metrics_files(files)) == 2

    def test_the_directory_gone(self, files: WorkerFiles, caplog: pytest.LogCaptureFixture) -> None:
        """The directory removed (the master exiting): the master's own snapshot and the retained total still
        answer."""
        fleet = Workers()
        master = lifecycle()
        master.stats.checked("readyz", [("ping", True)])
        metrics = fleet.master(files, master)
        files.remove()
        assert total(metrics).checks[0].successes == 1
