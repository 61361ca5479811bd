"""graceful.gunicorn.metrics in process: workers' metrics records, the master's sum, the retained total, bad records.

A worker's side is checked on a bare socketpair, read with the channel's
own :class:`~graceful.gunicorn.channel.FrameReader` (no thread); the
master's on a real :class:`~graceful.gunicorn.channel.MasterChannel` whose
reader thread the tests wait for (bounded, on an Event's timed wait).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.gunicorn.channel import REPORTS, FrameReader, Kind, WorkerChannel
from graceful.gunicorn.metrics import ServerMetrics, WorkerMetrics
from graceful.metrics.snapshot import Snapshot, merge
from graceful.testing import FakeClock
from tests.gunicorn.test_channel import Channels, wait_for


def lifecycle() -> Lifecycle:
    return Lifecycle(Config(), clock=FakeClock())


class Pair:
    """A worker's channel on a bare socketpair; the test reads the master's end itself."""

    def __init__(self) -> None:
        self.master_end, worker_end = socket.socketpair()
        self.master_end.setblocking(False)
        self.worker = WorkerChannel(worker_end, pid=11)
        self.reader = FrameReader(REPORTS)

    def metrics_records(self) -> list[dict[str, object]]:
        """The METRICS records sent so far (the hello skipped)."""
        records = []
        try:
            while chunk := self.master_end.recv(1 << 16):
                records += self.reader.feed(chunk)
        except BlockingIOError:
            pass
        return [json.loads(payload) for kind, payload in records if kind is Kind.METRICS]

    def close(self) -> None:
        self.worker.close()
        self.master_end.close()


@pytest.fixture
def pair() -> Iterator[Pair]:
    made = Pair()
    yield made
    made.close()


class Fleet(Channels):
    """A master's channel with its ServerMetrics, and the workers connected to it."""

    def __init__(self, master: Lifecycle | None = None) -> None:
        super().__init__()
        self.metrics = ServerMetrics(master or lifecycle(), self.master)

    def boot(self, pid: int) -> tuple[Lifecycle, WorkerChannel, WorkerMetrics]:
        """Worker ``pid``: its lifecycle, its channel, its metrics."""
        worker = lifecycle()
        channel = self.connect(pid)
        return worker, channel, WorkerMetrics(channel, worker)

    def total(self) -> Snapshot:
        return merge(self.metrics.snapshots())

    def live(self) -> list[int]:
        """The pids whose metrics the master holds as live."""
        return self.pids(Kind.METRICS)


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    made = Fleet()
    yield made
    made.close()


class TestWorkerMetrics:
    """WorkerMetrics: one worker's records, sent when they changed, and a last time at exit."""

    def test_sends_when_changed_only(self, pair: Pair) -> None:
        """The first publish sends; an unchanged one does not; a new rejection does."""
        worker = lifecycle()
        metrics = WorkerMetrics(pair.worker, worker)
        metrics.publish()
        metrics.publish()
        worker.stats.rejected("max_in_flight")
        metrics.publish()
        records = pair.metrics_records()
        assert len(records) == 2
        assert [record["requests"]["rejected"]["max_in_flight"] for record in records] == [0, 1]  # type: ignore[index]

    def test_nothing_after_the_final_send(self, pair: Pair) -> None:
        """final() sends the last counts; a periodic publish after it sends nothing."""
        worker = lifecycle()
        metrics = WorkerMetrics(pair.worker, worker)
        worker.stats.rejected("draining")
        metrics.final()
        worker.stats.rejected("draining")
        metrics.publish()
        records = pair.metrics_records()
        assert [record["requests"]["rejected"]["draining"] for record in records] == [1]  # type: ignore[index]

    def test_a_closed_master_is_logged_once(self, pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
        """The master gone: the worker logs one warning however often it publishes, and raises nothing."""
        worker = lifecycle()
        metrics = WorkerMetrics(pair.worker, worker)
        pair.master_end.close()
        for _ in range(3):
            worker.stats.rejected("draining")
            metrics.publish()
        warned = [r for r in caplog.records if "its channel to the master" in r.getMessage()]
        assert len(warned) == 1


class TestServerMetrics:
    """ServerMetrics: the master's own, the live workers', and what exited workers counted."""

    def test_adds_the_master_and_the_live_workers(self) -> None:
        """The sum has each live worker's rejections and in-flight, and the master's probe counts."""
        master = lifecycle()
        master.stats.checked("livez", [("ping", True)])
        fleet = Fleet(master)
        try:
            for pid, rejected in ((21, 2), (22, 3)):
                worker, _, published = fleet.boot(pid)
                for _ in range(rejected):
                    worker.stats.rejected("max_in_flight")
                worker.in_flight.add()
                published.publish()
            assert wait_for(lambda: fleet.live() == [21, 22])
            data = fleet.total()
            assert data.requests.rejected["max_in_flight"] == 5 and data.in_flight == 2
            assert [(c.endpoint, c.name, c.successes) for c in data.checks] == [("livez", "ping", 1)]
        finally:
            fleet.close()

    def test_a_recycled_workers_counters_stay(self, fleet: Fleet) -> None:
        """A worker that exits after its final send: its counters stay in the total, its in-flight goes;
        its replacement's add on top; the total never goes backwards."""
        old, old_channel, old_metrics = fleet.boot(31)
        old.stats.rejected("max_in_flight")
        old.in_flight.add()
        old_metrics.publish()
        assert wait_for(lambda: fleet.total().requests.rejected.get("max_in_flight") == 1)
        old.stats.rejected("max_in_flight")  # after its last periodic send
        old_metrics.final()
        old_channel.close()  # it exits
        new, _, new_metrics = fleet.boot(32)
        new.stats.rejected("max_in_flight")
        new_metrics.publish()
        assert wait_for(lambda: fleet.live() == [32])
        seen = [fleet.total() for _ in range(2)]
        assert [d.requests.rejected["max_in_flight"] for d in seen] == [3, 3]
        assert [d.in_flight for d in seen] == [0, 0]
        assert fleet.metrics.retained.requests.rejected["max_in_flight"] == 2

    def test_a_reused_pid(self, fleet: Fleet) -> None:
        """Two workers of one pid, one after the other: each channel counts apart, the first folded at its exit."""
        old, old_channel, old_metrics = fleet.boot(41)
        old.stats.rejected("draining")
        old.in_flight.add()
        old_metrics.final()
        new, _, new_metrics = fleet.boot(41)
        new.stats.rejected("draining")
        new_metrics.publish()
        assert wait_for(lambda: fleet.live() == [41, 41])
        assert fleet.total().requests.rejected["draining"] == 2
        old_channel.close()
        assert wait_for(lambda: fleet.live() == [41])
        data = fleet.total()
        assert data.requests.rejected["draining"] == 2 and data.in_flight == 0

    @pytest.mark.parametrize(
        "payload",
        [b'{"in_flight": ', b"\xff\xfe", b"[1, 2]", b'{"in_flight": "many"}', b"[" * 5000],
        ids=["truncated", "not-utf8", "a-list", "wrong-types", "nested-deep"],
    )
    def test_a_hostile_live_record_is_skipped_and_logged_once(
        self, fleet: Fleet, caplog: pytest.LogCaptureFixture, payload: bytes
    ) -> None:
        """A live worker's record that is not a snapshot: the rest still adds up, one warning for many scrapes."""
        good, _, published = fleet.boot(81)
        good.stats.rejected("draining")
        published.publish()
        _, hostile, _ = fleet.boot(82)
        assert hostile.send(Kind.METRICS, payload)
        assert wait_for(lambda: fleet.live() == [81, 82])
        with caplog.at_level(logging.WARNING, logger="graceful.gunicorn.metrics"):
            for _ in range(3):
                assert fleet.total().requests.rejected["draining"] == 1
        warned = [r.getMessage() for r in caplog.records if "skipping worker 82's metrics" in r.getMessage()]
        assert len(warned) == 1

    def test_a_hostile_record_of_a_gone_worker_folds_nothing(self, fleet: Fleet) -> None:
        """An exited worker's last record that is not a snapshot: nothing folded, the master goes on."""
        _, hostile, _ = fleet.boot(91)
        assert hostile.send(Kind.METRICS, json.dumps({"in_flight": 5}).encode())
        assert wait_for(lambda: fleet.live() == [91])
        hostile.close()
        assert wait_for(lambda: fleet.live() == [])
        assert fleet.total().in_flight == 0 and not any(fleet.metrics.retained.requests.rejected.values())
