"""graceful.django.database: the readiness check per database and closing every connection."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator

import pytest
from django.db import OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import ConnectionHandler
from werkzeug.test import Client

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.registry import CLEANUP_TASK, READINESS_CHECK
from graceful.django import database
from graceful.django.database import CLEANUP_TASK_NAME, ConnectionTracker, install, ping, uninstall
from graceful.wsgi.middleware import GracefulMiddleware
from tests.django.conftest import UNREACHABLE


def plain_app(environ: object, start_response: Callable[..., object]) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"app"]


def in_thread(work: Callable[[], object]) -> None:
    """Run ``work`` on a thread of its own, as a request thread would, and wait for it."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except Exception as exc:  # noqa: BLE001 -- re-raised in the test's thread below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


def open_and_keep(alias: str, kept: list[BaseDatabaseWrapper]) -> Callable[[], None]:
    """A request thread's work: a query whose connection stays open (CONN_MAX_AGE > 0)."""

    def work() -> None:
        connection = connections[alias]
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        kept.append(connection)

    return work


@pytest.fixture
def tracker() -> Iterator[ConnectionTracker]:
    """A tracker receiving connection_created for one test."""
    lifecycle = Lifecycle(Config())
    tracker = install(lifecycle)
    try:
        yield tracker
    finally:
        uninstall(tracker)


class TestPing:
    """ping(alias): connect, SELECT 1, close."""

    def test_a_reachable_database_passes_and_is_closed_again(self) -> None:
        """The check's connection is closed when it returns: nothing outlives the check's thread."""
        ping("default")
        assert connections["default"].connection is None

    def test_an_unreachable_database_raises_djangos_error(self) -> None:
        """A sqlite file whose folder is gone: OperationalError, and no connection left behind."""
        with pytest.raises(OperationalError, match="unable to open database file"):
            ping(UNREACHABLE)
        assert connections[UNREACHABLE].connection is None


class TestConnectionTracker:
    """Connections opened on any thread are closed by close_all() from another one."""

    def test_closes_connections_other_threads_keep(self, tracker: ConnectionTracker) -> None:
        """Two request threads keep their connections; the cleanup thread closes both and says how many."""
        kept: list[BaseDatabaseWrapper] = []
        in_thread(open_and_keep("default", kept))
        in_thread(open_and_keep("other", kept))
        assert all(wrapper.connection is not None for wrapper in kept)
        closed: list[int] = []
        in_thread(lambda: closed.append(tracker.close_all()))
        assert closed == [2]
        assert [wrapper.connection for wrapper in kept] == [None, None]
        assert tracker.open_connections() == []

    def test_the_raw_connection_is_really_closed(self, tracker: ConnectionTracker) -> None:
        """The DB-API connection itself is closed, not only forgotten by Django."""
        kept: list[BaseDatabaseWrapper] = []
        in_thread(open_and_keep("default", kept))
        raw = kept[0].connection
        tracker.close_all()
        with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
            raw.execute("SELECT 1")

    def test_closed_connections_are_not_counted(self, tracker: ConnectionTracker) -> None:
        """A connection Django already closed (CONN_MAX_AGE = 0, the check's own) is not closed again."""
        in_thread(lambda: ping("default"))
        assert tracker.close_all() == 0

    def test_connections_opened_by_another_process_are_left_alone(
        self, tracker: ConnectionTracker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A connection recorded under another pid (a parent's, inherited through fork) is not ours to close."""
        kept: list[BaseDatabaseWrapper] = []
        with monkeypatch.context() as patch:
            patch.setattr(database.os, "getpid", lambda: 1)
            in_thread(open_and_keep("default", kept))
        try:
            assert tracker.close_all() == 0
            assert kept[0].connection is not None
        finally:
            kept[0].inc_thread_sharing()
            kept[0].close()

    def test_logs_how_many_it_closed(self, tracker: ConnectionTracker, caplog: pytest.LogCaptureFixture) -> None:
        """One info line with the count and the pid."""
        kept: list[BaseDatabaseWrapper] = []
        in_thread(open_and_keep("default", kept))
        with caplog.at_level(logging.INFO, logger="graceful.django.database"):
            tracker.close_all()
        assert [r.getMessage().split(" in pid ")[0] for r in caplog.records] == [
            "graceful: closed 1 Django database connection(s)"
        ]


class TestInstall:
    """install(lifecycle): a readiness check per database and the cleanup task."""

    def test_registers_a_check_per_alias_and_the_cleanup_task(self) -> None:
        """django-db-<alias> for every configured database; django-db-connections as a cleanup task."""
        lifecycle = Lifecycle(Config())
        tracker = install(lifecycle)
        uninstall(tracker)
        names = [hook.name for hook in lifecycle.registry.hooks(READINESS_CHECK)]
        assert names == ["django-db-default", "django-db-other", f"django-db-{UNREACHABLE}"]
        assert [hook.name for hook in lifecycle.registry.hooks(CLEANUP_TASK)] == [CLEANUP_TASK_NAME]

    def test_a_project_without_databases_gets_no_check(self) -> None:
        """DATABASES = {} (Django's dummy default, which refuses every query): no check that could never pass."""
        lifecycle = Lifecycle(Config())
        uninstall(install(lifecycle, ConnectionHandler({})))
        assert lifecycle.registry.hooks(READINESS_CHECK) == []
        assert [hook.name for hook in lifecycle.registry.hooks(CLEANUP_TASK)] == [CLEANUP_TASK_NAME]

    def test_readyz_passes_for_reachable_and_withholds_the_reason_for_unreachable(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """/readyz?verbose: reachable databases ok, the unreachable one failed with its reason withheld and logged."""
        lifecycle = Lifecycle(Config())
        uninstall(install(lifecycle))
        client = Client(GracefulMiddleware(plain_app, lifecycle, check_timeout=10))
        with caplog.at_level(logging.WARNING, logger="graceful"):
            response = client.get("/readyz?verbose")
        body = response.get_data(as_text=True)
        assert response.status_code == 503
        assert "[+]django-db-default ok\n[+]django-db-other ok\n" in body
        assert f"[-]django-db-{UNREACHABLE} failed: reason withheld\n" in body
        assert "unable to open database file" not in body
        logged = [r for r in caplog.records if r.exc_info and "unable to open database file" in str(r.exc_info[1])]
        assert len(logged) == 1
        assert client.get(f"/readyz?exclude=django-db-{UNREACHABLE}").status_code == 200

    def test_the_cleanup_task_closes_what_requests_kept(self) -> None:
        """The lifecycle's own cleanup run closes a request thread's persistent connection."""
        lifecycle = Lifecycle(Config())
        tracker = install(lifecycle)
        try:
            kept: list[BaseDatabaseWrapper] = []
            in_thread(open_and_keep("default", kept))
            report = lifecycle.drain_and_clean_up(drain_timeout=1)
        finally:
            uninstall(tracker)
        assert report.ok
        assert kept[0].connection is None


class FakeWrapper:
    """A pooled connection wrapper as the cleanup sees it: alias, connection, close(), pool and close_pool()."""

    def __init__(self, alias: str, calls: list[str], pooled: bool = True, fails: bool = False) -> None:
        self.alias = alias
        self.connection: object | None = object()
        self.pool: object | None = object() if pooled else None
        self._calls = calls
        self._fails = fails

    def inc_thread_sharing(self) -> None:
        """Nothing to allow: no thread check here."""

    def dec_thread_sharing(self) -> None:
        """Nothing to allow: no thread check here."""

    def close(self) -> None:
        self._calls.append(f"close {self.alias}")
        self.connection = None

    def close_pool(self) -> None:
        self._calls.append(f"close_pool {self.alias}")
        if self._fails:
            raise RuntimeError("pool worker stuck")
        self.pool = None


class TestClosePools:
    """close_pools(): the pool of each database this process used, after its connections; others left alone."""

    def test_closes_each_used_pool_after_the_connections(self, caplog: pytest.LogCaptureFixture) -> None:
        """clean_up: every connection handed back first, then each pool once, one log line per pool."""
        calls: list[str] = []
        wrappers = {"default": FakeWrapper("default", calls), "other": FakeWrapper("other", calls)}
        tracker = ConnectionTracker()
        for wrapper in wrappers.values():
            tracker.opened(None, wrapper)
        with caplog.at_level(logging.INFO, logger="graceful.django.database"):
            tracker.clean_up(wrappers)
        assert calls == ["close default", "close other", "close_pool default", "close_pool other"]
        pools = [r.getMessage().split(" in pid ")[0] for r in caplog.records if "pool" in r.getMessage()]
        assert pools == [
            "graceful: closed Django's connection pool 'default'",
            "graceful: closed Django's connection pool 'other'",
        ]

    def test_unpooled_and_unused_databases_are_left_alone(self) -> None:
        """No pool (SQLite, or no "pool" option), or never used here: close_pool() is not called."""
        calls: list[str] = []
        wrappers = {
            "plain": FakeWrapper("plain", calls, pooled=False),
            "pooled": FakeWrapper("pooled", calls),
            "unused": FakeWrapper("unused", calls),
        }
        tracker = ConnectionTracker()
        tracker.opened(None, wrappers["plain"])
        tracker.opened(None, wrappers["pooled"])
        assert tracker.close_pools(wrappers) == ["pooled"]
        assert calls == ["close_pool pooled"]

    def test_a_pool_only_a_parent_process_used_is_the_parents(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A pool opened before the fork (preload_app) and unused since: not ours to close."""
        calls: list[str] = []
        wrappers = {"default": FakeWrapper("default", calls)}
        tracker = ConnectionTracker()
        with monkeypatch.context() as patch:
            patch.setattr(database.os, "getpid", lambda: 1)
            tracker.opened(None, wrappers["default"])
        assert tracker.close_pools(wrappers) == []
        assert calls == []

    def test_a_failing_close_is_logged_and_the_others_still_close(self, caplog: pytest.LogCaptureFixture) -> None:
        """close_pool() raising for one database: a warning naming it and the error; the next pool is closed."""
        calls: list[str] = []
        wrappers = {"stuck": FakeWrapper("stuck", calls, fails=True), "fine": FakeWrapper("fine", calls)}
        tracker = ConnectionTracker()
        for wrapper in wrappers.values():
            tracker.opened(None, wrapper)
        with caplog.at_level(logging.WARNING, logger="graceful.django.database"):
            assert tracker.close_pools(wrappers) == ["fine"]
        assert calls == ["close_pool stuck", "close_pool fine"]
        assert [r.getMessage() for r in caplog.records] == [
            "graceful: closing Django's connection pool 'stuck' failed: pool worker stuck"
        ]
