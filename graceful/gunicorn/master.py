"""The Gunicorn master's steps of the shutdown; their order is :mod:`graceful.core.sequences`'s.

Runs in the master (arbiter) process; every contact with the arbiter goes
through :class:`~graceful.gunicorn.adapter.arbiter.ArbiterAdapter`.
:meth:`MasterShutdown.install` (``when_ready``, main thread) hands three
moments of Gunicorn's main loop to the master's sequence: each TERM it takes
from its queue (:func:`~graceful.core.sequences.master_on_term`), each pass
of the loop after its wait (:func:`~graceful.core.sequences.master_on_loop_pass`),
and ``on_exit`` (:func:`~graceful.core.sequences.master_finish`, through
:meth:`MasterShutdown.finish`). The steps here:

* the first TERM's: systemd ``STOPPING=1``, the ``graceful-shutdown``
  thread (the delay, the hooks, the listeners closed once their accept
  queues are empty, or every worker's drain awaited in send_retry_after
  mode), then the hand-over: Gunicorn's own wake-up of its loop, whose
  next pass stops the workers and halts Gunicorn (its ``halt()``). No
  signal is forged and nothing is raised for the loop to catch;
* a second TERM before the workers stop: exit 1 at once; after, our OS
  handler in front of Gunicorn's sends it to a trap that exits 1.

SIGINT and SIGQUIT keep Gunicorn's quick stop; HUP, TTIN, TTOU, USR1, USR2
keep their meaning and never start the timeline (HUP and TTOU first tell the
workers why, :mod:`graceful.gunicorn.stop_reason`).

The master and each worker talk through their channel
(:mod:`graceful.gunicorn.channel`): the facts go out as they fire, with the
master's time; the workers' reports come back to one reader thread.

A TERM while a USR2 peer serves the same sockets (:mod:`graceful.gunicorn.upgrade`)
is a process stop: this master's workers stop at once (stop accepting, drain,
clean up) and it exits; no pre-shutdown hook, no delay, no readiness change,
no systemd STOPPING=1. The last master standing runs the timeline.

In ``on_exit`` the master merges its own part of the shutdown record with
the parts its workers sent through their channels and leaves the server's
record: the log line, ``GRACEFUL_REPORT_FILE``, the termination message
(:mod:`graceful.process.termination`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from graceful.core.budget import seconds_left
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import ProcessPart, part_of, record_of
from graceful.core.sequences import MasterPhase, master_finish, master_on_loop_pass, master_on_term
from graceful.gunicorn.adapter.arbiter import Arbiter, GunicornHandler
from graceful.gunicorn.channel import Kind, MasterChannel
from graceful.gunicorn.health import MasterHealth
from graceful.gunicorn.shared import ArrivalBoard
from graceful.gunicorn.stop_reason import StopReason
from graceful.gunicorn.upgrade import Peer, live_peer
from graceful.process.exit import exit_process
from graceful.process.sockets import close_after_queue_drains
from graceful.process.termination import leave_record
from graceful.process.trap import SignalTrap

__all__ = ["MasterShutdown"]

logger = logging.getLogger(__name__)

#: Upper bound (s) on waiting for the master's accept queues to empty.
QUEUE_DRAIN_TIMEOUT = 5.0
#: Upper bound (s) on waiting, at exit, for the last records of workers already reaped.
PARTS_TIMEOUT = 1.0


class MasterShutdown:
    """One Gunicorn master's shutdown steps (:class:`~graceful.core.sequences.MasterSide`); kept on the arbiter.

    Created in ``on_starting`` (main thread, before the first fork) and so
    never re-created on HUP, even when the config file is re-executed
    (:func:`graceful.gunicorn.adapter.attach`).
    """

    def __init__(self, arbiter: Arbiter, lifecycle: Lifecycle, exit: Callable[[int], NoReturn] = exit_process) -> None:
        self.arbiter = arbiter
        # How a second signal ends the process (os._exit after flushing; a test's stand-in raises).
        self._exit = exit
        self.lifecycle = lifecycle
        #: Each worker's channel: the facts out, their reports in.
        self.channel = MasterChannel()
        #: The latest request's arrival in any worker during the shutdown.
        self.arrivals = ArrivalBoard()
        # The adaptive delay ends on the server's quiet: every worker's arrivals.
        lifecycle.last_arrival = self.arrivals.last
        #: Where the shutdown is (:class:`~graceful.core.sequences.MasterPhase`); our OS handler reads it.
        self.phase = MasterPhase.SERVING
        self._trap: SignalTrap | None = None
        self._quick = False
        #: The USR2 peer that serves on while this master stops alone (a process stop), if any.
        self.peer: Peer | None = None
        lifecycle.adapter = self
        lifecycle.subscribe(self.on_signal)
        #: The health port (GRACEFUL_HEALTH_BIND), bound already; None when it is off.
        #: See :meth:`request_stop`; read and cleared on the main thread (``master_on_loop_pass``).
        self.stop_requested = False
        self.health = MasterHealth.create(arbiter, lifecycle, self.channel, stop_server=self.request_stop)
        # The master serves no requests: its workers count and sample their own.
        lifecycle.become_master("gunicorn", arbiter.worker_class_setting())

    # -- main thread ------------------------------------------------------------

    def install(self) -> None:
        """Take over SIGTERM (``when_ready``, main thread).

        The main loop's TERM handling and each of its passes go to the
        master's sequence; our OS handler in front of Gunicorn's sends TERMs
        that arrive once the workers are being stopped (when Gunicorn would
        drop them) to a trap that exits 1. HUP and TTOU first say why the
        workers they stop stop.
        """
        arbiter = self.arbiter
        arbiter.on_term(lambda: master_on_term(self))
        arbiter.after_loop_wait(lambda: master_on_loop_pass(self))
        if self.health is not None:
            self.health.start()
        arbiter.before_reload(lambda: self.channel.set_stop_reason(StopReason.RELOAD))
        arbiter.before_control_worker_kill(lambda: self.channel.set_stop_reason(StopReason.CONTROL_KILL))
        self._trap = SignalTrap(lambda _signum: None, signals=(), exit=self.exit_now).start(armed=True)
        arbiter.front_os_signals((signal.SIGTERM, signal.SIGINT, signal.SIGQUIT), self._os_handler)

    def workers_changed(self, new: int, old: int | None) -> None:
        """``nworkers_changed`` (main thread: TTIN, TTOU; the control socket's thread: worker add/remove).

        Fewer workers: the ones Gunicorn stops next are scaled in.
        """
        if old is not None and new < old:
            self.channel.set_stop_reason(StopReason.SCALE_IN)

    def _os_handler(self, signum: int, frame: FrameType | None, gunicorn_handler: GunicornHandler | None) -> None:
        # Inside the OS signal handler: only read and set plain attributes, and queue.
        stopping = self.phase is MasterPhase.STOPPING_WORKERS
        if stopping and signum == signal.SIGTERM and self._trap is not None:
            self._trap.handle(signum, frame)
            return
        if stopping:  # SIGINT or SIGQUIT while the workers drain: quick stop
            self._quick = True
        if gunicorn_handler is not None:
            gunicorn_handler(signum, frame)

    def stops_alone(self) -> bool:
        """See :meth:`MasterSide.stops_alone` (main thread, at a TERM)."""
        peer = live_peer(self.arbiter)
        if peer is None:
            return False
        # Gunicorn's stop() then closes only this master's copies of the sockets.
        logger.info(
            "graceful: SIGTERM with a live %s master (pid %d) on the same sockets: stopping this"
            " master's workers only (no pre-shutdown hooks, no delay)",
            peer.role,
            peer.pid,
        )
        self.peer = peer
        self.channel.set_stop_reason(StopReason.UPGRADE)
        return True

    def announce_shutdown(self) -> None:
        """See :meth:`MasterSide.announce_shutdown`."""
        logger.info("graceful: SIGTERM: shutting down gracefully (send it again to exit at once)")
        self.arbiter.notify_systemd("STOPPING=1")

    def in_background(self, sequence: Callable[[], None]) -> None:
        """See :meth:`MasterSide.in_background`."""
        threading.Thread(target=sequence, name="graceful-shutdown", daemon=True).start()

    def exit_at_once(self) -> NoReturn:
        """See :meth:`MasterSide.exit_at_once`."""
        logger.warning("graceful: second SIGTERM: exiting with status 1 at once")
        self.exit_now(1)

    def stop_workers(self) -> bool:
        """TERM the workers and reap them as they exit (main thread), within graceful_timeout.

        Gunicorn's ``stop()`` would do the same, but looks only every 0.1 s and
        sleeps once more after the last worker is gone; reaping here ends the
        shutdown within a few ms of the last worker's exit. A SIGINT/SIGQUIT
        meanwhile switches to the quick stop, as in Gunicorn: False.
        """
        arbiter = self.arbiter
        timeout = arbiter.graceful_timeout()
        logger.info(
            "graceful: stopping %d worker(s): each drains and cleans up, SIGKILL after graceful_timeout (%gs)",
            len(arbiter.worker_pids()),
            timeout,
        )
        gone = self._stop_and_reap(arbiter.signal_workers, arbiter.reap, lambda: bool(arbiter.worker_pids()), timeout)
        if gone is None:  # the quick stop: Gunicorn's own stop() finishes it, the dirty pool included
            return False
        if not gone:
            left = len(arbiter.worker_pids())
            logger.warning("graceful: %d worker(s) still running after graceful_timeout: killing", left)
            arbiter.signal_workers(signal.SIGKILL)
        return True

    def halt_server(self) -> None:
        """See :meth:`MasterSide.halt_server`."""
        self.arbiter.halt_gunicorn()

    def close(self) -> None:
        """See :meth:`MasterSide.close`."""
        self.channel.close()

    def stop_dirty_pool(self) -> None:
        """After the HTTP workers (main thread): stop Gunicorn 27's dirty pool and reap it, bounded.

        The requests waiting on its tasks were served by then. Gunicorn's own
        ``stop()`` would signal it together with the HTTP workers, failing
        those requests. Its arbiter gives its workers ``dirty_graceful_timeout``,
        which the budget counts.
        """
        arbiter = self.arbiter
        if not arbiter.dirty_pid():
            return
        budget = arbiter.dirty_graceful_timeout() + 1
        if self._stop_and_reap(arbiter.signal_dirty, arbiter.reap_dirty, lambda: bool(arbiter.dirty_pid()), budget):
            return
        if not self._quick:
            logger.warning("graceful: the dirty arbiter still running after dirty_graceful_timeout: killing it")
            arbiter.kill_dirty_tree()

    def _stop_and_reap(
        self, send: Callable[[int], object], reap: Callable[[], object], alive: Callable[[], bool], cap: float
    ) -> bool | None:
        """Send TERM, then reap until nothing is ``alive()``, within ``cap`` s of the budget (main thread).

        True once all is gone, False when something is still alive at the
        deadline; None when a SIGINT/SIGQUIT came meanwhile (QUIT was sent:
        the quick stop, as in Gunicorn).
        """
        clock = self.lifecycle.clock
        deadline = clock.now() + self._remaining_budget(cap)
        send(signal.SIGTERM)
        pause = threading.Event()
        while alive() and clock.now() < deadline:
            if self._quick:
                send(signal.SIGQUIT)
                return None
            reap()
            if not alive():
                break  # the last one is gone: no pause after it
            # No portable wait exists for "any of these children exited" alongside
            # Gunicorn's own reaping, so look often: an exit is seen within 5 ms.
            clock.wait(pause, 0.005)
        return not alive()

    def exit_now(self, code: int) -> NoReturn:
        """Second signal (trap thread or main thread): kill the workers and exit ``code`` without waiting.

        SIGKILL, not Gunicorn's SIGQUIT: a worker in the middle of its drain or
        cleanup must not be left running (or stuck) after its master is gone.
        """
        try:
            self.arbiter.signal_workers(signal.SIGKILL)
            self.arbiter.kill_dirty_tree()
        finally:
            self._exit(code)

    # -- graceful-shutdown thread -------------------------------------------------

    def wait_workers_drained(self) -> None:
        """See :meth:`MasterSide.wait_workers_drained`."""
        drain_timeout = self.lifecycle.config.drain_timeout
        timeout = self._remaining_budget(drain_timeout)
        if not self.channel.wait_all(Kind.DRAINED, self.arbiter.worker_pids, timeout):
            logger.warning("graceful: not every worker drained within %gs", drain_timeout)

    def stop_listening(self) -> None:
        """ServerAdapter (graceful-shutdown thread): stop listening without resetting queued connections.

        The master's listeners are shut down once their accept queues are
        empty; that stops every worker sharing them at once. Sockets another
        process also owns (a USR2 successor, systemd socket activation,
        ``fd://``) must stay open for it: each worker stops accepting on its
        copies instead, and Gunicorn's stop() closes only ours. With
        reuse_port each worker closes its own listener. Either way the
        workers report, and the master waits for them (bounded).
        """
        arbiter = self.arbiter
        budget = self._remaining_budget(QUEUE_DRAIN_TIMEOUT)
        if arbiter.workers_own_listeners() or arbiter.listeners_shared_with_others():
            self.channel.fire(Kind.CLOSE_LISTENERS)
            if not self.channel.wait_all(Kind.LISTENERS_CLOSED, arbiter.worker_pids, budget + 1):
                logger.warning("graceful: not every worker stopped listening within %gs", budget + 1)
            return
        close_after_queue_drains(arbiter.listeners(), budget)

    def _remaining_budget(self, cap: float) -> float:
        """Seconds left (at most ``cap``) before the grace period, less the margin, runs out."""
        lifecycle = self.lifecycle
        now = lifecycle.clock.now()
        return seconds_left(lifecycle.shutdown_initiated.fired_at, lifecycle.config.grace_period, now, cap)

    def hand_over(self) -> None:
        """See :meth:`MasterSide.hand_over`: Gunicorn's own wake-up, no signal."""
        self.arbiter.wake()

    # -- any thread ---------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop the server as a first TERM does, on the main loop's next pass (woken now with Gunicorn's
        own wake-up: no signal is sent). After a TERM, or a second request, it changes nothing."""
        self.stop_requested = True
        self.arbiter.wake()

    def on_signal(self, name: str, at: float) -> None:
        """Lifecycle listener (the firing thread): tell the workers, with its time; tell systemd."""
        if name == "ShutdownInitiated":
            self.channel.fire(Kind.SHUTDOWN_INITIATED, at)
        elif name == "NotAcceptingNewRequests":
            self.channel.fire(Kind.NOT_ACCEPTING, at)
        self.arbiter.notify_systemd(f"STATUS=graceful: {name}")

    def finish(self) -> None:
        """``on_exit`` (main thread): every worker has drained and cleaned up; the sequence's last steps."""
        master_finish(self, process_stop=self.peer is not None)
        if self.peer is not None:
            logger.info("graceful: master %d stopped; pid %d serves", os.getpid(), self.peer.pid)

    def leave_record(self) -> None:
        """See :meth:`MasterSide.leave_record`: the master's part merged with the workers'; never raises."""
        from graceful import __version__

        try:
            own = part_of(self.lifecycle, os.getpid())
            record = record_of(self.lifecycle, [own, *self._worker_parts()], __version__)
            leave_record(record, self.lifecycle.config)
        except Exception:  # logged: the record must never change how the server exits
            logger.exception("graceful: could not build the shutdown record")
        finally:
            self.channel.close()

    def _worker_parts(self) -> list[ProcessPart]:
        """The parts the workers sent, by pid; one that is not a part is logged and skipped."""
        parts: list[ProcessPart] = []
        for pid, payload in self.channel.parts(PARTS_TIMEOUT):
            try:
                parts.append(ProcessPart.read(json.loads(payload), f"worker {pid}'s part"))
            except (ValueError, RecursionError) as exc:  # RecordError, JSON, UTF-8; nesting
                logger.warning("graceful: skipping a worker's part of the shutdown record: %s", exc)
        parts.sort(key=lambda part: part.pid)
        return parts
