"""Named hooks run concurrently, each under its own timeout, at most once.

Pre-shutdown hooks and cleanup tasks are batches of named callables. A batch
starts them all at once on a ``ThreadPoolExecutor`` and waits for each until
its own deadline. A hook that raises, calls ``sys.exit`` or times out is
recorded and logged with its name, outcome and duration; it never stops the
others.

A hook that never returns leaves a thread behind. ``ThreadPoolExecutor``
threads are joined at interpreter exit, so such a thread would hold the
process open: :attr:`HookBatch.hung` names them, and the caller ends the
process with :func:`graceful.process.exit.exit_process`, which skips that join.

Under Gunicorn, pre-shutdown hooks run in the master, cleanup tasks in each
worker; both on threads named ``graceful-<kind>``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from graceful.core.clock import Clock
from graceful.core.logfields import log_fields

__all__ = ["Hook", "HookBatch", "HookResult", "Outcome", "ShutdownReport"]

logger = logging.getLogger(__name__)


class Outcome(str, enum.Enum):
    """How a hook ended."""

    OK = "ok"
    FAILED = "failed"
    TIMED_OUT = "timed out"


@dataclasses.dataclass(frozen=True)
class Hook:
    """A named callable of one kind (``pre-shutdown hook``, ``cleanup task``, ...).

    ``timeout`` is in seconds; ``None`` means the config's ``hook_timeout``.
    """

    kind: str
    name: str
    fn: Callable[[], object]
    timeout: float | None = None

    def timeout_or(self, default: float) -> float:
        """The seconds this hook may run: its own timeout, else ``default`` (the config's ``hook_timeout``)."""
        return default if self.timeout is None else self.timeout

    def origin(self) -> tuple[str, str]:
        """Where the callable was defined: re-running the same definition is no duplicate."""
        code = getattr(self.fn, "__code__", None)
        filename = code.co_filename if code is not None else ""
        return filename, getattr(self.fn, "__qualname__", repr(self.fn))


@dataclasses.dataclass(frozen=True)
class HookResult:
    """The outcome of one hook: name, outcome, seconds it took, error text, when it started (monotonic s)."""

    kind: str
    name: str
    outcome: Outcome
    duration: float
    error: str | None = None
    started_at: float | None = None


@dataclasses.dataclass(frozen=True)
class ShutdownReport:
    """Every hook's and task's result in one shutdown, in the order they were registered."""

    results: tuple[HookResult, ...] = ()

    def __add__(self, other: ShutdownReport) -> ShutdownReport:
        return ShutdownReport(self.results + other.results)

    @property
    def ok(self) -> bool:
        """True when every hook and task returned normally."""
        return all(r.outcome is Outcome.OK for r in self.results)

    def by_name(self, name: str) -> HookResult:
        """Return the result of the hook called ``name``; ``KeyError`` if none."""
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(name)

    def summary(self) -> str:
        """One line: how many ok, failed, timed out."""
        counts = {o: sum(r.outcome is o for r in self.results) for o in Outcome}
        return ", ".join(f"{counts[o]} {o.value}" for o in Outcome)


#: Gives the ``extra=`` fields of a log line for an event name (see :mod:`graceful.core.logfields`).
LogFields = Callable[[str], Mapping[str, object]]


def _plain_fields(event: str) -> Mapping[str, object]:
    return log_fields(event)


class HookBatch:
    """Runs hooks concurrently once; :meth:`wait` collects their results.

    Thread-safe: :meth:`start` and :meth:`wait` may be called from different
    threads; each runs its body once. ``fields(event)`` gives the structured
    fields of its log lines (the lifecycle's, with the time since
    ShutdownInitiated).
    """

    def __init__(
        self,
        kind: str,
        hooks: Iterable[Hook],
        default_timeout: float,
        clock: Clock,
        on_all_done: Callable[[], object] | None = None,
        fields: LogFields = _plain_fields,
    ) -> None:
        self.kind = kind
        self._fields = fields
        self._on_all_done = on_all_done
        self._hooks = list(hooks)
        self._default_timeout = default_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._results: dict[str, HookResult] = {}
        self._finished = {h.name: threading.Event() for h in self._hooks}
        self._started_at: float | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._report: ShutdownReport | None = None

    def timeout_of(self, hook: Hook) -> float:
        """The seconds ``hook`` may run."""
        return hook.timeout_or(self._default_timeout)

    def start(self) -> None:
        """Start every hook at once on its own thread; later calls do nothing."""
        with self._lock:
            if self._started_at is not None:
                return
            self._started_at = self._clock.now()
            if not self._hooks:
                if self._on_all_done is not None:
                    self._on_all_done()
                return
            self._executor = ThreadPoolExecutor(
                max_workers=len(self._hooks),
                thread_name_prefix=f"graceful-{self.kind.replace(' ', '-')}",
            )
            for hook in self._hooks:
                self._executor.submit(self._run_one, hook)
        # No more work will be submitted: let idle threads go as soon as they finish.
        self._executor.shutdown(wait=False)

    def _run_one(self, hook: Hook) -> None:
        started = self._clock.now()
        outcome, error = Outcome.OK, None
        try:
            hook.fn()
        except BaseException as exc:  # SystemExit from a hook must not stop the others
            outcome, error = Outcome.FAILED, f"{type(exc).__name__}: {exc}"
            logger.error("graceful: %s %r raised", self.kind, hook.name, exc_info=True, extra=self._fields("hook"))
        self._record(HookResult(self.kind, hook.name, outcome, self._clock.now() - started, error, started))
        self._finished[hook.name].set()
        if self._on_all_done is not None and not self.hung:
            # The last hook to return says so at once, so that the moment all
            # hooks stopped is recorded even while the caller is still waiting
            # for something else (the shutdown delay).
            self._on_all_done()

    def _record(self, result: HookResult) -> None:
        # First writer wins: a hook that returns after it was declared timed
        # out keeps its "timed out" result.
        with self._lock:
            self._results.setdefault(result.name, result)

    def wait(self) -> ShutdownReport:
        """Wait for each hook until its own deadline; return (and log) the results once.

        Every hook ends as ok, failed or timed out; a timed-out hook's thread
        is abandoned (see :attr:`hung`).
        """
        self.start()
        assert self._started_at is not None
        for hook in sorted(self._hooks, key=self.timeout_of):
            deadline = self._started_at + self.timeout_of(hook)
            if not self._clock.wait(self._finished[hook.name], deadline - self._clock.now()):
                self._record(
                    HookResult(
                        self.kind,
                        hook.name,
                        Outcome.TIMED_OUT,
                        self.timeout_of(hook),
                        f"still running after {self.timeout_of(hook):g}s",
                        self._started_at,
                    )
                )
        with self._lock:
            if self._report is None:
                self._report = ShutdownReport(tuple(self._results[h.name] for h in self._hooks))
                self._log(self._report)
            return self._report

    def _log(self, report: ShutdownReport) -> None:
        for r in report.results:
            level = logging.INFO if r.outcome is Outcome.OK else logging.WARNING
            logger.log(
                level,
                "graceful: %s %r %s after running %.3fs%s",
                self.kind,
                r.name,
                r.outcome.value,
                r.duration,
                f": {r.error}" if r.error else "",
                extra=self._fields("hook"),
            )
        if report.results:
            logger.info("graceful: %ss finished: %s", self.kind, report.summary(), extra=self._fields("hooks"))

    def results(self) -> list[HookResult]:
        """The results recorded so far (hooks that have not ended yet have none), in registration order."""
        with self._lock:
            return [self._results[h.name] for h in self._hooks if h.name in self._results]

    def pending_reason(self, name: str) -> str | None:
        """``None`` once hook ``name`` returned normally, else why not (running, or its error)."""
        with self._lock:
            result = self._results.get(name)
        if result is None:
            return "not finished"
        return None if result.outcome is Outcome.OK else f"{result.outcome.value}: {result.error}"

    @property
    def hung(self) -> list[str]:
        """Names of hooks whose threads are still running."""
        return [name for name, done in self._finished.items() if not done.is_set()]
