"""Per-process request statistics of a shutdown: arrivals, rejections, the drain, health checks, samples.

What the shutdown record (:mod:`graceful.core.record`) and the metrics
(:mod:`graceful.metrics`) report, counted where it happens, and nothing on the
request hot path before a shutdown:

* requests that arrive after ShutdownInitiated, whatever their answer, by
  phase: ``delay`` until NotAcceptingNewRequests, ``draining`` after; the
  last one's time, and how many came in the last tenth of the shutdown delay
  (late traffic: the delay looks too short). ``GracefulMiddleware`` counts
  them on its checked path, which every request takes from ShutdownInitiated
  on (``Lifecycle.refresh_unhindered`` keeps the hot-path flag down from then);
  health probes are never counted;
* rejections by reason: ``shutting_down`` (429, retry-after mode),
  ``draining`` (503: the request raced the drain), ``max_in_flight`` (429),
  ``refused_stream`` (HTTP/2's REFUSED_STREAM, above a GOAWAY's last-stream-id),
  counted where they are answered;
* the drain: how many requests it waited for, how long, how many it abandoned;
* health-check results, per endpoint and check, counted where probes are
  evaluated (:mod:`graceful.http.health`);
* the processes it started that ended abnormally (a Gunicorn master's
  workers: killed by a signal, killed at its deadline, crashed, or gone
  without their part of the record), each a :class:`ProcessEnd`, with the
  requests they had in flight at their last report (lost);
* samples (in-flight count, arrivals and rejections so far) every
  :data:`SAMPLE_INTERVAL` seconds from ShutdownInitiated to CleanupFinished,
  taken by a :class:`Sampler` on the ``graceful-sampler`` thread.

Thread-safe. Request threads count without a lock: a :class:`Counter` is an
``itertools.count``, whose ``next`` is one atomic C call; everything else
takes a lock. Under Gunicorn each worker counts its own requests (the
lifecycle renews its statistics after the fork); the master serves none and
does not sample.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from graceful.core.clock import Clock, MonotonicClock

__all__ = [
    "LATE_SHARE",
    "PHASES",
    "PHASE_DELAY",
    "PHASE_DRAINING",
    "REASONS",
    "REASON_DRAINING",
    "REASON_MAX_IN_FLIGHT",
    "REASON_REFUSED_STREAM",
    "REASON_SHUTTING_DOWN",
    "SAMPLE_INTERVAL",
    "ArrivalSlot",
    "CheckTally",
    "Counter",
    "DrainFigures",
    "END_CAUSES",
    "END_KILLED",
    "END_NO_PART",
    "END_SIGNAL",
    "END_STATUS",
    "LEFT",
    "LEFT_AT_DEADLINE",
    "LEFT_STREAM",
    "LEFT_WEBSOCKET",
    "LateTraffic",
    "ProcessEnd",
    "RequestStats",
    "Sample",
    "Sampler",
]

#: Rejected with 429 + Retry-After in retry-after mode (after NotAcceptingNewRequests).
REASON_SHUTTING_DOWN = "shutting_down"
#: Rejected with 503: the request arrived as the drain began.
REASON_DRAINING = "draining"
#: Rejected with 429: every ``max_in_flight`` slot was taken.
REASON_MAX_IN_FLIGHT = "max_in_flight"
#: HTTP/2: a stream opened above a GOAWAY's last-stream-id, refused with REFUSED_STREAM (safe to retry).
REASON_REFUSED_STREAM = "refused_stream"
REASONS = (REASON_SHUTTING_DOWN, REASON_DRAINING, REASON_MAX_IN_FLIGHT, REASON_REFUSED_STREAM)

#: Long-lived connections told to leave (graceful.asgi.long_lived): WebSockets, streams (SSE, long-running), and
#: of those, how many were told at the drain's deadline rather than at their time in the delay.
LEFT_WEBSOCKET = "websocket"
LEFT_STREAM = "stream"
LEFT_AT_DEADLINE = "at_deadline"
LEFT = (LEFT_WEBSOCKET, LEFT_STREAM, LEFT_AT_DEADLINE)

#: Arrived after ShutdownInitiated, before NotAcceptingNewRequests.
PHASE_DELAY = "delay"
#: Arrived after NotAcceptingNewRequests.
PHASE_DRAINING = "draining"
PHASES = (PHASE_DELAY, PHASE_DRAINING)

#: Arrivals in this last share of the shutdown delay are late traffic.
LATE_SHARE = 0.1
#: Seconds between two samples.
SAMPLE_INTERVAL = 0.05

#: How a process ended abnormally (:attr:`ProcessEnd.cause`): killed by a signal (not its master's)...
END_SIGNAL = "signal"
#: ... killed by its master at the deadline it was given (Gunicorn's graceful_timeout) ...
END_KILLED = "killed"
#: ... exited with a status other than 0 ...
END_STATUS = "status"
#: ... or exited (status 0, or unknown) without sending its part of the shutdown record.
END_NO_PART = "no_part"
END_CAUSES = (END_SIGNAL, END_KILLED, END_STATUS, END_NO_PART)
#: At most this many ended processes are kept (a crash loop must not grow a report without bound).
MAX_ENDS = 1000


class ArrivalSlot(Protocol):
    """Where an arrival's monotonic time is written: ``slot[0] = now`` (a list, or shared memory)."""

    def __setitem__(self, index: int, value: float, /) -> None:
        """Store ``value`` at ``index`` (only 0 is used)."""


class Counter:
    """A count that any thread raises with ``add()``, without a lock.

    ``add`` is ``itertools.count``'s ``__next__``: one atomic C call. Reading
    advances that count too, so :attr:`value` (under a lock) subtracts how
    many reads there were.
    """

    __slots__ = ("_count", "_lock", "_reads", "add")

    def __init__(self) -> None:
        self._count = itertools.count()
        self._reads = 0
        self._lock = threading.Lock()
        #: Count one.
        self.add: Callable[[], int] = self._count.__next__

    @property
    def value(self) -> int:
        """How many times ``add`` was called."""
        with self._lock:
            value = next(self._count) - self._reads
            self._reads += 1
        return value


@dataclasses.dataclass(frozen=True)
class DrainFigures:
    """The drain: when it began and ended (monotonic s), the requests it waited for and abandoned.

    A process may wait more than once (a Gunicorn worker in retry-after mode):
    the figures run from the first wait's start to the last one's end.
    """

    started_at: float
    in_flight: int
    ended_at: float | None = None
    abandoned: int = 0


@dataclasses.dataclass(frozen=True)
class LateTraffic:
    """Requests that arrived in the last tenth of the shutdown delay (times in s since ShutdownInitiated)."""

    count: int
    window_start: float
    last_arrival: float
    shutdown_delay: float


@dataclasses.dataclass(frozen=True)
class CheckTally:
    """One health check at one endpoint: its last result and how many probes it passed and failed."""

    endpoint: str
    name: str
    ok: bool
    successes: int
    errors: int


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One look during the shutdown: monotonic time, requests in flight, arrivals and rejections so far."""

    at: float
    in_flight: int
    arrived: int
    rejected: int


@dataclasses.dataclass(frozen=True)
class ProcessEnd:
    """A process that ended abnormally, as the process that started it saw it (a Gunicorn master: its worker).

    ``at``: when it was seen gone (monotonic s; in a report, s since its
    origin). ``in_flight``: its requests in flight at its last report (None:
    it never reported). ``part``: it sent its part of the shutdown record,
    whose figures count its requests (none of them is lost here).
    ``replaced``: it ended while its server still served (the shutdown
    delay): Gunicorn forked another in its place.
    """

    pid: int
    cause: str
    at: float
    role: str = "worker"
    signal: str | None = None
    status: int | None = None
    in_flight: int | None = None
    part: bool = False
    replaced: bool = False

    @property
    def serves_requests(self) -> bool:
        """False for a process that serves none (Gunicorn's dirty arbiter runs tasks for the workers)."""
        return self.role == "worker"

    @property
    def lost(self) -> int | None:
        """The requests lost with it: those in flight at its last report (None: unknown; 0: its part counts them)."""
        if self.part or not self.serves_requests:
            return 0
        return self.in_flight

    def describe(self) -> str:
        """``worker 12 killed by SIGKILL while stopping: 4 requests in flight lost``."""
        deadline = "graceful_timeout" if self.serves_requests else "dirty_graceful_timeout"
        how = {
            END_SIGNAL: f"killed by {self.signal}",
            END_KILLED: f"killed by the master at {deadline} ({self.signal or 'SIGKILL'})",
            END_STATUS: f"exited with status {self.status}",
            END_NO_PART: "exited without its part of the record",
        }.get(self.cause, self.cause)
        if self.cause != END_NO_PART and not self.part and self.serves_requests:
            how += " without its part of the record"
        when = "during the delay (replaced)" if self.replaced else "while stopping"
        text = f"{self.role} {self.pid} {how} {when}"
        lost = self.lost
        if not self.serves_requests:
            return f"{text}: its unfinished tasks are lost"
        if self.part:
            return text
        if lost is None:
            return f"{text}: its requests in flight are unknown (it never reported them)"
        return f"{text}: {lost} request{'' if lost == 1 else 's'} in flight lost"


class RequestStats:
    """One process's request statistics (see the module docstring); times on ``clock``."""

    def __init__(self, clock: Clock) -> None:
        # The real clock's reading without its Python frame: arrived() runs on every request of a shutdown.
        self._now: Callable[[], float] = time.monotonic if type(clock) is MonotonicClock else clock.now
        self._lock = threading.Lock()
        self._arrivals = {phase: Counter() for phase in PHASES}
        self._delay_add = self._arrivals[PHASE_DELAY].add
        self._draining_add = self._arrivals[PHASE_DRAINING].add
        self._late = Counter()
        self._rejections = {reason: Counter() for reason in REASONS}
        self._left = {key: Counter() for key in LEFT}
        #: Monotonic time of ShutdownInitiated once :meth:`begin` was called.
        self.shutdown_at: float | None = None
        self._shutdown_delay = 0.0
        self._late_from = float("inf")
        #: Monotonic time of the latest arrival after ShutdownInitiated (one of two at the same moment).
        self.last_arrival_at: float | None = None
        # Where each arrival's time is also written: a Gunicorn worker's is the server's arrival board
        # (graceful.gunicorn.shared.ArrivalBoard, read by the master's adaptive delay); else a list of one.
        self._board: ArrivalSlot = [0.0]
        self._drain: DrainFigures | None = None
        #: True once the server cut the requests left at the drain's deadline (:meth:`drain_cut`).
        self._drain_cut = False
        self._checks: dict[tuple[str, str], list[int]] = {}  # [last ok, successes, errors]; guarded by _lock
        self._ends: list[ProcessEnd] = []  # guarded by _lock

    # -- request threads -----------------------------------------------------

    def begin(self, shutdown_at: float, shutdown_delay: float) -> None:
        """ShutdownInitiated fired at ``shutdown_at`` (monotonic s): arrivals count from now on."""
        self._shutdown_delay = shutdown_delay
        self._late_from = shutdown_at + (1 - LATE_SHARE) * shutdown_delay
        self.shutdown_at = shutdown_at

    def arrived(self, stopped: bool) -> None:
        """A request arrived after ShutdownInitiated; ``stopped``: NotAcceptingNewRequests had fired."""
        now = self._now()
        self.last_arrival_at = now
        self._board[0] = now
        if stopped:
            self._draining_add()
            return
        self._delay_add()
        if now >= self._late_from:
            self._late.add()

    def publish_arrivals(self, board: ArrivalSlot) -> None:
        """Also write each arrival's time into ``board[0]`` (a Gunicorn worker: the server's arrival board).

        Call before requests are served (under Gunicorn: ``post_fork``, main thread).
        """
        self._board = board

    def told_to_leave(self, kind: str, at_deadline: bool) -> None:
        """A long-lived connection of ``kind`` (``websocket`` or ``stream``) was told to leave, at its time
        in the delay or (``at_deadline``) because it was still open when the drain ended."""
        self._left[kind].add()
        if at_deadline:
            self._left[LEFT_AT_DEADLINE].add()

    def rejected(self, reason: str) -> None:
        """A request was answered with a refusal for ``reason`` (one of :data:`REASONS`)."""
        self._rejections[reason].add()

    # -- the drain (under Gunicorn: the worker's main thread) ----------------------

    def drain_began(self, at: float, in_flight: int) -> None:
        """A drain began at ``at`` (monotonic s) with ``in_flight`` requests to wait for; the first one counts."""
        with self._lock:
            if self._drain is None:
                self._drain = DrainFigures(at, in_flight)

    def drain_ended(self, at: float, abandoned: int) -> None:
        """A drain ended at ``at``, leaving ``abandoned`` requests still running; the last one counts,
        unless the server cut them (:meth:`drain_cut`)."""
        with self._lock:
            if self._drain is not None and not self._drain_cut:
                self._drain = dataclasses.replace(self._drain, ended_at=at, abandoned=abandoned)

    def drain_cut(self) -> None:
        """The drain that just ended is the last: the server now cuts the requests it abandoned.

        An ASGI worker's stop cancels their tasks, which ends their count: a
        later wait (``worker_exit``'s) would find none and call them drained.
        """
        with self._lock:
            self._drain_cut = self._drain is not None and self._drain.ended_at is not None

    # -- health probes (the request thread that answers one) ---------------------------

    def checked(self, endpoint: str, results: Iterable[tuple[str, bool]]) -> None:
        """One probe of ``endpoint`` evaluated these ``(check name, passed)`` results."""
        with self._lock:
            for name, ok in results:
                tally = self._checks.setdefault((endpoint, name), [1, 0, 0])
                tally[0] = int(ok)
                tally[1 if ok else 2] += 1

    # -- the processes it started (a Gunicorn master: its main thread) -------------------

    def process_ended(self, end: ProcessEnd) -> None:
        """A process this one started ended abnormally (at most :data:`MAX_ENDS` are kept)."""
        with self._lock:
            if len(self._ends) < MAX_ENDS:
                self._ends.append(end)

    def process_ends(self) -> list[ProcessEnd]:
        """The processes that ended abnormally, in the order they were seen."""
        with self._lock:
            return list(self._ends)

    # -- readers (any thread) --------------------------------------------------------

    def arrivals(self) -> dict[str, int]:
        """Arrivals after ShutdownInitiated by phase."""
        return {phase: counter.value for phase, counter in self._arrivals.items()}

    def left(self) -> dict[str, int]:
        """Long-lived connections told to leave, by kind, and how many of them at the drain's deadline."""
        return {key: counter.value for key, counter in self._left.items()}

    def rejections(self) -> dict[str, int]:
        """Rejections by reason."""
        return {reason: counter.value for reason, counter in self._rejections.items()}

    def totals(self) -> tuple[int, int]:
        """Arrivals and rejections so far, each summed over phases and reasons."""
        return sum(self.arrivals().values()), sum(self.rejections().values())

    @property
    def drain(self) -> DrainFigures | None:
        """The drain's figures, once it began."""
        with self._lock:
            return self._drain

    def late_traffic(self) -> LateTraffic | None:
        """The requests that arrived in the last tenth of the delay (see :data:`LATE_SHARE`), None if none did."""
        count = self._late.value
        last, start = self.last_arrival_at, self.shutdown_at
        if not count or last is None or start is None:
            return None
        return LateTraffic(count, self._late_from - start, last - start, self._shutdown_delay)

    def health_checks(self) -> list[CheckTally]:
        """Every check that was evaluated, with its last result and counts, by endpoint then name."""
        with self._lock:
            items = sorted(self._checks.items())
        return [CheckTally(endpoint, name, bool(ok), good, bad) for (endpoint, name), (ok, good, bad) in items]


class Sampler:
    """Samples a process during its shutdown on the ``graceful-sampler`` daemon thread.

    Every :data:`SAMPLE_INTERVAL` real seconds (also under a test's fake
    clock, whose time it reads for each sample), from :meth:`start` until
    :meth:`stop`, and at most ``limit`` samples (then it stops and says it
    was truncated); :meth:`stop` takes one last sample. ``read()`` returns
    the in-flight count, arrivals and rejections so far, or None when there
    is nothing left to sample (the lifecycle is gone): the thread then ends.
    """

    def __init__(self, clock: Clock, read: Callable[[], tuple[int, int, int] | None], limit: int) -> None:
        self._clock = clock
        self._read = read
        self.limit = max(2, limit)
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: True when the sampler stopped at its limit before :meth:`stop`.
        self.truncated = False

    def start(self) -> None:
        """Take the first sample and start the thread; later calls do nothing."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="graceful-sampler", daemon=True)
        self._take()
        self._thread.start()

    def stop(self) -> None:
        """Take the last sample and stop the thread (it ends within one interval); idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._take()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the thread to end; True once it has (or never started)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    @property
    def samples(self) -> list[Sample]:
        """The samples so far, in time order (a copy)."""
        with self._lock:
            return list(self._samples)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            if not self._take():
                self.truncated = len(self._samples) >= self.limit
                return

    def _take(self) -> bool:
        values = self._read()
        if values is None:
            return False
        in_flight, arrived, rejected = values
        with self._lock:
            if len(self._samples) >= self.limit:
                return False
            self._samples.append(Sample(self._clock.now(), in_flight, arrived, rejected))
            return True
