"""A worker's part of the shutdown record (graceful.gunicorn.worker) when its watch thread lags behind the master.

The worker's ``graceful-watch`` thread mirrors the master's ShutdownInitiated
into the worker's lifecycle; on a loaded machine it can be descheduled between
seeing the broadcast and mirroring it, while Gunicorn's TERM and ``worker_exit``
go ahead on the main thread. Here that thread is held at that point by a gate
the test opens after ``worker_exit``: no sleep, the same order every run.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from graceful.gunicorn.shared import SharedState
from tests.gunicorn.fakes import FakeWorker
from tests.gunicorn.test_worker import SOON, booted, shared

__all__ = ["shared"]  # the fixture, shared with test_worker.py


def hold_the_watch(shared: SharedState, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Hold the watch thread (its waits are the ones of a second or more) once it sees ShutdownInitiated."""
    gate = threading.Event()
    seen = shared.shutdown_initiated.is_fired

    def is_fired(timeout: float = 0.0) -> bool:
        fired = seen(timeout)
        if fired and timeout >= 1.0:
            gate.wait(SOON)
        return fired

    monkeypatch.setattr(shared.shutdown_initiated, "is_fired", is_fired)
    return gate


class TestPartWhileTheWatchLags:
    def test_a_worker_in_the_servers_stop_leaves_its_part_before_its_watch_mirrors_the_signal(
        self, shared: SharedState, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The server's stop, worker_exit before the watch thread mirrored ShutdownInitiated: the part is left."""
        gate = hold_the_watch(shared, monkeypatch)
        fake = FakeWorker()
        shutdown = booted(fake, shared)
        try:
            shared.shutdown_initiated.fire()
            os.kill(os.getpid(), signal.SIGTERM)  # the master's TERM: the handler runs in this main thread
            assert fake.left_loop.wait(SOON)
            shutdown.exit()
        finally:
            gate.set()
        assert shutdown.stop.server_stop
        assert [part.pid for part in shared.parts.read_all()] == [os.getpid()]
