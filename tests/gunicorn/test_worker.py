"""Unit tests of graceful.gunicorn.worker's pieces that need no Gunicorn process."""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from graceful.gunicorn.worker import _stop_accepting


class OldGthreadWorker:
    """The parts of Gunicorn's gthread worker before 24 that _stop_accepting touches."""

    def __init__(self, sockets: list[socket.socket]) -> None:
        self.sockets = sockets
        self.poller = selectors.DefaultSelector()
        self._lock = threading.RLock()
        for sock in sockets:
            self.poller.register(sock, selectors.EVENT_READ, "accept")


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


def test_old_gthread_worker_stops_accepting_and_keeps_the_sockets_open(listeners: list[socket.socket]) -> None:
    """Gunicorn < 24 gthread: the listeners leave the poller; the sockets stay open (another master uses them)."""
    worker = OldGthreadWorker(listeners)
    _stop_accepting(worker)
    assert worker.poller.get_map() == {}
    assert all(sock.fileno() != -1 for sock in listeners)
    with socket.create_connection(listeners[0].getsockname(), timeout=5):
        pass  # still listening: the kernel still queues connections for the other master


def test_twice_is_harmless(listeners: list[socket.socket]) -> None:
    """A second call (or a listener already gone from the poller) raises nothing."""
    worker = OldGthreadWorker(listeners)
    _stop_accepting(worker)
    _stop_accepting(worker)
    assert worker.poller.get_map() == {}


@pytest.mark.parametrize("kind", ["sync", "gthread 24+"])
def test_other_workers_are_left_alone(kind: str, listeners: list[socket.socket]) -> None:
    """sync serves what it accepts; gthread from 24 serves accepted connections as it stops: nothing to do."""
    worker: Any = OldGthreadWorker(listeners)
    if kind == "sync":
        worker.poller = None
    else:
        worker.set_accept_enabled = lambda enabled: None
    before = dict(worker.poller.get_map()) if worker.poller is not None else None
    _stop_accepting(worker)
    if worker.poller is not None:
        assert dict(worker.poller.get_map()) == before and len(before or {}) == 2
    assert all(sock.fileno() != -1 for sock in listeners)
    for sock in listeners:
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass  # still listening
