"""The health port under Gunicorn: served by the master, fed by every worker.

Where it runs: a thread of the master, ``graceful-health-port``
(:class:`~graceful.healthport.server.HealthPort`). The master never serves
the app, so its thread answers however busy the workers are, whatever their
class (sync, gthread, gevent: nothing here depends on it). A thread, not a
process: nothing to reap, restart or orphan, and the master's own facts
(ShutdownInitiated, its loop running) are read in place. Fork safety: the
port's docstring (a gate held across each fork; the child closes the port's
sockets, and this module's pipes).

What feeds it::

    each worker                                  the master
    graceful-health thread (greenlet: gevent)    graceful-channel thread
      runs the app's checks every 1 s   channel    reads every worker's channel,
      (HealthRunner), sends a HEALTH  --------->   keeps the latest record of each
      record (never waits: a full                  kind per worker
      channel drops it)                          graceful-health-port thread
                                                   answers probes from the live
                                                   workers' latest (HealthView)
                                                 main thread
                                                   murder_workers / reap_workers wrapped:
                                                   each call is a tick of its loop
      every 1 s, when changed: its      channel  at each /metrics: the master's own,
      metrics snapshot, a METRICS  ---------->   each live worker's latest, and what
      record; the last at exit                   exited workers counted (retained)

Both go through the worker's one channel to its master
(:mod:`graceful.gunicorn.channel`). ``/metrics`` adds up the whole server:
:mod:`graceful.gunicorn.metrics`. A health record from a pid that is not one
of Gunicorn's live workers is not counted, a worker's record is forgotten
once its channel closes (it is gone), and a record that is not a snapshot of
the worker that sent it is refused and logged once per worker.

The master's loop has no per-loop hook; the arbiter adapter's
:meth:`~graceful.gunicorn.adapter.arbiter.ArbiterAdapter.on_loop_tick` notes
the time of each of its periodic calls (a float attribute: safe in a signal
handler). ``master-loop`` fails when none ran for longer than the liveness
bound: Gunicorn's ``timeout``, after which it kills a silent worker itself
(30 s when the timeout is off).

USR2 (binary upgrade), one master answering at a time: the old master serves
the port until it stops. Its re-exec child inherits the listening socket and
the read end of a hand-over pipe (``pre_exec`` names them in the child's
environment) and stays passive: connections wait in the kernel's queue, none
is refused. When the old master begins to stop (its ShutdownInitiated, or
Gunicorn's ``stop()`` for a quick stop), or dies, it closes the pipe's write
end and stops accepting; the new master reads end-of-file and answers from
then on. The socket never closed, so no probe was refused in between.
Another process still holding the address at start-up (not a USR2 child
of ours): the server starts, and the port's thread tries again every 0.5 s
for up to the grace period (for as long as a USR2 old master lives, then the
grace period), logging when it starts waiting, when it binds and when it
gives up (:mod:`graceful.healthport.bindwait`). Meanwhile every worker's
readiness check ``healthport`` fails until the master's word
(:class:`AddressState`, shared memory), so ``/readyz`` on the app's port
fails. At the bound the master stops the server,
as a SIGTERM would: probes that reach another process say nothing about this
one (docs/health-port.md says why it stops rather than serve on without).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from graceful.core.codec import ReportError
from graceful.core.lifecycle import Lifecycle
from graceful.gunicorn.adapter.arbiter import Arbiter
from graceful.gunicorn.channel import Kind, MasterChannel, Received
from graceful.gunicorn.metrics import ServerMetrics, WorkerMetrics
from graceful.healthport.address import HealthAddress
from graceful.healthport.bindwait import BindWait
from graceful.healthport.runner import HealthRunner
from graceful.healthport.server import HealthPort, register_at_fork_weakly
from graceful.healthport.snapshot import Snapshot
from graceful.healthport.view import HealthView, Heard
from graceful.metrics.snapshot import Snapshot as MetricsSnapshot
from graceful.wsgi.middleware import as_middleware

if TYPE_CHECKING:
    from graceful.gunicorn.worker import WorkerShutdown

__all__ = ["HEALTHPORT_CHECK", "AddressState", "MasterHealth", "start_worker_health"]

logger = logging.getLogger(__name__)

#: Seconds a worker's snapshot counts for readiness (the runner publishes every second).
STALE_AFTER = 5.0
#: The liveness bound (s) when Gunicorn's timeout is off (0).
DEFAULT_LIVENESS_BOUND = 30.0
#: Set in a USR2 re-exec's environment only. Not GRACEFUL_*: those are settings, and unknown ones are refused.
FD_ENV = "_GRACEFUL_HEALTH_FD"
HANDOFF_ENV = "_GRACEFUL_HEALTH_HANDOFF_FD"
#: The workers' readiness check once the health port had to wait for its address.
HEALTHPORT_CHECK = "healthport"


class AddressState:
    """Whether the master's health port has its address: one byte of anonymous shared memory.

    Made by the master in ``on_starting`` (before the first fork) when the
    address is in use; the port's thread writes it once (:data:`BOUND` or
    :data:`GAVE_UP`), every forked worker reads it in its readiness check
    ``healthport`` (:meth:`check`), which passes once the port is bound.
    """

    WAITING, BOUND, GAVE_UP = 0, 1, 2

    def __init__(self) -> None:
        # Anonymous and MAP_SHARED (mmap's default): the forked workers see the master's writes.
        self._memory = mmap.mmap(-1, mmap.PAGESIZE)

    def set(self, state: int) -> None:
        """The master (the port's thread): the address is bound, or given up."""
        self._memory[0] = state

    def get(self) -> int:
        """Any process of the server: :data:`WAITING`, :data:`BOUND` or :data:`GAVE_UP`."""
        return self._memory[0]

    def check(self) -> None:
        """A worker's readiness check ``healthport`` (its check thread): raise until the master's port is bound."""
        state = self.get()
        if state == self.WAITING:
            raise RuntimeError("the health port is waiting for its address, in use by another process")
        if state == self.GAVE_UP:
            raise RuntimeError("the health port's address stayed in use: the server is stopping")


class MasterHealth:
    """The master's health port and what it knows; kept as ``server.graceful.health``.

    Build it with :meth:`create` in ``on_starting`` (main thread, before the
    listeners and the first fork): it binds there, so a bad address stops
    Gunicorn at start-up. :meth:`start` in ``when_ready``. Also the view's
    :class:`~graceful.healthport.view.Sources`, on the port's thread.
    """

    def __init__(
        self,
        arbiter: Arbiter,
        lifecycle: Lifecycle,
        address: HealthAddress,
        channel: MasterChannel,
        stop_server: Callable[[], None] = lambda: None,
    ) -> None:
        self.arbiter = arbiter
        # Stops the server as a first TERM does (the master's request_stop), from any thread.
        self._stop_server = stop_server
        self.lifecycle = lifecycle
        self.address = address
        self._pid = os.getpid()
        #: The workers' channels: their latest health and metrics records.
        self.channel = channel
        # Each worker's latest record, decoded once: pid -> (the record, its snapshot or None).
        self._decoded: dict[int, tuple[Received, Snapshot | None]] = {}
        self._refused: set[int] = set()
        self._last_heard = self._tick = time.monotonic()
        timeout = arbiter.worker_timeout()
        self.liveness_bound = timeout if timeout > 0 else DEFAULT_LIVENESS_BOUND
        self.view = HealthView(
            lifecycle, self, liveness_bound=self.liveness_bound, stale_after=STALE_AFTER, workers=True
        )
        inherited, self._handoff_in = _inherited(arbiter, address)
        self.port = HealthPort(address, self.view, listener=inherited, passive=lambda: self._handoff_in is not None)
        if self._handoff_in is not None:
            self.port.watch(self._handoff_in, self._on_handoff)
        # Ours, for a USR2 child of ours: it reads end-of-file once we stop serving.
        self._handoff_r: int | None
        self._handoff_w: int | None
        self._handoff_r, self._handoff_w = os.pipe()
        self._passing_on = False
        self._handed_over = False
        #: The server's metrics for /metrics: the master's, its workers', what exited workers counted.
        self.server_metrics = ServerMetrics(lifecycle, channel)
        register_at_fork_weakly(self, after_in_child="_after_fork_in_child")
        #: Whether the port has its address; None: it had it at once (or inherited it).
        self.address_state: AddressState | None = None
        wait = BindWait(
            str(address),
            lifecycle.config.grace_period,
            time.monotonic(),
            predecessor=arbiter.predecessor_pid,
            on_bound=self._on_bound,
            on_give_up=self._give_up,
        )
        self.port.bind(wait_in_use=wait)
        if self.port.waiting_for_address:
            # Before the first fork: every worker inherits the state and the check (kept once bound: it
            # passes then, for the cost of one more check, only on a server whose address was in use).
            self.address_state = AddressState()
            lifecycle.readiness_check(HEALTHPORT_CHECK)(self.address_state.check)

    @classmethod
    def create(
        cls,
        arbiter: Arbiter,
        lifecycle: Lifecycle,
        channel: MasterChannel,
        stop_server: Callable[[], None] = lambda: None,
    ) -> MasterHealth | None:
        """The health port of ``GRACEFUL_HEALTH_BIND``, bound; None when it is off. Raises RuntimeError.

        Refused at start-up: an address Gunicorn's ``bind`` also uses, and any
        error binding it but "in use" (retried in the background).
        """
        address = lifecycle.config.health_address
        if address is None:
            return None
        for bind in arbiter.binds():
            if address.conflicts_with(bind):
                raise RuntimeError(
                    f"graceful: GRACEFUL_HEALTH_BIND={lifecycle.config.health_bind!r} is also in Gunicorn's bind"
                    f" {bind!r}: give the health port a port of its own"
                )
        try:
            return cls(arbiter, lifecycle, address, channel, stop_server)
        except OSError as exc:
            raise RuntimeError(f"graceful: cannot listen on GRACEFUL_HEALTH_BIND={str(address)!r}: {exc}") from None

    # -- main thread -------------------------------------------------------------------------

    def start(self) -> None:
        """``when_ready``: note the loop's ticks, pass the port on at a re-exec, hand it over at a stop; answer."""
        arbiter = self.arbiter
        arbiter.on_loop_tick(self._on_tick)
        arbiter.around_reexec(self._pass_listener_on)
        arbiter.before_stop(self.hand_over)
        self.lifecycle.subscribe(self._on_signal)
        self.port.start()
        if self._handoff_in is not None:
            logger.info("graceful: health port %s: the old master serves it until it stops", self.port.bound_address)

    def _on_tick(self) -> None:
        self._tick = time.monotonic()  # a plain attribute: also safe from 22's SIGCHLD handler

    def _pass_listener_on(self, reexec: Callable[[], object]) -> object:
        # The re-exec child keeps the listener and the hand-over pipe: pre_exec passes them on.
        self._passing_on = True
        try:
            with self.port.passing_listener_on():
                return reexec()
        finally:
            self._passing_on = False

    def _on_signal(self, name: str, _at: float) -> None:
        """Lifecycle listener (the firing thread: the main thread, for ShutdownInitiated)."""
        if name == self.lifecycle.shutdown_initiated.name:
            self.hand_over()

    def hand_over(self) -> None:
        """This master stops serving while a USR2 child exists: the child answers the port from now on."""
        successor = self.arbiter.successor_pid()
        if os.getpid() != self._pid or self._handed_over or not successor:
            return
        self._handed_over = True
        logger.info("graceful: health port %s handed to the new master (pid %d)", self.port.bound_address, successor)
        self._close_handoff_write_end()
        self.port.release_listener()

    def pre_exec(self) -> None:
        """``pre_exec`` (the USR2 re-exec child, before exec): name the listener and the pipe for the new master."""
        env = self.arbiter.exec_environment()
        env.pop(FD_ENV, None)
        env.pop(HANDOFF_ENV, None)
        listener = self.port.listener
        if listener is None or self._handoff_r is None:
            return  # never bound (still retrying): the new master binds itself
        os.set_inheritable(listener.fileno(), True)
        os.set_inheritable(self._handoff_r, True)
        env[FD_ENV] = str(listener.fileno())
        env[HANDOFF_ENV] = str(self._handoff_r)

    # -- fork: the forking thread, in the child ---------------------------------------------------

    def _after_fork_in_child(self) -> None:
        if self._pid != os.getpid() and self._pid:
            self._pid = 0
            self._close_handoff_write_end()
            if not self._passing_on:
                _close(self._handoff_r)
                self._handoff_r = None
            _close(self._handoff_in)
            self._handoff_in = None
            self.lifecycle.unsubscribe(self._on_signal)

    def _close_handoff_write_end(self) -> None:
        _close(self._handoff_w)
        self._handoff_w = None

    # -- graceful-health-port thread: the hand-over ------------------------------------------------

    def _on_handoff(self) -> None:
        fd = self._handoff_in
        if fd is None:
            return
        try:
            if os.read(fd, 64):
                return  # nothing is ever written: only end-of-file means something
        except BlockingIOError:
            return
        self.port.unwatch(fd)
        _close(fd)
        self._handoff_in = None
        logger.info(
            "graceful: the old master stopped serving the health port %s: answering it", self.port.bound_address
        )

    # -- graceful-health-port thread: an address in use at start-up ---------------------------------

    def _on_bound(self) -> None:
        """The address was in use and is bound now: the workers' readiness checks pass."""
        if self.address_state is not None:
            self.address_state.set(AddressState.BOUND)

    def _give_up(self) -> None:
        """Still in use at the bound: tell the workers, and stop the server as a SIGTERM does (once)."""
        if self.address_state is not None:
            self.address_state.set(AddressState.GAVE_UP)
        if self.lifecycle.shutdown_initiated.is_set():
            return  # stopping already
        self._stop_server()

    # -- Sources of the view (the port's thread) --------------------------------------------------

    def heard(self) -> Sequence[Heard]:
        """The latest snapshot of each live worker (its channel open, Gunicorn's live pid); the others forgotten."""
        live = self.arbiter.worker_pids()
        heard: list[Heard] = []
        decoded: dict[int, tuple[Received, Snapshot | None]] = {}
        for pid, received in self.channel.latest(Kind.HEALTH):
            if pid not in live:
                continue
            known = self._decoded.get(pid)
            item = known if known is not None and known[0] is received else (received, self._decode(pid, received))
            decoded[pid] = item
            if item[1] is not None:
                heard.append((item[1], received.at))
                self._last_heard = max(self._last_heard, received.at)
        self._decoded = decoded
        return heard

    def _decode(self, pid: int, received: Received) -> Snapshot | None:
        """Worker ``pid``'s health record; None (logged once per record) when it is not a snapshot of ``pid``."""
        try:
            snapshot: Snapshot | None = Snapshot.decode(received.payload)
        except ReportError:
            snapshot = None
        if snapshot is not None and snapshot.pid == pid:
            return snapshot
        if pid not in self._refused:
            self._refused.add(pid)
            logger.warning("graceful: refusing worker %d's health record: not a snapshot of that worker", pid)
        return None

    def booting(self) -> int:
        """Live workers that have not published yet."""
        return len(self.arbiter.worker_pids() - {pid for pid, _ in self.channel.latest(Kind.HEALTH)})

    def last_heard(self) -> float:
        """When a live worker last published, or when this master started."""
        self.heard()
        return self._last_heard

    def master_idle(self) -> float | None:
        """Seconds since the master's loop last called murder_workers or reap_workers."""
        return time.monotonic() - self._tick

    def shutting_down(self) -> bool:
        """The server's ShutdownInitiated: not an old master's whose USR2 successor serves."""
        return self.lifecycle.shutdown_initiated.is_set() and not self.arbiter.successor_pid()

    def metrics(self) -> list[MetricsSnapshot]:
        """The master's snapshot, each live worker's latest, what exited workers counted (see .metrics)."""
        return self.server_metrics.snapshots()


def _inherited(arbiter: Arbiter, address: HealthAddress) -> tuple[socket.socket | None, int | None]:
    """In a USR2 re-exec master: the old master's health listener and the hand-over pipe's read end."""
    fd_text, handoff_text = os.environ.pop(FD_ENV, None), os.environ.pop(HANDOFF_ENV, None)
    if not fd_text or not handoff_text or not arbiter.predecessor_pid():
        return None, None
    listener = None
    try:
        listener = socket.socket(fileno=int(fd_text))
        handoff = int(handoff_text)
        if not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) or not _same(listener, address):
            raise ValueError(f"fd {fd_text} is not a listener on {address}")
        os.set_inheritable(listener.fileno(), False)
        os.set_inheritable(handoff, False)
        os.set_blocking(handoff, False)
    except (ValueError, OSError) as exc:
        logger.warning("graceful: not taking over the old master's health port: %s; binding it anew", exc)
        if listener is not None:
            listener.close()
        return None, None
    return listener, handoff


def _same(listener: socket.socket, address: HealthAddress) -> bool:
    """Whether ``listener`` listens where ``address`` says (the port, or the path)."""
    name = listener.getsockname()
    if address.path is not None:
        return isinstance(name, (str, bytes)) and os.fsdecode(name) == address.path
    return isinstance(name, tuple) and (address.port == 0 or name[1] == address.port)


def _close(fd: int | None) -> None:
    """Close ``fd`` unless it is None (the callers then store None: an fd is never closed twice)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def start_worker_health(shutdown: WorkerShutdown, lifecycle: Lifecycle) -> HealthRunner | None:
    """``post_worker_init`` (worker main thread, after graceful wrapped the app): publish to the master.

    Nothing when the master serves no health port (``shutdown.health_port``).
    The runner sends each snapshot through the worker's channel, and this
    worker's metrics for the master's ``/metrics`` every period
    (:class:`~graceful.gunicorn.metrics.WorkerMetrics`); ``worker_exit``
    sends the last of them. With the port off, a
    ``GRACEFUL_HEALTH_BIND`` seen only here (Flask's ``app.config``) is
    worth a warning: the master, which would serve the port, reads the
    environment alone.
    """
    worker = shutdown.worker
    if not shutdown.health_port:
        if lifecycle.config.health_bind:
            logger.warning(
                "graceful: GRACEFUL_HEALTH_BIND=%r is set in the worker only (app.config?): the Gunicorn master,"
                " which serves the health port, reads it from the environment; set it there",
                lifecycle.config.health_bind,
            )
        return None
    middleware = as_middleware(worker.app())
    assert middleware is not None, "WorkerShutdown.start() wraps the app first"
    checks = (middleware.inner or middleware).health  # the app's own middleware, with its options, when it has one

    def stopping() -> bool:
        return shutdown.stopping or not worker.is_alive()

    # Its metrics for the master's /metrics: every period, and once more after the drain and cleanup.
    channel = shutdown.channel
    metrics = WorkerMetrics(channel, lifecycle)
    shutdown.at_exit.append(metrics.final)

    def send(snapshot: Snapshot) -> None:
        channel.send(Kind.HEALTH, snapshot.record())  # never waits: a full channel drops it

    return HealthRunner(lifecycle, checks, send, stopping=stopping, every_period=metrics.publish).start()
