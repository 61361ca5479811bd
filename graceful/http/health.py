"""Health checks behind ``/livez``, ``/readyz`` and ``/healthz``: evaluation and rendering.

What each endpoint runs, in this order (kube-apiserver's, minus its own checks)::

    /livez    ping, the liveness checks             stays 200 during shutdown
    /readyz   ping, the readiness checks,           fails from ShutdownInitiated on
              poststarthook/<name> per post-start hook, shutdown
    /healthz  ping, the liveness checks, the readiness checks (not shutdown)

A check passes when it returns anything but ``False`` and does not raise.
Each user check runs on its own daemon thread under ``check_timeout``, all of
one probe's checks at once, so a probe answers within about ``check_timeout``
however many checks hang. A check whose previous run is still going is not
started again: a probe joins the run in progress, and reports ``timed out``
at once when that run has already outlived ``check_timeout``. With
``check_cache_ttl`` a finished result is reused for that many seconds (the
lifecycle's clock). ``ping``, ``shutdown`` and the post-start hooks are read
inline, never cached.

The output is kube-apiserver's: ``ok`` on a pass; with ``?verbose``, or on
any failure, one line per check (``[+]ping ok``, ``[-]shutdown failed: reason
withheld``, ``[+]name excluded: ok``), a ``warn: ...`` line for ``?exclude``
names that match nothing (they do not fail the probe), then ``readyz check
passed`` or ``readyz check failed``. The failure reason is shown only when
``config.expose_check_errors`` is true; the real reason always goes to the log.

Logging, once per change and never once per probe: a user check is logged
where it runs when it starts failing (with the traceback when it raised),
when its reason changes and when it passes again (:class:`HealthChecks`); a
probe's answer is logged when the set of checks failing it changes
(:class:`FailureLog`): a ``/readyz`` failing every second through the whole
shutdown delay is one line, the expected answer, not news.

Each probe's results (excluded checks aside) are counted in the lifecycle's
statistics (``lifecycle.stats.checked``), which the metrics report.

Everything here is independent of WSGI: :class:`HealthChecks.respond` takes
an endpoint, an optional check name and a query string and returns a status
and a body; :mod:`graceful.http.probes` routes HTTP to it. The health port
(:mod:`graceful.healthport`) answers from results evaluated earlier, with the
same rendering: :func:`respond_with`. Thread-safe: request threads probe
concurrently. Under Gunicorn each worker has its own checks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
from collections.abc import Sequence
from urllib.parse import unquote_plus

from graceful.core.hooks import Hook
from graceful.core.lifecycle import Lifecycle
from graceful.core.registry import LIVENESS_CHECK, READINESS_CHECK

__all__ = [
    "DEFAULT_CHECK_TIMEOUT",
    "ENDPOINTS",
    "HEALTHZ",
    "LIVEZ",
    "READYZ",
    "POST_START_PREFIX",
    "PING",
    "SHUTDOWN",
    "CheckResult",
    "FailureLog",
    "HealthChecks",
    "HealthQuery",
    "HealthReport",
    "HealthResponse",
    "respond_with",
]

logger = logging.getLogger(__name__)

LIVEZ = "livez"
READYZ = "readyz"
HEALTHZ = "healthz"
ENDPOINTS = (LIVEZ, READYZ, HEALTHZ)

#: Seconds a user check may run before its probe reports it ``timed out``. Keep
#: it below the probe's own ``timeoutSeconds`` (1 s by default in Kubernetes).
DEFAULT_CHECK_TIMEOUT = 0.8

PING = "ping"
SHUTDOWN = "shutdown"
POST_START_PREFIX = "poststarthook/"

TIMED_OUT = "timed out"
WITHHELD = "reason withheld"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One check's outcome in one probe; ``reason`` says why it failed (``None`` when ok)."""

    name: str
    ok: bool
    reason: str | None = None
    excluded: bool = False

    def line(self, expose_errors: bool) -> str:
        """The verbose line: ``[+]name ok``, ``[+]name excluded: ok`` or ``[-]name failed: ...``."""
        if self.excluded:
            return f"[+]{self.name} excluded: ok"
        if self.ok:
            return f"[+]{self.name} ok"
        reason = " ".join((self.reason or "failed").split()) if expose_errors else WITHHELD
        return f"[-]{self.name} failed: {reason}"


@dataclasses.dataclass(frozen=True)
class HealthQuery:
    """What a probe's query string asks for: ``?verbose`` and ``?exclude=name`` (repeatable)."""

    verbose: bool = False
    exclude: tuple[str, ...] = ()

    @classmethod
    def parse(cls, query_string: str) -> HealthQuery:
        """Read ``verbose`` (present at all, any value) and every ``exclude``; never raises.

        Malformed fields and percent escapes are taken as they come, as Go's
        ``url.ParseQuery`` leaves them; a WSGI (latin-1) string is read as UTF-8.
        """
        verbose = False
        exclude: list[str] = []
        for field in _wsgi_text(query_string).split("&"):
            key, _, value = field.partition("=")
            key = unquote_plus(key)
            if key == "verbose":
                verbose = True
            elif key == "exclude":
                exclude.append(unquote_plus(value))
        return cls(verbose, tuple(exclude))


@dataclasses.dataclass(frozen=True)
class HealthReport:
    """Every check of one probe of one endpoint, in order, and the exclusions that matched nothing.

    ``notes`` are more ``warn:`` lines that do not fail the probe (the health
    port's: a check failing in some Gunicorn workers only).
    """

    endpoint: str
    results: tuple[CheckResult, ...]
    unmatched: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @classmethod
    def excluding(
        cls, endpoint: str, items: Sequence[CheckResult], exclude: tuple[str, ...], notes: tuple[str, ...] = ()
    ) -> HealthReport:
        """The report of results already evaluated, the ``exclude`` names marked excluded (passing)."""
        excluded = set(exclude)
        results = tuple(CheckResult(r.name, True, excluded=True) if r.name in excluded else r for r in items)
        return cls(endpoint, results, _unmatched(excluded, items), notes)

    @property
    def ok(self) -> bool:
        """True when no check failed (excluded checks count as passed)."""
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        """The failing checks."""
        return tuple(r for r in self.results if not r.ok)

    def render(self, *, verbose: bool, expose_errors: bool) -> str:
        """The response body: ``ok`` on a quiet pass, else the kube-apiserver listing."""
        if self.ok and not verbose:
            return "ok"
        lines = [r.line(expose_errors) for r in self.results]
        if self.unmatched:
            quoted = ",".join(json.dumps(name, ensure_ascii=False) for name in sorted(self.unmatched))
            lines.append(f"warn: some health checks cannot be excluded: no matches for {quoted}")
        lines.extend(f"warn: {note}" for note in self.notes)
        lines.append(f"{self.endpoint} check {'passed' if self.ok else 'failed'}")
        return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class HealthResponse:
    """An HTTP status code and a text body."""

    status: int
    body: str


class _Run:
    """One execution of one user check on its own thread."""

    __slots__ = ("done", "error", "hook", "result", "started_at")

    def __init__(self, hook: Hook, started_at: float) -> None:
        self.hook = hook
        self.started_at = started_at
        self.done = threading.Event()
        self.result: CheckResult | None = None
        #: What the check raised, for the log line when it starts failing so.
        self.error: BaseException | None = None


class HealthChecks:
    """Runs one lifecycle's checks for the health endpoints; see the module docstring.

    ``check_timeout`` (seconds, > 0) bounds each user check per probe;
    ``check_cache_ttl`` (seconds, >= 0; 0 = off) reuses a finished user check's
    result. Both are measured on ``lifecycle.clock``. Raises ``ValueError``
    for values out of range.
    """

    def __init__(
        self,
        lifecycle: Lifecycle,
        *,
        check_timeout: float = DEFAULT_CHECK_TIMEOUT,
        check_cache_ttl: float = 0.0,
    ) -> None:
        if not (isinstance(check_timeout, (int, float)) and math.isfinite(check_timeout) and check_timeout > 0):
            raise ValueError(f"check_timeout={check_timeout!r} is not allowed: expected seconds > 0")
        if not (isinstance(check_cache_ttl, (int, float)) and math.isfinite(check_cache_ttl) and check_cache_ttl >= 0):
            raise ValueError(f"check_cache_ttl={check_cache_ttl!r} is not allowed: expected seconds >= 0")
        self.lifecycle = lifecycle
        self.check_timeout = float(check_timeout)
        self.check_cache_ttl = float(check_cache_ttl)
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], _Run] = {}
        self._cache: dict[tuple[str, str], tuple[CheckResult, float]] = {}
        #: Each user check's last outcome (ok, reason), under the lock: its log line is written on a change.
        self._states: dict[tuple[str, str], tuple[bool, str | None]] = {}
        self._failures = FailureLog()

    # -- what runs where -----------------------------------------------------

    def _items(self, endpoint: str) -> list[CheckResult | Hook]:
        """The endpoint's checks in order: built-ins already evaluated, user checks still to run."""
        lifecycle = self.lifecycle
        items: list[CheckResult | Hook] = [CheckResult(PING, True)]
        if endpoint in (LIVEZ, HEALTHZ):
            items.extend(lifecycle.registry.hooks(LIVENESS_CHECK))
        if endpoint in (READYZ, HEALTHZ):
            items.extend(lifecycle.registry.hooks(READINESS_CHECK))
        if endpoint == READYZ:
            for name, pending in lifecycle.post_start_status().items():
                items.append(CheckResult(POST_START_PREFIX + name, pending is None, pending))
            shutting_down = lifecycle.shutdown_initiated.is_set()
            items.append(
                CheckResult(SHUTDOWN, not shutting_down, "process is shutting down" if shutting_down else None)
            )
        return items

    def names(self, endpoint: str) -> list[str]:
        """The check names of ``endpoint`` (``livez``, ``readyz`` or ``healthz``), in order."""
        return [item.name for item in self._items(endpoint)]

    # -- evaluation ------------------------------------------------------------

    def evaluate(self, endpoint: str, *, exclude: tuple[str, ...] = (), only: str | None = None) -> HealthReport:
        """Run ``endpoint``'s checks (or just the ones named ``only``) and return the report.

        Excluded checks are not run. Returns within about ``check_timeout``.
        """
        items = self._items(endpoint)
        if only is not None:
            items = [item for item in items if item.name == only]
        excluded = set(exclude)
        pending: list[CheckResult | tuple[Hook, CheckResult | _Run]] = []
        for item in items:
            if item.name in excluded:
                pending.append(CheckResult(item.name, True, excluded=True))
            elif isinstance(item, CheckResult):
                pending.append(item)
            else:
                pending.append((item, self._start(item)))
        deadline = self.lifecycle.clock.now() + self.check_timeout
        results = tuple(e if isinstance(e, CheckResult) else self._settle(*e, deadline) for e in pending)
        return HealthReport(endpoint, results, _unmatched(excluded, items))

    def run_user_checks(self) -> tuple[tuple[CheckResult, ...], tuple[CheckResult, ...]]:
        """Run every liveness and every readiness check at once; return (liveness, readiness) results.

        The health port's runner calls this once a second (the
        ``graceful-health`` thread of each serving process), sharing the runs
        in progress and the cache with the probes of the app's port. Returns
        within about ``check_timeout``.
        """
        registry = self.lifecycle.registry
        live = [(hook, self._start(hook)) for hook in registry.hooks(LIVENESS_CHECK)]
        ready = [(hook, self._start(hook)) for hook in registry.hooks(READINESS_CHECK)]
        deadline = self.lifecycle.clock.now() + self.check_timeout
        return (
            tuple(self._settle(hook, entry, deadline) for hook, entry in live),
            tuple(self._settle(hook, entry, deadline) for hook, entry in ready),
        )

    def _start(self, hook: Hook) -> CheckResult | _Run:
        """Return a cached result, the run already in progress, or a newly started run."""
        key = (hook.kind, hook.name)
        now = self.lifecycle.clock.now()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and now - cached[1] < self.check_cache_ttl:
                return cached[0]
            run = self._running.get(key)
            if run is not None:
                if now - run.started_at >= self.check_timeout:
                    return CheckResult(hook.name, False, f"{TIMED_OUT} (the previous run is still running)")
                return run
            run = self._running[key] = _Run(hook, now)
        thread = threading.Thread(target=self._execute, args=(run,), name=f"graceful-check-{hook.name}", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # the process is out of threads
            self._finish(run, CheckResult(hook.name, False, f"could not start: {exc}"))
        return run

    def _execute(self, run: _Run) -> None:
        hook = run.hook
        try:
            value = hook.fn()
        # Even SystemExit in a check is only a failed check; _note logs it with its traceback.
        except BaseException as exc:  # noqa: BLE001
            run.error = exc
            result = CheckResult(hook.name, False, f"{type(exc).__name__}: {exc}")
        else:
            result = CheckResult(hook.name, value is not False, None if value is not False else "returned False")
        self._finish(run, result)

    def _finish(self, run: _Run, result: CheckResult) -> None:
        key = (run.hook.kind, run.hook.name)
        with self._lock:
            run.result = result
            if self._running.get(key) is run:
                del self._running[key]
            if self.check_cache_ttl:
                self._cache[key] = (result, self.lifecycle.clock.now())
        run.done.set()

    def _settle(self, hook: Hook, entry: CheckResult | _Run, deadline: float) -> CheckResult:
        """A user check's result for this probe (waiting for its run until ``deadline``); logs a change."""
        error = None
        if isinstance(entry, CheckResult):
            result = entry
        else:
            clock = self.lifecycle.clock
            if clock.wait(entry.done, deadline - clock.now()) and entry.result is not None:
                result, error = entry.result, entry.error
            else:
                result = CheckResult(hook.name, False, TIMED_OUT)
        self._note(hook, result, error)
        return result

    def _note(self, hook: Hook, result: CheckResult, error: BaseException | None) -> None:
        """Log a user check that starts failing, fails for another reason, or passes again; else nothing."""
        key = (hook.kind, hook.name)
        state = (result.ok, result.reason)
        with self._lock:
            previous = self._states.get(key)
            if previous == state:
                return
            self._states[key] = state
        if not result.ok:
            exc_info = (type(error), error, error.__traceback__) if error is not None else None
            logger.warning("graceful: %s %r failing: %s", hook.kind, hook.name, result.reason, exc_info=exc_info)
        elif previous is not None:
            logger.info("graceful: %s %r passes again", hook.kind, hook.name)

    # -- one probe ---------------------------------------------------------------

    def respond(self, endpoint: str, check: str | None = None, query_string: str = "") -> HealthResponse:
        """Answer one probe of ``/endpoint`` (or ``/endpoint/check``) with a status and a body.

        ``check`` and ``query_string`` may come straight from WSGI (UTF-8 bytes
        read as latin-1); they are decoded here.

        200 ``ok`` on a pass (the listing with ``?verbose``); 503 and the listing
        on a failure; 404 for an unknown ``check``. Logs the failing checks with
        their real reasons when they change (:class:`FailureLog`). The first
        passing ``/readyz`` that excludes nothing fires HasBeenReady. Never
        raises for any query string.
        """
        query = HealthQuery.parse(query_string)
        if check is not None:
            check = _wsgi_text(check)
            report = self.evaluate(endpoint, only=check)
            if not report.results:
                return _not_found(endpoint, check)
        else:
            report = self.evaluate(endpoint, exclude=query.exclude)
        return _conclude(self.lifecycle, report, check, query, self._failures)


class FailureLog:
    """Logs a probe's failure once per phase: when the set of checks failing it changes.

    A probe every second that fails for the same checks (``/readyz`` through
    the whole shutdown delay) is the expected answer, not news: one line, with
    the reasons, when it starts failing; one when another check fails or one
    recovers; one when it passes again. A reason that changes alone (counts of
    workers) logs nothing: the process running a user check logs its changes.
    INFO while ``shutdown`` is among the failures (a shutdown is the plan,
    and workers stop at its end), WARNING otherwise. Keyed by path
    (``/readyz``, ``/readyz/<known check>``): bounded whatever clients send.
    Thread-safe (the app port's request threads share one).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failing: dict[str, tuple[str, ...]] = {}

    def record(self, path: str, report: HealthReport) -> None:
        """Note one answer of ``path``; log it only when its failing checks changed."""
        failed = report.failed
        names = tuple(r.name for r in failed)
        with self._lock:
            if names == self._failing.get(path, ()):
                return
            self._failing[path] = names
        if not failed:
            logger.info("graceful: %s check passes again", path)
            return
        level = logging.INFO if SHUTDOWN in names else logging.WARNING
        logger.log(level, "graceful: %s check failed: %s", path, "; ".join(f"{r.name}: {r.reason}" for r in failed))


def respond_with(
    lifecycle: Lifecycle,
    items: Sequence[CheckResult],
    endpoint: str,
    check: str | None,
    query_string: str,
    *,
    failure_log: FailureLog,
    notes: tuple[str, ...] = (),
) -> HealthResponse:
    """Answer a probe from checks already evaluated (the health port's), as :meth:`HealthChecks.respond` does.

    The same answer for the same results: ``?verbose``, ``?exclude`` (the
    names marked excluded), ``/endpoint/<check>`` (404 when no item has that
    name), ``notes`` as ``warn:`` lines, HasBeenReady on the first full pass of
    ``lifecycle``, the failures logged by ``failure_log``. Never raises.
    """
    query = HealthQuery.parse(query_string)
    if check is not None:
        check = _wsgi_text(check)
        chosen = tuple(item for item in items if item.name == check)
        if not chosen:
            return _not_found(endpoint, check)
        report = HealthReport(endpoint, chosen)
    else:
        report = HealthReport.excluding(endpoint, items, query.exclude, notes)
    return _conclude(lifecycle, report, check, query, failure_log)


def _conclude(
    lifecycle: Lifecycle, report: HealthReport, check: str | None, query: HealthQuery, failures: FailureLog
) -> HealthResponse:
    """The answer to a report: HasBeenReady on a full pass, the failure log, the statistics, the status and body."""
    # For graceful_healthcheck{name,type} and graceful_healthchecks_total (graceful.metrics):
    # the probes this process answered, on the app port or the health port.
    lifecycle.stats.checked(report.endpoint, [(r.name, r.ok) for r in report.results if not r.excluded])
    if report.ok and report.endpoint == READYZ and check is None and not query.exclude:
        has_been_ready = lifecycle.has_been_ready
        if not has_been_ready.is_set():
            has_been_ready.fire()
    failures.record(f"/{report.endpoint}" if check is None else f"/{report.endpoint}/{check}", report)
    expose = lifecycle.config.expose_check_errors
    return HealthResponse(200 if report.ok else 503, report.render(verbose=query.verbose, expose_errors=expose))


def _not_found(endpoint: str, check: str) -> HealthResponse:
    return HealthResponse(404, f"no {endpoint} check named {json.dumps(check, ensure_ascii=False)}\n")


def _unmatched(excluded: set[str], items: Sequence[CheckResult | Hook]) -> tuple[str, ...]:
    """The ``?exclude`` names no check has, in a stable order."""
    return tuple(sorted(excluded - {item.name for item in items}))


def _wsgi_text(value: str) -> str:
    """Read a WSGI "bytes as latin-1" string as UTF-8 where it is that; else leave it."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value
