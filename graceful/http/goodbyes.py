"""When each long-lived connection is told to leave: spread over the shutdown delay, not all at once.

From ShutdownInitiated every long-lived connection (a WebSocket, a stream of
server-sent events, a request marked long-running) is told to leave. Told
all in one instant, thousands of clients would reconnect in the same
millisecond; the kube-apiserver rate-limits the end of its watches for the
same reason. So the connections open at ShutdownInitiated leave one after
another, evenly over the *window*: the part of the shutdown delay that is
sure to pass (``shutdown_delay``, or its floor ``shutdown_delay_min`` when
the delay is adaptive). The k-th of n (oldest first) leaves at
``T0 + window * k / (n + 1)``, so the first goodbye is not at T0 itself and
the last comes before the window ends.

A connection opened during the delay (its client reconnected here while the
load balancers still send to this pod) is served, and leaves at the
window's end: by then the balancers have had the whole window to stop
sending here, so its client's next reconnection goes elsewhere. Every
connection still open when the drain ends (InFlightRequestsDrained) is told
at once, and counted as told *at the deadline*.

Pure arithmetic on monotonic seconds; the ASGI side schedules it on its
event loop (:mod:`graceful.asgi.long_lived`).
"""

from __future__ import annotations

from graceful.core.config import Config

__all__ = ["spread", "window_of"]


def window_of(config: Config) -> float:
    """The seconds goodbyes are spread over: the delay's floor when it is adaptive, else the delay."""
    floor = config.shutdown_delay_min
    return config.shutdown_delay if floor is None else min(floor, config.shutdown_delay)


def spread(t0: float, window: float, count: int) -> list[float]:
    """When each of ``count`` connections open at ``t0`` leaves, oldest first: evenly inside ``(t0, t0 + window)``."""
    return [t0 + window * k / (count + 1) for k in range(1, count + 1)]
