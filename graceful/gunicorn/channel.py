"""The one channel between the Gunicorn master and each of its workers: typed, framed records, both ways.

Every worker gets its own ``socketpair(AF_UNIX, SOCK_STREAM)``, made by the
master just before the fork (Gunicorn's ``pre_fork``)::

    master                                                    each worker
      pre_fork (main thread): makes the pair, writes the     post_fork: keeps its end, closes
        facts already fired as its first records               every other it inherited, says hello
      any thread: a fact fires  ----- facts ------------->   graceful-watch thread (and the
        ShutdownInitiated, NotAcceptingNewRequests,            graceful-stop thread at its TERM)
        close your listeners, the reason of the next TERM      read them: WorkerChannel.poll()
      graceful-channel thread: one selector over   <------   hello (its pid), drained, listeners
        every worker's end; keeps the latest record           closed, health (non-blocking: a full
        of each kind per worker, wakes the waiters,           buffer drops it), metrics, in flight
        reads each end to end-of-file                         (shutdown), its part of the record at exit
                                                              (blocking, bounded)

A record is ``[4-byte big-endian length N][1-byte kind][N bytes payload]``;
the kinds are :class:`Kind`, each with a bound on its payload. Payloads are
JSON, or another module's own encoding carried as it is (a health
snapshot's :meth:`~graceful.healthport.snapshot.Snapshot.record`, a metrics
snapshot, a :class:`~graceful.core.record.ProcessPart`): this module never
looks inside them. A stream is a stream, so records never interleave: a
worker's threads share its end and take one lock around each whole record.

A worker's end at end-of-file means the worker is gone and everything it
sent has been read: a part sent just before it exits is never lost, and
the master reads parts only once every end is at end-of-file (bounded).

Robustness: whatever arrives is checked. A record of an unknown kind, or
longer than its kind allows, ends what the master takes from that worker
(the stream cannot be cut into records any more); a record cut short by
end-of-file is dropped. Each is logged once per worker; the master's thread
never dies of a record.

Fork safety: a fact fires under the channel's lock, which ``pre_fork``
also holds while it makes a new pair and writes the facts fired so far
into it, so a worker forked while the master fires a fact gets it exactly
once. The child closes the master's end of its own pair and every end of
the other workers it inherited (``os.register_at_fork``), so a worker's
end-of-file is its own exit. The master's threads may hold its locks at
the fork: the child never takes them.

What stays out of the channel: a request's arrival time, written by the
request path without a system call (:class:`~graceful.gunicorn.shared.ArrivalBoard`).
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import math
import os
import select
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from graceful.gunicorn.stop_reason import SENT_BY_MASTER, StopReason
from graceful.healthport.server import register_at_fork_weakly
from graceful.healthport.snapshot import MAX_RECORD

__all__ = [
    "FrameReader",
    "Kind",
    "REPORT_TIMEOUT",
    "MasterChannel",
    "Received",
    "WorkerChannel",
    "frame",
]

logger = logging.getLogger(__name__)


class Kind(enum.IntEnum):
    """What a record says; the byte after its length."""

    # master -> worker: the server's facts
    SHUTDOWN_INITIATED = 1
    NOT_ACCEPTING = 2
    #: The master cannot stop listening itself (reuse_port, or listeners shared with another master).
    CLOSE_LISTENERS = 3
    #: Why the master stops the workers it TERMs next (a :class:`StopReason`'s value).
    STOP_REASON = 4
    # worker -> master
    #: The worker's first record: its pid.
    HELLO = 16
    #: send_retry_after: its requests are done.
    DRAINED = 17
    #: It stopped listening (after CLOSE_LISTENERS).
    LISTENERS_CLOSED = 18
    #: Its latest health snapshot (the health port's record).
    HEALTH = 19
    #: Its latest metrics snapshot (JSON).
    METRICS = 20
    #: Its part of the shutdown record (JSON), sent once as it exits.
    PART = 21
    #: During a shutdown: its requests in flight (ASCII digits), as they change (lost if it dies).
    IN_FLIGHT = 22


#: The facts: what the master tells every worker, the one that forks later too.
FACTS = frozenset({Kind.SHUTDOWN_INITIATED, Kind.NOT_ACCEPTING, Kind.CLOSE_LISTENERS, Kind.STOP_REASON})
#: What a worker tells its master.
REPORTS = frozenset(Kind) - FACTS

#: The longest payload of each kind (bytes). A part is small (its samples are bounded); bigger is not one.
MAX_PAYLOAD: dict[Kind, int] = {
    Kind.SHUTDOWN_INITIATED: 8,
    Kind.NOT_ACCEPTING: 8,
    Kind.CLOSE_LISTENERS: 0,
    Kind.STOP_REASON: 64,
    Kind.HELLO: 20,
    Kind.DRAINED: 0,
    Kind.LISTENERS_CLOSED: 0,
    Kind.HEALTH: MAX_RECORD,
    Kind.METRICS: 1 << 20,
    Kind.PART: 32 << 20,
    Kind.IN_FLIGHT: 12,
}

_HEADER = struct.Struct("!IB")
#: A fact's payload: the master's monotonic time when it fired (none: the worker's own time stands in).
_TIME = struct.Struct("!d")
#: Upper bound (s) on a worker's wait to send a record the master waits for (drained, its part, its last metrics).
REPORT_TIMEOUT = 2.0
#: Seconds a worker waits to finish a record another thread's full buffer interrupted.
FINISH_RECORD_TIMEOUT = 1.0
#: Seconds the master's thread waits for something before it looks again (it is woken for any news).
_IDLE = 1.0


def frame(kind: Kind, payload: bytes = b"") -> bytes:
    """One whole record; ValueError when ``payload`` is longer than ``kind`` allows."""
    if len(payload) > MAX_PAYLOAD[kind]:
        raise ValueError(f"a {kind.name} record's payload is at most {MAX_PAYLOAD[kind]} bytes, not {len(payload)}")
    return _HEADER.pack(len(payload), kind) + payload


class FrameReader:
    """Cuts one end's byte stream into records of the kinds it ``accepts``.

    A record of another kind, or longer than its kind allows, loses the
    stream: :attr:`error` says why, and nothing more is taken from it.
    :attr:`pending` is the bytes of a record not yet whole (at end-of-file:
    a record cut short).
    """

    def __init__(self, accepts: Collection[Kind]) -> None:
        self._accepts = frozenset(int(kind) for kind in accepts)
        self._buffer = bytearray()
        #: Why the stream was lost; None while it is sound.
        self.error: str | None = None

    @property
    def pending(self) -> int:
        """Bytes of a record not yet whole."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[tuple[Kind, bytes]]:
        """Add ``chunk``; every record now whole, in order."""
        if self.error is not None:
            return []
        buffer = self._buffer
        buffer += chunk
        records: list[tuple[Kind, bytes]] = []
        start = 0
        while len(buffer) - start >= _HEADER.size:
            length, code = _HEADER.unpack_from(buffer, start)
            if code not in self._accepts:
                self._lose(f"a record of unknown kind {code}")
                return records
            kind = Kind(code)
            if length > MAX_PAYLOAD[kind]:
                self._lose(f"a {kind.name} record of {length} bytes (at most {MAX_PAYLOAD[kind]})")
                return records
            end = start + _HEADER.size + length
            if len(buffer) < end:
                break
            records.append((kind, bytes(buffer[start + _HEADER.size : end])))
            start = end
        del buffer[:start]
        return records

    def _lose(self, error: str) -> None:
        self.error = error
        self._buffer.clear()


@dataclass(frozen=True)
class Received:
    """The latest record of one kind from one worker, as the master keeps it."""

    payload: bytes
    #: Monotonic time the master read it.
    at: float


@dataclass(eq=False)
class _End:
    """The master's end of one worker's channel."""

    sock: socket.socket
    #: The worker's pid, from its hello; None until then.
    pid: int | None = None
    reader: FrameReader = field(default_factory=lambda: FrameReader(REPORTS))
    latest: dict[Kind, Received] = field(default_factory=dict)
    #: False once at end-of-file (the worker is gone).
    open: bool = True
    #: A fact could not be written whole: the worker would misread the stream, so none is written any more.
    broken: bool = False
    warned: bool = False


class MasterChannel:
    """The master's side: every worker's end, the facts fired, the ``graceful-channel`` reader thread.

    Made in ``on_starting`` (main thread, before the first fork). The
    reader thread starts with the first worker. :meth:`before_fork` runs in
    ``pre_fork``; :meth:`worker_end` in the worker, in ``post_fork``.
    Thread-safe; see the module docstring for fork safety.
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._ends: list[_End] = []
        #: The facts fired so far, in order, as records (the stop reason: the latest only).
        self._facts: dict[Kind, bytes] = {}
        self._stop_reason = StopReason.BY_MASTER
        #: pid -> the kinds of report it sent (drained, listeners closed), also after it exited.
        self._reported: dict[int, set[Kind]] = {}
        #: The parts of workers whose end is at end-of-file: (pid, payload).
        self._parts: list[tuple[int, bytes]] = []
        self._on_close: list[Callable[[int, dict[Kind, Received]], object]] = []
        self._selector: selectors.BaseSelector | None = None
        # Wakes the reader thread for a new end or the close; made with the thread.
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._added: list[_End] = []
        self._thread: threading.Thread | None = None
        self._closing = False
        self._pid = os.getpid()
        # The pair made for the fork under way, and the thread forking.
        self._pending: tuple[_End, socket.socket] | None = None
        self._forking: int | None = None
        #: In a forked worker: its end, until :meth:`worker_end` takes it.
        self._child: socket.socket | None = None
        register_at_fork_weakly(self, after_in_parent="_after_fork_in_parent", after_in_child="_after_fork_in_child")

    # -- the facts (master, any thread) --------------------------------------------------------

    def fire(self, kind: Kind, at: float | None = None) -> None:
        """Tell every worker, and every one forked later, the fact ``kind``; once (later calls do nothing).

        ``at``: the monotonic time it fired in the master, which the workers
        take as theirs (``CLOCK_MONOTONIC`` is the machine's, not the process's).
        """
        if kind not in FACTS or kind is Kind.STOP_REASON:
            raise ValueError(f"{kind.name} is not a fact the master fires")
        self._set_fact(kind, b"" if at is None else _TIME.pack(at), once=True)

    def fired(self, kind: Kind) -> bool:
        """True once the fact ``kind`` fired."""
        return kind in self._facts

    def set_stop_reason(self, reason: StopReason) -> None:
        """Master, main thread: say why the workers it TERMs next stop (before it TERMs them)."""
        if reason not in SENT_BY_MASTER:
            raise ValueError(f"the master does not send {reason.value!r}: a worker knows it itself")
        self._stop_reason = reason
        self._set_fact(Kind.STOP_REASON, reason.value.encode(), once=False)

    @property
    def stop_reason(self) -> StopReason:
        """The reason the master sent last (``stopped by the master`` before any)."""
        return self._stop_reason

    def _set_fact(self, kind: Kind, payload: bytes, *, once: bool) -> None:
        record = frame(kind, payload)
        with self._lock:
            if once and kind in self._facts:
                return
            self._facts[kind] = record
            for end in self._ends:
                if end.open:
                    self._tell(end, record)

    def _tell(self, end: _End, record: bytes) -> None:
        """Write one fact to a worker (under the lock). Never blocks: a few bytes into an empty buffer."""
        if end.broken:
            return
        try:
            sent = end.sock.send(record)
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # the worker is gone: its end-of-file is read by the thread
        if sent != len(record):
            end.broken = True
            logger.warning(
                "graceful: worker %s does not read its channel: no more facts are sent to it", end.pid or "?"
            )

    # -- the fork (master main thread; the child in post_fork) -----------------------------------

    def before_fork(self) -> None:
        """``pre_fork`` (master, main thread): the next worker's pair, with the facts so far already in it."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        mine.setblocking(False)
        end = _End(mine)
        with self._lock:
            self._drop_pending()
            for record in self._facts.values():
                self._tell(end, record)
            self._ends.append(end)
            self._pending = (end, theirs)
            self._forking = threading.get_ident()

    def _after_fork_in_parent(self) -> None:
        """The forking thread, in the master: the child has its end; read ours."""
        if self._pending is None or self._forking != threading.get_ident():
            return
        end, theirs = self._pending
        self._pending = None
        theirs.close()
        self._watch(end)

    def _after_fork_in_child(self) -> None:
        """The forking thread, in the child (no lock taken: another thread of the master may hold it)."""
        if self._pid != os.getpid() and self._pid:
            self._pid = 0
            pending, forking = self._pending, self._forking
            self._pending = None
            if pending is not None and forking == threading.get_ident():
                self._child = pending[1]  # a Gunicorn worker; any other fork closes it at exec
            elif pending is not None:
                pending[1].close()
            for end in self._ends:
                end.sock.close()
            self._ends = []
            self._close_wake()
            if self._selector is not None:
                self._selector.close()
                self._selector = None
            self._thread = None

    def worker_end(self, pid: int | None = None) -> WorkerChannel | None:
        """``post_fork`` (worker, main thread): this worker's channel; None when ``pre_fork`` did not run.

        Called in the process that ran ``pre_fork`` (no fork between: a test,
        a worker in this very process), both ends stay here.
        """
        if self._child is None and self._pending is not None and self._pid == os.getpid():
            end, theirs = self._pending
            self._pending = None
            self._watch(end)
            return WorkerChannel(theirs, pid)
        sock, self._child = self._child, None
        return None if sock is None else WorkerChannel(sock, pid)

    def connect(self, pid: int | None = None) -> WorkerChannel:
        """A worker's channel without a fork (tests): ``pre_fork`` and ``post_fork`` in this process."""
        self.before_fork()
        channel = self.worker_end(pid)
        assert channel is not None
        return channel

    def _drop_pending(self) -> None:
        """A pre_fork with no fork after it (the fork failed): the pair is forgotten (under the lock)."""
        if self._pending is not None:
            end, theirs = self._pending
            self._pending = None
            theirs.close()
            self._watch(end)  # reads end-of-file at once

    # -- what workers sent (master, any thread) --------------------------------------------------

    def latest(self, kind: Kind) -> list[tuple[int, Received]]:
        """(pid, its latest record of ``kind``) of each worker whose end is open, in fork order."""
        found: list[tuple[int, Received]] = []
        with self._lock:
            for end in self._ends:
                if end.open and end.pid is not None and kind in end.latest:
                    found.append((end.pid, end.latest[kind]))
        return found

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the channel's lock: what :meth:`on_close` callbacks change stays as it is meanwhile."""
        with self._lock:
            yield

    def on_close(self, callback: Callable[[int, dict[Kind, Received]], object]) -> None:
        """Call ``callback(pid, latest)`` on the ``graceful-channel`` thread as a worker's end reaches end-of-file.

        Called before :meth:`latest` stops listing that worker, under the
        channel's lock: it must be quick and call nothing of the channel.
        """
        self._on_close.append(callback)

    def wait_all(self, kind: Kind, live_pids: Callable[[], Collection[int]], timeout: float) -> bool:
        """Until every pid in ``live_pids()`` sent ``kind`` (at least once), up to ``timeout`` s; True if all did.

        ``live_pids`` is asked again as records arrive and at least every
        0.2 s: workers that die or are replaced change the set.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if all(kind in self._reported.get(pid, ()) for pid in live_pids()):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(min(remaining, 0.2))

    def parts(self, timeout: float) -> list[tuple[int, bytes]]:
        """``on_exit`` (main thread, workers reaped): every worker's part, once every end is at end-of-file.

        Waits up to ``timeout`` s for the ends still open (their last
        records may be on their way); a part already read from one still
        open counts too.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while any(end.open for end in self._ends):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    logger.warning("graceful: a worker's channel is still open at exit: reading the parts so far")
                    break
                self._lock.wait(min(remaining, 0.2))
            parts = list(self._parts)
            for end in self._ends:
                if end.pid is not None and Kind.PART in end.latest:
                    parts.append((end.pid, end.latest[Kind.PART].payload))
        return parts

    def close(self) -> None:
        """Stop the reader thread and close every end (master; at exit, and in tests)."""
        with self._lock:
            self._closing = True
            thread = self._thread
        self._wake()
        if thread is not None:
            thread.join(timeout=1.0)
        with self._lock:
            for end in self._ends:
                end.sock.close()
                end.open = False
            self._ends = []
            if self._pending is not None:
                self._pending[1].close()
                self._pending = None
            if self._thread is None or not self._thread.is_alive():
                self._close_wake()
            self._lock.notify_all()

    def _close_wake(self) -> None:
        for sock in (self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._wake_r = self._wake_w = None

    # -- the graceful-channel thread --------------------------------------------------------------

    def _watch(self, end: _End) -> None:
        """Have the reader thread read ``end`` (started with the first)."""
        with self._lock:
            self._added.append(end)
            if end not in self._ends:
                self._ends.append(end)
            if self._thread is None and not self._closing:
                self._wake_r, self._wake_w = socket.socketpair()
                self._wake_r.setblocking(False)
                self._wake_w.setblocking(False)
                self._selector = selectors.DefaultSelector()
                self._selector.register(self._wake_r, selectors.EVENT_READ, None)
                self._thread = threading.Thread(target=self._run, name="graceful-channel", daemon=True)
                self._thread.start()
        self._wake()

    def _wake(self) -> None:
        wake = self._wake_w
        if wake is not None:
            with contextlib.suppress(OSError):  # full: a wake is pending already
                wake.send(b"w")

    def _run(self) -> None:
        selector = self._selector
        assert selector is not None
        while not self._closing:
            for key, _ in selector.select(_IDLE):
                if key.data is None:
                    self._take_added(selector, key.fileobj)  # type: ignore[arg-type]
                    continue
                try:
                    self._read(selector, key.data)
                except Exception:  # logged; this worker's end is closed, the others are read on
                    logger.exception("graceful: reading worker %s's channel failed: it is closed", key.data.pid)
                    self._closed(selector, key.data)
        selector.close()

    def _take_added(self, selector: selectors.BaseSelector, wake: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            while wake.recv(4096):
                pass
        with self._lock:
            added, self._added = self._added, []
        for end in added:
            selector.register(end.sock, selectors.EVENT_READ, end)

    def _read(self, selector: selectors.BaseSelector, end: _End) -> None:
        try:
            chunk = end.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""  # reset: as good as end-of-file
        if not chunk:
            self._closed(selector, end)
            return
        records = end.reader.feed(chunk)
        now = time.monotonic()
        with self._lock:
            for kind, payload in records:
                self._take(end, kind, payload, now)
            self._lock.notify_all()
        if end.reader.error is not None:
            self._warn(end, end.reader.error)

    def _take(self, end: _End, kind: Kind, payload: bytes, now: float) -> None:
        """One record from a worker (under the lock)."""
        if kind is Kind.HELLO:
            if end.pid is None:
                pid = _pid(payload)
                if pid is None:
                    self._warn(end, f"a hello that is not a pid: {payload[:20]!r}")
                end.pid = pid
            return
        if end.pid is None:
            self._warn(end, f"a {kind.name} record before its hello")
            return
        if kind in (Kind.DRAINED, Kind.LISTENERS_CLOSED):
            self._reported.setdefault(end.pid, set()).add(kind)
        end.latest[kind] = Received(payload, now)

    def _closed(self, selector: selectors.BaseSelector, end: _End) -> None:
        with contextlib.suppress(KeyError, ValueError):  # unregistered already (a failed read's retry)
            selector.unregister(end.sock)
        end.sock.close()
        if end.reader.pending:
            self._warn(end, f"a record cut short at end-of-file ({end.reader.pending} bytes)")
        with self._lock:
            if end.pid is not None:
                for callback in self._on_close:
                    try:
                        callback(end.pid, end.latest)
                    except Exception:  # logged: a consumer's bug must not stop the reader
                        logger.exception("graceful: a channel consumer failed on worker %d's exit", end.pid)
                if Kind.PART in end.latest:
                    self._parts.append((end.pid, end.latest[Kind.PART].payload))
            end.open = False
            if end in self._ends:
                self._ends.remove(end)
            self._lock.notify_all()

    def _warn(self, end: _End, problem: str) -> None:
        """Once per worker: what it sent that the master refuses."""
        if not end.warned:
            end.warned = True
            logger.warning("graceful: refusing what worker %s sent on its channel: %s", end.pid or "?", problem)


class WorkerChannel:
    """A worker's end: the master's facts in, its reports out. Made in ``post_fork`` (worker, main thread).

    Any of the worker's threads (greenlets under gevent, after
    :meth:`renew_after_patch`) may send and read: one lock around each
    whole record sent, one around reading. Never used in a signal handler.
    """

    def __init__(self, sock: socket.socket, pid: int | None = None) -> None:
        sock.setblocking(False)
        self._sock = sock
        self.pid = os.getpid() if pid is None else pid
        self._send_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._reader = FrameReader(FACTS)
        self._facts: dict[Kind, float | None] = {}
        self._stop_reason = StopReason.BY_MASTER
        #: True once the master's end is closed (the master is gone).
        self.master_gone = False
        #: Records dropped because the master was not reading (health, metrics).
        self.dropped = 0
        # A record was cut short: the master cannot read anything after it.
        self._broken = False
        self._warned = False
        # Whoever reads a fact wakes the other readers' waits (the graceful-stop thread may read it first).
        self._news_r, self._news_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._owner = os.getpid()
        register_at_fork_weakly(self, after_in_child="_after_fork_in_child")
        self.send(Kind.HELLO, str(self.pid).encode(), timeout=FINISH_RECORD_TIMEOUT)

    def _after_fork_in_child(self) -> None:
        """A process the worker forks (the app's own): its copy would keep the master from seeing this worker's exit."""
        if self._owner != os.getpid():
            self._owner = os.getpid()
            self.close()
            for fd in (self._news_r, self._news_w):  # no thread of the worker's came along
                os.close(fd)

    def close(self) -> None:
        """Close this end (the worker's exit does the same): the master reads its end-of-file."""
        self._broken = self.master_gone = True
        self._sock.close()
        # Wakes a thread waiting on it; the pipe stays (a waiter may still be about to select on it).
        with contextlib.suppress(OSError):
            os.write(self._news_w, b"c")

    def renew_after_patch(self) -> None:
        """``post_worker_init`` under gevent, after its monkey-patching: cooperative locks."""
        self._send_lock = threading.Lock()
        self._read_lock = threading.Lock()

    def fileno(self) -> int:
        """The worker's end."""
        return self._sock.fileno()

    # -- facts in -------------------------------------------------------------------------------

    def poll(self) -> None:
        """Read every fact waiting, without blocking."""
        with self._read_lock:
            while not self.master_gone:
                try:
                    chunk = self._sock.recv(4096)
                except BlockingIOError:
                    return
                except OSError:
                    chunk = b""
                if not chunk:
                    self.master_gone = True
                    return
                for kind, payload in self._reader.feed(chunk):
                    if kind is Kind.STOP_REASON:
                        self._facts[kind] = None
                        self._stop_reason = _reason(payload)
                    else:
                        self._facts[kind] = _time(payload)
                with contextlib.suppress(OSError):  # full: the waiters are being woken already
                    os.write(self._news_w, b"n")
                if self._reader.error is not None:
                    self._warn(self._reader.error)
                    self.master_gone = True  # nothing more can be read from it

    def fired(self, kind: Kind) -> bool:
        """True once the master sent the fact ``kind``."""
        self.poll()
        return kind in self._facts

    def fired_at(self, kind: Kind) -> float | None:
        """The master's monotonic time of the fact ``kind`` (None: not sent, or sent without one)."""
        self.poll()
        return self._facts.get(kind)

    def wait_for(self, kind: Kind, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the fact ``kind``; True once the master sent it."""
        deadline = time.monotonic() + timeout
        while not self.fired(kind):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            # select.select looked up now: gevent's cooperative one once patched.
            watched = [self._news_r] if self.master_gone else [self._sock.fileno(), self._news_r]
            try:
                readable, _, _ = select.select(watched, [], [], remaining)
            except (OSError, ValueError):  # closed meanwhile (close()): look again, at the news alone
                continue
            if self._news_r in readable:
                with contextlib.suppress(OSError):
                    os.read(self._news_r, 64)
        return True

    def stop_reason(self) -> StopReason:
        """Why the master stops this worker, as it said last before its TERM (read after the TERM)."""
        self.poll()
        return self._stop_reason

    # -- reports out ------------------------------------------------------------------------------

    def send(self, kind: Kind, payload: bytes = b"", *, timeout: float | None = None) -> bool:
        """Send one record; True once it is all in the channel.

        ``timeout`` None: never wait (a full buffer drops the record, counted
        in :attr:`dropped`). A payload longer than ``kind`` allows is not sent
        (logged once). Else wait up to ``timeout`` s for room. A
        record begun is finished (within :data:`FINISH_RECORD_TIMEOUT` at
        least), or the channel is broken: nothing more is sent.
        """
        try:
            record = frame(kind, payload)
        except ValueError as exc:  # a payload too long to be what it says
            self._warn(str(exc))
            return False
        with self._send_lock:
            if self._broken:
                return False
            view = memoryview(record)
            deadline = time.monotonic() + (FINISH_RECORD_TIMEOUT if timeout is None else timeout)
            while view:
                try:
                    view = view[self._sock.send(view) :]
                    continue
                except BlockingIOError:
                    pass
                except OSError as exc:  # the master is gone
                    self._broken = True
                    self._warn(str(exc))
                    return False
                if len(view) == len(record) and timeout is None:
                    self.dropped += 1
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if len(view) != len(record):
                        self._broken = True
                    self._warn(f"the master read nothing for {timeout or FINISH_RECORD_TIMEOUT:g}s")
                    return False
                select.select([], [self._sock], [], remaining)
            return True

    def send_json(self, kind: Kind, data: object, *, timeout: float | None = None) -> bool:
        """:meth:`send` ``data`` as compact JSON."""
        return self.send(kind, json.dumps(data, separators=(",", ":")).encode(), timeout=timeout)

    def _warn(self, problem: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("graceful: worker %d: its channel to the master: %s", self.pid, problem)


def _pid(payload: bytes) -> int | None:
    """A hello's pid, or None."""
    text = payload.decode("ascii", "replace")
    return int(text) if text.isdigit() and 0 < int(text) < 1 << 31 else None


def _time(payload: bytes) -> float | None:
    """A fact's time, or None (no time, or not a finite one)."""
    if len(payload) != _TIME.size:
        return None
    (at,) = _TIME.unpack(payload)
    return at if math.isfinite(at) and at >= 0 else None


def _reason(payload: bytes) -> StopReason:
    """A stop reason's value; an unknown one reads as ``stopped by the master``."""
    try:
        reason = StopReason(payload.decode())
    except (UnicodeDecodeError, ValueError):
        return StopReason.BY_MASTER
    return reason if reason in SENT_BY_MASTER else StopReason.BY_MASTER
