"""Unit tests of graceful.gunicorn.recycling (the gthread stop) against stand-ins of Gunicorn's workers."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from graceful.gunicorn.adapter.gthread import stop_accepting_22
from graceful.gunicorn.recycling import GthreadStop


class Config:
    """The part of Gunicorn's Config the stop writes to."""

    def __init__(self) -> None:
        self.settings: dict[str, object] = {}

    def set(self, name: str, value: object) -> None:
        self.settings[name] = value


class OldGthreadWorker:
    """The parts of Gunicorn's gthread worker before 24 that the stop touches."""

    def __init__(self, sockets: list[socket.socket]) -> None:
        self.sockets = sockets
        self.poller = selectors.DefaultSelector()
        self._lock = threading.RLock()
        self.nr_conns = 0
        self.max_requests = 7
        self.cfg = Config()
        for sock in sockets:
            self.poller.register(sock, selectors.EVENT_READ, "accept")


class MethodQueue:
    """Gunicorn 24+'s PollableMethodQueue, recording what it was asked to run."""

    def __init__(self) -> None:
        self.deferred: list[Callable[[], object]] = []

    def defer(self, callback: Callable[[], object]) -> None:
        self.deferred.append(callback)


class NewGthreadWorker:
    """The parts of Gunicorn 24+'s gthread worker that the stop touches."""

    def __init__(self) -> None:
        self.nr_conns = 0
        self.max_requests = 7
        self.worker_connections = 1000
        self.method_queue = MethodQueue()
        self.cfg = Config()

    def set_accept_enabled(self, enabled: bool) -> None:
        raise AssertionError("the main loop calls it, on its own thread")


@pytest.fixture
def listeners() -> Iterator[list[socket.socket]]:
    socks = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        socks.append(sock)
    yield socks
    for sock in socks:
        sock.close()


class TestStopAccepting22:
    def test_listeners_leave_the_poller_and_stay_open(self, listeners: list[socket.socket]) -> None:
        """Gunicorn < 24: the listeners leave the poller; the sockets stay open (another master uses them)."""
        worker = OldGthreadWorker(listeners)
        stop_accepting_22(worker)
        assert worker.poller.get_map() == {}
        assert all(sock.fileno() != -1 for sock in listeners)
        with socket.create_connection(listeners[0].getsockname(), timeout=5):
            pass  # still listening: the kernel still queues connections for the other master

    def test_twice_is_harmless(self, listeners: list[socket.socket]) -> None:
        """A second call (or a listener already gone from the poller) raises nothing."""
        worker = OldGthreadWorker(listeners)
        stop_accepting_22(worker)
        stop_accepting_22(worker)
        assert worker.poller.get_map() == {}


class TestInstall:
    def test_takes_gunicorns_max_requests_over(self) -> None:
        """Gunicorn's own counter can no longer stop the worker; graceful keeps the limit it chose."""
        worker = NewGthreadWorker()
        stop = GthreadStop.install(worker)
        assert stop is not None
        assert stop.max_requests == 7 and worker.max_requests == sys.maxsize

    def test_a_release_without_the_internals_is_left_alone(self, caplog: pytest.LogCaptureFixture) -> None:
        """Missing internals: no takeover, max_requests untouched, one warning naming what is missing."""
        worker: Any = NewGthreadWorker()
        del worker.method_queue
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert GthreadStop.install(worker) is None
        assert worker.max_requests == 7
        [record] = caplog.records
        assert "has no set_accept_enabled, worker_connections and method_queue (24+)" in record.getMessage()

    def test_no_connection_count_is_left_alone(self, caplog: pytest.LogCaptureFixture) -> None:
        """Without nr_conns the stop cannot tell when connections are done: no takeover, named in the warning."""
        worker: Any = NewGthreadWorker()
        worker.nr_conns = None
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert GthreadStop.install(worker) is None
        assert "has no nr_conns" in caplog.text


class TestCount:
    def test_exactly_one_request_reaches_the_limit(self) -> None:
        """Counted from many threads at once, exactly one request is the one that reaches max_requests."""
        worker = NewGthreadWorker()
        worker.max_requests = 500
        stop = GthreadStop.install(worker)
        assert stop is not None
        hits: list[bool] = []

        def count() -> None:
            hits.extend(stop.count() for _ in range(250))

        threads = [threading.Thread(target=count) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert len(hits) == 1000 and hits.count(True) == 1


class TestStop:
    def test_24_stops_accepting_through_the_main_loop(self) -> None:
        """24+: worker_connections 0 (the loop unregisters the listeners itself), and the loop is woken."""
        worker = NewGthreadWorker()
        stop = GthreadStop.install(worker)
        assert stop is not None
        stop.stop_accepting()
        assert worker.worker_connections == 0 and len(worker.method_queue.deferred) == 1

    def test_waits_for_the_connections_then_hands_over_once(self) -> None:
        """The stop waits until no connection is left, then calls Gunicorn's handler once and wakes the loop."""
        worker = NewGthreadWorker()
        worker.nr_conns = 2
        stop = GthreadStop.install(worker)
        assert stop is not None
        calls: list[tuple[float, int]] = []

        def close_them() -> None:
            worker.nr_conns = 0

        threading.Timer(0.2, close_them).start()
        began = time.monotonic()
        left = stop.stop(time.monotonic() + 10, lambda _sig, _frame: calls.append((time.monotonic(), worker.nr_conns)))
        assert left == 0
        [(called_at, open_then)] = calls
        assert open_then == 0 and called_at - began >= 0.15
        assert worker.cfg.settings["graceful_timeout"] >= 1
        assert len(worker.method_queue.deferred) == 2  # stop accepting, then the hand-over

    def test_hands_over_at_the_deadline_with_connections_left(self) -> None:
        """A connection still open at the deadline: Gunicorn's stop begins anyway (bounded), and it is counted."""
        worker = NewGthreadWorker()
        worker.nr_conns = 1
        stop = GthreadStop.install(worker)
        assert stop is not None
        calls: list[int] = []
        assert stop.stop(time.monotonic() + 0.1, lambda _sig, _frame: calls.append(1)) == 1
        assert calls == [1] and worker.cfg.settings["graceful_timeout"] == 1

    def test_22_unregisters_listeners_and_wakes_the_poller(self, listeners: list[socket.socket]) -> None:
        """22/23: the listeners leave the poller; a pipe of the stop's wakes the loop's select, and is drained."""
        worker = OldGthreadWorker(listeners)
        stop = GthreadStop.install(worker)
        assert stop is not None
        with main_loop(worker) as end_loop:
            # Gunicorn's loop ends at its SIGTERM handler: the wake-up after is left for its stop to read.
            stop.stop(time.monotonic() + 10, lambda _sig, _frame: end_loop())
        keys = list(worker.poller.get_map().values())
        assert [key.fileobj for key in keys if isinstance(key.fileobj, socket.socket)] == []
        [(key, _events)] = worker.poller.select(1.0)  # the hand-over's wake-up: what Gunicorn's loop would see
        key.data(key.fileobj)
        assert worker.poller.select(0) == []  # drained by its callback


@contextlib.contextmanager
def main_loop(worker: OldGthreadWorker) -> Iterator[Callable[[], None]]:
    """Gunicorn 22/23's gthread main loop, reduced to select and dispatch, on a thread; yields its end."""
    done = threading.Event()

    def run() -> None:
        while not done.is_set():
            for key, _events in worker.poller.select(0.02):
                key.data(key.fileobj)

    def end() -> None:
        done.set()
        thread.join(10)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield end
    finally:
        end()


class TestLateAccept22:
    def test_a_connection_the_loop_accepts_after_the_listeners_left_is_served_first(
        self, listeners: list[socket.socket]
    ) -> None:
        """22/23: the loop's select() found a listener just before it left: the hand-over waits for that accept.

        Gunicorn 22/23 close the poller at their stop with such a connection
        in it, unread: handing over while ``nr_conns`` still read 0 lost it.
        """
        worker = OldGthreadWorker(listeners)
        in_accept, go_on, done_accepting = threading.Event(), threading.Event(), threading.Event()
        order: list[str] = []
        accepted: list[socket.socket] = []

        def accept(listener: socket.socket) -> None:
            # The loop's thread, descheduled between its select() and the accept.
            in_accept.set()
            go_on.wait(10)
            accepted.append(listener.accept()[0])
            worker.nr_conns += 1
            order.append("accepted")
            done_accepting.set()

        for sock in listeners:
            worker.poller.modify(sock, selectors.EVENT_READ, accept)
        stop = GthreadStop.install(worker)
        assert stop is not None
        handed_over = threading.Event()

        def gunicorn_term(_sig: int, _frame: object) -> None:
            order.append(f"handed over with {worker.nr_conns} open")
            handed_over.set()

        with socket.create_connection(listeners[0].getsockname(), timeout=5), main_loop(worker):
            assert in_accept.wait(10)
            stopping = threading.Thread(target=stop.stop, args=(time.monotonic() + 30, gunicorn_term))
            stopping.start()
            assert not handed_over.wait(0.5), order  # nr_conns reads 0 here, and the accept is still to come
            go_on.set()
            assert done_accepting.wait(10)
            assert not handed_over.wait(0.2), order  # the accepted connection is still open
            worker.nr_conns -= 1  # its request is answered and it is closed
            order.append("answered")
            stopping.join(10)
        for conn in accepted:
            conn.close()
        assert order == ["accepted", "answered", "handed over with 0 open"]

    def test_24_has_no_late_accept_to_wait_for(self) -> None:
        """24+ serves what its loop accepted late in its own stop: the hand-over does not wait for the loop."""
        worker = NewGthreadWorker()
        stop = GthreadStop.install(worker)
        assert stop is not None
        calls: list[int] = []
        # No main loop runs here: had the stop waited for one, it would hand over only at the deadline.
        assert stop.stop(time.monotonic() + 30, lambda _sig, _frame: calls.append(worker.nr_conns)) == 0
        assert calls == [0] and worker.cfg.settings["graceful_timeout"] >= 29
