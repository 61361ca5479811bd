"""The health port's HTTP server: one thread, ``graceful-health-port``, that never waits for anything.

One ``selectors`` loop over the listener, its connections, a wake-up socket
and any file descriptor a caller asks it to watch (the Gunicorn master's
channel from its workers); every socket non-blocking, one request per
connection (:mod:`.request`), every bound in :mod:`.limits`. It knows no
WSGI and no Gunicorn: a :class:`Responder` answers each probe from results
already at hand, in microseconds (:mod:`.view`), so no probe ever waits for
an app worker, a thread of the app or a check.

Each round of the loop, in order: accept up to ``_ACCEPT_ROUND`` connections
(reading at once the request that usually came with each, and answering a
probe there and then), read and answer the connections that became
readable, answer at most one queued ``/metrics`` (so probes never wait
behind a run of them), close what has expired. At the cap of open
connections one is shed for each new one (:mod:`.table`): never a probe
whose request has arrived.

After its answer a connection is shut down for writing and what the client
still sends is read and dropped for up to ``LINGER`` seconds, so that closing
with unread bytes does not reset the answer away.

Fork safety (the Gunicorn master forks workers while this thread runs): the
thread holds :attr:`HealthPort.fork_gate` whenever it is not blocked in
``select()``; ``os.register_at_fork`` takes the gate before each fork
(waiting at most one round of the loop, and a round never blocks) and the
child closes every socket of the port, but the listener while
:meth:`HealthPort.passing_listener_on` (a USR2 re-exec hands it on). So at a
fork this thread is inside a system call and holds no lock: never in the
middle of a log write or a buffered stream a child would find locked. The
thread also blocks the asynchronous signals, so the kernel delivers them to
the main thread, where Python runs the handlers: the process's signal
handling stays as it was.

An address in use at start may be waited for in the background, within a
bound (:mod:`.bindwait`: Gunicorn, where another server may still hold it);
every other error is raised at start-up.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import signal
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

from graceful.healthport.address import HealthAddress
from graceful.healthport.bindwait import BindWait
from graceful.healthport.limits import ClientBudgets, Limits, connection_capacity
from graceful.healthport.request import Probe, Refusal, encode, parse
from graceful.healthport.table import LINGERING, QUEUED, READING, WRITING, ConnectionTable
from graceful.http.health import HealthResponse
from graceful.http.probes import METRICS
from graceful.http.replies import TOO_MANY

__all__ = ["LINGER", "HealthPort", "PortStats", "Responder", "register_at_fork_weakly"]

logger = logging.getLogger(__name__)

#: Seconds to read and drop what a client still sends after its answer, before closing.
LINGER = 0.5
#: The longest the loop sleeps with nothing to do (it looks at ``passive`` and a bind retry then).
_IDLE = 0.5
#: Connections accepted per round at most (then the other sockets have their turn).
_ACCEPT_ROUND = 64
#: Seconds to leave the listener alone when accept() fails for want of descriptors and nothing can be shed.
_ACCEPT_PAUSE = 0.1
#: Seconds before a fork gives up waiting for the gate (a round never takes that long) and forks anyway.
_FORK_WAIT = 1.0
#: Signals this thread blocks, so the kernel hands them to the main thread (where Python runs handlers).
_ASYNC_SIGNALS = {
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCHLD,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGWINCH,
    signal.SIGALRM,
}
_LISTENER, _WAKE = "listener", "wake"


class Responder(Protocol):
    """Answers one probe from results at hand; called on the port's thread, so it must never block."""

    def respond(self, endpoint: str, check: str | None, query_string: str) -> HealthResponse:
        """``endpoint`` is ``livez``, ``readyz`` or ``healthz``; ``check`` and the query as WSGI gives them."""
        ...

    def metrics(self) -> tuple[int, bytes, str]:
        """``/metrics``: the status, the body and its content type."""
        ...


class PortStats:
    """What the port did, counted on its thread (plain ints: read them from any thread).

    ``evicted``: connections shed for new ones at the cap; ``rate_limited``:
    ``/metrics`` requests answered 429 (over their budget).
    """

    __slots__ = ("accepted", "answered", "bad_requests", "evicted", "rate_limited", "timed_out", "too_large")

    def __init__(self) -> None:
        self.accepted = self.answered = self.bad_requests = self.evicted = 0
        self.rate_limited = self.timed_out = self.too_large = 0

    def __repr__(self) -> str:
        return "PortStats(" + ", ".join(f"{name}={getattr(self, name)}" for name in self.__slots__) + ")"


class _Conn:
    """One accepted connection: what it sent so far, what is left to send, its deadline, its state (:mod:`.table`)."""

    __slots__ = ("deadline", "inbox", "outbox", "peer", "request", "sock", "state")

    def __init__(self, sock: socket.socket, peer: str, now: float, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.deadline = now + deadline
        self.inbox = bytearray()
        self.outbox = memoryview(b"")
        self.state = READING
        #: A queued /metrics request.
        self.request: Probe | None = None


class HealthPort:
    """The health port's server; see the module docstring.

    Build it on the main thread at start-up, :meth:`bind` it there (a bad
    address raises there), then :meth:`start` the thread. ``listener`` adopts
    a socket already bound instead (inherited across a USR2 re-exec).
    ``passive`` (called on the port's thread each round) returns True while
    another process serves the port: the listener stays unwatched and its
    connections wait in the kernel's queue until this one takes over
    (:meth:`wake` makes it look again at once).
    """

    def __init__(
        self,
        address: HealthAddress,
        responder: Responder,
        *,
        limits: Limits | None = None,
        listener: socket.socket | None = None,
        passive: Callable[[], bool] | None = None,
    ) -> None:
        self.address = address
        self.responder = responder
        self.limits = limits or Limits()
        self.stats = PortStats()
        #: Held by the port's thread except while it waits in select(); taken around each fork.
        self.fork_gate = threading.Lock()
        self._fork_held = False
        self._keep_listener_in_child = False
        self._passive = passive
        self._listener = listener
        if listener is not None:
            listener.setblocking(False)
        #: The wait for an address in use at start (None: not waiting).
        self._bind_wait: BindWait | None = None
        self._selector: selectors.BaseSelector | None = None
        self._watching_listener = False
        #: The wake-up socket pair, made by start().
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._conns: ConnectionTable[_Conn] = ConnectionTable(connection_capacity(self.limits))
        self._metrics_budgets = ClientBudgets(self.limits, time.monotonic())
        self._paused_until = 0.0
        self._closing = False
        self._releasing = False
        self._thread: threading.Thread | None = None
        #: File descriptors the loop watches besides its own sockets, each with its callback.
        self._extra: dict[int, Callable[[], None]] = {}
        self._pid = os.getpid()
        register_at_fork_weakly(
            self, before="before_fork", after_in_parent="after_fork_in_parent", after_in_child="after_fork_in_child"
        )

    # -- main thread -------------------------------------------------------------------

    def bind(self, *, wait_in_use: BindWait | None = None) -> None:
        """Bind now (nothing to do for an adopted listener). Raises OSError.

        With ``wait_in_use``, an address in use is logged once and tried
        again by the port's thread, within that wait's bound (:mod:`.bindwait`).
        """
        if self._listener is not None:
            return
        try:
            self._listener = self.address.bind()
        except OSError as exc:
            if not (wait_in_use is not None and exc.errno == errno.EADDRINUSE):
                raise
            self._bind_wait = wait_in_use
            logger.warning(wait_in_use.waiting(exc))
        else:
            self._bound()

    @property
    def waiting_for_address(self) -> bool:
        """Whether the port's thread is still trying to bind an address in use."""
        return self._bind_wait is not None

    def start(self) -> HealthPort:
        """Start the ``graceful-health-port`` thread; the port answers from now on."""
        wake_r, wake_w = self._wake = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="graceful-health-port", daemon=True)
        self._thread.start()
        return self

    @property
    def listener(self) -> socket.socket | None:
        """The listening socket, once bound."""
        return self._listener

    @property
    def bound_address(self) -> str:
        """Where it listens (the real port when 0 was asked for), or the address it is to bind."""
        listener = self._listener
        if listener is None:
            return str(self.address)
        name = listener.getsockname()
        if isinstance(name, (str, bytes)):
            return f"unix:{os.fsdecode(name)}"
        return str(HealthAddress(str(name[0]), int(name[1])))

    def watch(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the port's thread whenever ``fd`` is readable; before :meth:`start`."""
        self._extra[fd] = callback

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd``: from a :meth:`watch` callback, on the port's thread."""
        self._extra.pop(fd, None)
        if self._selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(fd)

    def wake(self) -> None:
        """Any thread: make the loop look at its state again now (``passive`` changed, closing)."""
        if self._wake is not None:
            with contextlib.suppress(OSError):  # BlockingIOError: a wake-up is already waiting
                self._wake[1].send(b"\0")

    def close(self, timeout: float = 1.0) -> None:
        """Stop the thread (waiting up to ``timeout`` s) and close every socket: the port stops answering."""
        self._closing = True
        self.wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if thread is None or not thread.is_alive():
            self._close_all()

    def release_listener(self) -> None:
        """Any thread: stop accepting, finish the connections already accepted, then close everything.

        For a listener another process also holds and serves from now on (a
        USR2 successor): what waits in the kernel's queue is left to it.
        """
        self._releasing = True
        self.wake()

    @contextlib.contextmanager
    def passing_listener_on(self) -> Iterator[None]:
        """Around a fork whose child hands the listener on (a USR2 re-exec): that child keeps it open."""
        self._keep_listener_in_child = True
        try:
            yield
        finally:
            self._keep_listener_in_child = False

    # -- fork (the forking thread; see the module docstring) ----------------------------------

    def before_fork(self) -> None:
        """Take the gate, so that the fork finds the port's thread in select() (bounded)."""
        if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
            return
        self._fork_held = self.fork_gate.acquire(timeout=_FORK_WAIT)

    def after_fork_in_parent(self) -> None:
        """Give the gate back."""
        if self._fork_held:
            self._fork_held = False
            self.fork_gate.release()

    def after_fork_in_child(self) -> None:
        """The thread did not come along: close the port's sockets (but a listener being handed on)."""
        if self._pid in (0, os.getpid()):
            return
        if self._fork_held:
            self._fork_held = False
            self.fork_gate.release()
        # A worker holding a copy would keep the port bound, and connections open, after the master closed them.
        self._pid = 0
        self._close_all(keep=self._listener if self._keep_listener_in_child else None)

    def _close_all(self, keep: socket.socket | None = None) -> None:
        for conn in self._conns:
            self._conns.remove(conn)
            with contextlib.suppress(OSError):
                conn.sock.close()
        if self._selector is not None:
            with contextlib.suppress(OSError):
                self._selector.close()
            self._selector = None
        for sock in self._wake or ():
            with contextlib.suppress(OSError):
                sock.close()
        if self._listener is not None and self._listener is not keep:
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None

    # -- graceful-health-port thread ------------------------------------------------------

    def _run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)
        gate = self.fork_gate
        self._take(gate)
        try:
            selector = self._selector = selectors.DefaultSelector()
            assert self._wake is not None
            selector.register(self._wake[0], selectors.EVENT_READ, _WAKE)
            for fd in self._extra:
                selector.register(fd, selectors.EVENT_READ, fd)
            while not self._closing:
                if self._releasing and not len(self._conns):
                    break  # every connection accepted has its answer: the successor serves the rest
                self._update_listener(selector)
                timeout = self._timeout()
                gate.release()
                try:
                    events = selector.select(timeout)
                finally:
                    self._take(gate)
                self._round(selector, events)
        except Exception:
            logger.exception("graceful: the health port's loop failed; the health port no longer answers")
        finally:
            self._close_all()  # under the gate: a fork meanwhile finds the sockets open or closed, never half
            gate.release()

    def _take(self, gate: threading.Lock) -> None:
        """Take the gate back after select(): a fork holds it for a moment at most."""
        while not gate.acquire(timeout=5.0):
            logger.warning("graceful: the health port waited 5s for a fork to finish")

    def _round(self, selector: selectors.BaseSelector, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, _ in events:
            data = key.data
            if data == _WAKE:
                self._drain_wake()
            elif data == _LISTENER:
                self._accept(selector)
            elif isinstance(data, int):
                self._call_back(data)
            elif isinstance(data, _Conn) and data in self._conns:  # not shed earlier in this round
                self._guarded(selector, data, self._on_ready)
        # After every probe of this round: one /metrics, the most expensive answer.
        queued = self._conns.first(QUEUED)
        if queued is not None:
            self._guarded(selector, queued, self._answer_queued)
        self._expire(selector)

    def _guarded(self, selector: selectors.BaseSelector, conn: _Conn, step: Callable[..., None]) -> None:
        """Run ``step(selector, conn)``; one connection's trouble never stops the port: drop it, go on."""
        try:
            step(selector, conn)
        except Exception:
            logger.exception("graceful: the health port dropped a connection it could not handle")
            self._drop(selector, conn)

    def _call_back(self, fd: int) -> None:
        """A watched descriptor is readable: its callback; one that raises is logged and unwatched."""
        callback = self._extra.get(fd)
        if callback is None:
            return
        try:
            callback()
        except Exception:
            logger.exception("graceful: the health port stops watching fd %d: its callback failed", fd)
            self.unwatch(fd)

    def _timeout(self) -> float:
        if self._conns.count(QUEUED):
            return 0.0  # a /metrics waits its turn: after this round's probes, not after a sleep
        now = time.monotonic()
        wake = now + _IDLE
        deadline = self._conns.next_deadline()
        if deadline is not None:
            wake = min(wake, deadline)
        if self._paused_until:
            wake = min(wake, self._paused_until)
        if self._bind_wait is not None:
            wake = min(wake, self._bind_wait.next_try)
        return max(0.0, wake - now)

    def _drain_wake(self) -> None:
        assert self._wake is not None
        with contextlib.suppress(OSError):  # BlockingIOError: drained
            while self._wake[0].recv(4096):
                pass

    def _update_listener(self, selector: selectors.BaseSelector) -> None:
        """Watch the listener when it should be: bound, not passive, not releasing, not paused."""
        now = time.monotonic()
        wait = self._bind_wait
        if self._listener is None and wait is not None and now >= wait.next_try:
            self._try_bind(wait, now)
        if self._paused_until and now >= self._paused_until:
            self._paused_until = 0.0
        listener = self._listener
        if listener is None:
            return
        want = not self._releasing and not self._paused_until and not (self._passive is not None and self._passive())
        if want and not self._watching_listener:
            selector.register(listener, selectors.EVENT_READ, _LISTENER)
            self._watching_listener = True
        elif not want and self._watching_listener:
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(listener)
            self._watching_listener = False

    def _try_bind(self, wait: BindWait, now: float) -> None:
        """Another try at an address in use: bound, or again later, or (at the wait's bound) given up."""
        try:
            self._listener = self.address.bind()
        except OSError:  # in use still, or another error: the first line said so; the bound covers both
            if wait.failed(now):
                self._bind_wait = None
                logger.error(wait.giving_up(now))
                wait.on_give_up()
            return
        self._bind_wait = None
        self._bound(wait.bound(now))
        wait.on_bound()

    def _bound(self, after: str = "") -> None:
        suffix = f" {after}" if after else ""
        logger.info("graceful: health port listening on %s (pid %d)%s", self.bound_address, os.getpid(), suffix)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        """Take up to ``_ACCEPT_ROUND`` connections from the kernel's queue; answer those whose probe came along."""
        listener = self._listener
        if listener is None:
            return
        for _ in range(_ACCEPT_ROUND):
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._shed(selector):
                    continue  # out of descriptors: one connection fewer, then the next one
                logger.error("graceful: the health port's accept() failed: %s; pausing for %gs", exc, _ACCEPT_PAUSE)
                self._paused_until = time.monotonic() + _ACCEPT_PAUSE
                return
            self.stats.accepted += 1
            sock.setblocking(False)
            if self._conns.full():
                self._shed(selector)
            conn = _Conn(
                sock, address[0] if isinstance(address, tuple) else "unix", time.monotonic(), self.limits.deadline
            )
            self._conns.add(conn)
            selector.register(sock, selectors.EVENT_READ, conn)
            self._guarded(selector, conn, self._on_ready)  # its request is usually there already

    def _shed(self, selector: selectors.BaseSelector) -> bool:
        """Close one connection to make room (:meth:`ConnectionTable.victim`); False when there is none."""
        victim = self._conns.victim()
        if victim is None:
            return False
        if victim.state != LINGERING:
            self.stats.evicted += 1
        self._drop(selector, victim)
        return True

    def _drop(self, selector: selectors.BaseSelector, conn: _Conn) -> None:
        if not self._conns.remove(conn):
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _on_ready(self, selector: selectors.BaseSelector, conn: _Conn) -> None:
        if conn.state == WRITING:
            self._send(selector, conn)
            return
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client closed, or reset
            self._drop(selector, conn)
        elif conn.state == READING:
            conn.inbox += data
            self._read(selector, conn)

    def _read(self, selector: selectors.BaseSelector, conn: _Conn) -> None:
        parsed = parse(conn.inbox, self.limits.max_request)
        if parsed is None:
            return
        if isinstance(parsed, Refusal):
            if parsed.status == 400:
                self.stats.bad_requests += 1
            elif parsed.status == 431:
                self.stats.too_large += 1
            response = encode(parsed.status, parsed.body, head=parsed.head, allow=parsed.allow)
        elif parsed.endpoint != METRICS:
            response = self._answer(parsed)
        elif self._metrics_budgets.take(conn.peer, time.monotonic()):
            conn.request = parsed
            self._conns.move(conn, QUEUED)  # answered after this round's probes (_round)
            return
        else:
            self.stats.rate_limited += 1
            response = encode(429, TOO_MANY, head=parsed.head, retry_after="1")
        self._reply(selector, conn, response)

    def _answer_queued(self, selector: selectors.BaseSelector, conn: _Conn) -> None:
        assert conn.request is not None
        self._reply(selector, conn, self._answer(conn.request))

    def _answer(self, probe: Probe) -> bytes:
        if probe.endpoint == METRICS:
            try:
                status, body, content_type = self.responder.metrics()
            except Exception:
                logger.exception("graceful: the health port's answer to /metrics failed")
                return encode(500, b"internal error\n", head=probe.head)
            return encode(status, body, head=probe.head, content_type=content_type)
        try:
            answer = self.responder.respond(probe.endpoint, probe.check, probe.query)
        except Exception:
            logger.exception("graceful: the health port's answer to /%s failed", probe.endpoint)
            answer = HealthResponse(500, "internal error\n")
        return encode(answer.status, answer.body.encode("utf-8", "replace"), head=probe.head)

    def _reply(self, selector: selectors.BaseSelector, conn: _Conn, response: bytes) -> None:
        self._conns.move(conn, WRITING)
        conn.inbox = bytearray()
        conn.outbox = memoryview(response)
        self.stats.answered += 1
        self._send(selector, conn)

    def _send(self, selector: selectors.BaseSelector, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.outbox)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._drop(selector, conn)
            return
        conn.outbox = conn.outbox[sent:]
        if conn.outbox:
            selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
            return
        # Answered: our FIN now; read and drop what the client still sends, briefly, then close.
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        conn.deadline = time.monotonic() + LINGER
        self._conns.move(conn, LINGERING)
        selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        for conn in self._conns.expired(time.monotonic()):
            if conn.state != LINGERING:
                self.stats.timed_out += 1
            self._drop(selector, conn)


def register_at_fork_weakly(
    target: object, *, before: str | None = None, after_in_parent: str | None = None, after_in_child: str | None = None
) -> None:
    """``os.register_at_fork`` with methods of ``target`` (by name), holding no reference to it.

    Handlers can never be unregistered: these do nothing once ``target`` is gone.
    """
    ref = weakref.ref(target)

    def call(name: str | None) -> Callable[[], None] | None:
        if name is None:
            return None
        method_name = name

        def handler() -> None:
            current = ref()
            if current is not None:
                getattr(current, method_name)()

        return handler

    handlers = {"before": before, "after_in_parent": after_in_parent, "after_in_child": after_in_child}
    os.register_at_fork(**{key: call(name) for key, name in handlers.items() if name is not None})
