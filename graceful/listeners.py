"""Closing listening sockets without resetting connections already queued on them.

When the last copy of a listening socket closes, Linux resets every
connection still waiting in its accept queue: those clients sent a request
and get ``connection reset``. :func:`close_after_queue_drains` avoids that:

1. shrink the backlog (``listen(0)``), so few new connections can queue;
2. wait, bounded, until the accept queue is empty, while the server keeps
   accepting and serving what is there (Linux reports the queue length of a
   listening socket in ``TCP_INFO``);
3. ``shutdown()`` the socket: from now on every process sharing it stops
   listening at once, and new connections are refused.

Under Gunicorn this runs in the master (it shares the listening sockets with
its workers) on the graceful-shutdown thread; in the single-process server,
on that server's shutdown thread.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Iterable

__all__ = ["accept_queue_length", "close_after_queue_drains"]

logger = logging.getLogger(__name__)

# struct tcp_info: 8 one-byte fields, then u32 fields; the fifth u32,
# tcpi_unacked, holds a listening socket's accept-queue length.
_TCPI_UNACKED_OFFSET = 24
_TCP_INFO_SIZE = 104
# How often to look at the queue while it drains: the kernel offers no event
# for "accept queue empty", so this is the one place graceful polls.
_POLL_INTERVAL = 0.005


def accept_queue_length(sock: socket.socket) -> int | None:
    """Connections waiting in ``sock``'s accept queue, or None where the OS cannot say."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not hasattr(socket, "TCP_INFO"):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    except OSError:
        return None
    if len(info) < _TCPI_UNACKED_OFFSET + 4:
        return None
    return int(struct.unpack_from("I", info, _TCPI_UNACKED_OFFSET)[0])


def close_after_queue_drains(sockets: Iterable[socket.socket], timeout: float) -> int:
    """Stop listening on ``sockets`` once their accept queues are empty (or after ``timeout`` s).

    Returns how many queued connections were still waiting at the deadline
    (and were reset). The caller's server must keep accepting meanwhile.
    Safe to call from any thread; each socket is left shut down but open
    (its owner closes the file descriptor as usual).
    """
    socks = list(sockets)
    for sock in socks:
        try:
            sock.listen(0)
        except OSError:  # already closed or not listening: nothing to shrink
            continue
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    waiting = _queued(socks)
    while waiting and time.monotonic() < deadline:
        pause.wait(_POLL_INTERVAL)
        waiting = _queued(socks)
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RD)
        except OSError:  # not connected/listening any more: already closed
            continue
    if waiting:
        logger.warning("graceful: %d queued connection(s) still unaccepted after %gs; they are reset", waiting, timeout)
    return waiting


def _queued(socks: list[socket.socket]) -> int:
    return sum(accept_queue_length(sock) or 0 for sock in socks)
