"""The master's fold of workers' metrics files (graceful.gunicorn.metrics): file age by number, process existence."""

from __future__ import annotations

import os

from graceful.gunicorn.metrics import _process_exists
from graceful.gunicorn.shared import WorkerFiles
from tests.gunicorn.test_metrics import Workers, files, metrics_files, total

__all__ = ["files"]  # the fixture, shared with test_metrics.py


class TestFold:
    def test_the_older_file_of_a_reused_pid_is_folded_whatever_the_listing_order(self, files: WorkerFiles) -> None:
        """Boot times compare as numbers: started 10 is newer than 9 though "10" sorts first; the 9 one is folded."""
        fleet = Workers()
        metrics = fleet.master(files)
        for started, rejected in ((9, 1), (10, 2)):  # two boots of pid 41, each with its count
            worker, published = fleet.boot(files, 41)
            for _ in range(rejected):
                worker.stats.rejected("draining")
            published.final()
            os.rename(os.path.join(files.path, published.name), os.path.join(files.path, f"metrics-41-{started}.json"))
        assert metrics_files(files) == ["metrics-41-10.json", "metrics-41-9.json"]  # the newer one listed first
        assert total(metrics).requests.rejected["draining"] == 3  # the older one's count kept, folded
        assert metrics_files(files) == ["metrics-41-10.json"]
        assert metrics.retained.requests.rejected["draining"] == 1


class TestProcessExists:
    def test_a_process_exists_until_it_is_gone(self) -> None:
        """This process exists; a pid above Linux's largest does not; pid 1 exists even if not ours to signal."""
        assert _process_exists(os.getpid())
        assert not _process_exists(2**22 + 1)
        assert _process_exists(1)
