"""The shutdown timeline: named one-shot signals and the driver that fires them.

    T0: ShutdownInitiated      first SIGTERM/SIGINT (or request_shutdown()).
                               /readyz fails, /livez and /healthz stay 200,
                               responses get "Connection: close",
                               pre-shutdown hooks all start at once.
    T0+delay: AfterShutdownDelayDuration
                               shutdown_delay has passed (still serving);
                               adaptive (shutdown_delay_min set): the floor
                               has passed and nothing arrived for the quiet
                               period, or the maximum (shutdown_delay) came
                               (graceful.core.delay).
    T0+h: PreShutdownHooksStopped
                               every pre-shutdown hook finished, failed or
                               timed out (h <= longest hook timeout).
    max(delay, h): NotAcceptingNewRequests
                               default mode: listeners close
                               (HTTPServerStoppedListening follows at once);
                               send_retry_after mode: new requests get 429.
    ...: InFlightRequestsDrained
                               in-flight count reached 0, or drain_timeout.
    ...: HTTPServerStoppedListening
                               retry-after mode closes its listeners only now.
    ...: CleanupFinished       every cleanup task finished, failed or timed
                               out; the process may exit 0.

    HasBeenReady fires apart from all this, at the first passing /readyz.
    A second SIGTERM/SIGINT at any point exits 1 at once (graceful.process.trap).

    A process stop is not a server stop: one serving process of a server
    that goes on serving (a Gunicorn worker recycled, replaced on HUP,
    removed with TTOU; a master whose USR2 successor serves) fires none of
    these. It waits for its in-flight requests and runs its cleanup tasks
    (:meth:`Lifecycle.stop_process`); readiness and pre-shutdown hooks are
    the server's and stay as they are.

Each signal wraps a ``threading.Event``, remembers the monotonic time it
fired, fires once however often it is signalled, and logs one line with the
seconds since ShutdownInitiated (and the structured fields of
:mod:`graceful.core.logfields`).

From ShutdownInitiated to CleanupFinished the lifecycle also observes: its
:class:`~graceful.core.stats.RequestStats` count the requests that arrive and
are refused, and a ``graceful-sampler`` thread samples them every 50 ms
(:mod:`graceful.core.stats`); at NotAcceptingNewRequests it warns when
requests were still arriving in the last tenth of the delay. The shutdown
record (:mod:`graceful.core.record`) is built from all this.

A :class:`Lifecycle` owns the signals (:mod:`graceful.core.signals`), the hook
registry, the in-flight wait group and the admission limit of one server. The
server-specific step sits behind :class:`ServerAdapter`. Under Gunicorn, the
master runs the first half (:meth:`Lifecycle.run_until_not_accepting`, on its
``graceful-shutdown`` thread) and each worker the second half
(:meth:`Lifecycle.drain_and_clean_up`, in its main thread); ``graceful serve``
runs both on one ``graceful-shutdown`` thread.

This module reads in timeline order: the driver first, then what it is
configured with, then registration, observation and start-up.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable
from typing import NoReturn, Protocol

from graceful.core import sequences
from graceful.core.budget import Budget
from graceful.core.clock import Clock, MonotonicClock
from graceful.core.config import Config, ConfigError
from graceful.core.delay import DelayEnd, DelayOutcome, run_delay
from graceful.core.gate import Gate
from graceful.core.hooks import HookBatch, HookResult, ShutdownReport
from graceful.core.logfields import log_fields
from graceful.core.registry import CLEANUP_TASK, POST_START_HOOK, PRE_SHUTDOWN_HOOK, Registrations, Registry
from graceful.core.role import Role
from graceful.core.signals import LifecycleSignal
from graceful.core.stats import SAMPLE_INTERVAL, RequestStats, Sample, Sampler
from graceful.core.waitgroup import SafeWaitGroup
from graceful.process.exit import exit_process

__all__ = ["Lifecycle", "LifecycleSignal", "NullAdapter", "ServerAdapter", "SignalListener"]

logger = logging.getLogger(__name__)

#: Called as ``listener(signal_name, monotonic_time)`` when a signal fires.
SignalListener = Callable[[str, float], None]

#: At most this many samples per shutdown (30 minutes of them), whatever the grace period.
MAX_SAMPLES = 36_000


class Lifecycle(Registrations):
    """One server's shutdown timeline, hooks, checks, in-flight count and admission limit.

    ``config`` defaults to ``Config.load()`` (the environment), read when first
    needed, so importing graceful never fails on a bad variable; servers read
    it at start-up. Thread-safe: ``request_shutdown`` may be called from any
    thread, any number of times; the timeline runs once on a daemon thread
    named ``graceful-shutdown``. Hooks and checks are registered with the
    decorators of :class:`graceful.core.registry.Registrations`.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        clock: Clock | None = None,
        adapter: ServerAdapter | None = None,
        role: Role = Role.SERVER,
    ) -> None:
        self._config = config
        self._configured = config is not None
        self.clock: Clock = clock or MonotonicClock()
        self.adapter: ServerAdapter = adapter or NullAdapter()
        #: This process's part in the shutdown (see :meth:`become_master`, :meth:`become_worker`).
        self.role = role
        self.registry = Registry()
        self.in_flight = SafeWaitGroup()
        #: The request sides' one interface to this lifecycle (:mod:`graceful.core.gate`).
        self.gate = Gate(self)
        self._listeners: list[SignalListener] = []
        self._lock = threading.Lock()
        self._driver: threading.Thread | None = None
        self._tail_started = False
        self._listeners_closed = False
        self._timeline_running = False
        self._pre_batch: HookBatch | None = None
        self._cleanup_batch: HookBatch | None = None
        self._post_start_batch: HookBatch | None = None
        # Set when the drain and cleanup (server or process stop) are done: a second caller waits on it.
        self._tail_done = threading.Event()
        self.report = ShutdownReport()
        #: This process's request statistics (see :mod:`graceful.core.stats`).
        self.stats = RequestStats(self.clock)
        #: The latest arrival's monotonic time (None: none yet), read by the adaptive delay: this
        #: process's own; a Gunicorn master reads its workers' arrival board instead.
        self.last_arrival: Callable[[], float | None] = lambda: self.stats.last_arrival_at
        #: How the shutdown delay ended, once it has (in the process that runs it).
        self.delay_outcome: DelayOutcome | None = None
        self._sampler: Sampler | None = None
        #: What serves the app, for ``graceful_info`` and the record: ``gunicorn``, ``graceful serve``, ...
        self.server = "wsgi"
        #: The Gunicorn worker class (``sync``, ``gthread``, ``gevent``), else what the server says.
        self.worker_class = ""

        def signal(name: str) -> LifecycleSignal:
            return LifecycleSignal(name, self.clock, on_fire=self._signal_fired)

        self.has_been_ready = signal("HasBeenReady")
        self.shutdown_initiated = signal("ShutdownInitiated")
        self.after_shutdown_delay = signal("AfterShutdownDelayDuration")
        self.pre_shutdown_hooks_stopped = signal("PreShutdownHooksStopped")
        self.not_accepting_new_requests = signal("NotAcceptingNewRequests")
        self.in_flight_requests_drained = signal("InFlightRequestsDrained")
        self.http_server_stopped_listening = signal("HTTPServerStoppedListening")
        self.cleanup_finished = signal("CleanupFinished")

    # -- the timeline ---------------------------------------------------------

    def request_shutdown(self) -> None:
        """Start the whole timeline on its own thread; later calls do nothing.

        Safe from any thread, but not from an OS signal handler (use graceful.process.trap).
        """
        with self._lock:
            if self._driver is not None:
                return
            self._driver = threading.Thread(
                target=sequences.server_shutdown, args=(self,), name="graceful-shutdown", daemon=True
            )
        self._driver.start()

    def run_until_not_accepting(self) -> None:
        """Run the first half of the timeline, up to NotAcceptingNewRequests, on the calling thread.

        The steps are :func:`graceful.core.sequences.until_not_accepting`'s.
        Under Gunicorn the master runs this half; each worker runs
        :meth:`drain_and_clean_up` when it is stopped.
        """
        sequences.until_not_accepting(self)

    def run_delay(self) -> None:
        """Wait out the shutdown delay (fixed, or adaptive: :mod:`graceful.core.delay`) and log how it ended."""
        config = self.config
        t0 = self.shutdown_initiated.fired_at
        assert t0 is not None
        outcome = run_delay(
            self.clock,
            t0,
            config.shutdown_delay,
            self.last_arrival,
            floor=config.shutdown_delay_min,
            quiet_period=config.quiet_period,
        )
        self.delay_outcome = outcome
        if outcome.end is not DelayEnd.FIXED:
            logger.info(
                "graceful: the shutdown delay ended after %.3fs: %s",
                outcome.ended_at,
                outcome.describe(),
                extra=self.log_fields("delay_ended"),
            )

    def become_master(self, server: str, worker_class: str) -> None:
        """A Gunicorn master, main thread, ``on_starting``: it runs the delay and the hooks, serves nothing."""
        self.role = Role.MASTER
        self.server, self.worker_class = server, worker_class

    def become_worker(self, no_pre_shutdown_hooks: str) -> None:
        """A forked worker, main thread, at once (``post_fork``): a lifecycle of its own that serves, drains
        and cleans up, its master running the rest; a pre-shutdown hook registered from now on is refused,
        saying ``no_pre_shutdown_hooks``."""
        self.reinit_after_fork()
        self.role = Role.WORKER
        self.adapter = NullAdapter()
        self.registry.close(PRE_SHUTDOWN_HOOK, no_pre_shutdown_hooks)

    def wait_pre_shutdown_hooks(self) -> None:
        """Wait for every pre-shutdown hook (each bounded by its timeout), then fire PreShutdownHooksStopped."""
        assert self._pre_batch is not None, "initiate_shutdown() first"
        self.report = self._pre_batch.wait() + self.report
        self.pre_shutdown_hooks_stopped.fire()

    def initiate_shutdown(self) -> None:
        """Fire ShutdownInitiated and start the pre-shutdown hooks (if this lifecycle runs them)."""
        with self._lock:
            self._timeline_running = True  # the config in force is the one this shutdown runs with
            if self._pre_batch is None:
                hooks = self.registry.close(PRE_SHUTDOWN_HOOK, "shutdown has begun")
                if not self.role.runs_pre_shutdown_hooks:
                    hooks = []
                self._pre_batch = HookBatch(
                    PRE_SHUTDOWN_HOOK,
                    hooks,
                    self.config.hook_timeout,
                    self.clock,
                    on_all_done=self.pre_shutdown_hooks_stopped.fire,
                    fields=self.log_fields,
                )
        if not self.shutdown_initiated.fire():
            return
        self._pre_batch.start()

    def stop_accepting(self) -> None:
        """Fire NotAcceptingNewRequests; in default mode close the listeners at once."""
        if not self.not_accepting_new_requests.fire():
            return
        if not self.config.send_retry_after:
            self.close_listeners()

    def close_listeners(self) -> None:
        """Tell the adapter to stop listening and fire HTTPServerStoppedListening; once."""
        with self._lock:
            if self._listeners_closed:
                return
            self._listeners_closed = True
        # Stop accepting new connections.
        self.adapter.stop_listening()
        self.http_server_stopped_listening.fire()

    def drain_and_clean_up(self, drain_timeout: float | None = None) -> ShutdownReport:
        """Wait for in-flight requests (up to drain_timeout), close listeners, run cleanup tasks.

        Runs once; a second caller waits for the first to finish (up to the
        time it may take). Under Gunicorn a worker calls this from
        ``worker_exit`` in its main thread, with what is left of its
        ``drain_timeout`` (seconds; the config's when None). Returns the
        shutdown report.
        """
        if not self._start_tail():
            return self.report
        timeout = self.config.drain_timeout if drain_timeout is None else drain_timeout
        sequences.drain_and_clean_up(self, timeout)
        self._tail_done.set()
        return self.report

    def stop_process(self, drain_timeout: float, on_drained: Callable[[bool], object] | None = None) -> None:
        """A process stop: wait for in-flight requests (up to ``drain_timeout`` s), run cleanup tasks.

        For one serving process of a server that goes on serving (a Gunicorn
        worker recycled, replaced on HUP, removed with TTOU, or whose master
        hands over to a USR2 successor): no signal fires, so nothing says the
        server stops; readiness is untouched. ``on_drained(drained)`` is
        called between the two, with whether the drain ended before its
        timeout (the caller logs it). Runs once, sharing
        :meth:`drain_and_clean_up`'s once (a second caller of either waits
        for the first). The cleanup's outcome is in :attr:`report`. Under
        Gunicorn, the worker's main thread from ``worker_exit``.
        """
        if not self._start_tail():
            return
        drained = self.drain(drain_timeout)
        if on_drained is not None:
            on_drained(drained)
        self.run_cleanup_tasks()
        self._tail_done.set()

    def _start_tail(self) -> bool:
        """True for the first caller of the drain and cleanup; a later one waits for it (bounded), False."""
        with self._lock:
            first = not self._tail_started
            self._tail_started = True
            self._timeline_running = True
        if not first:
            self.clock.wait(self._tail_done, self.config.drain_timeout + self.longest_cleanup_timeout() + 1)
        return first

    def drain(self, timeout: float) -> bool:
        """Wait for in-flight requests, up to ``timeout`` s, warning of what it abandons; True if drained."""
        drained = self.drain_in_flight(timeout)
        if not drained:
            logger.warning(
                "graceful: drain timed out after %gs; abandoning %d in-flight request(s)",
                timeout,
                self.in_flight.count,
                extra=self.log_fields("drain_timeout"),
            )
        return drained

    def run_cleanup_tasks(self) -> None:
        """Run the cleanup tasks, all at once, and add their results to the report."""
        hooks = self.registry.close(CLEANUP_TASK, "cleanup has begun")
        self._cleanup_batch = HookBatch(
            CLEANUP_TASK, hooks, self.config.hook_timeout, self.clock, fields=self.log_fields
        )
        self.report = self.report + self._cleanup_batch.wait()

    def drain_in_flight(self, timeout: float) -> bool:
        """Stop counting new requests and wait up to ``timeout`` seconds for the in-flight ones; True if drained.

        Records the drain's figures (:attr:`stats`): the requests in flight at
        the first such wait and when it began, what is left at the last one
        and when it ended. A Gunicorn worker in retry-after mode waits once on
        its ``graceful-watch`` thread (the master keeps listening until every
        worker has drained) and again, briefly, in ``worker_exit``.
        """
        self.stats.drain_began(self.clock.now(), self.in_flight.count)
        drained = self.in_flight.wait(timeout, self.clock.wait)
        self.stats.drain_ended(self.clock.now(), 0 if drained else self.in_flight.count)
        return drained

    def wait_finished(self, timeout: float) -> bool:
        """Wait (on the lifecycle's clock) until CleanupFinished; return whether it fired."""
        return self.cleanup_finished.wait(timeout)

    def exit(self, code: int = 0) -> NoReturn:
        """End the process with ``code``, not waiting for hung hook threads.

        Call from the main thread after :meth:`wait_finished`.
        """
        if self.hung_hooks:
            logger.warning(
                "graceful: exiting with hung hooks still running: %s",
                ", ".join(self.hung_hooks),
                extra=self.log_fields("hung_hooks"),
            )
        exit_process(code)

    @property
    def hung_hooks(self) -> list[str]:
        """Names of hooks and tasks whose threads are still running after their timeout."""
        batches = (self._post_start_batch, self._pre_batch, self._cleanup_batch)
        return [name for batch in batches if batch is not None for name in batch.hung]

    # -- configuration -----------------------------------------------------------

    @property
    def config(self) -> Config:
        """The config in force (loaded from the environment on first use)."""
        if self._config is None:
            self._config = Config.load()
        return self._config

    @property
    def configured(self) -> bool:
        """True once a config was given (here or to the constructor), not only read from the environment."""
        return self._configured

    def configure(self, config: Config) -> None:
        """Replace the config; only before this process started running the timeline.

        A Gunicorn worker forked during the shutdown delay (replacing one that
        died) sees ShutdownInitiated already fired and may still configure.
        """
        if self._timeline_running:
            raise RuntimeError("cannot change the config: this lifecycle's shutdown is running")
        self._config = config
        self._configured = True
        self.gate.reset()

    def budget(self) -> Budget:
        """The shutdown budget of the config with the hooks registered so far.

        A kind with nothing registered counts ``hook_timeout``: what a hook
        registered later gets by default.
        """
        default = self.config.hook_timeout
        pre = [h.timeout_or(default) for h in self.registry.hooks(PRE_SHUTDOWN_HOOK)]
        cleanup = [h.timeout_or(default) for h in self.registry.hooks(CLEANUP_TASK)]
        return self.config.budget(pre, cleanup)

    def check_budget(self) -> None:
        """Raise ``ConfigError`` when the config plus the registered hooks cannot fit the grace period."""
        problem = self.budget().overrun(self.config.grace_period)
        if problem is not None:
            raise ConfigError(problem)

    def longest_cleanup_timeout(self) -> float:
        """The longest timeout (s) among the registered cleanup tasks, 0 if none."""
        return self._longest(CLEANUP_TASK)

    def longest_pre_shutdown_timeout(self) -> float:
        """The longest timeout (s) among the registered pre-shutdown hooks, 0 if none."""
        return self._longest(PRE_SHUTDOWN_HOOK)

    def _longest(self, kind: str) -> float:
        default = self.config.hook_timeout
        return max((h.timeout_or(default) for h in self.registry.hooks(kind)), default=0.0)

    # -- observation -------------------------------------------------------------

    @property
    def signals(self) -> tuple[LifecycleSignal, ...]:
        """Every signal in timeline order."""
        return (
            self.has_been_ready,
            self.shutdown_initiated,
            self.after_shutdown_delay,
            self.pre_shutdown_hooks_stopped,
            self.not_accepting_new_requests,
            self.in_flight_requests_drained,
            self.http_server_stopped_listening,
            self.cleanup_finished,
        )

    def subscribe(self, listener: SignalListener) -> None:
        """Call ``listener(name, time)`` on the firing thread each time a signal fires."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: SignalListener) -> None:
        """Stop calling ``listener`` (no error if it was not subscribed)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def log_fields(self, event: str) -> dict[str, object]:
        """The structured fields (:mod:`graceful.core.logfields`) of a log line about ``event``, now."""
        t0 = self.shutdown_initiated.fired_at
        return log_fields(event, since_shutdown=None if t0 is None else self.clock.now() - t0)

    def hook_results(self) -> list[HookResult]:
        """Every hook and task result recorded so far in this process: post-start, pre-shutdown, cleanup."""
        batches = (self._post_start_batch, self._pre_batch, self._cleanup_batch)
        return [result for batch in batches if batch is not None for result in batch.results()]

    @property
    def samples(self) -> list[Sample]:
        """The shutdown's samples so far (none before ShutdownInitiated, nor in a process serving no requests)."""
        return [] if self._sampler is None else self._sampler.samples

    @property
    def samples_truncated(self) -> bool:
        """True when the sampler stopped at its bound before CleanupFinished."""
        return self._sampler is not None and self._sampler.truncated

    def _signal_fired(self, signal: LifecycleSignal) -> None:
        """Each signal's ``on_fire``, on the firing thread: requests check again, log the line, tell subscribers."""
        # After fired_at, never before: see Gate.refresh.
        self.gate.hinder()
        t0 = self.shutdown_initiated.fired_at
        assert signal.fired_at is not None
        if signal is self.shutdown_initiated:
            self._observe_shutdown()
        if signal.learned:  # another process fired it (a Gunicorn worker's master) and logged it there
            logger.debug("graceful: %s (learned)", signal.name, extra=log_fields("signal", signal=signal.name))
        elif t0 is None:  # HasBeenReady, or a worker stopped by HUP, TTOU or recycling
            logger.info("graceful: %s", signal.name, extra=log_fields("signal", signal=signal.name))
        elif signal is self.shutdown_initiated:
            logger.info("graceful: %s", signal.name, extra=log_fields("signal", signal=signal.name, since_shutdown=0.0))
        else:
            since = signal.fired_at - t0
            fields = log_fields("signal", signal=signal.name, since_shutdown=since)
            logger.info("graceful: %s (%.3fs after ShutdownInitiated)", signal.name, since, extra=fields)
        if signal is self.not_accepting_new_requests:
            self._warn_late_traffic()
        elif signal is self.cleanup_finished and self._sampler is not None:
            self._sampler.stop()
        for listener in list(self._listeners):
            listener(signal.name, signal.fired_at)

    def _observe_shutdown(self) -> None:
        """ShutdownInitiated: count arrivals from now on, and sample (in a process that serves requests)."""
        t0 = self.shutdown_initiated.fired_at
        assert t0 is not None
        self.stats.begin(t0, self.config.shutdown_delay)
        if self.role.serves_requests and self._sampler is None:
            limit = min(MAX_SAMPLES, math.ceil(self.config.grace_period / SAMPLE_INTERVAL) + 2)
            # Weakly: a lifecycle dropped mid-shutdown (a test's) does not keep a sampler thread going.
            sample = weakref.WeakMethod(self._sample)
            self._sampler = Sampler(self.clock, lambda: _call_alive(sample), limit)
            self._sampler.start()

    def _sample(self) -> tuple[int, int, int]:
        arrived, rejected = self.stats.totals()
        return self.in_flight.count, arrived, rejected

    def _warn_late_traffic(self) -> None:
        """NotAcceptingNewRequests: warn once when requests still came in the last tenth of the delay."""
        late = self.stats.late_traffic()
        if late is None:
            return
        if self._delay_ended_on_quiet():
            return  # traffic had stopped: a longer delay would have changed nothing
        logger.warning(
            "graceful: %d request(s) arrived in the last tenth of the %gs shutdown delay (from %.3fs after"
            " ShutdownInitiated; the last at %.3fs): the delay looks too short for the load balancers to stop"
            " sending here; raise GRACEFUL_SHUTDOWN_DELAY",
            late.count,
            late.shutdown_delay,
            late.window_start,
            late.last_arrival,
            extra=self.log_fields("late_traffic"),
        )

    def _delay_ended_on_quiet(self) -> bool:
        """Whether an adaptive delay ended on quiet, in the process that ran it or one that saw it end.

        A Gunicorn worker did not run the delay (the master did): it ended on
        quiet when NotAcceptingNewRequests came before the maximum.
        """
        if self.delay_outcome is not None:
            return self.delay_outcome.end is DelayEnd.QUIET
        t0, ended = self.shutdown_initiated.fired_at, self.not_accepting_new_requests.fired_at
        if not self.config.adaptive_delay or t0 is None or ended is None:
            return False
        return ended - t0 < self.config.shutdown_delay

    # -- start-up and fork -------------------------------------------------------

    def run_post_start_hooks(self) -> None:
        """Start the post-start hooks, concurrently; call once the listener is bound."""
        with self._lock:
            if self._post_start_batch is not None:
                return
            hooks = self.registry.close(POST_START_HOOK, "start-up has begun")
            # Post-start hooks may take as long as they need; readiness waits.
            self._post_start_batch = HookBatch(POST_START_HOOK, hooks, float("inf"), self.clock)
        self._post_start_batch.start()

    def post_start_status(self) -> dict[str, str | None]:
        """Each post-start hook's state: ``None`` once it returned, else why it is not ready."""
        batch = self._post_start_batch
        names = [h.name for h in self.registry.hooks(POST_START_HOOK)]
        if batch is None:
            return {name: "not started" for name in names}
        return {name: batch.pending_reason(name) for name in names}

    def reinit_after_fork(self) -> None:
        """Make the copy of this lifecycle in a forked child usable on its own.

        A thread of the parent may have held one of our locks at the fork;
        the child gets fresh ones. Gunicorn workers call this in ``post_fork``.
        """
        self._lock = threading.Lock()
        self.registry.reinit_after_fork()
        for signal in self.signals:
            signal.reinit_after_fork()
        # The parent's hook threads did not come along: the child starts with none.
        self._driver = None
        self._timeline_running = self._tail_started = self._listeners_closed = False
        self._pre_batch = self._cleanup_batch = self._post_start_batch = None
        self._tail_done = threading.Event()
        self.report = ShutdownReport()
        self.delay_outcome = None
        # The child counts and samples its own requests.
        self.stats = RequestStats(self.clock)
        # Forked during the shutdown delay: resume_after_fork() counts and samples it, once the
        # child may start a thread (a thread started before gevent's monkey-patching is an OS
        # thread that threading, once patched, cannot account for when it ends).
        self._sampler = None

    def resume_after_fork(self) -> None:
        """In a child forked during the shutdown delay: count and sample its requests from now on.

        Nothing otherwise. A Gunicorn worker calls this in ``post_worker_init`` (main
        thread), after its own initialisation (gevent's monkey-patching included) and
        before it serves: :meth:`reinit_after_fork` runs in ``post_fork`` and starts no thread.
        """
        if self.shutdown_initiated.fired_at is not None:
            self._observe_shutdown()

    def renew_after_patch(self) -> None:
        """Renew every lock and event made before ``threading`` was monkey-patched (gevent).

        A Gunicorn gevent worker calls this in ``post_worker_init``, after
        gevent's ``patch_all()`` and before starting any thread (greenlet) of
        its own: the signals, the registry and the lifecycle were made in the
        master, with real OS primitives, which would block the hub when
        waited on. State is kept (a fired signal stays fired); hook batches
        and the wait group make theirs when they run, after the patch.
        """
        self._lock = threading.Lock()
        self.registry.renew_after_patch()
        for signal in self.signals:
            signal.renew_after_patch()
        done = threading.Event()
        if self._tail_done.is_set():
            done.set()
        self._tail_done = done
        # The statistics keep their OS locks: each guards a few lines that never yield to the hub,
        # so no greenlet waits on one while another holds it.


def _call_alive(method: weakref.WeakMethod[Callable[[], tuple[int, int, int]]]) -> tuple[int, int, int] | None:
    """Call a weakly held method, or return None once its object is gone."""
    alive = method()
    return None if alive is None else alive()


class ServerAdapter(Protocol):
    """The server-specific step the lifecycle cannot do itself."""

    def stop_listening(self) -> None:
        """Close the listeners: new connections are refused from now on. Called once."""


class NullAdapter:
    """An adapter for a lifecycle with no listeners of its own (tests, Gunicorn workers)."""

    def stop_listening(self) -> None:
        """Do nothing: someone else owns the listeners."""
