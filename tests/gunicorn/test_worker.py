"""Unit tests of a worker's shutdown (graceful.gunicorn.worker) against a fake worker and a real channel.

Each test plays Gunicorn's part with :class:`tests.gunicorn.fakes.FakeWorker`
and the master's with a real :class:`~graceful.gunicorn.channel.MasterChannel`
connected to the worker in this one process (a socketpair, no fork): its
facts, its stop reason, the parts workers send. No Gunicorn process; the
worker's SIGTERM handlers are installed for real and restored after each test.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import ProcessPart
from graceful.gunicorn.adapter.refusal import WorkerRefused
from graceful.gunicorn.channel import Kind, MasterChannel, WorkerChannel
from graceful.gunicorn.shared import ArrivalBoard
from graceful.gunicorn.stop_reason import StopReason
from graceful.gunicorn.worker import WorkerShutdown, app_kind_refusal
from graceful.testing import FakeClock
from graceful.wsgi.middleware import GracefulMiddleware
from tests.gunicorn.fakes import FakeGthreadLoop, FakeWorker, gunicorns_term_handler, signal_this_process
from tests.gunicorn.test_http2 import FakeServer

SOON = 10.0  # real seconds: a bound for a loaded machine, never reached when things work


class Request:
    """What ``pre_request`` gets: Gunicorn's request, which can be told to close its connection."""

    def __init__(self) -> None:
        self.closed = False

    def force_close(self) -> None:
        self.closed = True


class Master:
    """The master's side of one worker: its channel, connected to the worker's end, and the arrival board."""

    def __init__(self) -> None:
        self.channel = MasterChannel()
        self.worker_end: WorkerChannel = self.channel.connect()
        self.arrivals = ArrivalBoard()

    def fire(self, kind: Kind) -> None:
        """A fact of the master's, as its lifecycle listener sends it."""
        self.channel.fire(kind)

    def parts(self) -> list[ProcessPart]:
        """The parts the worker sent, once its end is closed (as its process exiting closes it)."""
        self.worker_end.close()
        return [ProcessPart.read(json.loads(payload)) for _, payload in self.channel.parts(SOON)]


@pytest.fixture
def master() -> Iterator[Master]:
    """The master's side; the worker's watch thread ends with the channel."""
    made = Master()
    previous = signal.getsignal(signal.SIGTERM)
    yield made
    signal.signal(signal.SIGTERM, previous)
    made.fire(Kind.CLOSE_LISTENERS)
    made.channel.close()
    made.worker_end.close()


def worker_of(fake: FakeWorker, master: Master, config: Config | None = None) -> WorkerShutdown:
    """``post_fork``: the worker's part over ``fake``, on a lifecycle of its own (the fork's copy)."""
    lifecycle = Lifecycle(config or Config(shutdown_delay=1, drain_timeout=4), clock=FakeClock())
    return WorkerShutdown(fake, lifecycle, master.worker_end, master.arrivals, master_listener=lambda _name, _at: None)


def booted(fake: FakeWorker, master: Master, config: Config | None = None) -> WorkerShutdown:
    """``post_fork``, Gunicorn's SIGTERM handler, then ``post_worker_init``."""
    shutdown = worker_of(fake, master, config)
    signal.signal(signal.SIGTERM, gunicorns_term_handler(fake))  # Gunicorn's init_signals
    shutdown.start()
    return shutdown


def serve(app: Any) -> None:
    """One request through ``app`` (the worker's wrapped app), its body read and closed as Gunicorn does."""
    body = app({"REQUEST_METHOD": "GET", "PATH_INFO": "/work", "wsgi.input": None}, lambda status, headers: None)
    try:
        list(body)
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()


def wait_for(condition: Any) -> bool:
    """Wait (bounded) for ``condition()`` that another thread makes true, on an Event's timed wait."""
    pause = threading.Event()
    for _ in range(int(SOON / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return bool(condition())


def cleanup_log(lifecycle: Lifecycle) -> list[str]:
    """Registers a cleanup task that notes its run; returns the notes."""
    ran: list[str] = []
    lifecycle.cleanup_task("close-pool")(lambda: ran.append("close-pool"))
    return ran


class TestPostFork:
    def test_arrivals_during_the_shutdown_go_on_the_servers_board(self, master: Master) -> None:
        """A worker's request statistics write each arrival's time on the board the master reads."""
        shutdown = worker_of(FakeWorker(), master)
        stats = shutdown.lifecycle.stats
        stats.arrived(False)
        assert stats.last_arrival_at is not None
        assert master.arrivals.last() == stats.last_arrival_at

    def test_pre_shutdown_hooks_are_the_masters(self, master: Master) -> None:
        """A worker refuses pre-shutdown hooks, saying where to register them instead."""
        shutdown = worker_of(FakeWorker(), master)
        with pytest.raises(RuntimeError, match="run once per server, in the master"):
            shutdown.lifecycle.pre_shutdown_hook("deregister")(lambda: None)

    def test_gunicorns_own_drain_is_bounded_by_drain_timeout(self, master: Master) -> None:
        """The worker's copy of graceful_timeout becomes drain_timeout; the master's wait is kept for the budget."""
        fake = FakeWorker(graceful_timeout=30)
        shutdown = worker_of(fake, master)
        assert fake.drain_bound == 4 and shutdown.graceful_timeout == 30


class TestStart:
    def test_wraps_the_app_guards_accept_and_runs_post_start_hooks(self, master: Master) -> None:
        """post_worker_init: the app is wrapped once, accept() guarded, post-start hooks started."""
        fake = FakeWorker()
        shutdown = worker_of(fake, master)
        started = threading.Event()
        shutdown.lifecycle.post_start_hook("warm-cache")(started.set)
        signal.signal(signal.SIGTERM, gunicorns_term_handler(fake))
        shutdown.start()
        assert isinstance(fake.wsgi, GracefulMiddleware)
        assert "guard accept" in fake.calls
        assert started.wait(SOON)

    def test_a_shut_down_listener_makes_gthreads_loop_stop_accepting(self, master: Master) -> None:
        """gthread: accept() on a listener the master shut down stops the loop's accepting (no pause); sync: none."""
        loop = FakeGthreadLoop()
        fake = FakeWorker("gthread", gthread=loop)
        signal.signal(signal.SIGTERM, gunicorns_term_handler(fake))
        worker_of(fake, master).start()
        assert fake.accept_guard is not None
        fake.accept_guard()
        assert loop.calls.count("stop accepting") == 1
        sync = FakeWorker("sync")
        worker_of(sync, master).start()
        assert "guard accept" in sync.calls and sync.accept_guard is None

    def test_a_cleanup_task_longer_than_gunicorns_wait_is_refused(self, master: Master) -> None:
        """A cleanup task the master's graceful_timeout cannot wait for stops the worker's boot."""
        fake = FakeWorker(graceful_timeout=10)
        shutdown = worker_of(fake, master, Config(drain_timeout=4, grace_period=60))
        shutdown.lifecycle.cleanup_task("flush", timeout=20)(lambda: None)
        with pytest.raises(WorkerRefused, match="graceful_timeout"):
            shutdown.start()

    def test_a_budget_the_apps_hooks_break_refuses_the_worker_in_one_line(self, master: Master) -> None:
        """A cleanup task registered by the app that cannot fit the grace period: the worker's boot is refused."""
        shutdown = worker_of(FakeWorker(), master, Config(shutdown_delay=5, drain_timeout=4, grace_period=20))
        shutdown.lifecycle.cleanup_task("flush", timeout=15)(lambda: None)
        with pytest.raises(WorkerRefused, match=r"^graceful: graceful shutdown does not fit GRACEFUL_GRACE_PERIOD"):
            shutdown.start()

    def test_an_asgi_app_is_refused_in_one_line(self, master: Master) -> None:
        """An ASGI app under a WSGI worker class stops the worker's boot in one line, the app left unwrapped."""

        async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
            raise AssertionError("never called")

        fake = FakeWorker(app=asgi_app)
        shutdown = worker_of(fake, master)
        with pytest.raises(WorkerRefused) as refused:
            shutdown.start()
        assert str(refused.value) == (
            "graceful: the app is an ASGI app, but Gunicorn's sync worker class serves WSGI apps (every request"
            " would get a 500): use -k asgi or -k uvicorn_worker.UvicornWorker, or graceful serve module:app"
        )
        assert fake.wsgi is asgi_app

    def test_a_wsgi_app_under_an_asgi_worker_class_is_refused_in_one_line(self) -> None:
        """A WSGI app under -k asgi or a Uvicorn worker stops the boot in one line; each kind's own app passes."""

        def wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
            return []

        async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
            return None

        for kind in ("asgi", "uvicorn"):
            assert app_kind_refusal(wsgi_app, kind) == (
                f"graceful: the app is a WSGI app, but the {kind} worker class serves ASGI apps (every request would"
                " get a 500): use -k gthread, sync or gevent"
            )
            assert app_kind_refusal(asgi_app, kind) is None
        assert app_kind_refusal(wsgi_app, "gthread") is None

    def test_the_masters_facts_reach_the_worker(self, master: Master) -> None:
        """The master's ShutdownInitiated and NotAcceptingNewRequests become the worker's, in that order."""
        shutdown = booted(FakeWorker(), master)
        lifecycle = shutdown.lifecycle
        master.fire(Kind.SHUTDOWN_INITIATED)
        assert lifecycle.shutdown_initiated.wait(SOON)
        assert not lifecycle.not_accepting_new_requests.is_set()
        master.fire(Kind.NOT_ACCEPTING)
        assert lifecycle.not_accepting_new_requests.wait(SOON)

    def test_the_worker_takes_the_masters_times_and_logs_no_copy(
        self, master: Master, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The worker's signals carry the master's times, marked learned; the master's line is not logged again."""
        shutdown = booted(FakeWorker(), master)
        lifecycle = shutdown.lifecycle
        with caplog.at_level(logging.INFO, logger="graceful"):
            master.channel.fire(Kind.SHUTDOWN_INITIATED, 1234.5)
            master.channel.fire(Kind.NOT_ACCEPTING, 1239.5)
            assert lifecycle.not_accepting_new_requests.wait(SOON)
        assert lifecycle.shutdown_initiated.fired_at == 1234.5 and lifecycle.shutdown_initiated.learned
        assert lifecycle.not_accepting_new_requests.fired_at == 1239.5
        assert lifecycle.stats.shutdown_at == 1234.5  # the worker's arrivals count from the server's T0
        assert "ShutdownInitiated" not in caplog.text and "NotAcceptingNewRequests" not in caplog.text


class TestInFlightReports:
    def test_each_changed_count_of_the_shutdown_goes_to_the_master(self, master: Master) -> None:
        """At each sample of its shutdown the worker tells the master its in-flight count, when it changed."""
        shutdown = worker_of(FakeWorker(), master)
        lifecycle = shutdown.lifecycle
        assert lifecycle.on_sample is not None
        sent: list[bytes] = []
        send = shutdown.channel.send

        def recorded(kind: Kind, payload: bytes = b"", *, timeout: float | None = None) -> bool:
            sent.append(payload)
            return send(kind, payload, timeout=timeout)

        shutdown.channel.send = recorded  # type: ignore[method-assign]
        for count in (2, 2, 1, 1, 0):  # the sampler's reads
            lifecycle.on_sample(count)
        assert sent == [b"2", b"1", b"0"]
        ends: list[bytes] = []
        master.channel.on_close(lambda _pid, latest: ends.append(latest[Kind.IN_FLIGHT].payload))
        master.worker_end.close()
        master.channel.parts(SOON)
        assert ends == [b"0"]  # the master keeps the latest


class TestPreRequest:
    def test_connection_close_from_shutdown_initiated(self, master: Master) -> None:
        """Responses keep their connection until ShutdownInitiated, then ask the client to close it."""
        shutdown = booted(FakeWorker(), master)
        before, after = Request(), Request()
        shutdown.before_request(before)
        master.fire(Kind.SHUTDOWN_INITIATED)
        assert shutdown.lifecycle.shutdown_initiated.wait(SOON)
        shutdown.before_request(after)
        assert not before.closed and after.closed

    def test_the_request_that_reaches_max_requests_starts_a_process_stop(
        self, master: Master, caplog: pytest.LogCaptureFixture
    ) -> None:
        """sync: the request that reaches max_requests starts the worker's stop, as 'recycled'."""
        fake = FakeWorker(max_requests=3)
        shutdown = booted(fake, master)
        fake.served = 2
        with caplog.at_level(logging.INFO, logger="graceful"):
            shutdown.before_request(Request())
        assert shutdown.stopping and shutdown.stop.reason is StopReason.RECYCLED
        assert f"worker {os.getpid()} stopping (recycled)" in caplog.text

    def test_without_a_limit_nothing_is_watched_until_shutdown_initiated(self, master: Master) -> None:
        """No max_requests: pre_request is one attribute look until ShutdownInitiated, which takes it down."""
        shutdown = booted(FakeWorker(max_requests=sys.maxsize), master)
        assert shutdown.requests_unwatched
        master.fire(Kind.SHUTDOWN_INITIATED)
        assert shutdown.lifecycle.shutdown_initiated.wait(SOON)
        assert not shutdown.requests_unwatched

    def test_a_process_stop_takes_the_unwatched_path_down(self, master: Master) -> None:
        """No max_requests, a process stop (HUP, TTOU): responses from its start get Connection: close."""
        shutdown = booted(FakeWorker(max_requests=sys.maxsize), master)
        assert shutdown.requests_unwatched
        shutdown.stop.begin(StopReason.RECYCLED)
        request = Request()
        shutdown.before_request(request)
        assert not shutdown.requests_unwatched and request.closed

    def test_a_max_requests_limit_watches_every_request(self, master: Master) -> None:
        """With max_requests every request is counted: never the unwatched path."""
        shutdown = booted(FakeWorker(max_requests=3), master)
        assert not shutdown.requests_unwatched


class TestExit:
    def test_the_servers_stop_drains_cleans_up_and_leaves_its_part(self, master: Master) -> None:
        """The master's shutdown: the worker's cleanup runs once and its part is left for the master's record."""
        fake = FakeWorker()
        shutdown = booted(fake, master)
        ran = cleanup_log(shutdown.lifecycle)
        master.fire(Kind.SHUTDOWN_INITIATED)
        assert shutdown.lifecycle.shutdown_initiated.wait(SOON)
        signal_this_process(signal.SIGTERM)  # the master's TERM
        assert fake.left_loop.wait(SOON)
        shutdown.exit()
        assert ran == ["close-pool"]
        assert shutdown.lifecycle.cleanup_finished.is_set()
        assert [part.pid for part in master.parts()] == [os.getpid()]

    def test_the_last_step_spares_gunicorns_exit_the_final_collections(self, master: Master) -> None:
        """After the cleanup and the part, the heap is frozen: the interpreter's exit next skips collecting it."""
        fake = FakeWorker()
        shutdown = booted(fake, master)
        ran = cleanup_log(shutdown.lifecycle)
        master.fire(Kind.SHUTDOWN_INITIATED)
        signal_this_process(signal.SIGTERM)
        assert fake.left_loop.wait(SOON)
        assert gc.get_freeze_count() == 0
        shutdown.exit()
        assert gc.get_freeze_count() > 0
        assert ran == ["close-pool"] and len(master.parts()) == 1

    @pytest.mark.parametrize("kind", ["sync", "gthread"])
    def test_requests_in_flight_at_the_term_are_the_ones_drained(self, master: Master, kind: str) -> None:
        """Three requests running at the TERM, served before worker_exit (as Gunicorn does): the part says drained 3."""
        entered, release = threading.Barrier(4, timeout=SOON), threading.Event()

        def slow(environ: dict[str, object], start_response: Any) -> list[bytes]:
            entered.wait()
            release.wait(SOON)
            start_response("200 OK", [])
            return [b"done"]

        gthread = FakeGthreadLoop() if kind == "gthread" else None
        fake = FakeWorker(kind, app=slow, gthread=gthread)
        shutdown = booted(fake, master)
        requests = [threading.Thread(target=serve, args=(fake.wsgi,)) for _ in range(3)]
        for request in requests:
            request.start()
        entered.wait()  # all three are in the app
        master.fire(Kind.SHUTDOWN_INITIATED)
        signal_this_process(signal.SIGTERM)
        assert fake.left_loop.wait(SOON)
        began = wait_for(lambda: shutdown.lifecycle.stats.drain is not None)
        assert began
        release.set()
        for request in requests:
            request.join(SOON)
        shutdown.exit()
        [part] = master.parts()
        assert (part.requests.drained, part.requests.abandoned) == (3, 0)

    @pytest.mark.parametrize(("reason", "text"), [(StopReason.RELOAD, "reload"), (StopReason.SCALE_IN, "scale-in")])
    def test_a_process_stop_says_why_and_touches_no_server_signal(
        self, master: Master, caplog: pytest.LogCaptureFixture, reason: StopReason, text: str
    ) -> None:
        """HUP or TTOU: the worker logs why it stops, drains and cleans up; no server signal, no part left."""
        fake = FakeWorker()
        shutdown = booted(fake, master)
        ran = cleanup_log(shutdown.lifecycle)
        master.channel.set_stop_reason(reason)  # the master sends it before its TERM
        with caplog.at_level(logging.INFO, logger="graceful"):
            signal_this_process(signal.SIGTERM)
            assert fake.left_loop.wait(SOON)
            shutdown.exit()
        pid = os.getpid()
        lines = [r.getMessage() for r in caplog.records if f"worker {pid} stop" in r.getMessage()]
        assert lines == [f"graceful: worker {pid} stopping ({text})", f"graceful: worker {pid} stopped ({text})"]
        assert ran == ["close-pool"]
        assert not shutdown.lifecycle.shutdown_initiated.is_set() and master.parts() == []

    def test_a_worker_killed_for_its_timeout_goes_straight_to_cleanup(
        self, master: Master, caplog: pytest.LogCaptureFixture
    ) -> None:
        """worker_abort (the master's SIGABRT after the worker's timeout): no drain wait, cleanup, reason 'timeout'."""
        shutdown = booted(FakeWorker(), master)
        ran = cleanup_log(shutdown.lifecycle)
        shutdown.abort()
        with caplog.at_level(logging.INFO, logger="graceful"):
            shutdown.exit()
        assert ran == ["close-pool"] and shutdown.stop.reason is StopReason.TIMEOUT
        assert f"worker {os.getpid()} stopping (timeout)" in caplog.text

    def test_a_worker_that_never_booted_only_cleans_up(self, master: Master) -> None:
        """A worker that failed before post_worker_init: its cleanup tasks run, nothing else."""
        shutdown = worker_of(FakeWorker(), master)
        ran = cleanup_log(shutdown.lifecycle)
        shutdown.exit()
        assert ran == ["close-pool"] and not shutdown.stopping

    def test_worker_exit_in_the_master_is_ignored(self, master: Master) -> None:
        """Gunicorn also calls worker_exit in the master: another pid than the worker's does nothing."""
        shutdown = booted(FakeWorker(), master)
        ran = cleanup_log(shutdown.lifecycle)
        shutdown.pid = os.getpid() + 1  # as seen from the master: the worker's pid is not its own
        shutdown.exit()
        assert ran == []


class TestHttp2:
    def test_refused_streams_are_the_workers_rejections(self, master: Master) -> None:
        """A stream refused above GOAWAY's last-stream-id counts as a rejection (refused_stream) in the part."""
        fake = FakeWorker("gthread", gthread=FakeGthreadLoop(), http2=FakeServer())
        shutdown = booted(fake, master)
        master.fire(Kind.SHUTDOWN_INITIATED)
        assert shutdown.lifecycle.shutdown_initiated.wait(SOON)
        assert shutdown.stop.http2 is not None
        connection = shutdown.stop.http2.connection()
        connection.sent_final(1)
        assert [connection.accepts(stream) for stream in (1, 3, 5)] == [True, False, False]
        assert shutdown.lifecycle.stats.rejections()["refused_stream"] == 2
        signal_this_process(signal.SIGTERM)
        assert fake.left_loop.wait(SOON)
        shutdown.exit()
        [part] = master.parts()
        assert part.requests.rejected["refused_stream"] == 2


class TestGthread:
    def test_the_stop_waits_for_connections_then_hands_to_gunicorn(self, master: Master) -> None:
        """gthread: stop accepting, wait for the late accepts and open connections, then Gunicorn's own stop."""
        loop = FakeGthreadLoop(connections=0, max_requests=100)
        fake = FakeWorker("gthread", gthread=loop)
        shutdown = booted(fake, master)
        assert loop.calls == ["take over max_requests"]
        signal_this_process(signal.SIGTERM)
        assert fake.left_loop.wait(SOON)  # Gunicorn's handler runs only at the end of graceful's stop
        assert loop.calls == ["take over max_requests", "stop accepting", "late accepts", "bound drain", "wake"]
        shutdown.exit()

    def test_the_request_that_reaches_the_limit_closes_its_connection(self, master: Master) -> None:
        """gthread counts in pre_request: the request reaching max_requests gets Connection: close and stops it."""
        loop = FakeGthreadLoop(max_requests=2)
        shutdown = booted(FakeWorker("gthread", gthread=loop), master)
        first, second = Request(), Request()
        shutdown.before_request(first)
        shutdown.before_request(second)
        assert not first.closed and second.closed
        assert shutdown.stop.reason is StopReason.RECYCLED
