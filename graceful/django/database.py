"""The databases: a readiness check per alias, and closing every connection at exit.

``django-db-<alias>`` (a readiness check, one per ``settings.DATABASES``
alias; none for the dummy ``default`` Django puts in an empty one) opens a
connection, runs ``SELECT 1`` and closes it again. It runs on its own
``graceful-check-*`` thread under the middleware's check timeout
(``GracefulMiddleware(check_timeout=...)``, 0.8 s by default): a connect that
hangs is reported ``timed out`` and is not started again while it runs.
Django's connections belong to the thread that opened them, so the check
opens its own, as a request does under the default ``CONN_MAX_AGE = 0``, and
closes it before its thread ends. A failure's reason is withheld from
``?verbose`` unless ``GRACEFUL_EXPOSE_CHECK_ERRORS``; the error is logged.

``django-db-connections`` (a cleanup task) closes every connection this
process opened and still holds -- persistent ones (``CONN_MAX_AGE > 0``)
kept by request threads included -- after the drain, when no request is
being served. ``django.db.connections.close_all()`` would close only the
calling thread's: cleanup tasks run on threads of their own
(``graceful-cleanup-task_N``), so a :class:`ConnectionTracker` records each
connection as Django opens it (the ``connection_created`` signal) and closes
it from there. Then it closes the connection pools of the databases this
process used (Django 5.1+ pools PostgreSQL connections, 5.2+ Oracle's, with
``OPTIONS = {"pool": ...}``): a pooled connection's ``close()`` only hands it
back to its pool, which keeps it open, with psycopg_pool's threads, until
``close_pool()``; an unclosed pool would also hold the process at exit
waiting for those threads. A pool this process inherited through fork
(``preload_app``) and never used is its parent's and is left alone.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, Error, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.db.utils import ConnectionHandler

from graceful.core.lifecycle import Lifecycle

__all__ = ["CHECK_PREFIX", "CLEANUP_TASK_NAME", "ConnectionTracker", "install", "ping"]

logger = logging.getLogger(__name__)

#: Readiness check names: ``django-db-`` + the database alias.
CHECK_PREFIX = "django-db-"
#: The cleanup task's name.
CLEANUP_TASK_NAME = "django-db-connections"
#: The engine Django puts under ``default`` when ``DATABASES`` is empty: no database to check.
DUMMY_ENGINE = "django.db.backends.dummy"


def ping(alias: str = DEFAULT_DB_ALIAS) -> None:
    """Connect to database ``alias``, run ``SELECT 1``, close; raise Django's error on failure.

    Any thread; the connection is the calling thread's own and is closed
    before returning, whatever happens.
    """
    connection = connections[alias]
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            # Oracle needs "FROM DUAL": the backend says what a bare SELECT needs.
            cursor.execute("SELECT 1" + connection.features.bare_select_suffix)
            cursor.fetchone()
    finally:
        connection.close()


def _check(alias: str) -> Callable[[], None]:
    def check() -> None:
        ping(alias)

    return check


class ConnectionTracker:
    """Every Django connection this process opened, whichever thread opened it.

    :meth:`opened` receives Django's ``connection_created`` signal (on the
    thread that connects: request threads, check threads); :meth:`clean_up`
    (:meth:`close_all`, then :meth:`close_pools`) runs as the cleanup task.
    Thread-safe. Connections are held weakly: a thread's connection objects
    go when the thread does.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Each connection object with the pid that opened it: one inherited from a parent
        # process through fork (preload_app) is the parent's to close, never ours.
        self._opened: weakref.WeakKeyDictionary[BaseDatabaseWrapper, int] = weakref.WeakKeyDictionary()
        # Each alias with the pid that last connected to it: its pool (if pooled) is that process's.
        self._aliases: dict[str, int] = {}

    def opened(self, sender: object, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        """Django's ``connection_created`` receiver: remember ``connection`` and its alias."""
        with self._lock:
            self._opened[connection] = os.getpid()
            self._aliases[connection.alias] = os.getpid()

    def used_aliases(self) -> list[str]:
        """The database aliases this process connected to, in the order first used."""
        pid = os.getpid()
        with self._lock:
            return [alias for alias, opener in self._aliases.items() if opener == pid]

    def open_connections(self) -> list[BaseDatabaseWrapper]:
        """The connection objects of this process that hold a connection now."""
        pid = os.getpid()
        with self._lock:
            mine = [wrapper for wrapper, opener in self._opened.items() if opener == pid]
        return [wrapper for wrapper in mine if wrapper.connection is not None]

    def close_all(self) -> int:
        """Close every connection this process holds, from this thread; return how many were closed.

        Part of the cleanup task (a ``graceful-cleanup-task_N`` thread, after the drain).
        Django refuses to close another thread's connection unless sharing is
        allowed: it is, for the close only. A close that fails is logged and
        the others still run.
        """
        closed = 0
        for wrapper in self.open_connections():
            wrapper.inc_thread_sharing()
            try:
                wrapper.close()
            except Error as exc:
                logger.warning("graceful: closing Django database connection %r failed: %s", wrapper.alias, exc)
            else:
                closed += 1
            finally:
                wrapper.dec_thread_sharing()
        logger.info("graceful: closed %d Django database connection(s) in pid %d", closed, os.getpid())
        return closed

    def close_pools(self, databases: ConnectionHandler = connections) -> list[str]:
        """Close the connection pool of each database this process used; return their aliases.

        The cleanup task, after :meth:`close_all` handed every connection back
        to its pool. ``close_pool()`` closes the pooled connections and stops
        the pool's threads (psycopg_pool waits up to 5 s for them); a backend
        without pools (SQLite, MySQL) or a database without ``"pool"`` in its
        OPTIONS has none. A close that fails is logged and the others still run.
        """
        closed: list[str] = []
        for alias in self.used_aliases():
            wrapper = databases[alias]
            if getattr(wrapper, "pool", None) is None:
                continue
            try:
                wrapper.close_pool()  # type: ignore[attr-defined]  # PostgreSQL (5.1+) and Oracle (5.2+) backends
            except Exception as exc:  # noqa: BLE001 -- whatever the driver raises: logged, the other pools still close
                logger.warning("graceful: closing Django's connection pool %r failed: %s", alias, exc)
            else:
                closed.append(alias)
                logger.info("graceful: closed Django's connection pool %r in pid %d", alias, os.getpid())
        return closed

    def clean_up(self, databases: ConnectionHandler = connections) -> None:
        """The cleanup task: :meth:`close_all` the connections, then :meth:`close_pools`."""
        self.close_all()
        self.close_pools(databases)


def install(lifecycle: Lifecycle, databases: ConnectionHandler = connections) -> ConnectionTracker:
    """Register ``django-db-<alias>`` per database and ``django-db-connections`` (connections, then pools).

    Main thread, in ``django.setup()``. ``databases`` (Django's
    ``connections``) says which aliases there are; a project without any
    (``DATABASES = {}``, Django's dummy ``default``) gets no check. Returns the
    tracker, which receives ``connection_created`` from now on (until
    :func:`uninstall`).
    """
    tracker = ConnectionTracker()
    for alias, options in databases.settings.items():
        if options.get("ENGINE") != DUMMY_ENGINE:
            lifecycle.readiness_check(CHECK_PREFIX + alias)(_check(alias))
    lifecycle.cleanup_task(CLEANUP_TASK_NAME)(lambda: tracker.clean_up(databases))
    connection_created.connect(tracker.opened, weak=False, dispatch_uid=_uid(tracker))
    return tracker


def uninstall(tracker: ConnectionTracker) -> None:
    """Stop ``tracker`` receiving ``connection_created`` (tests; a process that sets up twice)."""
    connection_created.disconnect(dispatch_uid=_uid(tracker))


def _uid(tracker: ConnectionTracker) -> str:
    return f"graceful.django.database:{id(tracker)}"
