"""Unit tests of graceful.gunicorn.ends: how the master accounts for workers that end abnormally.

Each worker's channel is a real one (``MasterChannel.connect``, no fork);
its exit status is handed in as the arbiter adapter's look before reaping
would. No Gunicorn, no sleep beyond the channel's own reading.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.role import Role
from graceful.gunicorn.adapter.arbiter import ExitStatus
from graceful.gunicorn.channel import Kind, MasterChannel, WorkerChannel
from graceful.gunicorn.ends import WorkerEnds, in_flight_payload
from graceful.testing import FakeClock

SOON = 10.0  # real seconds: a bound for a loaded machine

KILLED = ExitStatus(signal=signal.SIGKILL)
EXIT_0 = ExitStatus(status=0)


@pytest.fixture
def channel() -> Iterator[MasterChannel]:
    """The master's channel, closed at the end."""
    made = MasterChannel()
    yield made
    made.close()


@pytest.fixture
def ends(channel: MasterChannel) -> WorkerEnds:
    """A master's account of its workers' ends, watching (its first TERM came)."""
    lifecycle = Lifecycle(Config(), clock=FakeClock(), role=Role.MASTER)
    made = WorkerEnds(lifecycle, channel)
    made.watch()
    return made


def worker(channel: MasterChannel, pid: int, in_flight: int | None = None, part: bool = False) -> WorkerChannel:
    """Worker ``pid``'s channel, having reported ``in_flight`` and maybe sent its part."""
    end = channel.connect(pid)
    if in_flight is not None:
        assert end.send(Kind.IN_FLIGHT, in_flight_payload(in_flight), timeout=SOON)
    if part:
        assert end.send(Kind.PART, b"{}", timeout=SOON)
    return end


def gone(channel: MasterChannel, *ends: WorkerChannel) -> None:
    """The workers exit: their channels close, and the master reads each to its end."""
    for end in ends:
        end.close()
    channel.parts(SOON)


class TestWhatEndedAbnormally:
    def test_a_worker_killed_by_a_signal_loses_its_requests_in_flight(
        self, channel: MasterChannel, ends: WorkerEnds, caplog: pytest.LogCaptureFixture
    ) -> None:
        """SIGKILL (the OOM killer's) while stopping, 4 in flight at its last report: 4 lost, logged once."""
        ends.stopping()
        gone(channel, worker(channel, 11, in_flight=4))
        ends.exited(11, KILLED)
        with caplog.at_level(logging.WARNING, logger="graceful"):
            [end] = ends.settle()
        assert (end.pid, end.cause, end.signal, end.lost, end.replaced) == (11, "signal", "SIGKILL", 4, False)
        assert caplog.messages == [
            "graceful: ended abnormally: worker 11 killed by SIGKILL without its part of the record"
            " while stopping: 4 requests in flight lost"
        ]
        assert ends.lifecycle.stats.process_ends() == [end]
        assert ends.settle(final=True) == []  # once

    def test_a_worker_the_master_killed_at_graceful_timeout_says_so(
        self, channel: MasterChannel, ends: WorkerEnds
    ) -> None:
        """The master's own SIGKILL at graceful_timeout is named as such."""
        ends.stopping()
        frozen = worker(channel, 11, in_flight=1)
        ends.killing({11})
        gone(channel, frozen)
        ends.exited(11, KILLED)
        [end] = ends.settle()
        assert end.describe() == (
            "worker 11 killed by the master at graceful_timeout (SIGKILL) without its part of the record while"
            " stopping: 1 request in flight lost"
        )

    def test_a_crash_before_any_report_is_unknown(self, channel: MasterChannel, ends: WorkerEnds) -> None:
        """An exit status other than 0 and no in-flight report: its requests are unknown, not 0."""
        ends.stopping()
        gone(channel, worker(channel, 11))
        ends.exited(11, ExitStatus(status=3))
        [end] = ends.settle()
        assert (end.cause, end.status, end.in_flight, end.lost) == ("status", 3, None, None)

    def test_status_0_without_its_part_is_abnormal(self, channel: MasterChannel, ends: WorkerEnds) -> None:
        """Gone without its part while the master stops the workers, though it exited 0: its last count is lost."""
        ends.stopping()
        gone(channel, worker(channel, 11, in_flight=2))
        ends.exited(11, EXIT_0)
        [end] = ends.settle()
        assert (end.cause, end.lost) == ("no_part", 2)

    def test_a_worker_that_ended_during_the_delay_was_replaced(self, channel: MasterChannel, ends: WorkerEnds) -> None:
        """Before the master TERMs its workers, Gunicorn replaces a worker that dies: it is named replaced."""
        gone(channel, worker(channel, 11, in_flight=0))
        ends.exited(11, KILLED)
        [end] = ends.settle()
        assert end.replaced
        assert end.describe().startswith("worker 11 killed by SIGKILL without its part of the record during the delay")


class TestWhatIsNot:
    def test_a_worker_that_sent_its_part_and_exited_0_ended_normally(
        self, channel: MasterChannel, ends: WorkerEnds
    ) -> None:
        """Its part counts its requests; status 0: nothing to say."""
        gone(channel, worker(channel, 11, in_flight=3, part=True))
        ends.exited(11, EXIT_0)
        assert ends.settle(final=True) == []
        assert ends.lifecycle.stats.process_ends() == []

    def test_killed_after_sending_its_part_loses_nothing(self, channel: MasterChannel, ends: WorkerEnds) -> None:
        """A signal after its part: abnormal, but its requests are in its part (0 lost)."""
        gone(channel, worker(channel, 11, in_flight=3, part=True))
        ends.exited(11, KILLED)
        [end] = ends.settle()
        assert end.lost == 0 and end.describe().endswith("killed by SIGKILL during the delay (replaced)")

    def test_a_process_stop_during_the_delay_that_exits_0_without_a_part_is_normal(
        self, channel: MasterChannel, ends: WorkerEnds
    ) -> None:
        """Recycled (or replaced on HUP) during the delay, it exited 0 before it heard of the shutdown: no loss."""
        gone(channel, worker(channel, 11, in_flight=0))
        ends.exited(11, EXIT_0)
        assert ends.settle(final=True) == []

    def test_ends_before_the_first_term_are_gunicorns_business(self, channel: MasterChannel) -> None:
        """Not watching yet (no TERM): a worker's end is not accounted for."""
        ends = WorkerEnds(Lifecycle(Config(), clock=FakeClock(), role=Role.MASTER), channel)
        gone(channel, worker(channel, 11, in_flight=3))
        ends.exited(11, KILLED)
        assert ends.settle(final=True) == []


class TestWhenItIsSettled:
    def test_waits_for_both_sides_until_the_end(self, channel: MasterChannel, ends: WorkerEnds) -> None:
        """Its status alone is not enough while its channel may still hold its part; at exit it is."""
        live = worker(channel, 11, in_flight=5)
        ends.exited(11, ExitStatus(status=1))
        assert ends.settle() == []
        [end] = ends.settle(final=True)  # its channel never closed: no part
        assert (end.cause, end.status, end.in_flight) == ("status", 1, None)
        live.close()

    def test_a_status_never_seen_is_read_from_the_channel_alone(self, channel: MasterChannel, ends: WorkerEnds) -> None:
        """Reaped unseen (it exited between the look and Gunicorn's waitpid): its channel still says no part."""
        ends.stopping()
        gone(channel, worker(channel, 11, in_flight=2))
        assert ends.settle() == []
        [end] = ends.settle(final=True)
        assert (end.cause, end.status, end.lost) == ("no_part", None, 2)

    def test_a_killed_worker_reaped_unseen_is_still_the_masters_kill(
        self, channel: MasterChannel, ends: WorkerEnds
    ) -> None:
        """SIGKILLed by the master and reaped by Gunicorn's stop before the look: still killed at graceful_timeout."""
        ends.stopping()
        frozen = worker(channel, 11, in_flight=1)
        ends.killing({11})
        gone(channel, frozen)
        [end] = ends.settle(final=True)
        assert (end.cause, end.signal) == ("killed", "SIGKILL")
