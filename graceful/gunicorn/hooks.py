"""The Gunicorn server hooks graceful uses; ``graceful/conf.py`` is their public path.

Every function here is a Gunicorn server hook, and each docstring says where
Gunicorn runs it: the master (``on_starting``, ``when_ready``, ``on_reload``,
``pre_fork``, ``on_exit``) hands to :mod:`graceful.gunicorn.master` (``pre_fork``:
the new worker's channel, :mod:`graceful.gunicorn.channel`); a worker
(``post_fork``, ``post_worker_init``, ``pre_request``, ``worker_abort``,
``worker_exit``) to :mod:`graceful.gunicorn.worker`; the health port
(``GRACEFUL_HEALTH_BIND``) to :mod:`graceful.gunicorn.health`, in
``post_worker_init`` and in ``pre_exec`` (the USR2 re-exec child).
``on_starting`` first refuses a worker class graceful does not support
(:mod:`graceful.gunicorn.worker_classes`). A config that defines one of
these hooks itself calls ours from it (``graceful.conf.post_fork(server, worker)``).

Settings are resolved once, in ``on_starting``, by the master
(:mod:`graceful.gunicorn.config`: the config file's, a preloaded app's, or
``GRACEFUL_*`` environment variables over the served Django project's
``settings.GRACEFUL``); nothing is read at import. ``graceful_timeout`` and
``dirty_graceful_timeout`` are :data:`~graceful.gunicorn.config.DERIVED`
here, which stands for "derive it" in ``on_starting`` (drain_timeout + the
longest cleanup task + 1 s; for Gunicorn 27's dirty pool, what the grace
period leaves after that: :mod:`graceful.gunicorn.config`); a value the user
sets is kept. A bad setting, a budget that cannot fit, or Gunicorn waits that
push the shutdown past GRACEFUL_GRACE_PERIOD stop Gunicorn in ``on_starting``
with one line, which names only what the user set and what to change.
"""

from __future__ import annotations

import logging
from typing import Any

from graceful.core.budget import graceful_timeout_problem
from graceful.core.config import ConfigError
from graceful.core.default import default_lifecycle
from graceful.gunicorn.adapter import attach, attached
from graceful.gunicorn.adapter.arbiter import Arbiter, ArbiterAdapter
from graceful.gunicorn.adapter.refusal import WorkerRefused
from graceful.gunicorn.adapter.worker import WorkerAdapter
from graceful.gunicorn.config import DERIVED, derive_timeouts, longest_cleanup, registered_budget, resolve
from graceful.gunicorn.health import start_worker_health
from graceful.gunicorn.master import MasterShutdown
from graceful.gunicorn.worker import WorkerShutdown
from graceful.gunicorn.worker_classes import refuse_unsupported
from graceful.process.termination import report_file_problem

__all__ = [
    "dirty_graceful_timeout",
    "graceful_timeout",
    "nworkers_changed",
    "on_exit",
    "on_reload",
    "on_starting",
    "post_fork",
    "post_worker_init",
    "pre_exec",
    "pre_fork",
    "pre_request",
    "when_ready",
    "worker_abort",
    "worker_exit",
]

logger = logging.getLogger(__name__)

#: Gunicorn's setting, read when it loads this config: "derive it from graceful's settings in on_starting".
graceful_timeout = DERIVED
#: Gunicorn 27's dirty pool's (ignored before 25): "derive it from what the grace period leaves in on_starting".
dirty_graceful_timeout = DERIVED


def _check_settings(arbiter: Arbiter) -> frozenset[str]:
    """Resolve the settings once, derive Gunicorn's waits left unset (their names returned); refuse what
    cannot work (RuntimeError: printed)."""
    lifecycle = default_lifecycle
    try:
        config = resolve(arbiter, lifecycle)
        lifecycle.check_budget()
    except ConfigError as exc:
        raise RuntimeError(f"graceful: {exc}") from None
    derived = derive_timeouts(arbiter, lifecycle)
    chosen = arbiter.graceful_timeout()
    # Derived, it covers them by construction: only the user's value can fall short.
    problem = graceful_timeout_problem(chosen, config.drain_timeout, longest_cleanup(lifecycle))
    dirty = arbiter.dirty_graceful_timeout() if arbiter.dirty_pool_configured() else None
    problem = problem or registered_budget(lifecycle).graceful_timeout_overrun(
        chosen, config.grace_period, dirty, derived=derived
    )
    problem = problem or report_file_problem(config.report_file)
    if problem is not None:
        raise RuntimeError(problem)
    return derived


def _log_to_gunicorn(arbiter: ArbiterAdapter) -> None:
    """Send graceful's log lines to Gunicorn's error log, unless logging was configured for them."""
    ours = logging.getLogger("graceful")
    if ours.handlers or logging.getLogger().handlers:
        return
    for handler in arbiter.error_log_handlers():
        ours.addHandler(handler)
    ours.setLevel(logging.INFO)


def on_starting(server: Any) -> None:
    """Master, main thread, before the listeners and the first fork: check the worker class and settings,
    make the shared state and the health port (with its /metrics)."""
    arbiter = ArbiterAdapter.probe(server)
    refuse_unsupported(arbiter)
    _log_to_gunicorn(arbiter)
    if "dirty_graceful_timeout" in _check_settings(arbiter):
        logger.info(
            "graceful: dirty_graceful_timeout %gs, derived: what GRACEFUL_GRACE_PERIOD leaves after the"
            " delay and graceful_timeout %gs",
            arbiter.dirty_graceful_timeout(),
            arbiter.graceful_timeout(),
        )
    master = MasterShutdown(arbiter, default_lifecycle)
    attach(server, master)


def when_ready(server: Any) -> None:
    """Master, main thread, listeners bound: take over SIGTERM."""
    _master(server).install()


def on_reload(server: Any) -> None:
    """Master, main thread, on HUP (the config may have been re-executed): check settings again.

    A reload must not take down a running server: a problem is logged, not raised.
    """
    arbiter = _master(server).arbiter
    try:
        _check_settings(arbiter)
    except RuntimeError as exc:
        arbiter.log_error(f"{exc} (after reload; the server keeps running)")


def nworkers_changed(server: Any, new_value: int, old_value: int | None) -> None:
    """Master (TTIN, TTOU; the control socket's worker add/remove): note a scale-in for the workers it stops.

    Gunicorn also calls it while it sets up, before ``on_starting``: ignored there.
    """
    master: MasterShutdown | None = attached(server)
    if master is not None:
        master.workers_changed(new_value, old_value)


def pre_fork(server: Any, worker: Any) -> None:
    """Master, main thread, just before it forks a worker: that worker's channel."""
    _master(server).channel.before_fork()


def post_fork(server: Any, worker: Any) -> None:
    """Worker, main thread, just after the fork: set up the worker's own shutdown on its channel."""
    master = _master(server)
    channel = master.channel.worker_end()
    if channel is None:
        raise WorkerRefused(  # one line, and the master stops rather than fork worker after worker
            "graceful: pre_fork did not run before this worker's fork: a config that defines pre_fork"
            " must call graceful.conf.pre_fork(server, worker) from it"
        )
    shutdown = WorkerShutdown(
        WorkerAdapter.probe(worker),
        default_lifecycle,
        channel,
        master.arrivals,
        master.on_signal,
        master.arbiter.workers_own_listeners(),
        master.health is not None,
    )
    attach(worker, shutdown)


def post_worker_init(worker: Any) -> None:
    """Worker, main thread, app loaded: wrap the app, start post-start hooks, the watch and health threads."""
    shutdown: WorkerShutdown = attached(worker)
    shutdown.start()
    start_worker_health(shutdown, default_lifecycle)


def pre_exec(server: Any) -> None:
    """The master's USR2 re-exec child, before exec: hand the health port's socket on to the new master."""
    health = _master(server).health
    if health is not None:
        health.pre_exec()


def pre_request(worker: Any, req: Any) -> None:
    """Worker, the thread serving ``req``: ask for ``Connection: close`` once shutting down.

    Runs on every request (Gunicorn skips only its default hook): until
    ShutdownInitiated or the worker's stop, and without a max_requests
    limit, it looks at one attribute and calls nothing more.
    """
    shutdown: WorkerShutdown = attached(worker)
    if not shutdown.requests_unwatched:
        shutdown.before_request(req)


def worker_abort(worker: Any) -> None:
    """Worker, inside its SIGABRT handler (the master killed it for missing its timeout): note it."""
    shutdown: WorkerShutdown | None = attached(worker)
    if shutdown is not None:
        shutdown.abort()


def worker_exit(server: Any, worker: Any) -> None:
    """Worker main thread as it exits (also the master, on one path; ignored there): drain, clean up."""
    shutdown: WorkerShutdown | None = attached(worker)
    if shutdown is not None:
        shutdown.exit()


def on_exit(server: Any) -> None:
    """Master, main thread, after every worker exited."""
    _master(server).finish()


def _master(server: Any) -> MasterShutdown:
    """The master's shutdown that ``on_starting`` kept on Gunicorn's arbiter."""
    master: MasterShutdown = attached(server)
    return master
