"""Unit tests of graceful.gunicorn.process_stop: a worker's stop, its reason and its SIGTERM takeover."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from graceful.gunicorn.adapter.worker import WorkerAdapter
from graceful.gunicorn.channel import Kind
from graceful.gunicorn.process_stop import ProcessStop
from graceful.gunicorn.recycling import GthreadStop
from graceful.gunicorn.stop_reason import StopReason
from tests.gunicorn.fakes import signal_this_process
from tests.gunicorn.test_recycling import NewGthreadWorker


class Shared:
    """What the master told the worker, as its channel gives it (graceful.gunicorn.process_stop.MasterFacts)."""

    def __init__(self) -> None:
        self.facts: set[Kind] = set()
        self.reason = StopReason.BY_MASTER

    def fired(self, kind: Kind) -> bool:
        return kind in self.facts

    def stop_reason(self) -> StopReason:
        return self.reason


class SyncWorker:
    """The parts of Gunicorn's sync (or gevent) worker the stop reads."""

    def __init__(self) -> None:
        self.nr = 0
        self.max_requests = 3
        self.alive = True
        self.handle_exit: Any = None  # Gunicorn's SIGTERM handler, where a test gives one


class Request:
    def __init__(self) -> None:
        self.closed = False

    def force_close(self) -> None:
        self.closed = True


def stop_of(worker: object, shared: Shared | None = None, drain_timeout: float = 5.0) -> ProcessStop:
    holder: Any = shared or Shared()
    stop = ProcessStop(WorkerAdapter(worker), holder)
    stop.drain_timeout = drain_timeout  # what install() sets from the config
    return stop


def wait_until(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class TestBegin:
    def test_once_with_one_line_for_a_process_stop(self, caplog: pytest.LogCaptureFixture) -> None:
        """The first begin() wins and logs 'worker PID stopping (reason)'; later ones change nothing."""
        stop = stop_of(SyncWorker())
        with caplog.at_level(logging.INFO, logger="graceful"):
            assert stop.begin(StopReason.RELOAD)
            assert not stop.begin(StopReason.SCALE_IN)
        assert stop.reason is StopReason.RELOAD and stop.stopping and not stop.server_stop
        assert [r.getMessage() for r in caplog.records] == [f"graceful: worker {os.getpid()} stopping (reload)"]

    def test_a_later_begin_returns_only_once_the_line_is_out(self) -> None:
        """The losing begin() (worker_exit's, on the main thread) waits for the winner's line.

        A worker with nothing to drain otherwise exits, daemon threads and all,
        before its graceful-stop thread writes "stopping (reason)".
        """
        stop = stop_of(SyncWorker())
        in_emit, lines = threading.Event(), []

        class SlowHandler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                in_emit.set()
                time.sleep(0.3)  # the winner's thread, descheduled while it writes
                lines.append(record.getMessage())

        handler = SlowHandler(logging.INFO)
        graceful_logger = logging.getLogger("graceful")
        graceful_logger.addHandler(handler)
        old_level = graceful_logger.level
        graceful_logger.setLevel(logging.INFO)
        try:
            winner = threading.Thread(target=stop.begin, args=(StopReason.RELOAD,))
            winner.start()
            assert in_emit.wait(5)
            assert not stop.begin(StopReason.RELOAD)
            seen_by_the_loser = list(lines)
            winner.join(5)
        finally:
            graceful_logger.removeHandler(handler)
            graceful_logger.setLevel(old_level)
        assert seen_by_the_loser == [f"graceful: worker {os.getpid()} stopping (reload)"]

    def test_the_servers_stop_logs_nothing_of_its_own(self, caplog: pytest.LogCaptureFixture) -> None:
        """begin(None), the server's stop: the lifecycle's signals tell it, this logs nothing."""
        stop = stop_of(SyncWorker())
        with caplog.at_level(logging.INFO, logger="graceful"):
            assert stop.begin(None)
        assert stop.server_stop and caplog.records == []

    def test_the_drain_counts_from_the_stops_start(self) -> None:
        """drain_time_left(): all of drain_timeout before the stop, what is left of it after."""
        stop = stop_of(SyncWorker(), drain_timeout=5.0)
        assert stop.drain_time_left() == 5.0
        stop.begin(StopReason.RELOAD, at=time.monotonic() - 2.0)
        assert 2.5 < stop.drain_time_left() <= 3.0


class TestReasonNow:
    def test_the_servers_shutdown(self) -> None:
        """The ShutdownInitiated broadcast fired: the server's stop (None), whatever the slot says."""
        shared = Shared()
        shared.facts.add(Kind.SHUTDOWN_INITIATED)
        shared.reason = StopReason.RELOAD
        stop = stop_of(SyncWorker(), shared)
        stop.term_at = time.monotonic()
        assert stop.reason_now() is None

    def test_a_term_reads_the_slot(self) -> None:
        """A TERM from the master: the reason the master wrote."""
        shared = Shared()
        shared.reason = StopReason.SCALE_IN
        stop = stop_of(SyncWorker(), shared)
        stop.term_at = time.monotonic()
        assert stop.reason_now() is StopReason.SCALE_IN

    def test_no_term_is_stopped_by_the_master(self) -> None:
        """No TERM (SIGQUIT, the master gone): the slot's old reason does not apply."""
        shared = Shared()
        shared.reason = StopReason.RELOAD
        assert stop_of(SyncWorker(), shared).reason_now() is StopReason.BY_MASTER


class TestBeforeRequest:
    def test_connection_close_once_stopping(self) -> None:
        """Every request after the stop began is answered with Connection: close."""
        stop = stop_of(SyncWorker())
        first = Request()
        stop.before_request(first)
        stop.begin(StopReason.RELOAD)
        later = Request()
        stop.before_request(later)
        assert not first.closed and later.closed

    def test_sync_and_gevent_learn_their_recycling_from_gunicorns_count(self) -> None:
        """sync/gevent: the request Gunicorn will count as the max_requests-th starts the stop (recycled)."""
        worker = SyncWorker()
        stop = stop_of(worker)
        for served in range(2):
            worker.nr = served
            stop.before_request(Request())
            assert not stop.stopping
        worker.nr = 2
        stop.before_request(Request())
        assert stop.reason is StopReason.RECYCLED

    def test_gthread_counts_itself_and_closes_the_last_request(self) -> None:
        """gthread (taken over): the request reaching max_requests gets Connection: close and starts the stop."""
        worker = NewGthreadWorker()
        worker.max_requests = 2
        stop = stop_of(worker)
        stop.gthread = GthreadStop.install(worker)
        first, second = Request(), Request()
        stop.before_request(first)
        stop.before_request(second)
        assert not first.closed and second.closed and stop.reason is StopReason.RECYCLED


@pytest.fixture
def sigterm() -> Iterator[list[int]]:
    """A stand-in for Gunicorn's SIGTERM handler (records calls); the test process's own is restored after."""
    calls: list[int] = []

    def gunicorns(signum: int, _frame: FrameType | None) -> None:
        calls.append(signum)

    previous = signal.signal(signal.SIGTERM, gunicorns)
    try:
        yield calls
    finally:
        signal.signal(signal.SIGTERM, previous)


class TestSigterm:
    def test_sync_hands_the_term_to_gunicorn_at_once_and_logs_the_reason(
        self, sigterm: list[int], caplog: pytest.LogCaptureFixture
    ) -> None:
        """sync/gevent: Gunicorn's handler runs in the OS handler; the graceful-stop thread logs the reason."""
        shared = Shared()
        shared.reason = StopReason.RELOAD
        stop = stop_of(SyncWorker(), shared)
        with caplog.at_level(logging.INFO, logger="graceful"):
            stop.install(5.0, None, None)
            signal_this_process(signal.SIGTERM)
            # The thread notes the stop, then logs it: wait for the line, not only the note.
            line = f"graceful: worker {os.getpid()} stopping (reload)"
            assert wait_until(lambda: line in caplog.text)
        assert sigterm == [signal.SIGTERM]
        assert stop.stopping and stop.reason is StopReason.RELOAD and stop.term_at is not None

    def test_gthread_hands_over_only_when_its_connections_are_done(self, sigterm: list[int]) -> None:
        """gthread: the OS handler does not call Gunicorn's; the thread does, once no connection is left."""
        worker = NewGthreadWorker()
        worker.nr_conns = 1
        stop = stop_of(worker)
        stop.install(5.0, GthreadStop.install(worker), None)
        signal_this_process(signal.SIGTERM)
        assert wait_until(lambda: worker.worker_connections == 0)
        time.sleep(0.2)
        assert sigterm == []  # a connection is still open
        worker.nr_conns = 0
        assert wait_until(lambda: sigterm == [signal.SIGTERM])

    def test_a_term_while_the_app_loads_is_noted_with_its_reason(
        self, sigterm: list[int], caplog: pytest.LogCaptureFixture
    ) -> None:
        """A TERM that reaches Gunicorn's own handler (installed before the app loads) is noted too.

        Seen on Gunicorn 24 under gevent: a worker still loading the app at a
        HUP was stopped by Gunicorn's handle_exit and logged "stopped by the
        master" instead of "reload".
        """
        shared = Shared()
        shared.reason = StopReason.RELOAD
        worker = SyncWorker()
        worker.handle_exit = lambda _signum, _frame: setattr(worker, "alive", False)
        stop = stop_of(worker, shared)
        stop.note_early_term()
        signal.signal(signal.SIGTERM, worker.handle_exit)  # Gunicorn's init_signals, then load_wsgi
        signal_this_process(signal.SIGTERM)
        assert stop.term_at is not None and worker.alive is False
        with caplog.at_level(logging.INFO, logger="graceful"):
            stop.install(5.0, None, None)
            assert wait_until(lambda: stop.stopping)
        assert stop.reason is StopReason.RELOAD
        assert f"graceful: worker {os.getpid()} stopping (reload)" in caplog.text

    def test_a_term_during_the_boot_is_not_lost(self, sigterm: list[int]) -> None:
        """A TERM between the fork and Gunicorn's own handler is noted, and acted on once installed."""
        stop = stop_of(SyncWorker())
        stop.note_early_term()
        signal_this_process(signal.SIGTERM)
        assert stop.term_at is not None
        signal.signal(signal.SIGTERM, lambda signum, _frame: sigterm.append(signum))  # Gunicorn's init_signals
        stop.install(5.0, None, None)
        assert wait_until(lambda: stop.stopping)
        assert sigterm == [signal.SIGTERM]
