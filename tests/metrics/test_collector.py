"""Tests for graceful.metrics.collector: the Prometheus families after known traffic, parsed back."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from graceful import __version__
from graceful.core.clock import unix_time
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.stats import END_SIGNAL, ProcessEnd
from graceful.metrics import CONTENT_TYPE, GracefulCollector, MetricsUnavailable, merge, render_metrics
from graceful.metrics.snapshot import snapshot
from graceful.testing import FakeClock
from graceful.wsgi.middleware import GracefulMiddleware

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def hello(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def parse(text: bytes) -> Samples:
    """Every sample of Prometheus text as {(name, sorted labels): value}."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def request(mw: GracefulMiddleware, path: str = "/") -> tuple[int, Any]:
    """One GET through the middleware: the status code and the response (not yet closed)."""
    from werkzeug.test import EnvironBuilder

    status: list[str] = []
    result = mw(EnvironBuilder(path=path).get_environ(), lambda s, h, e=None: status.append(s))  # type: ignore[arg-type,misc]
    return int(status[0][:3]), result


def close(result: Any) -> None:
    b"".join(result)
    result.close()


class KnownTraffic:
    """A whole retry-after shutdown through a real middleware, with every kind of event once or more.

    Before the shutdown: a failing readiness check probed once, a max_in_flight rejection.
    During the delay: three requests (one of them still running at the end). A pre-shutdown
    hook that times out. After NotAcceptingNewRequests: three 429s. The drain abandons the
    running request. A worker it started was SIGKILLed with 3 requests in flight.
    """

    def __init__(self) -> None:
        self.hang = threading.Event()
        lc = self.lifecycle = Lifecycle(
            Config(send_retry_after=True, max_in_flight=1, shutdown_delay=1, drain_timeout=2), clock=FakeClock()
        )
        lc.server, lc.worker_class = "gunicorn", "gthread"
        lc.readiness_check("db")(lambda: False)
        lc.pre_shutdown_hook("deregister", timeout=1)(lambda: self.hang.wait(30))
        mw = GracefulMiddleware(hello, lc)
        assert request(mw, "/readyz")[0] == 503
        held_status, held = request(mw)
        assert held_status == 200
        assert request(mw)[0] == 429  # max_in_flight
        close(held)
        lc.initiate_shutdown()
        served = [request(mw) for _ in range(3)]
        assert [code for code, _ in served] == [200, 429, 429]  # one slot: the first holds it
        lc.run_until_not_accepting()
        assert [request(mw)[0] for _ in range(3)] == [429, 429, 429]  # retry-after
        lc.drain_and_clean_up()
        self.hang.set()
        lc.stats.process_ended(ProcessEnd(41, END_SIGNAL, 0.0, signal="SIGKILL", in_flight=3))


@pytest.fixture(scope="module")
def traffic() -> KnownTraffic:
    return KnownTraffic()


class TestFamilies:
    def test_every_value_after_known_traffic(self, traffic: KnownTraffic) -> None:
        """Parsed back with prometheus_client's parser, every family has the values the traffic made."""
        lc = traffic.lifecycle
        samples = parse(render_metrics(lc))
        assert samples[("graceful_requests_in_flight", ())] == 1
        rejected = {
            reason: samples[("graceful_requests_rejected_total", (("reason", reason),))]
            for reason in ("shutting_down", "draining", "max_in_flight")
        }
        # During the delay two of three were refused for max_in_flight (the first held the one slot).
        assert rejected == {"shutting_down": 3, "draining": 0, "max_in_flight": 3}
        assert samples[("graceful_requests_during_shutdown_total", (("phase", "delay"),))] == 3
        assert samples[("graceful_requests_during_shutdown_total", (("phase", "draining"),))] == 3
        for signal in lc.signals:
            key = ("graceful_lifecycle_signal_timestamp_seconds", (("signal", signal.name),))
            if signal.fired_at is None:
                assert key not in samples
            else:
                assert samples[key] == pytest.approx(unix_time(signal.fired_at))
        assert ("graceful_lifecycle_signal_timestamp_seconds", (("signal", "HasBeenReady"),)) not in samples
        hook = (("kind", "pre_shutdown_hook"), ("name", "deregister"))
        assert samples[("graceful_hook_duration_seconds", hook)] == 1.0
        assert samples[("graceful_hook_runs_total", (*hook[:2], ("outcome", "timed_out")))] == 1
        assert samples[("graceful_healthcheck", (("name", "db"), ("type", "readyz")))] == 0
        assert samples[("graceful_healthcheck", (("name", "shutdown"), ("type", "readyz")))] == 1

        def checks(name: str, status: str) -> float:
            return samples[("graceful_healthchecks_total", (("name", name), ("status", status), ("type", "readyz")))]

        assert (checks("db", "error"), checks("db", "success")) == (1, 0)
        assert (checks("ping", "success"), checks("ping", "error")) == (1, 0)
        assert samples[("graceful_drain_abandoned_requests_total", ())] == 1
        assert samples[("graceful_requests_lost_total", ())] == 3
        assert samples[("graceful_processes_ended_abnormally_total", (("cause", "signal"), ("role", "worker")))] == 1
        assert samples[("graceful_shutdown_delay_seconds", (("end", "fixed"),))] == 1.0
        info = (("server", "gunicorn"), ("version", __version__), ("worker_class", "gthread"))
        assert samples[("graceful_info", info)] == 1

    def test_counters_are_counters_and_gauges_gauges(self, traffic: KnownTraffic) -> None:
        """The TYPE lines follow the names: _total families are counters, the others gauges."""
        types = {f.name: f.type for f in text_string_to_metric_families(render_metrics(traffic.lifecycle).decode())}
        assert types == {
            "graceful_requests_in_flight": "gauge",
            "graceful_requests_rejected": "counter",
            "graceful_requests_during_shutdown": "counter",
            "graceful_lifecycle_signal_timestamp_seconds": "gauge",
            "graceful_shutdown_delay_seconds": "gauge",
            "graceful_hook_duration_seconds": "gauge",
            "graceful_hook_runs": "counter",
            "graceful_healthcheck": "gauge",
            "graceful_healthchecks": "counter",
            "graceful_drain_abandoned_requests": "counter",
            "graceful_requests_lost": "counter",
            "graceful_processes_ended_abnormally": "counter",
            "graceful_long_lived_told_to_leave": "counter",
            "graceful_info": "gauge",  # the text format has no info type: a gauge of 1
        }

    def test_content_type(self) -> None:
        """The text is Prometheus' 0.0.4 text format."""
        assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


class TestCollector:
    def test_in_a_users_registry(self, traffic: KnownTraffic) -> None:
        """GracefulCollector registered in the user's own registry reports the same as render_metrics."""
        registry = CollectorRegistry()
        registry.register(GracefulCollector(traffic.lifecycle))
        assert parse(generate_latest(registry)) == parse(render_metrics(traffic.lifecycle))

    def test_the_default_lifecycle_by_default(self, default_lifecycle: Lifecycle) -> None:
        """With no lifecycle, the collector reports graceful.default_lifecycle."""
        default_lifecycle.stats.rejected("draining")
        samples = parse(render_metrics())
        assert samples[("graceful_requests_rejected_total", (("reason", "draining"),))] == 1

    def test_computed_at_each_scrape(self) -> None:
        """A second scrape sees what happened after the first: nothing is cached."""
        lc = Lifecycle(Config(), clock=FakeClock())
        registry = CollectorRegistry()
        registry.register(GracefulCollector(lc))
        before = parse(generate_latest(registry))
        lc.stats.rejected("max_in_flight")
        after = parse(generate_latest(registry))
        key = ("graceful_requests_rejected_total", (("reason", "max_in_flight"),))
        assert (before[key], after[key]) == (0, 1)

    def test_merges_several_processes(self, traffic: KnownTraffic) -> None:
        """Given snapshots (a health server's workers), the collector reports their merge."""
        other = Lifecycle(Config(), clock=FakeClock())
        other.stats.rejected("max_in_flight")
        parts = [snapshot(traffic.lifecycle), snapshot(other)]
        samples = parse(render_metrics(snapshots=lambda: parts))
        assert samples[("graceful_requests_rejected_total", (("reason", "max_in_flight"),))] == 4
        assert samples == parse(render_metrics(snapshots=lambda: [merge(parts)]))

    def test_without_prometheus_client(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without the library, building a collector says how to install it."""
        monkeypatch.setitem(sys.modules, "prometheus_client", None)
        monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
        with pytest.raises(MetricsUnavailable, match=r"pip install 'graceful-wsgi\[prometheus\]'"):
            GracefulCollector(Lifecycle(Config()))
