"""The whole server's metrics under Gunicorn: each worker publishes, the master's health port adds up.

What ``/metrics`` on the health port answers is the merge
(:func:`graceful.metrics.merge`) of three things::

    the master's own snapshot      its signals, its hooks, the health port's probes
    each live worker's latest      written by the worker every second, read at each scrape
    what exited workers counted    folded into a total the master keeps (counters only)

Each worker (with the health port on) leaves its metrics snapshot in the
server's :class:`~graceful.gunicorn.shared.WorkerFiles` directory as
``metrics-<pid>-<start>.json`` (``<start>``: the worker's ``CLOCK_MONOTONIC``
nanoseconds at boot, so a reused pid never overwrites a file the master has
not folded yet). :class:`WorkerMetrics` writes it on the ``graceful-health``
thread's 1 s period, only when it changed, and once more in ``worker_exit``
after the drain and cleanup: nothing is written per request, and a worker's
last counts are on disk before it exits. A snapshot does not fit a pipe
record (``PIPE_BUF``), hence files, each written through a temporary file and
a rename.

:class:`ServerMetrics` runs on the master's ``graceful-health-port`` thread.
At each scrape it lists the directory (it never waits for a worker): the
newest file of each live worker counts as it is; a file whose worker is gone
(reaped by Gunicorn, or no such process) is read one last time and folded
into the retained total with :func:`~graceful.metrics.snapshot.counters_only`,
then removed. So counters never go backwards when a worker is recycled
(max_requests, HUP, TTOU), and in-flight requests of a dead worker are not
counted. The same fold also runs when the set of live workers changes, so
files do not pile up when nobody scrapes. A file that is not a snapshot
(truncated, over :data:`MAX_FILE_BYTES`, wrong types, not a regular file)
is skipped and logged once.

A worker killed before it could write (SIGKILL for its timeout) loses at
most its last second of counts.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Collection

from graceful.core.lifecycle import Lifecycle
from graceful.gunicorn.shared import WorkerFiles
from graceful.metrics.snapshot import Snapshot, counters_only, empty, merge, parse, snapshot

__all__ = ["MAX_FILE_BYTES", "PREFIX", "ServerMetrics", "WorkerMetrics"]

logger = logging.getLogger(__name__)

PREFIX = "metrics-"
#: A worker's snapshot is a few KB (one entry per hook and check); anything bigger is not one.
MAX_FILE_BYTES = 1 << 20
_NAME = re.compile(r"metrics-([1-9][0-9]{0,9})-([0-9]{1,20})\.json")


class WorkerMetrics:
    """One worker's metrics file; see the module docstring.

    :meth:`publish` on the ``graceful-health`` thread (a greenlet under
    gevent), :meth:`final` on the worker's main thread in ``worker_exit``:
    a lock keeps a slower periodic write from replacing the final one.
    """

    def __init__(self, files: WorkerFiles, lifecycle: Lifecycle, pid: int | None = None) -> None:
        self.files = files
        self.lifecycle = lifecycle
        self.pid = os.getpid() if pid is None else pid
        self.name = f"{PREFIX}{self.pid}-{time.monotonic_ns()}.json"
        self._lock = threading.Lock()
        self._written: Snapshot | None = None
        self._closed = False
        self._warned = False

    def publish(self) -> None:
        """Write this worker's snapshot now if it changed since the last write; a failure is logged once."""
        with self._lock:
            if not self._closed:
                self._write()

    def final(self) -> None:
        """The last write, after the drain and cleanup (``worker_exit``); no write after it."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._write()

    def _write(self) -> None:
        current = snapshot(self.lifecycle)
        if current == self._written:
            return
        try:
            self.files.write(self.name, current.to_json())
        except (OSError, ValueError, TypeError) as exc:
            if not self._warned:
                self._warned = True
                logger.warning("graceful: worker %d cannot publish its metrics: %s", self.pid, exc)
            return
        self._written = current


class ServerMetrics:
    """The master's view of the whole server's metrics; see the module docstring.

    ``live()`` gives the pids of Gunicorn's live workers (``server.WORKERS``).
    Used by one thread, the health port's.
    """

    def __init__(
        self,
        lifecycle: Lifecycle,
        files: WorkerFiles,
        live: Callable[[], Collection[int]],
        *,
        exists: Callable[[int], bool] | None = None,
    ) -> None:
        self.lifecycle = lifecycle
        self.files = files
        self._live = live
        self._exists = exists or _process_exists
        #: What the workers that are gone counted.
        self.retained = empty()
        #: Files seen while their worker was live: once it is not, the worker is gone.
        self._seen: set[str] = set()
        self._warned: set[str] = set()
        self._live_before: frozenset[int] = frozenset()

    def snapshots(self) -> list[Snapshot]:
        """The master's snapshot, each live worker's latest, and the retained total (at a scrape)."""
        current = self._fold_exited()
        items = [snapshot(self.lifecycle)]
        for name in current:
            item = self._read(name)
            if item is not None:
                items.append(item)
        items.append(self.retained)
        return items

    def on_workers_changed(self) -> None:
        """Fold the files of exited workers when the live workers changed since the last look (cheap otherwise)."""
        live = frozenset(self._live())
        if live != self._live_before:
            self._fold_exited()

    def _fold_exited(self) -> list[str]:
        """Fold every exited worker's file into :attr:`retained`; return the files of the live workers."""
        live = frozenset(self._live())
        self._live_before = live
        try:
            names = self.files.names(PREFIX)
        except OSError as exc:
            self._warn("(the directory)", str(exc))
            return []
        newest: dict[int, tuple[int, str]] = {}
        exited: list[str] = []
        for name in names:
            match = _NAME.fullmatch(name)
            if match is None:
                self._warn(name, "not a metrics file's name")
                continue
            pid, started = int(match[1]), int(match[2])
            if pid in live:
                self._seen.add(name)
                known = newest.get(pid)
                if known is None or started > known[0]:
                    if known is not None:
                        exited.append(known[1])  # the same pid booted again: the older file is a dead worker's
                    newest[pid] = (started, name)
                else:
                    exited.append(name)
            elif name in self._seen or not self._exists(pid):
                exited.append(name)
            # else: a worker just forked, not yet in WORKERS: live soon.
        for name in exited:
            item = self._read(name)
            if item is not None:
                self.retained = merge([self.retained, counters_only(item)])
            self.files.discard(name)
            self._seen.discard(name)
        self._warned.intersection_update(names)
        return [name for _, name in newest.values()]

    def _read(self, name: str) -> Snapshot | None:
        try:
            return parse(self.files.read(name, MAX_FILE_BYTES))
        except FileNotFoundError:
            return None  # replaced or removed since the listing
        except (OSError, ValueError) as exc:
            self._warn(name, str(exc))
            return None

    def _warn(self, name: str, reason: str) -> None:
        """Log a file that is not a snapshot once (its worker may rewrite it every second)."""
        if name not in self._warned:
            self._warned.add(name)
            logger.warning("graceful: skipping the metrics file %s: %s", name, reason)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's process of that pid
        return True
    return True
