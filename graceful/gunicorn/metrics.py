"""The whole server's metrics under Gunicorn: each worker publishes, the master's health port adds up.

What ``/metrics`` on the health port answers is the merge
(:func:`graceful.metrics.merge`) of three things::

    the master's own snapshot      its signals, its hooks, the health port's probes
    each live worker's latest      sent by the worker every second, kept by the master's channel
    what exited workers counted    folded into a total the master keeps (counters only)

Each worker (with the health port on) sends its metrics snapshot through its
channel to the master (:mod:`graceful.gunicorn.channel`, a ``METRICS``
record). :class:`WorkerMetrics` sends it on the ``graceful-health``
thread's 1 s period, only when it changed (never waiting: a full channel
drops it, and the next period sends it again), and once more in
``worker_exit`` after the drain and cleanup, waiting (bounded) for room:
nothing is sent per request, and a worker's last counts reach the master
before it exits.

:class:`ServerMetrics` lives in the master. The channel's reader thread
keeps each worker's latest record; at each scrape (the ``graceful-health-port``
thread) every worker whose channel is open counts as it is. When a worker's
channel reaches end-of-file (it exited, and everything it sent has been
read), its latest is folded into the retained total with
:func:`~graceful.metrics.snapshot.counters_only` on the channel's thread,
under the channel's lock, at the moment it stops counting as live: so
counters never go backwards when a worker is recycled (max_requests, HUP,
TTOU), nor count twice, and in-flight requests of a dead worker are not
counted. A record that is not a snapshot is skipped and logged once per
worker.

A worker killed before it could send (SIGKILL for its timeout) loses at
most its last second of counts.
"""

from __future__ import annotations

import json
import logging
import threading

from graceful.core.lifecycle import Lifecycle
from graceful.gunicorn.channel import REPORT_TIMEOUT, Kind, MasterChannel, Received, WorkerChannel
from graceful.metrics.snapshot import Snapshot, counters_only, empty, merge, parse, snapshot

__all__ = ["ServerMetrics", "WorkerMetrics"]

logger = logging.getLogger(__name__)


class WorkerMetrics:
    """One worker's metrics records; see the module docstring.

    :meth:`publish` on the ``graceful-health`` thread (a greenlet under
    gevent), :meth:`final` on the worker's main thread in ``worker_exit``:
    a lock keeps a periodic send from following the final one.
    """

    def __init__(self, channel: WorkerChannel, lifecycle: Lifecycle) -> None:
        self.channel = channel
        self.lifecycle = lifecycle
        self._lock = threading.Lock()
        self._sent: Snapshot | None = None
        self._closed = False

    def publish(self) -> None:
        """Send this worker's snapshot now if it changed since the last send; never waits."""
        with self._lock:
            if not self._closed:
                self._send(None)

    def final(self) -> None:
        """The last send, after the drain and cleanup (``worker_exit``); nothing is sent after it."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._send(REPORT_TIMEOUT)

    def _send(self, timeout: float | None) -> None:
        current = snapshot(self.lifecycle)
        if current != self._sent and self.channel.send_json(Kind.METRICS, current.to_json(), timeout=timeout):
            self._sent = current


class ServerMetrics:
    """The master's view of the whole server's metrics; see the module docstring.

    Made in the master before the first fork; :meth:`snapshots` on the
    health port's thread, the fold on the channel's.
    """

    def __init__(self, lifecycle: Lifecycle, channel: MasterChannel) -> None:
        self.lifecycle = lifecycle
        self.channel = channel
        #: What the workers that are gone counted (changed under the channel's lock only).
        self.retained = empty()
        self._warned: set[int] = set()
        channel.on_close(self._fold)

    def snapshots(self) -> list[Snapshot]:
        """The master's snapshot, each live worker's latest, and the retained total (at a scrape)."""
        items = [snapshot(self.lifecycle)]
        with self.channel.held():  # no worker moves from live to retained meanwhile
            latest = self.channel.latest(Kind.METRICS)
            retained = self.retained
        for pid, received in latest:
            item = self._parse(pid, received)
            if item is not None:
                items.append(item)
        items.append(retained)
        return items

    def _fold(self, pid: int, latest: dict[Kind, Received]) -> None:
        """The channel's thread, its lock held: worker ``pid`` is gone; keep its counters."""
        received = latest.get(Kind.METRICS)
        item = None if received is None else self._parse(pid, received)
        if item is not None:
            self.retained = merge([self.retained, counters_only(item)])
        self._warned.discard(pid)

    def _parse(self, pid: int, received: Received) -> Snapshot | None:
        try:
            return parse(json.loads(received.payload))
        except (ValueError, RecursionError) as exc:  # JSON, UTF-8, the snapshot's own checks; nesting
            if pid not in self._warned:
                self._warned.add(pid)
                logger.warning("graceful: skipping worker %d's metrics: %s", pid, exc)
            return None
