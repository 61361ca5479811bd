"""Unit tests of graceful's Gunicorn server hooks (graceful.gunicorn.hooks) on a real arbiter, in this process.

Gunicorn's ``Arbiter`` and a sync worker are built as Gunicorn builds them,
then each hook is called where Gunicorn would call it. Nothing binds or
forks: the master's and the worker's parts share this one process (and so
one lifecycle), which is enough to see each hook do its part. The OS signal
handlers the hooks install are restored after each test.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gunicorn.workers.sync import SyncWorker

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.gunicorn import hooks
from graceful.gunicorn.adapter import attached
from graceful.gunicorn.adapter.refusal import WorkerRefused
from graceful.gunicorn.channel import Kind
from graceful.gunicorn.master import MasterShutdown
from graceful.gunicorn.stop_reason import StopReason
from graceful.gunicorn.worker import WorkerShutdown
from graceful.testing import FakeClock
from graceful.wsgi.middleware import GracefulMiddleware
from tests.conftest import ROOT
from tests.gunicorn.test_adapter import app, arbiter_of
from tests.gunicorn.test_gunicorn import _gunicorn_version

SOON = 10.0


@pytest.fixture
def lifecycle(monkeypatch: pytest.MonkeyPatch) -> Lifecycle:
    """The hooks' default lifecycle, fresh for each test, on a fake clock."""
    fresh = Lifecycle(Config(shutdown_delay=1, drain_timeout=3, hook_timeout=2), clock=FakeClock())
    monkeypatch.setattr(hooks, "default_lifecycle", fresh)
    return fresh


@pytest.fixture
def process() -> Iterator[list[Any]]:
    """Restores the environment and the OS handlers the hooks replace; closes the arbiters' and workers' files."""
    saved_env = dict(os.environ)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)}
    made: list[Any] = []
    yield made
    for thing in made:
        state = attached(thing)
        if isinstance(state, MasterShutdown):
            state.channel.fire(Kind.CLOSE_LISTENERS)  # ends the workers' watch threads
            state.channel.close()
        if isinstance(state, WorkerShutdown):
            state.channel.close()
        if hasattr(thing, "tmp"):
            thing.tmp.close()
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    os.environ.clear()
    os.environ.update(saved_env)


def started(made: list[Any], **options: object) -> Any:
    """A real arbiter after ``on_starting`` and ``when_ready``, its loop able to be woken (22/23: a pipe)."""
    # What graceful.conf derives from the settings: drain_timeout + hook_timeout + 1 s.
    options.setdefault("graceful_timeout", 6)
    arbiter = arbiter_of(**options)
    made.append(arbiter)
    if not hasattr(arbiter.SIG_QUEUE, "get_nowait"):
        arbiter.PIPE = list(os.pipe())  # Gunicorn 22/23's init_signals makes it; this test runs no loop
    hooks.on_starting(arbiter)
    hooks.when_ready(arbiter)
    return arbiter


def forked(made: list[Any], arbiter: Any, loading: Callable[[], object] = lambda: None) -> Any:
    """A sync worker after ``post_fork`` and ``post_worker_init`` (its app loaded as Gunicorn's load_wsgi does:
    ``loading()`` is what the app's import does, such as configuring the lifecycle)."""
    worker = SyncWorker(1, os.getpid(), [], arbiter.app, arbiter.timeout, arbiter.cfg, arbiter.log)
    made.append(worker)
    hooks.pre_fork(arbiter, worker)  # no fork between: the worker's end stays in this process
    hooks.post_fork(arbiter, worker)
    loading()
    worker.wsgi = app
    hooks.post_worker_init(worker)
    return worker


class Request:
    def __init__(self) -> None:
        self.closed = False

    def force_close(self) -> None:
        self.closed = True


class TestOnStarting:
    def test_an_unsupported_worker_class_is_refused(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """A worker class graceful does not support stops Gunicorn at start-up, named."""
        arbiter = arbiter_of(worker_class="tornado")
        process.append(arbiter)
        with pytest.raises(RuntimeError, match=r"TornadoWorker \(-k tornado\) is not supported"):
            hooks.on_starting(arbiter)

    def test_a_graceful_timeout_that_cannot_fit_is_refused(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """graceful_timeout shorter than the drain and cleanup: refused at start-up, naming it."""
        arbiter = arbiter_of(graceful_timeout=1)
        process.append(arbiter)
        with pytest.raises(RuntimeError, match="graceful_timeout"):
            hooks.on_starting(arbiter)

    def test_graceful_confs_graceful_timeout_is_derived_from_the_settings(
        self, lifecycle: Lifecycle, process: list[Any]
    ) -> None:
        """graceful.conf's 0 means "derive it": drain_timeout 3 + hook_timeout 2 + 1 s, set before any fork."""
        arbiter = started(process, graceful_timeout=hooks.graceful_timeout)
        assert hooks.graceful_timeout == 0
        assert arbiter.cfg.graceful_timeout == 6

    def test_a_graceful_timeout_the_user_chose_is_kept(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """--graceful-timeout 9 (or a config file's): checked, never changed."""
        assert started(process, graceful_timeout=9).cfg.graceful_timeout == 9

    def test_a_reload_derives_it_again(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """HUP re-reads Gunicorn's config (graceful_timeout back to graceful.conf's 0): on_reload derives it again,
        from the settings resolved at start-up."""
        arbiter = started(process, graceful_timeout=0)
        arbiter.cfg.set("graceful_timeout", 0)
        hooks.on_reload(arbiter)
        assert arbiter.cfg.graceful_timeout == 6

    def test_unconfigured_the_environment_beats_the_django_projects_settings(
        self, process: list[Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """No config before on_starting: the master resolves it once, GRACEFUL_* variables over settings.GRACEFUL
        of the project its wsgi.py names (read, never run), over the defaults."""
        fresh = Lifecycle(clock=FakeClock())
        monkeypatch.setattr(hooks, "default_lifecycle", fresh)
        monkeypatch.syspath_prepend(str(tmp_path))
        (tmp_path / "site7").mkdir()
        (tmp_path / "site7" / "settings.py").write_text("GRACEFUL = {'SHUTDOWN_DELAY': 2, 'DRAIN_TIMEOUT': 7}\n")
        (tmp_path / "site7" / "wsgi.py").write_text(
            "import os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'site7.settings')\nraise SystemExit(3)\n"
        )
        monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
        monkeypatch.setenv("GRACEFUL_SHUTDOWN_DELAY", "1.5")
        arbiter = started(process, graceful_timeout=0, wsgi_app="site7.wsgi:application")
        assert fresh.configured
        assert (fresh.config.shutdown_delay, fresh.config.drain_timeout) == (1.5, 7.0)
        assert arbiter.cfg.graceful_timeout == 7 + 5 + 1  # drain 7 + hook_timeout 5 (default) + 1

    def test_a_config_given_before_on_starting_is_the_servers(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """Configured by the config file or a preloaded app: on_starting keeps it, whatever the environment says."""
        os.environ["GRACEFUL_SHUTDOWN_DELAY"] = "4"
        started(process)
        assert lifecycle.config.shutdown_delay == 1.0

    def test_keeps_the_masters_part_on_the_arbiter(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """on_starting makes the master's part (no health port unless asked) and keeps it on the arbiter."""
        arbiter = started(process)
        master = attached(arbiter)
        assert isinstance(master, MasterShutdown) and master.health is None
        assert lifecycle.server == "gunicorn" and not lifecycle.role.serves_requests


needs_dirty_settings = pytest.mark.skipif(_gunicorn_version() < (25, 0), reason="dirty workers exist from Gunicorn 25")


def with_dirty_pool(made: list[Any], **options: object) -> Any:
    """A real arbiter configured with a dirty pool (as ``--dirty-workers 1 --dirty-app ...``), after on_starting."""
    options.setdefault("graceful_timeout", hooks.graceful_timeout)
    options.setdefault("dirty_graceful_timeout", hooks.dirty_graceful_timeout)
    return started(made, dirty_workers=1, dirty_apps=["tests.live.dirty_app:Sleeper"], **options)


@needs_dirty_settings
class TestDirtyPoolTimeout:
    """Gunicorn's dirty_graceful_timeout, derived or the user's, alongside graceful_timeout (grace period 30 s,
    delay 1 s, drain 3 s, hook_timeout 2 s: graceful_timeout derives to 6 s)."""

    def test_neither_set_both_derived_and_logged(
        self, lifecycle: Lifecycle, process: list[Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        """Neither set: graceful_timeout 6 s, and the dirty pool the 23 s the grace period leaves; one line says so."""
        assert hooks.dirty_graceful_timeout == 0
        with caplog.at_level(logging.INFO, logger="graceful"):
            arbiter = with_dirty_pool(process)
        assert (arbiter.cfg.graceful_timeout, arbiter.cfg.dirty_graceful_timeout) == (6, 23)
        assert "dirty_graceful_timeout 23s, derived" in caplog.text

    def test_graceful_timeout_set_dirty_derived(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """--graceful-timeout 9 kept; the dirty pool gets what is left: 30 - 1 - 9 = 20 s."""
        arbiter = with_dirty_pool(process, graceful_timeout=9)
        assert (arbiter.cfg.graceful_timeout, arbiter.cfg.dirty_graceful_timeout) == (9, 20)

    def test_dirty_set_graceful_timeout_derived(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """--dirty-graceful-timeout 5 kept, graceful_timeout derived."""
        arbiter = with_dirty_pool(process, dirty_graceful_timeout=5)
        assert (arbiter.cfg.graceful_timeout, arbiter.cfg.dirty_graceful_timeout) == (6, 5)

    def test_both_set_kept(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """Both the user's and fitting: neither changed."""
        arbiter = with_dirty_pool(process, graceful_timeout=10, dirty_graceful_timeout=19)
        assert (arbiter.cfg.graceful_timeout, arbiter.cfg.dirty_graceful_timeout) == (10, 19)

    def test_a_dirty_timeout_that_cannot_fit_is_refused_naming_only_it(
        self, lifecycle: Lifecycle, process: list[Any]
    ) -> None:
        """Gunicorn's default 30 s, set by the user with graceful_timeout derived: refused, saying to lower it to
        23 s or leave it unset, never to unset graceful_timeout."""
        arbiter = arbiter_of(
            graceful_timeout=0, dirty_workers=1, dirty_apps=["tests.live.dirty_app:Sleeper"], dirty_graceful_timeout=30
        )
        process.append(arbiter)
        with pytest.raises(RuntimeError) as refused:
            hooks.on_starting(arbiter)
        message = str(refused.value)
        assert "dirty_graceful_timeout 30s = 37s > GRACEFUL_GRACE_PERIOD 30s" in message
        assert "lower dirty_graceful_timeout to 23s or less" in message
        assert "graceful_timeout (or leave it unset" not in message

    def test_a_graceful_timeout_leaving_no_room_is_refused_naming_only_it(
        self, lifecycle: Lifecycle, process: list[Any]
    ) -> None:
        """--graceful-timeout 29 leaves the derived dirty pool nothing: refused, naming graceful_timeout alone."""
        arbiter = arbiter_of(
            graceful_timeout=29, dirty_workers=1, dirty_apps=["tests.live.dirty_app:Sleeper"], dirty_graceful_timeout=0
        )
        process.append(arbiter)
        with pytest.raises(RuntimeError) as refused:
            hooks.on_starting(arbiter)
        message = str(refused.value)
        assert "less than the 1s its dirty_graceful_timeout needs" in message
        assert "lower graceful_timeout (or leave it unset: graceful derives it)" in message
        assert "dirty_graceful_timeout (or" not in message

    def test_a_reload_derives_it_again(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """HUP re-reads Gunicorn's config (both back to graceful.conf's 0): on_reload derives both again, the
        value the master bounds the dirty pool's stop with."""
        arbiter = with_dirty_pool(process)
        arbiter.cfg.set("graceful_timeout", 0)
        arbiter.cfg.set("dirty_graceful_timeout", 0)
        hooks.on_reload(arbiter)
        assert (arbiter.cfg.graceful_timeout, arbiter.cfg.dirty_graceful_timeout) == (6, 23)

    def test_pre_shutdown_hooks_count_in_what_is_left(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """A 4 s pre-shutdown hook in the config file outlasts the 1 s delay: the dirty pool gets 30 - 4 - 6 s."""
        lifecycle.pre_shutdown_hook("deregister", timeout=4)(lambda: None)
        assert with_dirty_pool(process).cfg.dirty_graceful_timeout == 20


class TestDerivedGracefulTimeout:
    def test_a_longer_cleanup_task_in_the_config_is_covered(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """A 7 s cleanup task registered in the config file (hook_timeout 2 s): graceful_timeout derives to
        3 + 7 + 1 s, instead of a refusal that advises leaving unset what is unset."""
        lifecycle.cleanup_task("flush", timeout=7)(lambda: None)
        assert started(process, graceful_timeout=0).cfg.graceful_timeout == 11


class TestBadSettings:
    def test_importing_the_config_reads_nothing(self) -> None:
        """A bad GRACEFUL_* value: graceful.conf imports, reading no setting (graceful_timeout 0: derive it later)."""
        env = dict(os.environ, GRACEFUL_SHUTDOWN_DELAY="soon", PYTHONPATH=str(ROOT))
        code = "import graceful, graceful.conf as c; print(c.graceful_timeout, graceful.default_lifecycle.configured)"
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout.strip()) == (0, "0 False"), done.stderr

    def test_on_starting_refuses_it_in_one_line(self, monkeypatch: pytest.MonkeyPatch, process: list[Any]) -> None:
        """on_starting names the variable, the value and what is allowed, as the one error Gunicorn prints."""
        monkeypatch.setenv("GRACEFUL_SHUTDOWN_DELAY", "soon")
        monkeypatch.setattr(hooks, "default_lifecycle", Lifecycle(clock=FakeClock()))
        arbiter = arbiter_of(graceful_timeout=30)
        process.append(arbiter)
        with pytest.raises(RuntimeError) as refused:
            hooks.on_starting(arbiter)
        assert str(refused.value).startswith("graceful: GRACEFUL_SHUTDOWN_DELAY='soon' is not allowed")
        assert "\n" not in str(refused.value)


class TestMasterHooks:
    def test_the_arbiters_term_handling_is_gracefuls(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """After when_ready, Gunicorn's loop calling handle_term starts the timeline instead of stopping."""
        arbiter = started(process)
        assert arbiter.handle_term() is None  # Gunicorn's loop goes on
        assert lifecycle.shutdown_initiated.is_set()
        assert lifecycle.not_accepting_new_requests.wait(SOON)

    def test_a_reload_that_breaks_the_budget_is_logged_not_raised(
        self, lifecycle: Lifecycle, process: list[Any]
    ) -> None:
        """on_reload: settings that no longer fit are logged in Gunicorn's error log; the server keeps running."""
        arbiter = started(process)
        errors: list[str] = []
        arbiter.log.error = lambda message, *args: errors.append(message % args)
        # The config file, re-executed on HUP, now registers a hook that cannot fit the grace period.
        lifecycle.pre_shutdown_hook("slow", timeout=40)(lambda: None)
        hooks.on_reload(arbiter)
        assert len(errors) == 1 and errors[0].endswith("(after reload; the server keeps running)")

    def test_fewer_workers_are_a_scale_in_for_the_workers_stopped_next(
        self, lifecycle: Lifecycle, process: list[Any]
    ) -> None:
        """nworkers_changed: a lower count (TTOU, worker remove) writes scale-in; before on_starting, nothing."""
        hooks.nworkers_changed(object(), 2, None)  # Gunicorn's setup, before graceful's part exists
        arbiter = started(process)
        hooks.nworkers_changed(arbiter, 1, 2)
        assert attached(arbiter).channel.stop_reason is StopReason.SCALE_IN

    def test_on_exit_after_a_quick_stop_records_nothing(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """on_exit with no graceful shutdown begun (INT, QUIT): the channel closes, no record."""
        arbiter = started(process)
        master = attached(arbiter)
        worker = forked(process, arbiter)
        hooks.pre_exec(arbiter)  # the health port is off: nothing to pass on
        hooks.on_exit(arbiter)
        assert master.channel.latest(Kind.HEALTH) == [] and attached(worker).channel.send(Kind.DRAINED) is False


class TestWorkerHooks:
    def test_post_fork_and_post_worker_init_wrap_the_app(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """The worker's part is kept on the worker, and its app is wrapped in graceful's middleware."""
        worker = forked(process, started(process))
        assert isinstance(attached(worker), WorkerShutdown)
        assert isinstance(worker.wsgi, GracefulMiddleware)

    def test_an_app_that_configures_other_server_settings_is_refused_at_boot(
        self, lifecycle: Lifecycle, process: list[Any]
    ) -> None:
        """Flask's app.config (or any app) giving another delay than the master's: the worker refuses to boot
        with the one line that names both values and the fix."""
        arbiter = started(process)
        configure = lambda: lifecycle.configure(lifecycle.config.replace(shutdown_delay=2))  # noqa: E731
        with pytest.raises(WorkerRefused) as refused:
            forked(process, arbiter, loading=configure)
        message = str(refused.value)
        assert message.startswith(
            "graceful: the app configures GRACEFUL_SHUTDOWN_DELAY=2.0, but the Gunicorn master runs with"
            " GRACEFUL_SHUTDOWN_DELAY=1.0: "
        )
        assert "\n" not in message and message.endswith("(preload_app)")

    def test_an_app_may_set_its_own_per_process_settings(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """max_in_flight is each worker's own: the worker boots with it."""
        arbiter = started(process)
        worker = forked(
            process, arbiter, loading=lambda: lifecycle.configure(lifecycle.config.replace(max_in_flight=3))
        )
        assert isinstance(worker.wsgi, GracefulMiddleware)
        assert lifecycle.gate.admission.limit == 3

    def test_post_fork_without_pre_fork_names_the_fix(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """A config whose own pre_fork does not call graceful's: the worker fails to boot, saying what to call."""
        arbiter = started(process)
        worker = SyncWorker(1, os.getpid(), [], arbiter.app, arbiter.timeout, arbiter.cfg, arbiter.log)
        process.append(worker)
        with pytest.raises(WorkerRefused, match=r"must call graceful\.conf\.pre_fork\(server, worker\) from it$"):
            hooks.post_fork(arbiter, worker)

    def test_pre_request_asks_for_close_once_shutting_down(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """pre_request: Connection: close from ShutdownInitiated on."""
        worker = forked(process, started(process))
        before, after = Request(), Request()
        hooks.pre_request(worker, before)
        lifecycle.shutdown_initiated.fire()
        hooks.pre_request(worker, after)
        assert not before.closed and after.closed

    def test_pre_request_calls_nothing_while_no_request_is_watched(
        self, lifecycle: Lifecycle, process: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """pre_request before ShutdownInitiated, no max_requests: one attribute look, no call into the worker's side."""
        worker = forked(process, started(process))
        shutdown = attached(worker)
        calls: list[object] = []
        monkeypatch.setattr(shutdown, "before_request", calls.append)
        hooks.pre_request(worker, Request())
        assert shutdown.requests_unwatched and calls == []
        lifecycle.shutdown_initiated.fire()
        request = Request()
        hooks.pre_request(worker, request)
        assert calls == [request]

    def test_worker_exit_cleans_up_and_abort_is_noted(self, lifecycle: Lifecycle, process: list[Any]) -> None:
        """worker_abort notes the timeout; worker_exit then runs the cleanup tasks at once."""
        worker = forked(process, started(process))
        ran: list[str] = []
        lifecycle.cleanup_task("close-pool")(lambda: ran.append("close-pool"))
        hooks.worker_abort(worker)
        hooks.worker_exit(None, worker)
        assert ran == ["close-pool"]

    def test_hooks_on_an_object_graceful_never_saw_do_nothing(self, lifecycle: Lifecycle) -> None:
        """worker_abort and worker_exit for a worker without graceful's part (it failed in post_fork): nothing."""
        stranger = object()
        hooks.worker_abort(stranger)
        hooks.worker_exit(None, stranger)
