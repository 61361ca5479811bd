"""Unit tests of graceful.gunicorn.stop_reason: the byte the master writes and its workers read."""

from __future__ import annotations

import os

import pytest

from graceful.gunicorn.stop_reason import StopReason, StopReasonSlot


class TestStopReasonSlot:
    def test_reads_stopped_by_the_master_until_written(self) -> None:
        """Nothing written yet: the reason is 'stopped by the master'."""
        assert StopReasonSlot().read() is StopReason.BY_MASTER

    def test_reads_the_last_reason_written(self) -> None:
        """Each write replaces the last; a read does not clear it."""
        slot = StopReasonSlot()
        slot.write(StopReason.RELOAD)
        slot.write(StopReason.SCALE_IN)
        assert slot.read() is StopReason.SCALE_IN and slot.read() is StopReason.SCALE_IN

    @pytest.mark.parametrize("reason", [StopReason.RECYCLED, StopReason.TIMEOUT])
    def test_the_workers_own_reasons_are_not_written(self, reason: StopReason) -> None:
        """recycled and timeout are known by the worker itself; the master writing one is a bug."""
        with pytest.raises(ValueError, match="a worker knows it itself"):
            StopReasonSlot().write(reason)

    # Python 3.12+ warns about fork() in a process with threads (pytest-timeout's); the child only reads.
    @pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
    def test_a_forked_child_sees_a_later_write(self) -> None:
        """The slot is shared memory: a child forked before the write reads it."""
        slot = StopReasonSlot()
        ready_r, ready_w = os.pipe()
        answer_r, answer_w = os.pipe()
        child = os.fork()
        if child == 0:  # the child: wait for the parent's write, report what it reads
            os.read(ready_r, 1)
            os.write(answer_w, slot.read().value.encode())
            os._exit(0)
        slot.write(StopReason.UPGRADE)
        os.write(ready_w, b"x")
        answer = os.read(answer_r, 64).decode()
        _, status = os.waitpid(child, 0)
        for fd in (ready_r, ready_w, answer_r, answer_w):
            os.close(fd)
        assert answer == "upgrade" and status == 0
