"""The shutdown, read top to bottom: the server's sequence, a Gunicorn master's and a Gunicorn worker's.

kube-apiserver's ``preparedGenericAPIServer.Run`` is the model: one place
says what happens in which order, one comment per step; the steps
themselves live where their state does (the lifecycle, the Gunicorn
master, a worker) and are called from here only. The three sequences side
by side, each column one process (a `graceful serve` server, or a
Gunicorn master and its workers)::

    one process (graceful serve)     Gunicorn master                       each Gunicorn worker
    ----------------------------     ---------------                       --------------------
    SIGTERM: server_shutdown         TERM: master_on_term (main thread)
      (graceful-shutdown thread)       master_first_term: STOPPING=1
    T0 ShutdownInitiated             T0 ShutdownInitiated ----- fact ----> worker_watch (graceful-watch
       pre-shutdown hooks start         pre-shutdown hooks start             thread) learns it: /readyz
                                       master_until_hand_over                fails, Connection: close,
                                         (graceful-shutdown thread)          HTTP/2 GOAWAY
    delay (fixed, or until quiet)    delay: the workers' arrivals
    PreShutdownHooksStopped          PreShutdownHooksStopped
    NotAcceptingNewRequests          NotAcceptingNewRequests ---- fact ----> learns it (retry-after: 429,
    listeners close once their       listeners close once their              then drains and reports)
      accept queues are empty          queues are empty (or: each
                                       worker stops and reports) <---------- stops accepting, reports
                                     hand over: wake the main loop
                                     master_stop (main thread) --- TERM ---> worker_exit (main thread):
                                       reap each worker as it exits           InFlightRequestsDrained,
    InFlightRequestsDrained                                                  cleanup tasks,
    cleanup tasks                                                            CleanupFinished,
    CleanupFinished                    <------------------------- part ----- its part of the record
    exit 0                           halt: on_exit, master_finish:
                                       the merged record, exit 0

A second TERM at any point exits 1 at once (:mod:`graceful.process.trap`;
the master: :meth:`MasterSide.exit_at_once`). A worker's *process stop*
(recycled, HUP, TTOU, a USR2 peer, its timeout) is not the server's: it
drains and cleans up alone, and no signal fires (``worker_exit`` below).

Nothing here waits without a bound, reads a clock, or touches Gunicorn:
each step does, behind the small interfaces below, so a unit test drives
every sequence with fakes and a fake clock.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from graceful.process.exit import skip_exit_collections

if TYPE_CHECKING:
    from graceful.core.lifecycle import Lifecycle
    from graceful.core.signals import LifecycleSignal

__all__ = [
    "MasterPhase",
    "MasterSide",
    "WorkerSide",
    "drain_and_clean_up",
    "master_finish",
    "master_on_loop_pass",
    "master_on_term",
    "server_shutdown",
    "until_not_accepting",
    "worker_exit",
    "worker_watch",
]


# -- one process: graceful serve, or any Lifecycle alone ---------------------------------------


def server_shutdown(lifecycle: Lifecycle) -> None:
    """The whole timeline in one process (``Lifecycle.request_shutdown``'s graceful-shutdown thread)."""
    until_not_accepting(lifecycle)  # T0 to NotAcceptingNewRequests
    lifecycle.drain_and_clean_up()  # InFlightRequestsDrained to CleanupFinished


def until_not_accepting(lifecycle: Lifecycle) -> None:
    """The first half: one process's, or a Gunicorn master's (its graceful-shutdown thread)."""
    lifecycle.initiate_shutdown()  # T0 ShutdownInitiated: /readyz fails; the pre-shutdown hooks start together
    lifecycle.run_delay()  # serve on while load balancers notice: a fixed delay, or until quiet
    lifecycle.after_shutdown_delay.fire()  # AfterShutdownDelayDuration
    lifecycle.wait_pre_shutdown_hooks()  # PreShutdownHooksStopped: never stop accepting before every hook ended
    lifecycle.stop_accepting()  # NotAcceptingNewRequests; default mode: the listeners close


def drain_and_clean_up(lifecycle: Lifecycle, drain_timeout: float) -> None:
    """The second half: one process's, or each Gunicorn worker's (``worker_exit``); once (the lifecycle's)."""
    lifecycle.drain(drain_timeout)  # wait for the in-flight requests, up to drain_timeout
    lifecycle.in_flight_requests_drained.fire()  # InFlightRequestsDrained (or drain_timeout)
    lifecycle.close_listeners()  # retry-after mode: HTTPServerStoppedListening only now
    # Every cleanup task at once, each bounded by its timeout; graceful serve of an ASGI app adds one: the
    # long-lived connections seen out, then Uvicorn's shutdown and the app's lifespan shutdown (graceful.uvicorn).
    lifecycle.run_cleanup_tasks()
    lifecycle.cleanup_finished.fire()  # CleanupFinished: the process may exit 0


# -- a Gunicorn master -----------------------------------------------------------------------


class MasterPhase(enum.Enum):
    """Where a Gunicorn master is in its shutdown; written on its main thread or its graceful-shutdown thread."""

    #: Until the first TERM (INT and QUIT keep Gunicorn's quick stop).
    SERVING = "serving"
    #: The delay, the hooks, the listeners (graceful-shutdown thread); a TERM now exits 1.
    SHUTTING_DOWN = "shutting down"
    #: The main loop's next pass stops the workers.
    HANDED_OVER = "handed over"
    #: The main thread stops the workers; a TERM exits 1 (before Gunicorn's queue), INT or QUIT is the quick stop.
    STOPPING_WORKERS = "stopping workers"


class MasterSide(Protocol):
    """The steps of a Gunicorn master's shutdown (:class:`graceful.gunicorn.master.MasterShutdown`)."""

    lifecycle: Lifecycle
    phase: MasterPhase
    #: Set by another thread (the health port giving up its address) to stop the server as a first TERM does.
    stop_requested: bool

    def stops_alone(self) -> bool:
        """Main thread: True when a USR2 peer serves the same sockets on (it logs whose): a process stop."""

    def announce_shutdown(self) -> None:
        """Main thread: log that the shutdown began; tell systemd ``STOPPING=1`` when it supervises the master."""

    def in_background(self, sequence: Callable[[], None]) -> None:
        """Main thread: run ``sequence()`` on the daemon thread ``graceful-shutdown``."""

    def wait_workers_drained(self) -> None:
        """graceful-shutdown thread: wait (bounded by the budget) until every live worker reports it drained."""

    def hand_over(self) -> None:
        """graceful-shutdown thread: wake Gunicorn's main loop, whose next pass calls :func:`master_on_loop_pass`."""

    def stop_workers(self) -> bool:
        """Main thread: TERM the workers, reap each as it exits (SIGKILL at graceful_timeout); False: a quick stop."""

    def stop_dirty_pool(self) -> None:
        """Main thread: stop Gunicorn 27's dirty arbiter and reap it, bounded."""

    def halt_server(self) -> None:
        """Main thread: Gunicorn's own halt: its stop() finds nothing left, calls on_exit, exits 0."""

    def exit_at_once(self) -> None:
        """Main thread, a second TERM: log it, SIGKILL the workers, exit 1 (never returns)."""

    def leave_record(self) -> None:
        """Main thread (on_exit): merge the workers' parts with the master's and leave the server's record."""

    def close(self) -> None:
        """Main thread (on_exit): close the channel to the workers."""


def master_on_term(master: MasterSide) -> None:
    """Gunicorn's main loop, main thread: each TERM it takes from its queue."""
    if master.phase is not MasterPhase.SERVING:
        master.exit_at_once()  # the second TERM: exit 1 at once, the workers SIGKILLed
    elif master.stops_alone():
        master_stop(master)  # a USR2 peer serves on: stop this master's workers, no delay, no hooks
    else:
        master_first_term(master)


def master_first_term(master: MasterSide) -> None:
    """Main thread, the first TERM; Gunicorn's loop goes on (workers replaced, reaped, timed out) meanwhile."""
    master.phase = MasterPhase.SHUTTING_DOWN  # from now on a TERM exits 1
    master.announce_shutdown()  # the log line; systemd shows the unit stopping
    master.lifecycle.initiate_shutdown()  # T0 ShutdownInitiated, told to every worker; the hooks start
    master.in_background(lambda: master_until_hand_over(master))


def master_until_hand_over(master: MasterSide) -> None:
    """graceful-shutdown thread: the first half of the timeline, then the hand-over to the main loop."""
    lifecycle = master.lifecycle
    until_not_accepting(lifecycle)  # delay, hooks, NotAcceptingNewRequests; the listeners close
    if lifecycle.config.send_retry_after:
        master.wait_workers_drained()  # the workers answer 429 meanwhile; each reports when its requests are done
        lifecycle.close_listeners()  # HTTPServerStoppedListening
    master.phase = MasterPhase.HANDED_OVER
    master.hand_over()  # wake Gunicorn's main loop: its next pass stops the workers


def master_on_loop_pass(master: MasterSide) -> None:
    """Main thread, each pass of Gunicorn's main loop (at least once a second, at once when woken)."""
    if master.phase is MasterPhase.HANDED_OVER:
        master_stop(master)
    elif master.stop_requested and master.phase is MasterPhase.SERVING:
        master.stop_requested = False
        master_on_term(master)  # a stop asked for by graceful itself: as the first TERM, never a second one


def master_stop(master: MasterSide) -> None:
    """Main thread: stop the workers, then Gunicorn; a USR2 peer's process stop too."""
    master.phase = MasterPhase.STOPPING_WORKERS  # a TERM now exits 1 before Gunicorn sees it
    if master.stop_workers():  # each drains, cleans up and sends its part, within graceful_timeout
        master.stop_dirty_pool()  # Gunicorn 27's dirty arbiter, once the requests that used it are done
    master.halt_server()  # Gunicorn's own halt: on_exit (master_finish), exit 0


def master_finish(master: MasterSide, process_stop: bool) -> None:
    """Main thread, ``on_exit``: every worker has exited; ``process_stop``: a USR2 peer serves on."""
    if master.phase is MasterPhase.SERVING or process_stop:
        master.close()  # INT or QUIT (Gunicorn's quick stop), or the peer's server: nothing to record
        return
    lifecycle = master.lifecycle
    lifecycle.in_flight_requests_drained.fire()  # every worker drained (each recorded when, in its part)
    lifecycle.cleanup_finished.fire()  # and cleaned up
    master.leave_record()  # the log line, GRACEFUL_REPORT_FILE, the termination message
    if lifecycle.hung_hooks:
        lifecycle.exit(0)  # interpreter exit would join a hung hook's thread forever
    skip_exit_collections()  # Gunicorn's sys.exit follows: no final collections over the whole heap


# -- a Gunicorn worker -------------------------------------------------------------------------


class WorkerSide(Protocol):
    """The steps of one Gunicorn worker's shutdown (:class:`graceful.gunicorn.worker.WorkerShutdown`)."""

    lifecycle: Lifecycle

    def learn(self, signal: LifecycleSignal) -> None:
        """graceful-watch thread: wait for the master's fact of ``signal`` and set it, at the master's time."""

    def wait_to_close_listeners(self) -> None:
        """graceful-watch thread: wait for the master to say so (only when it cannot stop listening itself)."""

    def stop_listening(self) -> None:
        """graceful-watch thread: stop accepting on this worker's listeners (its own: close them once empty)."""

    def report_drained(self) -> None:
        """graceful-watch thread: tell the master this worker's requests are done (bounded)."""

    def report_listeners_closed(self) -> None:
        """graceful-watch thread: tell the master this worker stopped listening (bounded)."""

    @property
    def booted(self) -> bool:
        """True once ``post_worker_init`` finished: the worker served."""

    @property
    def server_stops(self) -> bool:
        """Main thread, after :meth:`begin_stop`: True when this worker stops with its server (the master's fact)."""

    def begin_stop(self) -> float:
        """Main thread: note why and since when the worker stops; the seconds left of its drain_timeout."""

    def stop_alone(self, drain_timeout: float) -> None:
        """Main thread: a process stop: drain and clean up with the worker's own log lines, no signal."""

    def leave_part(self) -> None:
        """Main thread: its part of the shutdown record, to the master in a server stop (else a DEBUG line)."""

    def end(self) -> None:
        """Main thread: the callbacks at exit, then the exit (skipping the interpreter's final collections)."""


def worker_watch(worker: WorkerSide) -> None:
    """graceful-watch thread, from ``post_worker_init``: the master's facts become this worker's."""
    lifecycle = worker.lifecycle
    worker.learn(lifecycle.shutdown_initiated)  # the master's T0: /readyz fails, Connection: close, GOAWAY
    worker.learn(lifecycle.not_accepting_new_requests)  # retry-after mode: new requests get 429 from now on
    if lifecycle.config.send_retry_after:
        lifecycle.drain_in_flight(lifecycle.config.drain_timeout)  # the master listens until every worker drained
        worker.report_drained()
    worker.wait_to_close_listeners()  # reuse_port, or sockets shared with a USR2 peer; else never comes
    worker.stop_listening()  # reuse_port: close its own once their queues are empty; shared: stop accepting
    worker.report_listeners_closed()


def worker_exit(worker: WorkerSide) -> None:
    """Main thread, Gunicorn's ``worker_exit`` (every exit, once Gunicorn stopped accepting)."""
    lifecycle = worker.lifecycle
    if not worker.booted:
        lifecycle.stop_process(0.0)  # it never served: only the cleanup tasks (the app may have opened what they close)
    else:
        drain_time = worker.begin_stop()  # why, and since when: its TERM (the drain counts what was in flight then)
        if worker.server_stops:
            lifecycle.drain_and_clean_up(drain_timeout=drain_time)  # InFlightRequestsDrained .. CleanupFinished
        else:
            worker.stop_alone(drain_time)  # recycled, HUP, TTOU, a USR2 peer, its timeout: no signal fires
    worker.leave_part()  # to the master, which reads this worker's channel to its end
    worker.end()
