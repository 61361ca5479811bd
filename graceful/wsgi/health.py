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

Each probe's results (excluded checks aside) are counted in the lifecycle's
statistics (``lifecycle.stats.checked``), which the metrics report.

Everything here is independent of WSGI: :class:`HealthChecks.respond` takes
an endpoint, an optional check name and a query string and returns a status
and a body; :mod:`graceful.middleware` routes HTTP to it. Thread-safe: request
threads probe concurrently. Under Gunicorn each worker has its own checks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
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
    "CheckResult",
    "HealthChecks",
    "HealthQuery",
    "HealthReport",
    "HealthResponse",
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
    """Every check of one probe of one endpoint, in order, and the exclusions that matched nothing."""

    endpoint: str
    results: tuple[CheckResult, ...]
    unmatched: tuple[str, ...] = ()

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
        lines.append(f"{self.endpoint} check {'passed' if self.ok else 'failed'}")
        return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class HealthResponse:
    """An HTTP status code and a text body."""

    status: int
    body: str


class _Run:
    """One execution of one user check on its own thread."""

    __slots__ = ("done", "hook", "result", "started_at")

    def __init__(self, hook: Hook, started_at: float) -> None:
        self.hook = hook
        self.started_at = started_at
        self.done = threading.Event()
        self.result: CheckResult | None = None


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
        unmatched = tuple(excluded - {item.name for item in items})
        pending: list[CheckResult | _Run] = []
        for item in items:
            if item.name in excluded:
                pending.append(CheckResult(item.name, True, excluded=True))
            elif isinstance(item, CheckResult):
                pending.append(item)
            else:
                pending.append(self._start(item))
        deadline = self.lifecycle.clock.now() + self.check_timeout
        results = tuple(self._collect(entry, deadline) for entry in pending)
        return HealthReport(endpoint, results, unmatched)

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
        except BaseException as exc:  # even SystemExit in a check is only a failed check
            logger.warning("graceful: %s %r raised", hook.kind, hook.name, exc_info=True)
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

    def _collect(self, entry: CheckResult | _Run, deadline: float) -> CheckResult:
        if isinstance(entry, CheckResult):
            return entry
        clock = self.lifecycle.clock
        if clock.wait(entry.done, deadline - clock.now()) and entry.result is not None:
            return entry.result
        return CheckResult(entry.hook.name, False, TIMED_OUT)

    # -- one probe ---------------------------------------------------------------

    def respond(self, endpoint: str, check: str | None = None, query_string: str = "") -> HealthResponse:
        """Answer one probe of ``/endpoint`` (or ``/endpoint/check``) with a status and a body.

        ``check`` and ``query_string`` may come straight from WSGI (UTF-8 bytes
        read as latin-1); they are decoded here.

        200 ``ok`` on a pass (the listing with ``?verbose``); 503 and the listing
        on a failure; 404 for an unknown ``check``. Logs the failing checks with
        their real reasons. The first passing ``/readyz`` that excludes nothing
        fires HasBeenReady. Never raises for any query string.
        """
        query = HealthQuery.parse(query_string)
        if check is not None:
            check = _wsgi_text(check)
            report = self.evaluate(endpoint, only=check)
            if not report.results:
                return HealthResponse(404, f"no {endpoint} check named {json.dumps(check, ensure_ascii=False)}\n")
        else:
            report = self.evaluate(endpoint, exclude=query.exclude)
        # For graceful_healthcheck{name,type} and graceful_healthchecks_total (graceful.metrics).
        self.lifecycle.stats.checked(endpoint, [(r.name, r.ok) for r in report.results if not r.excluded])
        if report.ok:
            if endpoint == READYZ and check is None and not query.exclude:
                has_been_ready = self.lifecycle.has_been_ready
                if not has_been_ready.is_set():
                    has_been_ready.fire()
        else:
            self._log_failure(report, check)
        expose = self.lifecycle.config.expose_check_errors
        return HealthResponse(200 if report.ok else 503, report.render(verbose=query.verbose, expose_errors=expose))

    def _log_failure(self, report: HealthReport, check: str | None) -> None:
        failed = report.failed
        path = f"/{report.endpoint}" if check is None else f"/{report.endpoint}/{check}"
        # Failing /readyz only because of the shutdown is the plan, not a problem.
        level = logging.INFO if [r.name for r in failed] == [SHUTDOWN] else logging.WARNING
        logger.log(
            level,
            "graceful: %s check failed: %s",
            path,
            "; ".join(f"{r.name}: {r.reason}" for r in failed),
        )


def _wsgi_text(value: str) -> str:
    """Read a WSGI "bytes as latin-1" string as UTF-8 where it is that; else leave it."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value
