"""graceful.gunicorn.health in this process: the channel, the master's aggregation, ticks and the USR2 hand-over.

A stand-in arbiter (the attributes MasterHealth reads) replaces Gunicorn;
nothing forks here. tests/gunicorn/test_health_port.py runs the real thing.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.registry import READINESS_CHECK
from graceful.gunicorn.adapter.arbiter import ArbiterAdapter
from graceful.gunicorn.channel import Kind, MasterChannel, WorkerChannel
from graceful.gunicorn.health import (
    FD_ENV,
    HANDOFF_ENV,
    HEALTHPORT_CHECK,
    AddressState,
    MasterHealth,
    start_worker_health,
)
from graceful.gunicorn.metrics import WorkerMetrics
from graceful.healthport.address import HealthAddress
from graceful.healthport.snapshot import Snapshot
from graceful.http.health import CheckResult
from graceful.http.replies import NO_METRICS
from tests.healthport.helpers import get
from tests.metrics.helpers import figures, sample

SOON = 5.0
REJECTED = "graceful_requests_rejected_total"


class Cfg:
    def __init__(self, timeout: float = 30, bind: tuple[str, ...] = ("127.0.0.1:8000",)) -> None:
        self.timeout = timeout
        self.bind = list(bind)
        self.env_orig: dict[str, str] = {}


class Arbiter:
    """What MasterHealth uses of Gunicorn's arbiter; records the calls to the methods it wraps."""

    def __init__(self, **cfg: Any) -> None:
        self.cfg = Cfg(**cfg)
        self.WORKERS: dict[int, object] = {}
        self.reexec_pid = 0
        self.master_pid = 0
        self.calls: list[str] = []

    def murder_workers(self) -> None:
        self.calls.append("murder_workers")

    def reap_workers(self) -> None:
        self.calls.append("reap_workers")

    def reexec(self) -> None:
        self.calls.append("reexec")

    def stop(self, graceful: bool = True) -> None:
        self.calls.append(f"stop({graceful})")


def lifecycle_with(health_bind: str = "127.0.0.1:0") -> Lifecycle:
    return Lifecycle(Config(health_bind=health_bind, expose_check_errors=True))


#: The workers' ends of each test's channels, by (master's channel, pid).
_WORKERS: dict[tuple[int, int], WorkerChannel] = {}


@pytest.fixture
def made() -> Iterator[list[MasterHealth]]:
    """MasterHealth objects of a test; their ports and channels (both ends) are closed at the end."""
    built: list[MasterHealth] = []
    yield built
    for health in built:
        health.port.close()
        health.channel.close()
    for channel in _WORKERS.values():
        channel.close()
    _WORKERS.clear()


def create(made: list[MasterHealth], server: Arbiter, lifecycle: Lifecycle | None = None) -> MasterHealth:
    health = MasterHealth.create(ArbiterAdapter(server), lifecycle or lifecycle_with(), MasterChannel())
    assert health is not None
    made.append(health)
    return health


def worker(health: MasterHealth, pid: int) -> WorkerChannel:
    """Worker ``pid``'s end of its channel to ``health``'s master (one per pid and master)."""
    key = (id(health.channel), pid)
    if key not in _WORKERS:
        _WORKERS[key] = health.channel.connect(pid)
    return _WORKERS[key]


def send(health: MasterHealth, record: Snapshot, pid: int | None = None) -> None:
    """Worker ``pid`` (the record's own by default) sends ``record`` as its graceful-health thread does."""
    assert worker(health, record.pid if pid is None else pid).send(Kind.HEALTH, record.record())


def snapshot(pid: int, *, ready: bool = True, stopping: bool = False) -> Snapshot:
    return Snapshot(pid, stopping, (), (), (CheckResult("db", ready, None if ready else "down"),))


def probe(health: MasterHealth, path: str) -> tuple[int, str]:
    return get(health.port.listener, path, SOON)


def eventually(predicate: Any, timeout: float = SOON) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)  # probes within one client's budget
    return True


class TestCreate:
    """MasterHealth.create: off, refused addresses, binding at start-up."""

    def test_off_by_default(self) -> None:
        """Without GRACEFUL_HEALTH_BIND there is no health port."""
        assert MasterHealth.create(ArbiterAdapter(Arbiter()), Lifecycle(Config()), MasterChannel()) is None

    def test_gunicorns_own_port_is_refused(self) -> None:
        """The health port on one of Gunicorn's bind ports is a start-up error naming both."""
        with pytest.raises(RuntimeError) as caught:
            MasterHealth.create(
                ArbiterAdapter(Arbiter(bind=("0.0.0.0:8081",))), lifecycle_with("127.0.0.1:8081"), MasterChannel()
            )
        assert str(caught.value) == (
            "graceful: GRACEFUL_HEALTH_BIND='127.0.0.1:8081' is also in Gunicorn's bind '0.0.0.0:8081':"
            " give the health port a port of its own"
        )

    def test_an_address_that_cannot_be_bound_is_refused(self) -> None:
        """An address not of this machine stops start-up with the error."""
        with pytest.raises(RuntimeError, match=r"cannot listen on GRACEFUL_HEALTH_BIND='192\.0\.2\.1:8081'"):
            MasterHealth.create(ArbiterAdapter(Arbiter()), lifecycle_with("192.0.2.1:8081"), MasterChannel())

    def test_an_address_in_use_is_waited_for_with_the_workers_hook(self, made: list[MasterHealth]) -> None:
        """In use at start-up: no refusal; the workers inherit the readiness check healthport, which passes once
        the port's thread has bound the address."""
        holder = HealthAddress("127.0.0.1", 0).bind()
        try:
            lifecycle = lifecycle_with(f"127.0.0.1:{holder.getsockname()[1]}")
            health = create(made, Arbiter(), lifecycle)
            state = health.address_state
            assert state is not None and state.get() == AddressState.WAITING
            [check] = lifecycle.registry.hooks(READINESS_CHECK)
            assert check.name == HEALTHPORT_CHECK
            with pytest.raises(RuntimeError, match="waiting for its address"):
                check.fn()
            health.start()
            holder.close()
            assert eventually(lambda: state.get() == AddressState.BOUND)
            check.fn()  # passes
            assert probe(health, "/livez")[0] == 200
        finally:
            holder.close()

    def test_bound_at_once_no_hook(self, made: list[MasterHealth]) -> None:
        """A free address: nothing to wait for, no check."""
        lifecycle = lifecycle_with()
        assert create(made, Arbiter(), lifecycle).address_state is None
        assert lifecycle.registry.hooks(READINESS_CHECK) == []

    def test_giving_up_stops_the_server_as_a_sigterm(
        self, made: list[MasterHealth], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """At the bound the workers' checks say so and the server is asked to stop, as a first TERM does
        (no signal sent); not while it is stopping already."""
        stops: list[bool] = []
        holder = HealthAddress("127.0.0.1", 0).bind()
        try:
            address = f"127.0.0.1:{holder.getsockname()[1]}"
            lifecycle = lifecycle_with(address)
            stop = lambda: stops.append(True)  # noqa: E731
            health = MasterHealth.create(ArbiterAdapter(Arbiter()), lifecycle, MasterChannel(), stop_server=stop)
            assert health is not None
            made.append(health)
            state = health.address_state
            assert state is not None
            health._give_up()
            assert state.get() == AddressState.GAVE_UP and stops == [True]
            with pytest.raises(RuntimeError, match="stayed in use: the server is stopping"):
                state.check()
            health.lifecycle.initiate_shutdown()
            health._give_up()
            assert stops == [True]
        finally:
            holder.close()


class TestAggregation:
    """The latest record of each live worker; unknown pids dropped, gone workers forgotten."""

    def test_records_of_live_workers_only(self, made: list[MasterHealth]) -> None:
        """A record from a pid Gunicorn does not know is dropped; live ones are kept, the latest each."""
        server = Arbiter()
        server.WORKERS = {11: object(), 12: object()}
        health = create(made, server)
        for record in (snapshot(11, ready=False), snapshot(11), snapshot(99)):
            send(health, record)
        assert eventually(lambda: [s for s, _ in health.heard()] == [snapshot(11)])
        assert health.booting() == 1

    def test_gone_workers_are_forgotten(self, made: list[MasterHealth]) -> None:
        """A worker reaped by Gunicorn no longer counts."""
        server = Arbiter()
        server.WORKERS = {11: object()}
        health = create(made, server)
        send(health, snapshot(11))
        assert eventually(lambda: len(health.heard()) == 1)
        del server.WORKERS[11]
        assert health.heard() == [] and health.booting() == 0

    def test_a_closed_channel_is_a_gone_worker(self, made: list[MasterHealth]) -> None:
        """A worker whose channel reached end-of-file (it exited) no longer counts, before Gunicorn reaps it."""
        server = Arbiter()
        server.WORKERS = {11: object()}
        health = create(made, server)
        send(health, snapshot(11))
        assert eventually(lambda: len(health.heard()) == 1)
        worker(health, 11).close()
        assert eventually(lambda: health.heard() == [])

    def test_a_record_not_of_its_sender_is_refused_once(
        self, made: list[MasterHealth], caplog: pytest.LogCaptureFixture
    ) -> None:
        """Worker 11 sending worker 12's snapshot, or bytes that are no snapshot: refused, one warning per worker."""
        server = Arbiter()
        server.WORKERS = {11: object(), 12: object()}
        health = create(made, server)
        send(health, snapshot(12), pid=11)
        assert eventually(lambda: health.channel.latest(Kind.HEALTH) != [])
        assert health.heard() == []
        assert worker(health, 11).send(Kind.HEALTH, b"\x00\x05[[[[[")
        assert eventually(lambda: health.channel.latest(Kind.HEALTH)[0][1].payload.startswith(b"\x00"))
        assert health.heard() == []
        send(health, snapshot(12))
        assert eventually(lambda: [s for s, _ in health.heard()] == [snapshot(12)])
        assert len([r for r in caplog.records if "refusing worker 11's health record" in r.getMessage()]) == 1

    def test_answers_over_http(self, made: list[MasterHealth]) -> None:
        """Started, the port answers from the records: ready once one worker is, with a warn: for the other."""
        server = Arbiter()
        server.WORKERS = {11: object(), 12: object()}
        health = create(made, server)
        health.start()
        assert probe(health, "/readyz?verbose")[1].splitlines()[1] == (
            "[-]workers-ready failed: no ready worker (2 booting)"
        )
        send(health, snapshot(11, ready=False))
        send(health, snapshot(12))
        assert eventually(lambda: probe(health, "/readyz")[0] == 200)
        assert "warn: db failing in 1 of 2 workers" in probe(health, "/readyz?verbose")[1]

    def test_shutdown_of_the_server_not_of_an_old_master(self, made: list[MasterHealth]) -> None:
        """ShutdownInitiated fails readiness, unless a USR2 successor serves (then it is a process stop)."""
        server = Arbiter()
        lifecycle = lifecycle_with()
        health = create(made, server, lifecycle)
        lifecycle.initiate_shutdown()
        assert health.shutting_down()
        server.reexec_pid = 4321
        assert not health.shutting_down()


class TestMetrics:
    """/metrics on the master's port: its own snapshot, its workers' latest, what exited workers counted."""

    def test_the_masters_own_without_workers(self, made: list[MasterHealth]) -> None:
        """Without workers, /metrics is the master's lifecycle (its health-port probes)."""
        health = create(made, Arbiter())
        health.start()
        assert eventually(lambda: probe(health, "/livez")[0] == 200)
        status, body = probe(health, "/metrics")
        assert status == 200
        assert sample(figures(body), "graceful_healthchecks_total", name="ping", type="livez", status="success") >= 1

    def test_the_workers_latest_and_the_retained_total(self, made: list[MasterHealth]) -> None:
        """A live worker's latest counts; once its channel closes (it exited) its counters stay in the total."""
        server = Arbiter()
        server.WORKERS = {11: object()}
        health = create(made, server)
        health.start()
        lifecycle = Lifecycle(Config())
        lifecycle.stats.rejected("max_in_flight")
        WorkerMetrics(worker(health, 11), lifecycle).final()

        def rejected() -> float:
            return sample(figures(probe(health, "/metrics")[1]), REJECTED, reason="max_in_flight")

        assert eventually(lambda: rejected() == 1)
        worker(health, 11).close()
        del server.WORKERS[11]
        assert eventually(lambda: health.channel.latest(Kind.METRICS) == [])
        assert rejected() == 1

    def test_404_without_prometheus_client(
        self, made: list[MasterHealth], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Without prometheus_client: 404 with the install hint, one warning for several scrapes."""
        monkeypatch.setitem(sys.modules, "prometheus_client", None)
        monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
        monkeypatch.setattr("graceful.http.probes._missing_library_logged", [])
        health = create(made, Arbiter())
        health.start()
        assert [probe(health, "/metrics") for _ in range(2)] == [(404, NO_METRICS.decode())] * 2
        assert len([r for r in caplog.records if "/metrics answers 404" in r.getMessage()]) == 1


class TestTicks:
    """The master's loop is alive while its wrapped periodic calls run."""

    def test_wrappers_tick_then_call(self, made: list[MasterHealth]) -> None:
        """murder_workers and reap_workers still run, and each call resets master_idle."""
        server = Arbiter()
        health = create(made, server)
        health.start()
        time.sleep(0.2)
        assert health.master_idle() >= 0.2
        server.murder_workers()
        assert health.master_idle() < 0.2
        time.sleep(0.2)
        server.reap_workers()
        assert health.master_idle() < 0.2
        assert server.calls == ["murder_workers", "reap_workers"]


class TestHandOver:
    """USR2: the old master hands the port to its re-exec child; the child waits passive until then."""

    def test_nothing_to_hand_over_without_a_successor(self, made: list[MasterHealth]) -> None:
        """ShutdownInitiated or stop() without a USR2 child keeps the port answering."""
        server = Arbiter()
        lifecycle = lifecycle_with()
        health = create(made, server, lifecycle)
        health.start()
        lifecycle.initiate_shutdown()
        server.stop()
        assert probe(health, "/livez")[0] == 200
        assert server.calls == ["stop(True)"]

    def test_pre_exec_names_the_listener_and_the_pipe(self, made: list[MasterHealth]) -> None:
        """pre_exec puts both descriptors, inheritable, in the new master's environment."""
        server = Arbiter()
        server.cfg.env_orig = {FD_ENV: "stale", HANDOFF_ENV: "stale", "PATH": "/bin"}
        health = create(made, server)
        health.pre_exec()
        assert health.port.listener is not None
        env = server.cfg.env_orig
        assert env[FD_ENV] == str(health.port.listener.fileno()) and env["PATH"] == "/bin"
        assert os.get_inheritable(int(env[FD_ENV])) and os.get_inheritable(int(env[HANDOFF_ENV]))

    def test_the_new_master_waits_then_answers(
        self, made: list[MasterHealth], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A re-exec'd master adopts the socket, queues probes while the old one serves, answers after its TERM."""
        old_server = Arbiter()
        old_lifecycle = lifecycle_with()
        old = create(made, old_server, old_lifecycle)
        old.start()
        old_server.reexec_pid = 4321
        old_server.reexec()
        old.pre_exec()
        env = old_server.cfg.env_orig
        # The exec'd master gets copies of the two descriptors (here: duplicates, as exec would keep them).
        monkeypatch.setenv(FD_ENV, str(os.dup(int(env[FD_ENV]))))
        monkeypatch.setenv(HANDOFF_ENV, str(os.dup(int(env[HANDOFF_ENV]))))
        new_server = Arbiter()
        new_server.master_pid = os.getpid()
        new_server.WORKERS = {21: object()}
        caplog.set_level(logging.INFO, logger="graceful.gunicorn.health")
        new = create(made, new_server)
        new.start()
        assert FD_ENV not in os.environ and HANDOFF_ENV not in os.environ
        assert old.port.listener is not None and new.port.listener is not None
        assert new.port.listener.getsockname() == old.port.listener.getsockname()
        send(new, snapshot(21))
        assert probe(new, "/livez")[0] == 200
        assert (old.port.stats.answered, new.port.stats.accepted) == (1, 0)  # the old master answered it
        old_lifecycle.initiate_shutdown()  # its TERM: hand over
        assert eventually(lambda: old.port.listener is None)
        assert eventually(lambda: probe(new, "/readyz")[0] == 200)  # the new master, with its own worker
        assert new.port.stats.answered >= 1 and old.port.stats.answered == 1
        messages = [r.getMessage() for r in caplog.records]
        assert any("handed to the new master (pid 4321)" in m for m in messages)
        assert any("the old master stopped serving the health port" in m for m in messages)
        assert old_server.calls == ["reexec"]

    def test_a_stale_descriptor_is_not_adopted(
        self, made: list[MasterHealth], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A descriptor that is no listener on the address is refused with a warning; the port binds anew."""
        read_end, write_end = os.pipe()
        monkeypatch.setenv(FD_ENV, str(read_end))
        monkeypatch.setenv(HANDOFF_ENV, str(write_end))
        server = Arbiter()
        server.master_pid = os.getpid()
        with caplog.at_level(logging.WARNING, logger="graceful.gunicorn.health"):
            health = create(made, server)
        health.start()
        assert any("not taking over the old master's health port" in r.getMessage() for r in caplog.records)
        assert probe(health, "/livez")[0] == 200
        os.close(write_end)


def no_health_port() -> Any:
    """A worker's shutdown part whose master has no health port."""
    return SimpleNamespace(health_port=False, worker=None)


class TestWorkerSide:
    """start_worker_health in a worker with the port off."""

    def test_a_setting_only_the_worker_sees_is_a_warning(self, caplog: pytest.LogCaptureFixture) -> None:
        """GRACEFUL_HEALTH_BIND from app.config reaches only the worker: a warning says where to set it."""
        with caplog.at_level(logging.WARNING, logger="graceful.gunicorn.health"):
            assert start_worker_health(no_health_port(), lifecycle_with("0.0.0.0:8081")) is None
        assert any("reads it from the environment" in r.getMessage() for r in caplog.records)

    def test_off_everywhere_is_silent(self, caplog: pytest.LogCaptureFixture) -> None:
        """With the port off in the worker too, nothing starts and nothing is logged."""
        with caplog.at_level(logging.WARNING, logger="graceful.gunicorn.health"):
            assert start_worker_health(no_health_port(), Lifecycle(Config())) is None
        assert caplog.records == []
