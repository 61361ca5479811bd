"""Closing listening sockets without resetting connections already queued on them.

When the last copy of a listening socket closes, Linux resets every
connection still waiting in its accept queue, and every handshake still in
progress: those clients sent a request and get ``connection reset``.
:func:`close_after_queue_drains` avoids that:

1. stop new handshakes: a socket filter drops each new SYN, so no connection
   starts on this socket any more (the client retries in a second and then
   finds the port closed, or another listener on it); handshakes already
   under way complete as usual;
2. wait, bounded, until the handshakes under way have had time to complete
   and the accept queue is empty, while the server keeps accepting and
   serving what is there (Linux reports the queue length of a listening
   socket in ``TCP_INFO``);
3. ``shutdown()`` the socket: from now on every process sharing it stops
   listening at once, and new connections are refused.

Shrinking the backlog instead (``listen(0)``) does not close the window: a
client whose handshake completes while the queue is full believes it is
connected, its request waits unanswered, and the shutdown resets it.

Under Gunicorn this runs in the master (it shares the listening sockets with
its workers) on the graceful-shutdown thread; in the single-process server,
on that server's shutdown thread. An asyncio server (Uvicorn,
:mod:`graceful.uvicorn.server`) waits with :func:`wait_for_queues_to_drain`
on that thread and closes its listeners on its event loop.
"""

from __future__ import annotations

import ctypes
import logging
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterable

__all__ = [
    "HANDSHAKE_SETTLE",
    "accept_queue_length",
    "close_after_queue_drains",
    "drop_new_handshakes",
    "wait_for_queues_to_drain",
]

logger = logging.getLogger(__name__)

# struct tcp_info: 8 one-byte fields, then u32 fields; the fifth u32,
# tcpi_unacked, holds a listening socket's accept-queue length.
_TCPI_UNACKED_OFFSET = 24
_TCP_INFO_SIZE = 104
# How often to look at the queue while it drains: the kernel offers no event
# for "accept queue empty".
_POLL_INTERVAL = 0.005
# Seconds a handshake under way when new ones stop gets to complete: the
# client's final ACK comes one round trip after our SYN-ACK, well under a
# millisecond inside a cluster and a few across zones.
HANDSHAKE_SETTLE = 0.05

# SO_ATTACH_FILTER from <asm-generic/socket.h>; Python's socket module lacks it.
_SO_ATTACH_FILTER = 26
# Classic BPF, run on each packet reaching the listener with the TCP header
# first: load the flags byte; SYN without ACK (a new handshake) -> drop,
# anything else (the ACK that completes a handshake) -> keep. Sockets accepted
# later inherit the filter; it never matches on an established connection.
_TCP_FLAGS_OFFSET = 13
_SYN, _ACK = 0x02, 0x10
_DROP_NEW_HANDSHAKES = (
    (0x30, 0, 0, _TCP_FLAGS_OFFSET),  # BPF_LD | BPF_B | BPF_ABS: A = flags
    (0x54, 0, 0, _SYN | _ACK),  # BPF_ALU | BPF_AND | BPF_K: A &= SYN|ACK
    (0x15, 0, 1, _SYN),  # BPF_JMP | BPF_JEQ | BPF_K: A == SYN ? next : skip one
    (0x06, 0, 0, 0),  # BPF_RET | BPF_K: drop
    (0x06, 0, 0, 0xFFFFFFFF),  # BPF_RET | BPF_K: keep the whole packet
)
_DROP_NEW_HANDSHAKES_CODE = b"".join(struct.pack("HBBI", *instruction) for instruction in _DROP_NEW_HANDSHAKES)


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


def drop_new_handshakes(sock: socket.socket) -> bool:
    """Make the kernel drop new connection attempts (SYNs) to listening ``sock``.

    Handshakes already under way and connections already queued are not
    affected. Returns False where this cannot be done (not Linux, not TCP).
    """
    if sys.platform != "linux" or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    code = _DROP_NEW_HANDSHAKES_CODE
    program = ctypes.create_string_buffer(code, len(code))
    # struct sock_fprog {unsigned short len; struct sock_filter *filter;}; the kernel copies the program.
    fprog = struct.pack("HP", len(_DROP_NEW_HANDSHAKES), ctypes.addressof(program))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
    except OSError as exc:
        logger.debug("graceful: cannot filter new handshakes on %r: %s", sock, exc)
        return False
    return True


def close_after_queue_drains(sockets: Iterable[socket.socket], timeout: float) -> int:
    """Stop listening on ``sockets`` once their accept queues are empty (or after ``timeout`` s).

    :func:`wait_for_queues_to_drain`, then ``shutdown()`` each socket.
    Returns how many queued connections were still waiting at the deadline
    (and were reset). The caller's server must keep accepting meanwhile.
    Safe to call from any thread; each socket is left shut down but open
    (its owner closes the file descriptor as usual).
    """
    socks = list(sockets)
    waiting = wait_for_queues_to_drain(socks, timeout)
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RD)
        except OSError:  # not connected/listening any more: already closed
            continue
    if waiting:
        logger.warning("graceful: %d queued connection(s) still unaccepted after %gs; they are reset", waiting, timeout)
    return waiting


def wait_for_queues_to_drain(sockets: Iterable[socket.socket], timeout: float) -> int:
    """Drop new handshakes on ``sockets`` and wait until their accept queues are empty (or ``timeout`` s).

    From the call on, new handshakes are dropped (:func:`drop_new_handshakes`);
    the wait lasts at least ``HANDSHAKE_SETTLE`` seconds (within ``timeout``)
    so handshakes under way complete. Returns how many queued connections
    are still waiting. The caller's server must keep accepting meanwhile, and
    stop listening right after (an event loop that owns the sockets closes
    them itself: a socket shut down under its accept callback would wake it
    again and again). Any thread but the accepting one.
    """
    socks = list(sockets)
    filtered = [drop_new_handshakes(sock) for sock in socks]
    start = time.monotonic()
    deadline = start + timeout
    settled = start + (HANDSHAKE_SETTLE if any(filtered) else 0.0)
    pause = threading.Event()
    waiting = _queued(socks)
    while (waiting or time.monotonic() < settled) and time.monotonic() < deadline:
        pause.wait(_POLL_INTERVAL)
        waiting = _queued(socks)
    return waiting


def _queued(socks: list[socket.socket]) -> int:
    return sum(accept_queue_length(sock) or 0 for sock in socks)
