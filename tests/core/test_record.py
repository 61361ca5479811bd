"""Tests for graceful.core.record: each process's part, the server's record, its summary and its JSON."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from graceful.core.clock import Waitable
from graceful.core.config import Config
from graceful.core.delay import DelayEnd, DelayOutcome
from graceful.core.lifecycle import Lifecycle
from graceful.core.record import (
    MAX_MESSAGE_BYTES,
    ROLE_SERVER,
    ROLE_WORKER,
    HookEntry,
    ProcessPart,
    RecordError,
    RequestFigures,
    SampleSeries,
    ShutdownRecord,
    part_of,
    record_of,
)
from graceful.core.role import Role
from graceful.core.stats import END_KILLED, END_NO_PART, END_SIGNAL, END_STATUS, ProcessEnd
from graceful.testing import FakeClock, run_shutdown

VERSION = "9.9.9"


def served_lifecycle(**config: Any) -> Lifecycle:
    """A lifecycle on a fake clock that ran a whole shutdown with a hook, a task and some traffic.

    One request is in flight when the drain begins; it ends as the drain starts to wait for it
    (the clock's first wait once the wait group waits), so the drain counts it, with no real time
    given to a thread to end it.
    """
    clock = FakeClock()
    lc = Lifecycle(Config(**{"shutdown_delay": 4, **config}), clock=clock)
    lc.pre_shutdown_hook("deregister")(lambda: None)
    lc.cleanup_task("flush")(lambda: None)
    lc.server, lc.worker_class = "graceful serve", "threads"
    release = lc.in_flight.add()
    lc.initiate_shutdown()
    lc.stats.arrived(stopped=False)
    lc.stats.arrived(stopped=False)
    lc.stats.rejected("max_in_flight")
    wait_on_clock = clock.wait

    def wait_ending_the_request_once_draining(event: Waitable, timeout: float) -> bool:
        if lc.in_flight.waiting:
            release()  # later calls do nothing
        return wait_on_clock(event, timeout)

    clock.wait = wait_ending_the_request_once_draining  # type: ignore[method-assign]
    lc.request_shutdown()
    assert lc.cleanup_finished.event.wait(30)
    return lc


def server_record(lc: Lifecycle) -> ShutdownRecord:
    return record_of(lc, [part_of(lc, 1234)], VERSION)


def part(pid: int, role: str, t0: float, **changes: Any) -> ProcessPart:
    """A hand-made part: signals, one hook, some requests and samples, all in s since its own t0."""
    base = ProcessPart(
        pid=pid,
        role=role,
        t0=t0,
        signals={"ShutdownInitiated": 0.0, "InFlightRequestsDrained": 6.0, "CleanupFinished": 6.5},
        hooks=(HookEntry("cleanup task", "flush", pid, "ok", 6.0, 0.5),),
        requests=RequestFigures(
            drained=2,
            drain_seconds=1.0,
            arrived={"delay": 10, "draining": 1},
            last_arrival=4.5,
            late_from=4.5,
            late=1,
            rejected={"shutting_down": 0, "draining": 1, "max_in_flight": 0, "refused_stream": 2},
        ),
        samples=SampleSeries(t=(0.0, 1.0, 6.5), in_flight=(1, 3, 0), arrived=(0, 5, 11), rejected=(0, 0, 1)),
        longest_pre_shutdown_hook=0.0,
        longest_cleanup_task=2.0,
    )
    return dataclasses.replace(base, **changes)


class TestPartOf:
    def test_one_process_part(self) -> None:
        """A process's part has its signals, hooks with pid and start, drain, arrivals, rejections and samples."""
        lc = served_lifecycle()
        own = part_of(lc, 1234)
        assert own.t0 == lc.shutdown_initiated.fired_at
        assert own.signals["ShutdownInitiated"] == 0.0
        assert own.signals["AfterShutdownDelayDuration"] == 4.0
        assert "HasBeenReady" not in own.signals
        assert [(h.kind, h.name, h.pid, h.outcome) for h in own.hooks] == [
            ("pre-shutdown hook", "deregister", 1234, "ok"),
            ("cleanup task", "flush", 1234, "ok"),
        ]
        assert own.hooks[0].started == 0.0
        assert own.requests.drained == 1
        assert own.requests.abandoned == 0
        assert own.requests.arrived == {"delay": 2, "draining": 0}
        assert own.requests.rejected["max_in_flight"] == 1
        assert own.samples.t[0] == 0.0
        assert own.samples.t[-1] == own.signals["CleanupFinished"]

    def test_a_process_that_never_began_a_shutdown_has_no_part(self) -> None:
        """part_of refuses a lifecycle that neither began a shutdown nor drained."""
        with pytest.raises(ValueError, match="never began a shutdown"):
            part_of(Lifecycle(Config(), clock=FakeClock(), role=Role.WORKER), 1)

    def test_a_recycled_worker_is_measured_from_its_drain(self) -> None:
        """A worker stopped without ShutdownInitiated (recycled) has a part timed from its drain."""
        lc = Lifecycle(Config(), clock=FakeClock(), role=Role.WORKER)
        lc.drain_and_clean_up()
        own = part_of(lc, 7)
        assert own.t0 == lc.stats.drain.started_at  # type: ignore[union-attr]
        assert "ShutdownInitiated" not in own.signals

    @pytest.mark.parametrize(
        ("become", "named"),
        [
            (lambda lc: None, "server"),
            (lambda lc: lc.become_master("gunicorn", "sync"), "master"),
            (lambda lc: lc.become_worker("a worker"), "worker"),
        ],
        ids=["graceful-serve", "gunicorn-master", "gunicorn-worker"],
    )
    def test_the_part_names_the_lifecycles_role(self, become: Callable[[Lifecycle], None], named: str) -> None:
        """A part's role is its lifecycle's: graceful serve's says server, a master's master, a worker's
        worker, in the JSON as graceful 0.2 wrote it, and read back the same."""
        lc = Lifecycle(Config(shutdown_delay=0), clock=FakeClock())
        become(lc)
        run_shutdown(lc)
        own = part_of(lc, 7)
        data = json.loads(json.dumps(own.to_json()))
        assert (own.role, data["role"], ProcessPart.read(data).role) == (named, named, named)


class TestRecordOf:
    def test_one_process_server(self) -> None:
        """graceful serve: the record is its one part, with the config, the budget used and the totals."""
        lc = served_lifecycle()
        record = server_record(lc)
        assert (record.server, record.worker_class, record.pid, record.version) == (
            "graceful serve",
            "threads",
            1234,
            VERSION,
        )
        assert record.duration == record.signals["CleanupFinished"]
        assert record.config["shutdown_delay"] == 4.0
        assert record.budget["total"] == lc.budget().total
        assert record.budget["used_s"] == record.duration
        assert record.budget["used_share"] == pytest.approx(record.duration / 30, abs=1e-6)
        assert record.requests.arrived == {"delay": 2, "draining": 0}
        assert record.ok
        assert [p.role for p in record.parts] == [ROLE_SERVER]

    def test_gunicorn_master_and_two_workers(self) -> None:
        """The master's record sums its workers' parts, moved onto its own ShutdownInitiated."""
        lc = Lifecycle(Config(shutdown_delay=4), clock=FakeClock())
        lc.role = Role.MASTER
        run_shutdown(lc)
        master = part_of(lc, 100)
        t0 = master.t0
        first = part(101, ROLE_WORKER, t0 + 0.01)
        second = part(102, ROLE_WORKER, t0 + 0.02, signals={"ShutdownInitiated": 0.0, "InFlightRequestsDrained": 7.0})
        record = record_of(lc, [master, first, second], VERSION)
        assert [p.pid for p in record.parts] == [100, 101, 102]
        assert record.parts[2].offset == pytest.approx(0.02)
        assert record.signals["InFlightRequestsDrained"] == pytest.approx(7.02)
        assert record.signals["NotAcceptingNewRequests"] == master.signals["NotAcceptingNewRequests"]
        assert record.requests.drained == 4
        assert record.requests.arrived == {"delay": 20, "draining": 2}
        assert record.requests.rejected["draining"] == 2
        assert record.requests.last_arrival == pytest.approx(4.52)
        assert record.requests.late_from == pytest.approx(4.51)
        assert [(h.pid, h.started) for h in record.hooks] == [(101, pytest.approx(6.01)), (102, pytest.approx(6.02))]
        assert record.budget["longest_cleanup_task"] == 2.0
        # Samples: both workers summed on a common grid from 0.01 s, every 0.05 s.
        assert record.samples.at(0.01) == (1, 0, 0)  # only the first worker has begun
        assert record.samples.at(0.1) == (2, 0, 0)
        assert record.samples.at(1.1) == (6, 10, 0)
        assert record.samples.at(6.52)[1:] == (22, 2)

    def test_a_record_needs_the_server_part(self) -> None:
        """record_of with no parts is an error."""
        with pytest.raises(ValueError):
            record_of(Lifecycle(Config()), [], VERSION)


class TestSummary:
    def test_clean_shutdown(self) -> None:
        """A clean shutdown's paragraph: the duration, the delay, hooks, drain, tasks and the arrivals."""
        record = server_record(served_lifecycle())
        summary = record.summary()
        assert summary.startswith(f"graceful: clean shutdown in {record.duration:.1f} s (delay 4 s;")
        assert "1 pre-shutdown hook ok; drained 1 request in" in summary
        assert "0 abandoned; 1 cleanup task ok)" in summary
        assert "; 2 requests arrived during the delay, the last at 0.0 s; rejected: 1 max_in_flight" in summary

    def test_problems_are_named(self) -> None:
        """A timed-out hook and an abandoned request make it a shutdown with problems, naming the hook."""
        lc = Lifecycle(Config(shutdown_delay=0, drain_timeout=2), clock=FakeClock())
        hang = threading.Event()
        lc.pre_shutdown_hook("deregister", timeout=1)(lambda: hang.wait(10))
        lc.in_flight.add()
        run_shutdown(lc)
        hang.set()
        summary = server_record(lc).summary()
        assert summary.startswith("graceful: shutdown with problems in ")
        assert "1 pre-shutdown hook: 0 ok, 1 timed out (deregister)" in summary
        assert "drained 1 request in 2.0 s, 1 abandoned" in summary
        assert "no cleanup tasks" in summary

    def test_late_traffic_says_to_raise_the_delay(self) -> None:
        """Late arrivals end the paragraph with the advice."""
        lc = served_lifecycle()
        lc.stats.begin(lc.stats.shutdown_at or 0.0, 0)  # every arrival from now on is late
        lc.stats.arrived(stopped=False)
        summary = server_record(lc).summary()
        assert summary.endswith(
            "1 request in the last tenth of the delay: it looks too short, raise GRACEFUL_SHUTDOWN_DELAY"
        )

    def test_at_most_4096_bytes(self) -> None:
        """However many hooks fail with long names, the summary stays within Kubernetes' 4 KB, cut on a character."""
        hooks = tuple(HookEntry("cleanup task", f"tâche-{i}-" + "x" * 200, 1, "failed", 0.0, 0.1) for i in range(60))
        record = dataclasses.replace(server_record(served_lifecycle()), hooks=hooks)
        summary = record.summary()
        assert len(summary.encode("utf-8")) <= MAX_MESSAGE_BYTES
        assert summary.endswith("...")


class TestJson:
    def test_round_trip(self) -> None:
        """to_json then from_json gives the same record (times to the microsecond)."""
        record = server_record(served_lifecycle())
        again = ShutdownRecord.from_json(json.loads(json.dumps(record.to_json())))
        assert again.to_json() == record.to_json()

    def test_part_round_trip(self) -> None:
        """A worker's part survives its trip to the master."""
        original = part(5, ROLE_WORKER, 10.0)
        assert ProcessPart.read(json.loads(json.dumps(original.to_json()))) == original

    def test_a_part_from_before_http2_refusals_reads_them_as_0(self) -> None:
        """A part (or record) written before graceful 0.3 has no refused_stream: it reads as 0; others stay required."""
        data = json.loads(json.dumps(part(5, ROLE_WORKER, 10.0).to_json()))
        del data["requests"]["rejected"]["refused_stream"]
        assert ProcessPart.read(data).requests.rejected["refused_stream"] == 0
        del data["requests"]["rejected"]["draining"]
        with pytest.raises(RecordError, match=r"requests\.rejected\.draining: missing"):
            ProcessPart.read(data)

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda d: d.update(format=2), "record.format: expected 1"),
            (lambda d: d.pop("signals"), "record.signals: missing"),
            (lambda d: d.update(duration_s="long"), "record.duration_s: expected a number, got a string"),
            (lambda d: d.update(duration_s=-1), "record.duration_s: expected a number from 0"),
            (lambda d: d["hooks"].append(7), r"record.hooks\[2\]: expected a JSON object, got int"),
            (lambda d: d["hooks"][0].update(pid=True), r"record.hooks\[0\].pid: expected a whole number"),
            (lambda d: d["samples"]["t_s"].append(99), "record.samples.t_s: the sample series differ in length"),
            (lambda d: d["samples"].update(t_s=d["samples"]["t_s"][::-1]), "sample times go backwards"),
            (lambda d: d["parts"][0].update(role="boss"), r"record.parts\[0\].role: expected one of"),
            (lambda d: d["requests"]["rejected"].pop("draining"), "record.requests.rejected.draining: missing"),
        ],
    )
    def test_refuses_what_is_not_a_record(self, change: Any, message: str) -> None:
        """from_json names the first field that is wrong."""
        data = json.loads(json.dumps(server_record(served_lifecycle()).to_json()))
        change(data)
        with pytest.raises(RecordError, match=message):
            ShutdownRecord.from_json(data)

    def test_refuses_a_list(self) -> None:
        """A JSON list is not a record."""
        with pytest.raises(RecordError, match="record: expected a JSON object, got a list"):
            ShutdownRecord.from_json([])


class TestSampleSeries:
    def test_value_at_a_moment(self) -> None:
        """The last sample at or before the moment; nothing in flight before the first or after the last."""
        series = SampleSeries(t=(1.0, 2.0), in_flight=(4, 2), arrived=(1, 3), rejected=(0, 1))
        assert series.at(0.5) == (0, 0, 0)
        assert series.at(1.5) == (4, 1, 0)
        assert series.at(2.0) == (2, 3, 1)
        assert series.at(9.0) == (0, 3, 1)

    def test_a_long_span_is_bounded(self) -> None:
        """Summing series over a very long span keeps at most 100,000 points."""
        series = SampleSeries(t=(0.0, 1e6), in_flight=(1, 1), arrived=(0, 1), rejected=(0, 0))
        total = SampleSeries.total([series])
        assert len(total.t) <= 100_001
        assert total.t[-1] == 1e6


class TestDelayEnd:
    QUIET = DelayOutcome(DelayEnd.QUIET, 2.7, 1.7, 1.0, 1.0, 30)
    MAXIMUM = DelayOutcome(DelayEnd.MAXIMUM, 30, 29.8, 1.0, 1.0, 30)

    def test_the_record_carries_how_the_delay_ended(self) -> None:
        """record_of takes the lifecycle's delay outcome: a fixed delay says fixed."""
        record = server_record(served_lifecycle())
        assert record.delay is not None
        assert (record.delay.end, record.delay.ended_at) == (DelayEnd.FIXED, 4)
        assert record.to_json()["delay"]["text"].startswith("the fixed 4 s delay")

    def test_summary_says_why_an_adaptive_delay_ended(self) -> None:
        """The paragraph names the quiet (or the maximum) instead of a fixed length."""
        record = dataclasses.replace(server_record(served_lifecycle()), delay=self.QUIET)
        assert "(delay 2.7 s of 4 s at most: quiet for 1.0 s after the last arrival at 1.7 s;" in record.summary()
        record = dataclasses.replace(record, delay=self.MAXIMUM)
        assert "traffic still arriving, the last at 29.8 s: a load balancer still routes here;" in record.summary()

    def test_no_advice_to_raise_the_delay_after_a_quiet_end(self) -> None:
        """Late arrivals after an adaptive delay that ended on quiet do not call it too short."""
        lc = served_lifecycle()
        lc.stats.begin(lc.stats.shutdown_at or 0.0, 0)  # every arrival from now on is late
        lc.stats.arrived(stopped=False)
        record = server_record(lc)
        assert "raise GRACEFUL_SHUTDOWN_DELAY" in record.summary()
        assert "raise GRACEFUL_SHUTDOWN_DELAY" not in dataclasses.replace(record, delay=self.QUIET).summary()
        assert "raise GRACEFUL_SHUTDOWN_DELAY" in dataclasses.replace(record, delay=self.MAXIMUM).summary()

    def test_round_trip_and_absent(self) -> None:
        """The delay survives JSON; a record without it (older, or null) reads as unknown."""
        record = dataclasses.replace(server_record(served_lifecycle()), delay=self.QUIET)
        data = json.loads(json.dumps(record.to_json()))
        assert ShutdownRecord.from_json(data).delay == self.QUIET
        del data["delay"]
        assert ShutdownRecord.from_json(data).delay is None

    def test_refuses_an_unknown_end(self) -> None:
        """A delay that ended for no known reason is not a record's: the field is named."""
        data = dataclasses.replace(server_record(served_lifecycle()), delay=self.QUIET).to_json()
        data["delay"]["end"] = "bored"
        with pytest.raises(
            RecordError, match=r"record\.delay\.end: expected one of fixed, quiet, maximum, got 'bored'"
        ):
            ShutdownRecord.from_json(data)

    def test_adaptive_settings_in_the_config(self) -> None:
        """The floor and a set quiet period are in the record's config; unset ones are not."""
        lc = Lifecycle(Config(shutdown_delay_min=0, quiet_period=0.2, shutdown_delay=1), clock=FakeClock(settle=0.002))
        lc.last_arrival = lambda: None
        run_shutdown(lc)
        record = server_record(lc)
        assert (record.config["shutdown_delay_min"], record.config["quiet_period"]) == (0.0, 0.2)
        assert record.delay is not None and record.delay.end is DelayEnd.QUIET
        assert "shutdown_delay_min" not in server_record(served_lifecycle()).config


def master_with_ends(*ends: ProcessEnd) -> Lifecycle:
    """A Gunicorn master's lifecycle after a whole shutdown, whose workers ended as ``ends`` say."""
    lc = Lifecycle(Config(shutdown_delay=1), clock=FakeClock())
    lc.role = Role.MASTER
    run_shutdown(lc)
    t0 = lc.shutdown_initiated.fired_at
    assert t0 is not None
    for end in ends:
        lc.stats.process_ended(dataclasses.replace(end, at=t0 + end.at))
    return lc


class TestProcessesThatEndedAbnormally:
    def test_a_worker_killed_with_requests_in_flight_makes_them_lost(self) -> None:
        """A worker SIGKILLed while stopping, 4 requests in flight at its last report: 4 lost, not ok, named."""
        lc = master_with_ends(ProcessEnd(41, END_SIGNAL, 1.5, signal="SIGKILL", in_flight=4))
        record = record_of(lc, [part_of(lc, 40), part(42, ROLE_WORKER, lc.shutdown_initiated.fired_at or 0.0)], VERSION)
        assert not record.ok
        assert record.requests.lost == 4 and record.requests.lost_unknown == 0
        summary = record.summary()
        assert summary.startswith("graceful: shutdown with problems in ")
        assert "drained 2 requests in 1.0 s, 0 abandoned, 4 lost;" in summary
        assert (
            "cleanup task ok); ended abnormally: worker 41 killed by SIGKILL without its part of the record while"
            " stopping: 4 requests in flight lost; 10 requests arrived during the delay" in summary
        )

    def test_each_cause_is_said_in_its_words(self) -> None:
        """Killed at graceful_timeout, a crash, gone without its part, replaced during the delay: each in its words."""
        lc = master_with_ends(
            ProcessEnd(41, END_KILLED, 3.0, signal="SIGKILL", in_flight=1),
            ProcessEnd(42, END_STATUS, 0.4, status=3, replaced=True),
            ProcessEnd(43, END_NO_PART, 2.0, status=0, in_flight=0),
            ProcessEnd(44, END_SIGNAL, 2.5, signal="SIGSEGV", part=True, in_flight=2),
        )
        record = record_of(lc, [part_of(lc, 40)], VERSION)
        assert [e.describe() for e in record.ended] == [
            "worker 41 killed by the master at graceful_timeout (SIGKILL) without its part of the record while"
            " stopping: 1 request in flight lost",
            "worker 42 exited with status 3 without its part of the record during the delay (replaced):"
            " its requests in flight are unknown (it never reported them)",
            "worker 43 exited without its part of the record while stopping: 0 requests in flight lost",
            "worker 44 killed by SIGSEGV while stopping",  # its part counts its requests
        ]
        assert (record.requests.lost, record.requests.lost_unknown) == (1, 1)
        assert "0 abandoned, 1 lost and an unknown number in 1 process;" in record.summary()
        assert not record.ok

    def test_the_record_names_them_in_json_and_reads_them_back(self) -> None:
        """The record's ``ended`` list (with each one's text) survives to_json and from_json."""
        lc = master_with_ends(ProcessEnd(41, END_KILLED, 3.0, signal="SIGKILL", in_flight=1))
        record = record_of(lc, [part_of(lc, 40)], VERSION)
        data = json.loads(json.dumps(record.to_json()))
        assert data["ok"] is False
        assert data["requests"]["lost"] == 1
        [ended] = data["ended"]
        assert ended == {
            "pid": 41,
            "role": "worker",
            "cause": "killed",
            "at_s": 3.0,
            "signal": "SIGKILL",
            "status": None,
            "in_flight": 1,
            "part": False,
            "replaced": False,
            "lost": 1,
            "text": record.ended[0].describe(),
        }
        assert ShutdownRecord.from_json(data).to_json() == record.to_json()

    def test_a_record_without_them_reads_as_none_ended(self) -> None:
        """A record written before graceful 0.3 has no ``ended`` nor ``lost``: read as none."""
        data = json.loads(json.dumps(server_record(served_lifecycle()).to_json()))
        del data["ended"], data["requests"]["lost"], data["requests"]["lost_unknown"]
        again = ShutdownRecord.from_json(data)
        assert again.ended == () and again.requests.lost == 0 and again.ok

    def test_an_unknown_cause_is_refused(self) -> None:
        """A cause that is none of graceful's is refused, naming the field."""
        lc = master_with_ends(ProcessEnd(41, END_KILLED, 3.0, signal="SIGKILL"))
        data = json.loads(json.dumps(record_of(lc, [part_of(lc, 40)], VERSION).to_json()))
        data["ended"][0]["cause"] = "gremlins"
        with pytest.raises(RecordError, match=r"ended\[0\]\.cause: expected one of signal, killed, status, no_part"):
            ShutdownRecord.from_json(data)


class TestLongLivedConnections:
    def test_the_record_counts_and_names_the_connections_told_to_leave(self) -> None:
        """Long-lived connections told to leave are in requests.left and the summary, with those told at the
        drain's deadline named; a shutdown that told none says nothing of them."""
        assert "to leave" not in server_record(served_lifecycle()).summary()
        lc = served_lifecycle()
        for kind, at_deadline in (("websocket", False), ("websocket", False), ("websocket", True), ("stream", False)):
            lc.stats.told_to_leave(kind, at_deadline=at_deadline)
        record = server_record(lc)
        assert record.requests.left == {"websocket": 3, "stream": 1, "at_deadline": 1}
        assert "; told 3 WebSockets and 1 stream to leave (1 at the drain's deadline)" in record.summary()
        data = json.loads(json.dumps(record.to_json()))
        assert data["requests"]["left"] == {"websocket": 3, "stream": 1, "at_deadline": 1}
        assert ShutdownRecord.from_json(data).requests.left == record.requests.left

    def test_a_record_without_them_reads_as_none_told(self) -> None:
        """A record written before the ASGI side has no requests.left: read as none told."""
        data = json.loads(json.dumps(server_record(served_lifecycle()).to_json()))
        del data["requests"]["left"]
        assert ShutdownRecord.from_json(data).requests.left == {"websocket": 0, "stream": 0, "at_deadline": 0}

    def test_the_workers_figures_add_up(self) -> None:
        """Merged, the processes' counts of connections told to leave are summed."""
        one = RequestFigures(left={"websocket": 2, "stream": 0, "at_deadline": 1})
        two = RequestFigures(left={"websocket": 1, "stream": 3, "at_deadline": 0})
        assert RequestFigures.total([one, two]).left == {"websocket": 3, "stream": 3, "at_deadline": 1}
