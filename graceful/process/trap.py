"""The OS-signal trap: first SIGTERM/SIGINT starts the shutdown, a second exits 1.

The OS handler only queues the signal number into a ``queue.SimpleQueue``
(reentrant-safe): no lock, no ``Event``, no logging inside it. A daemon thread
named ``graceful-signals`` takes it from the queue and acts: the first signal
calls ``on_first`` (normally ``Lifecycle.request_shutdown``), a second one logs
(best effort) and ends the process with status 1 at once.

Used by the single-process server (``graceful serve``); under Gunicorn the
master's own signal loop plays this part (graceful.gunicorn.master).
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from graceful.process.exit import exit_process

__all__ = ["SignalTrap"]

logger = logging.getLogger(__name__)

_STOP = -1  # queued by uninstall() to end the thread


class SignalTrap:
    """Traps SIGTERM and SIGINT (or ``signals``) for one lifecycle.

    ``install`` and ``uninstall`` must run on the main thread (Python only
    lets the main thread set handlers). ``deliver`` simulates an OS signal for
    tests; ``exit`` is how a second signal ends the process (``os._exit``
    after flushing, by default).
    """

    def __init__(
        self,
        on_first: Callable[[int], object],
        signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
        exit: Callable[[int], object] = exit_process,
    ) -> None:
        self._on_first = on_first
        self._signals = signals
        self._exit = exit
        self._queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._previous: dict[signal.Signals, Any] = {}
        self._thread: threading.Thread | None = None
        self.received: list[int] = []

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The OS signal handler: only queues (``SimpleQueue.put`` is reentrant-safe).

        Another handler may call it to pass a signal on; :meth:`start` first.
        """
        self._queue.put(signum)

    def start(self, *, armed: bool = False) -> SignalTrap:
        """Start the acting thread without installing handlers.

        ``armed``: the first signal was already handled elsewhere (the
        Gunicorn master), so the next one exits at once.
        """
        if armed and not self.received:
            self.received.append(0)
        self._start_thread()
        return self

    def install(self) -> SignalTrap:
        """Install the handlers (main thread only) and start the acting thread."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("SignalTrap.install() must be called from the main thread")
        self._start_thread()
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self.handle)
        return self

    def uninstall(self) -> None:
        """Restore the previous handlers (main thread only) and stop the acting thread."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout=5)
            self._thread = None

    def deliver(self, signum: int) -> None:
        """Act as if the OS delivered ``signum`` (for tests); the thread must be running."""
        self._start_thread()
        self._queue.put(signum)

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="graceful-signals", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                signum = self._queue.get(timeout=1.0)
            except queue.Empty:
                continue
            if signum == _STOP:
                return
            self.received.append(signum)
            name = signal.Signals(signum).name
            if len(self.received) == 1:
                logger.info("graceful: received %s: shutting down gracefully (send it again to exit at once)", name)
                self._on_first(signum)
            else:
                logger.warning("graceful: received %s again: exiting with status 1 at once", name)
                self._exit(1)
                return
