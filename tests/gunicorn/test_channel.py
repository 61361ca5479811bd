"""Unit tests of graceful.gunicorn.channel: the framing, the master's reader, a worker's end, hostile records.

Socketpairs in this one process (``MasterChannel.connect`` is ``pre_fork``
and ``post_fork`` without the fork), no server, no sleep: a test that waits
for the master's reader thread waits on an Event's timed wait, bounded. Two
tests fork for real, as Gunicorn does, to see what a child keeps.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from graceful.gunicorn.channel import (
    FACTS,
    MAX_PAYLOAD,
    REPORTS,
    FrameReader,
    Kind,
    MasterChannel,
    Received,
    WorkerChannel,
    frame,
)
from graceful.gunicorn.stop_reason import StopReason

SOON = 10.0  # real seconds: a bound for a loaded machine, never reached when things work


def wait_for(condition: Callable[[], bool]) -> bool:
    """Wait (bounded) for ``condition()`` that the master's reader thread makes true."""
    pause = threading.Event()
    for _ in range(int(SOON / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return condition()


def facts_waiting(worker: WorkerChannel) -> list[tuple[Kind, bytes]]:
    """The records waiting at a worker's end, read raw (without the channel's own reading)."""
    data = b""
    try:
        while chunk := os.read(worker.fileno(), 65536):
            data += chunk
    except BlockingIOError:
        pass
    return FrameReader(FACTS).feed(data)


class Channels:
    """A master's channel and the workers' ends a test connects; all closed at the end."""

    def __init__(self) -> None:
        self.master = MasterChannel()
        self.workers: list[WorkerChannel] = []

    def connect(self, pid: int) -> WorkerChannel:
        self.workers.append(self.master.connect(pid))
        return self.workers[-1]

    def pids(self, kind: Kind) -> list[int]:
        return [pid for pid, _ in self.master.latest(kind)]

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.master.close()


@pytest.fixture
def channels() -> Iterator[Channels]:
    made = Channels()
    yield made
    made.close()


class TestFraming:
    def test_records_come_out_whole_however_the_bytes_arrive(self) -> None:
        """Three records fed one byte at a time come out once each, whole and in order."""
        stream = frame(Kind.HELLO, b"12") + frame(Kind.DRAINED) + frame(Kind.PART, b'{"pid": 12}')
        reader = FrameReader(REPORTS)
        records = [record for i in range(len(stream)) for record in reader.feed(stream[i : i + 1])]
        assert records == [(Kind.HELLO, b"12"), (Kind.DRAINED, b""), (Kind.PART, b'{"pid": 12}')]
        assert reader.pending == 0 and reader.error is None

    def test_a_record_not_yet_whole_is_pending(self) -> None:
        """Half a record gives nothing and counts as pending (at end-of-file: cut short)."""
        reader = FrameReader(REPORTS)
        assert reader.feed(frame(Kind.PART, b"x" * 10)[:8]) == []
        assert reader.pending == 8

    def test_a_payload_longer_than_its_kind_allows_is_not_framed(self) -> None:
        """frame() refuses a payload over its kind's bound, naming the kind and both sizes."""
        with pytest.raises(ValueError, match=r"^a HEALTH record's payload is at most 4096 bytes, not 4097$"):
            frame(Kind.HEALTH, b"x" * (MAX_PAYLOAD[Kind.HEALTH] + 1))

    def test_an_unknown_kind_loses_the_stream(self) -> None:
        """A kind byte no record has: the records before it come out, nothing after, and the reader says why."""
        reader = FrameReader(REPORTS)
        records = reader.feed(frame(Kind.DRAINED) + b"\x00\x00\x00\x00\x63" + frame(Kind.DRAINED))
        assert records == [(Kind.DRAINED, b"")]
        assert reader.error == "a record of unknown kind 99"
        assert reader.feed(frame(Kind.DRAINED)) == []

    def test_a_length_over_the_kinds_bound_loses_the_stream(self) -> None:
        """A length no record of its kind can have is refused before any of it is buffered."""
        reader = FrameReader(REPORTS)
        assert reader.feed(b"\xff\xff\xff\xff" + bytes([Kind.METRICS])) == []
        assert reader.error == "a METRICS record of 4294967295 bytes (at most 1048576)"
        assert reader.pending == 0

    def test_each_side_accepts_only_the_others_kinds(self) -> None:
        """A worker reads facts only, the master reports only: a report sent to a worker is refused."""
        reader = FrameReader(FACTS)
        assert reader.feed(frame(Kind.HELLO, b"1")) == []
        assert reader.error == f"a record of unknown kind {int(Kind.HELLO)}"


class TestFacts:
    def test_a_fact_reaches_the_worker(self, channels: Channels) -> None:
        """ShutdownInitiated fired in the master is read by the worker's wait."""
        worker = channels.connect(11)
        assert not worker.fired(Kind.SHUTDOWN_INITIATED)
        channels.master.fire(Kind.SHUTDOWN_INITIATED)
        assert worker.wait_for(Kind.SHUTDOWN_INITIATED, SOON)
        assert channels.master.fired(Kind.SHUTDOWN_INITIATED) and not worker.fired(Kind.NOT_ACCEPTING)

    def test_a_fact_carries_the_masters_time(self, channels: Channels) -> None:
        """A fact fired with the master's monotonic time reads back with it; one fired without reads None."""
        worker = channels.connect(11)
        channels.master.fire(Kind.SHUTDOWN_INITIATED, 812.25)
        channels.master.fire(Kind.CLOSE_LISTENERS)
        assert worker.wait_for(Kind.CLOSE_LISTENERS, SOON)
        assert worker.fired_at(Kind.SHUTDOWN_INITIATED) == 812.25
        assert worker.fired_at(Kind.CLOSE_LISTENERS) is None and worker.fired_at(Kind.NOT_ACCEPTING) is None

    @pytest.mark.parametrize("payload", [struct.pack("!d", math.nan), struct.pack("!d", -1.0), b"\x01\x02"])
    def test_a_time_that_is_not_one_reads_as_none(self, payload: bytes) -> None:
        """A fact whose time is not a finite, non-negative double still counts as fired; its time is None."""
        master_end, worker_end = socket.socketpair()
        try:
            worker = WorkerChannel(worker_end, pid=11)
            master_end.sendall(frame(Kind.NOT_ACCEPTING, payload))
            assert worker.wait_for(Kind.NOT_ACCEPTING, SOON)
            assert worker.fired_at(Kind.NOT_ACCEPTING) is None
        finally:
            master_end.close()
            worker_end.close()

    def test_a_fact_is_sent_once(self, channels: Channels) -> None:
        """Firing a fact again sends nothing more."""
        worker = channels.connect(11)
        channels.master.fire(Kind.NOT_ACCEPTING)
        channels.master.fire(Kind.NOT_ACCEPTING)
        assert facts_waiting(worker) == [(Kind.NOT_ACCEPTING, b"")]

    def test_a_worker_forked_later_gets_the_facts_first(self, channels: Channels) -> None:
        """A worker forked after facts fired (a dying worker replaced in the delay) gets them as its first records."""
        channels.master.set_stop_reason(StopReason.RELOAD)
        channels.master.fire(Kind.SHUTDOWN_INITIATED)
        channels.master.set_stop_reason(StopReason.SCALE_IN)
        late = channels.connect(12)
        assert facts_waiting(late) == [(Kind.STOP_REASON, b"scale-in"), (Kind.SHUTDOWN_INITIATED, b"")]

    def test_the_stop_reason_sent_before_the_term_is_read_at_the_term(self, channels: Channels) -> None:
        """The reason is in the worker's end before the TERM: reading it after the TERM finds it, the latest one."""
        worker = channels.connect(11)
        assert worker.stop_reason() is StopReason.BY_MASTER
        channels.master.set_stop_reason(StopReason.RELOAD)
        channels.master.set_stop_reason(StopReason.UPGRADE)
        assert worker.stop_reason() is StopReason.UPGRADE
        assert channels.master.stop_reason is StopReason.UPGRADE

    @pytest.mark.parametrize("reason", [StopReason.RECYCLED, StopReason.TIMEOUT])
    def test_the_workers_own_reasons_are_not_sent(self, channels: Channels, reason: StopReason) -> None:
        """recycled and timeout are known by the worker itself; the master sending one is a bug."""
        with pytest.raises(ValueError, match="a worker knows it itself"):
            channels.master.set_stop_reason(reason)

    def test_only_facts_are_fired(self, channels: Channels) -> None:
        """A report kind (or the stop reason, which has a value) is not a fact fire() sends."""
        for kind in (Kind.DRAINED, Kind.STOP_REASON):
            with pytest.raises(ValueError, match="is not a fact the master fires"):
                channels.master.fire(kind)

    def test_a_wait_for_a_fact_not_fired_times_out(self, channels: Channels) -> None:
        """wait_for returns False at its timeout; the master gone, it still waits no longer than that."""
        worker = channels.connect(11)
        assert not worker.wait_for(Kind.CLOSE_LISTENERS, 0.0)
        channels.master.close()
        assert not worker.wait_for(Kind.CLOSE_LISTENERS, 0.05)
        assert worker.master_gone

    def test_a_fact_read_by_another_thread_wakes_the_wait(self, channels: Channels) -> None:
        """The stop thread may read the fact the watch thread waits on: the wait still ends at once."""
        worker = channels.connect(11)
        woke = threading.Event()
        waiter = threading.Thread(target=lambda: worker.wait_for(Kind.NOT_ACCEPTING, SOON) and woke.set())
        waiter.start()
        channels.master.fire(Kind.NOT_ACCEPTING)
        assert wait_for(lambda: worker.fired(Kind.NOT_ACCEPTING))  # read here, not by the waiting thread
        assert woke.wait(SOON)
        waiter.join(SOON)


class TestReports:
    def test_the_latest_of_each_kind_per_worker(self, channels: Channels) -> None:
        """The master keeps each worker's latest record of a kind, with the time it read it."""
        first, second = channels.connect(11), channels.connect(12)
        for worker, payloads in ((first, (b"a", b"b")), (second, (b"c",))):
            for payload in payloads:
                assert worker.send(Kind.METRICS, payload)
        assert wait_for(lambda: [r.payload for _, r in channels.master.latest(Kind.METRICS)] == [b"b", b"c"])
        assert channels.pids(Kind.METRICS) == [11, 12] and channels.pids(Kind.HEALTH) == []

    def test_wait_all_waits_for_every_live_worker(self, channels: Channels) -> None:
        """wait_all: True once each live pid reported; a pid that never reports keeps it False at its timeout."""
        first, second = channels.connect(11), channels.connect(12)
        live = {11, 12}
        assert not channels.master.wait_all(Kind.DRAINED, lambda: live, 0.0)
        assert first.send(Kind.DRAINED)
        reporter = threading.Thread(target=second.send, args=(Kind.DRAINED,))
        reporter.start()
        assert channels.master.wait_all(Kind.DRAINED, lambda: live, SOON)
        reporter.join(SOON)
        assert not channels.master.wait_all(Kind.LISTENERS_CLOSED, lambda: live, 0.0)

    def test_a_part_sent_just_before_the_exit_is_read(self, channels: Channels) -> None:
        """A worker that sends its part and exits at once: the master reads its end to end-of-file, the part too."""
        worker = channels.connect(11)
        assert worker.send(Kind.PART, b'{"pid": 11}', timeout=SOON)
        worker.close()
        assert channels.master.parts(SOON) == [(11, b'{"pid": 11}')]
        assert channels.pids(Kind.PART) == []  # no longer live

    def test_parts_wait_no_longer_than_their_timeout(
        self, channels: Channels, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An end still open at exit (a worker's own child holds it): the parts read so far, after the timeout."""
        worker = channels.connect(11)
        assert worker.send(Kind.PART, b"{}")
        assert wait_for(lambda: channels.pids(Kind.PART) == [11])
        assert channels.master.parts(0.05) == [(11, b"{}")]
        assert "still open at exit" in caplog.text

    def test_on_close_sees_the_last_records(self, channels: Channels) -> None:
        """At a worker's end-of-file the master's consumers get its latest records, then it is no longer listed."""
        closed: list[tuple[int, dict[Kind, Received]]] = []
        channels.master.on_close(lambda pid, latest: closed.append((pid, dict(latest))))
        worker = channels.connect(11)
        assert worker.send(Kind.METRICS, b"last")
        worker.close()
        assert wait_for(lambda: closed != [])
        [(pid, latest)] = closed
        assert pid == 11 and latest[Kind.METRICS].payload == b"last"
        assert channels.pids(Kind.METRICS) == []


class TestHostileRecords:
    def test_an_unknown_kind_is_refused_once_and_the_master_reads_on(
        self, channels: Channels, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Garbage from one worker: logged once, nothing more taken from it; the other worker is still heard."""
        hostile, other = channels.connect(11), channels.connect(12)
        os.write(hostile.fileno(), b"\x00\x00\x00\x01\x63x" + b"\xff" * 100)
        assert hostile.send(Kind.METRICS, b"ignored")
        assert other.send(Kind.METRICS, b"heard")
        assert wait_for(lambda: channels.pids(Kind.METRICS) == [12])
        hostile.close()
        other.close()
        assert wait_for(lambda: "unknown kind 99" in caplog.text)
        warned = [r for r in caplog.records if "refusing what worker 11 sent" in r.getMessage()]
        assert len(warned) == 1
        assert channels.master.parts(SOON) == []

    def test_a_consumer_failing_at_an_exit_does_not_stop_the_reader(
        self, channels: Channels, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A consumer's bug at one worker's end-of-file is logged; the master reads the other workers on."""

        def broken(_pid: int, _latest: dict[Kind, Received]) -> None:
            raise RuntimeError("a consumer's bug")

        channels.master.on_close(broken)
        first, second = channels.connect(11), channels.connect(12)
        first.close()
        assert wait_for(lambda: "a channel consumer failed on worker 11's exit" in caplog.text)
        assert second.send(Kind.METRICS, b"still read")
        assert wait_for(lambda: channels.pids(Kind.METRICS) == [12])

    def test_a_huge_length_is_refused_without_buffering(
        self, channels: Channels, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A PART claiming 4 GiB: refused from its header, nothing buffered, the worker's later part ignored."""
        hostile = channels.connect(11)
        os.write(hostile.fileno(), b"\xff\xff\xff\xff" + bytes([Kind.PART]))
        assert hostile.send(Kind.PART, b"{}")
        hostile.close()
        assert channels.master.parts(SOON) == []
        assert "a PART record of 4294967295 bytes" in caplog.text

    def test_a_record_cut_short_at_the_exit_is_dropped(
        self, channels: Channels, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A worker dying in the middle of its part: the records before it count, the half part is dropped, logged."""
        worker = channels.connect(11)
        assert worker.send(Kind.DRAINED)
        os.write(worker.fileno(), frame(Kind.PART, b'{"pid": 11, "role": "worker"}')[:12])
        worker.close()
        assert channels.master.parts(SOON) == []
        assert channels.master.wait_all(Kind.DRAINED, lambda: {11}, 0.0)
        assert "a record cut short at end-of-file (12 bytes)" in caplog.text

    def test_records_after_a_bad_hello_count_for_no_worker(
        self, channels: Channels, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A stream whose hello is no pid: refused, logged once, and its reports count for no worker."""
        nobody = channels.connect(0)
        assert nobody.send(Kind.DRAINED) and nobody.send(Kind.METRICS, b"{}")
        assert wait_for(lambda: "a hello that is not a pid: b'0'" in caplog.text)
        nobody.close()
        assert channels.master.parts(SOON) == [] and channels.pids(Kind.METRICS) == []
        assert not channels.master.wait_all(Kind.DRAINED, lambda: {0}, 0.0)
        assert len([r for r in caplog.records if "refusing what worker ? sent" in r.getMessage()]) == 1


class TestWorkerSend:
    @pytest.fixture
    def unread(self) -> Iterator[tuple[socket.socket, WorkerChannel]]:
        """A worker's end whose master never reads: its buffer fills."""
        master_end, worker_end = socket.socketpair()
        channel = WorkerChannel(worker_end, pid=11)
        yield master_end, channel
        channel.close()
        master_end.close()

    def test_a_full_channel_drops_what_must_not_wait(self, unread: tuple[socket.socket, WorkerChannel]) -> None:
        """Health and periodic metrics never wait: once the buffer is full they are dropped and counted."""
        _, channel = unread
        sent = 0
        while channel.send(Kind.HEALTH, b"h") and sent < 1_000_000:
            sent += 1
        assert channel.dropped == 1 and 0 < sent < 1_000_000

    def test_a_report_waits_for_room_then_gives_up(
        self, unread: tuple[socket.socket, WorkerChannel], caplog: pytest.LogCaptureFixture
    ) -> None:
        """A record the master waits for waits up to its timeout for room, then fails; the channel stays usable."""
        master_end, channel = unread
        while channel.send(Kind.HEALTH, b"h"):
            pass
        assert not channel.send(Kind.DRAINED, timeout=0.05)
        assert "the master read nothing for 0.05s" in caplog.text
        master_end.setblocking(False)
        try:
            while master_end.recv(1 << 20):
                pass
        except BlockingIOError:
            pass
        assert channel.send(Kind.DRAINED, timeout=SOON)

    def test_a_payload_too_long_is_not_sent(
        self, unread: tuple[socket.socket, WorkerChannel], caplog: pytest.LogCaptureFixture
    ) -> None:
        """A part over its bound is refused with one warning, nothing written."""
        _, channel = unread
        assert not channel.send(Kind.HEALTH, b"x" * (MAX_PAYLOAD[Kind.HEALTH] + 1))
        assert "at most 4096 bytes" in caplog.text

    def test_the_threads_of_a_worker_never_interleave_records(
        self, channels: Channels, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Four threads sending large records at once: the master reads every record whole."""
        worker = channels.connect(11)
        payloads = [bytes([65 + n]) * 300_000 for n in range(4)]
        senders = [
            threading.Thread(target=worker.send, args=(Kind.METRICS, p), kwargs={"timeout": SOON}) for p in payloads
        ]
        seen: list[bytes] = []
        channels.master.on_close(lambda _pid, latest: seen.append(latest[Kind.METRICS].payload))
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(SOON)
        worker.close()
        assert wait_for(lambda: seen != [])
        assert seen[0] in payloads and "refusing" not in caplog.text


# Python 3.12+ warns about fork() in a process with threads (the channel's reader, pytest's); the child only reads.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
class TestFork:
    def _child(self, body: Callable[[], bool]) -> int:
        """Fork as Gunicorn does after pre_fork; the child exits 0 when ``body()`` is true. The child's pid."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if body() else 1
            finally:
                os._exit(code)
        return pid

    def _status(self, pid: int) -> int:
        deadline = threading.Event()
        for _ in range(int(SOON / 0.01)):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            deadline.wait(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the child never exited")

    def test_a_fact_fired_between_pre_fork_and_the_fork_reaches_the_child(self, channels: Channels) -> None:
        """The master fires while its main thread forks: the new worker gets the fact; its pid comes back."""
        master = channels.master
        master.before_fork()
        master.fire(Kind.SHUTDOWN_INITIATED)

        def child() -> bool:
            worker = master.worker_end()
            return worker is not None and worker.wait_for(Kind.SHUTDOWN_INITIATED, SOON)

        pid = self._child(child)
        assert self._status(pid) == 0
        assert master.parts(SOON) == []  # its end reached end-of-file: nothing else holds it

    def test_a_child_keeps_its_own_end_only(self, channels: Channels) -> None:
        """A worker forked after others closes their ends and the master's it inherited: each exit is still seen."""
        master = channels.master
        other = channels.connect(11)  # in the master process here: the child inherits its end too
        assert other.send(Kind.METRICS, b"11")
        assert wait_for(lambda: channels.pids(Kind.METRICS) == [11])
        late = channels.connect(13)
        go_r, go_w = os.pipe()
        master.before_fork()

        def child() -> bool:
            os.close(go_w)
            worker = master.worker_end()
            sent = worker is not None and worker.send(Kind.DRAINED, timeout=SOON)
            os.read(go_r, 1)  # alive until the parent has looked
            return sent

        pid = self._child(child)
        os.close(go_r)
        try:
            assert master.wait_all(Kind.DRAINED, lambda: {pid}, SOON)
            other.close()  # the other worker exits: the child holds no copy of its end
            assert wait_for(lambda: channels.pids(Kind.METRICS) == [])
            master.close()  # the master's ends: the child holds no copy of them either
            assert not late.wait_for(Kind.SHUTDOWN_INITIATED, 0.0)
            assert wait_for(lambda: late.fired(Kind.SHUTDOWN_INITIATED) or late.master_gone)
            assert late.master_gone
        finally:
            os.write(go_w, b"g")
            os.close(go_w)
        assert self._status(pid) == 0
