"""A worker's part of the shutdown record (graceful.gunicorn.worker) when its watch thread lags behind the master.

The worker's ``graceful-watch`` thread mirrors the master's ShutdownInitiated
into the worker's lifecycle; on a loaded machine it can be descheduled between
seeing the master's fact and mirroring it, while Gunicorn's TERM and ``worker_exit``
go ahead on the main thread. Here that thread is held at that point by a gate
the test opens after ``worker_exit``: no sleep, the same order every run.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from graceful.gunicorn.channel import Kind
from tests.gunicorn.fakes import FakeWorker, signal_this_process
from tests.gunicorn.test_worker import SOON, Master, booted, master

__all__ = ["master"]  # the fixture, shared with test_worker.py


def hold_the_watch(master: Master, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Hold the watch thread once it has seen ShutdownInitiated, before it mirrors it (a gate, no sleep)."""
    gate = threading.Event()
    seen = master.worker_end.wait_for

    def wait_for(kind: Kind, timeout: float | None = None) -> bool:
        fired = seen(kind, timeout=timeout)
        if fired and kind is Kind.SHUTDOWN_INITIATED:
            gate.wait(SOON)
        return fired

    monkeypatch.setattr(master.worker_end, "wait_for", wait_for)
    return gate


class TestPartWhileTheWatchLags:
    def test_a_worker_in_the_servers_stop_leaves_its_part_before_its_watch_mirrors_the_signal(
        self, master: Master, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The server's stop, worker_exit before the watch thread mirrored ShutdownInitiated: the part is left."""
        gate = hold_the_watch(master, monkeypatch)
        fake = FakeWorker()
        shutdown = booted(fake, master)
        try:
            master.fire(Kind.SHUTDOWN_INITIATED)
            signal_this_process(signal.SIGTERM)  # the master's TERM
            assert fake.left_loop.wait(SOON)
            shutdown.exit()
        finally:
            gate.set()
        assert shutdown.stop.server_stop
        assert [part.pid for part in master.parts()] == [os.getpid()]
