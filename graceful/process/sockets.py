"""Closing listening sockets without resetting connections already queued on them.

When the last copy of a listening socket closes, Linux resets every
connection still waiting in its accept queue, and every handshake still in
progress: those clients sent a request and get ``connection reset``.
:func:`close_after_queue_drains` avoids that:

1. stop new handshakes: a socket filter drops each new SYN, so no connection
   starts on this socket any more (the client retries in a second and then
   finds the port closed, or another listener on it); handshakes already
   under way complete as usual;
2. wait, bounded, until the handshakes under way have completed and the
   accept queue is empty, while the server keeps accepting and serving what
   is there (Linux reports the queue length of a listening socket in
   ``TCP_INFO``, and the handshakes under way through its socket diagnostics:
   :func:`handshakes_under_way`);
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
    "handshakes_under_way",
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
# Seconds from attaching the filter to the first look at the handshakes under way.
_FILTER_SETTLE = 0.001
# Seconds a handshake under way when new ones stop gets to complete: the
# client's final ACK comes one round trip after our SYN-ACK, well under a
# millisecond inside a cluster and a few across zones. The whole of it is
# waited only where the handshakes under way cannot be seen; where they can,
# the wait ends once none is left (usually at the first look).
HANDSHAKE_SETTLE = 0.05

# Socket diagnostics (sock_diag(7), <linux/inet_diag.h>): a dump of the TCP
# sockets in SYN_RECV, which includes the handshakes under way on listeners.
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCPF_SYN_RECV = 1 << 3
# struct nlmsghdr; struct inet_diag_req_v2 (family, protocol, ext, pad, states, a zeroed 48-byte sockid).
_NLMSGHDR = struct.Struct("=IHHII")
_DIAG_REQUEST = struct.Struct("=BBBBI48x")
# struct inet_diag_msg: family, state, timer, retrans, then the sockid's source port (network order).
_DIAG_MSG_SPORT = struct.Struct("!4xH")

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


def handshakes_under_way(sockets: Iterable[socket.socket]) -> int | None:
    """TCP handshakes under way (SYN received, final ACK not yet) on the ports of ``sockets``; None: cannot say.

    Linux's socket diagnostics (the netlink ``ss`` uses), in this process's
    network namespace. A SYN_RECV socket on another listener of the same
    port (a ``reuse_port`` sibling) counts too: the caller waits a little
    longer, never less. Any thread.
    """
    ports: dict[int, set[int]] = {}
    for sock in sockets:
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                ports.setdefault(sock.family, set()).add(sock.getsockname()[1])
        except OSError:  # closed: nothing can complete on it
            continue
    if not ports:
        return 0
    if sys.platform != "linux":
        return None
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(1.0)  # the kernel answers a dump at once; bounded all the same
            return sum(_syn_recv_on(diag, family, family_ports) for family, family_ports in ports.items())
    except (OSError, struct.error) as exc:  # no netlink here (a sandbox), or an answer we cannot read
        logger.debug("graceful: cannot see the handshakes under way: %s", exc)
        return None


def _syn_recv_on(diag: socket.socket, family: int, ports: set[int]) -> int:
    """How many SYN_RECV sockets of ``family`` have a local port in ``ports`` (one sock_diag dump)."""
    request = _DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, _TCPF_SYN_RECV)
    header = _NLMSGHDR.pack(_NLMSGHDR.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
    diag.send(header + request)
    count = 0
    while True:
        data = diag.recv(65536)
        offset = 0
        while offset + _NLMSGHDR.size <= len(data):
            length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data, offset)
            if kind == _NLMSG_DONE:
                return count
            if kind == _NLMSG_ERROR or length < _NLMSGHDR.size:
                raise OSError(f"sock_diag answered with message type {kind}")
            (port,) = _DIAG_MSG_SPORT.unpack_from(data, offset + _NLMSGHDR.size)
            count += port in ports
            offset += (length + 3) & ~3  # NLMSG_ALIGN


def close_after_queue_drains(sockets: Iterable[socket.socket], timeout: float) -> int:
    """Stop listening on ``sockets`` once their accept queues are empty (or after ``timeout`` s).

    :func:`wait_for_queues_to_drain`, then ``shutdown()`` each socket.
    Returns how many queued connections were still waiting at the deadline
    (and were reset). The caller's server must keep accepting meanwhile.
    Safe to call from any thread; each socket is left shut down but open
    (its owner closes the file descriptor as usual).
    """
    socks = list(sockets)
    start = time.monotonic()
    waiting = wait_for_queues_to_drain(socks, timeout)
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RD)
        except OSError:  # not connected/listening any more: already closed
            continue
    if waiting:
        logger.warning(
            "graceful: %d queued connection(s) still unaccepted after waiting %.1fs; they are reset",
            waiting,
            time.monotonic() - start,
        )
    return waiting


def wait_for_queues_to_drain(sockets: Iterable[socket.socket], timeout: float) -> int:
    """Drop new handshakes on ``sockets`` and wait until their accept queues are empty (or ``timeout`` s).

    From the call on, new handshakes are dropped (:func:`drop_new_handshakes`);
    the wait lasts until the handshakes under way have completed
    (:func:`handshakes_under_way`; where it cannot say, ``HANDSHAKE_SETTLE``
    seconds), all within ``timeout``. Returns how many queued connections
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
    # The first look comes a moment after the filter: a SYN that passed it just
    # before, in a softirq on another CPU (microseconds), has its handshake under way by then.
    pause.wait(_FILTER_SETTLE if any(filtered) else 0.0)
    waiting = _queued(socks)
    while (waiting or _settling(socks, settled)) and time.monotonic() < deadline:
        pause.wait(_POLL_INTERVAL)
        waiting = _queued(socks)
    return waiting


def _settling(socks: list[socket.socket], settled: float) -> bool:
    """True while a handshake under way may still complete (the settle time at most)."""
    return time.monotonic() < settled and handshakes_under_way(socks) != 0


def _queued(socks: list[socket.socket]) -> int:
    return sum(accept_queue_length(sock) or 0 for sock in socks)
