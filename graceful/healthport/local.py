"""The health port of one process serving on its own: ``graceful serve --health-bind``.

Two threads besides the server's: ``graceful-health`` (the
:class:`~graceful.healthport.runner.HealthRunner`: the process's checks every
second, the result handed over as one attribute) and ``graceful-health-port``
(the :class:`~graceful.healthport.server.HealthPort`, answering from it;
``/metrics``: this process's metrics, read at each scrape).
Neither waits for a request thread, so probes are answered while every
request thread is busy. Built and started on the main thread of
``graceful serve``, closed when it returns.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from graceful.core.lifecycle import Lifecycle
from graceful.healthport.address import HealthAddress
from graceful.healthport.runner import HealthRunner
from graceful.healthport.server import HealthPort
from graceful.healthport.snapshot import Snapshot
from graceful.healthport.view import HealthView, Heard
from graceful.http.health import HealthChecks
from graceful.metrics.snapshot import Snapshot as MetricsSnapshot
from graceful.metrics.snapshot import snapshot

__all__ = ["LIVENESS_BOUND", "STALE_AFTER", "LocalHealth"]

#: Seconds without a snapshot before /livez fails (the runner thread is stuck).
LIVENESS_BOUND = 30.0
#: Seconds a snapshot counts for /readyz (the runner publishes every second).
STALE_AFTER = 5.0


class LocalHealth:
    """The runner and the port of one process: :meth:`start` it on the main thread, :meth:`close` at exit."""

    def __init__(self, lifecycle: Lifecycle, checks: HealthChecks, address: HealthAddress) -> None:
        self.lifecycle = lifecycle
        self._heard: Heard | None = None
        self._started = time.monotonic()
        self.view = HealthView(lifecycle, self, liveness_bound=LIVENESS_BOUND, stale_after=STALE_AFTER, workers=False)
        self.runner = HealthRunner(lifecycle, checks, self._publish)
        self.port = HealthPort(address, self.view)

    def start(self) -> LocalHealth:
        """Bind (raises OSError, an address in use included), then start both threads."""
        self.port.bind()
        self.runner.start()
        self.port.start()
        return self

    def close(self) -> None:
        """Stop answering and stop the runner."""
        self.port.close()
        self.runner.stop()

    def _publish(self, snapshot: Snapshot) -> None:
        # The runner's thread: one assignment, so the port's thread reads the old pair or the new one.
        self._heard = (snapshot, time.monotonic())

    # -- Sources (the port's thread) -------------------------------------------------------

    def heard(self) -> Sequence[Heard]:
        """The runner's latest snapshot, if it has published one."""
        heard = self._heard
        return [] if heard is None else [heard]

    def booting(self) -> int:
        """None: one process, booted before the port starts."""
        return 0

    def last_heard(self) -> float:
        """When the runner last published, or when this started."""
        heard = self._heard
        return self._started if heard is None else heard[1]

    def master_idle(self) -> float | None:
        """No master loop here."""
        return None

    def shutting_down(self) -> bool:
        """The process's ShutdownInitiated."""
        return self.lifecycle.shutdown_initiated.is_set()

    def metrics(self) -> list[MetricsSnapshot]:
        """This process's metrics, taken now (every read is thread-safe; nothing waits for a request thread)."""
        return [snapshot(self.lifecycle)]
