"""graceful.process.sockets: stop listening without resetting a connection the kernel took on."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from graceful.process.sockets import (
    HANDSHAKE_SETTLE,
    accept_queue_length,
    close_after_queue_drains,
    drop_new_handshakes,
    wait_for_queues_to_drain,
)

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="socket filters and TCP_INFO queue length are Linux's")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock
    sock.close()


@pytest.fixture
def unix_listener(tmp_path: os.PathLike[str]) -> Iterator[tuple[socket.socket, str]]:
    path = os.path.join(tmp_path, "s")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path)
        sock.listen(1)
        yield sock, path


def _connect(sock: socket.socket, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(sock.getsockname()[:2], timeout=timeout)


def _wait_queued(sock: socket.socket, count: int) -> None:
    deadline = time.monotonic() + 5
    while accept_queue_length(sock) != count and time.monotonic() < deadline:
        time.sleep(0.005)
    assert accept_queue_length(sock) == count


def _assert_talks(client: socket.socket, server_side: socket.socket) -> None:
    client.sendall(b"ping")
    server_side.settimeout(5)
    assert server_side.recv(4) == b"ping"
    server_side.sendall(b"pong")
    assert client.recv(4) == b"pong"


@linux_only
def test_accept_queue_length_counts_connections_not_yet_accepted(listener: socket.socket) -> None:
    """TCP_INFO of a listener gives the number of connections waiting in its accept queue."""
    assert accept_queue_length(listener) == 0
    clients = [_connect(listener) for _ in range(3)]
    _wait_queued(listener, 3)
    listener.accept()[0].close()
    assert accept_queue_length(listener) == 2
    for client in clients:
        client.close()


def test_accept_queue_length_is_none_for_a_unix_socket(unix_listener: tuple[socket.socket, str]) -> None:
    """Where the OS cannot say (here: a Unix socket), the queue length is None, not 0."""
    assert accept_queue_length(unix_listener[0]) is None


@linux_only
def test_after_drop_new_handshakes_a_new_connection_gets_no_answer(listener: socket.socket) -> None:
    """A SYN reaching the filtered listener is dropped: connect() times out, nothing is queued."""
    assert drop_new_handshakes(listener) is True
    with socket.socket() as client:
        client.settimeout(0.5)
        with pytest.raises(socket.timeout):
            client.connect(listener.getsockname())
    assert accept_queue_length(listener) == 0


@linux_only
def test_drop_new_handshakes_spares_queued_and_established_connections(listener: socket.socket) -> None:
    """Connections queued before the filter are accepted and carry data both ways, as do older ones."""
    established = _connect(listener)
    older, _ = listener.accept()
    queued = _connect(listener)
    _wait_queued(listener, 1)
    assert drop_new_handshakes(listener) is True
    later, _ = listener.accept()
    _assert_talks(established, older)
    _assert_talks(queued, later)
    for sock in (established, older, queued, later):
        sock.close()


def test_drop_new_handshakes_declines_a_unix_socket(unix_listener: tuple[socket.socket, str]) -> None:
    """A socket that is not TCP cannot be filtered this way: False, and it keeps working."""
    sock, path = unix_listener
    assert drop_new_handshakes(sock) is False
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(path)
        sock.accept()[0].close()  # accepted: the listener still works


@linux_only
def test_queued_connections_are_accepted_before_the_listener_stops(listener: socket.socket) -> None:
    """close_after_queue_drains waits while the server accepts what is queued: 0 left, none reset."""
    clients = [_connect(listener) for _ in range(3)]
    _wait_queued(listener, 3)
    with ThreadPoolExecutor(1) as pool:
        closing = pool.submit(close_after_queue_drains, [listener], 10.0)
        accepted = [listener.accept()[0] for _ in clients]
        assert closing.result(timeout=15) == 0
    for client, server_side in zip(clients, accepted, strict=True):  # the queue is FIFO
        _assert_talks(client, server_side)
        client.close()
        server_side.close()
    with pytest.raises(ConnectionRefusedError):
        _connect(listener)


@linux_only
def test_waiting_for_the_queue_leaves_the_listener_to_its_owner(listener: socket.socket) -> None:
    """wait_for_queues_to_drain returns once what is queued is accepted, the socket still listening
    (an event loop closes it itself); new handshakes are dropped from the call on."""
    client = _connect(listener)
    _wait_queued(listener, 1)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(wait_for_queues_to_drain, [listener], 10.0)
        server_side = listener.accept()[0]
        assert waiting.result(timeout=15) == 0
    _assert_talks(client, server_side)
    assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
    client.close()
    server_side.close()


@linux_only
def test_handshakes_under_way_get_time_to_complete(listener: socket.socket) -> None:
    """With an empty queue the listener still stays up HANDSHAKE_SETTLE seconds before it stops."""
    start = time.monotonic()
    assert close_after_queue_drains([listener], 10.0) == 0
    assert time.monotonic() - start >= HANDSHAKE_SETTLE


@linux_only
def test_connections_still_queued_at_the_deadline_are_counted(listener: socket.socket) -> None:
    """Nobody accepts: after the timeout the listener stops and the call reports the 2 left queued."""
    clients = [_connect(listener) for _ in range(2)]
    _wait_queued(listener, 2)
    assert close_after_queue_drains([listener], 0.2) == 2
    for client in clients:
        client.close()


def test_a_unix_listener_stops_at_once(unix_listener: tuple[socket.socket, str]) -> None:
    """Without a queue length or a filter, the listener is shut down without waiting; connects fail."""
    sock, path = unix_listener
    start = time.monotonic()
    assert close_after_queue_drains([sock], 10.0) == 0
    assert time.monotonic() - start < 5  # far below the 10 s timeout: it did not wait for a queue
    with socket.socket(socket.AF_UNIX) as client, pytest.raises(ConnectionRefusedError):
        client.connect(path)


def test_an_already_closed_socket_is_skipped(listener: socket.socket) -> None:
    """A listener closed elsewhere first is no error: the others are still shut down."""
    closed = socket.socket()
    closed.close()
    assert close_after_queue_drains([closed, listener], 1.0) == 0
    with pytest.raises(ConnectionRefusedError):
        _connect(listener)


@linux_only
def test_under_connect_load_every_connection_is_answered_or_refused(listener: socket.socket) -> None:
    """8 clients connect in a loop through the close: each gets its answer or a refusal, none a reset."""
    listener.setblocking(False)
    stop = threading.Event()
    outcomes: list[str] = []
    lock = threading.Lock()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                stop.wait(0.001)
                continue
            except OSError:  # shut down
                return
            conn.setblocking(True)
            with conn:
                conn.settimeout(5)
                if conn.recv(1) == b"?":
                    conn.sendall(b"!")

    def client() -> None:
        deadline = time.monotonic() + 10
        for _ in range(2000):  # bounded in count and in time
            if time.monotonic() > deadline:
                return
            try:
                with _connect(listener) as sock:
                    sock.sendall(b"?")
                    outcome = "ok" if sock.recv(1) == b"!" else "closed"
            except ConnectionRefusedError:
                outcome = "refused"
            except OSError as exc:
                outcome = repr(exc)
            with lock:
                outcomes.append(outcome)
            if outcome == "refused":
                return

    server = threading.Thread(target=serve)
    server.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(client) for _ in range(8)]
            time.sleep(0.3)
            close_after_queue_drains([listener], 5.0)
            for future in futures:
                future.result(timeout=30)
    finally:
        stop.set()
        server.join(timeout=10)
    assert outcomes.count("ok") > 0 and outcomes.count("refused") == 8
    assert [outcome for outcome in outcomes if outcome not in ("ok", "refused")] == []
