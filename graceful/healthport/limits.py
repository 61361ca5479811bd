"""The health port's bounds: bad input never stops it, a flood from other clients never sheds a probe.

=========================  ===========================================================
listen backlog             ``BACKLOG`` (4,096, :mod:`.address`; the kernel caps it at
                           ``net.core.somaxconn``): a burst of 1,000 connections waits
                           in the kernel's queue instead of having its SYNs dropped
accepting                  as fast as the thread can: every round takes up to 64
                           connections from the queue, reads the request that came with
                           each and answers a probe at once, before it holds a slot
open connections           ``max_connections`` (4,096; at most a quarter of the
                           process's file descriptor limit); at the cap one is shed
                           for the new one: lingering, then the oldest silent one of
                           the address holding the most, then a queued ``/metrics``
                           (:mod:`.table`)
request size               ``max_request`` bytes (8 KiB) of request line and headers;
                           beyond: ``431`` (a 64 KB request line is read no further)
time per connection        ``deadline`` seconds (2 s) from accept to the last byte of
                           the answer; then closed (a client sending a byte a second)
``/metrics``               ``metrics_rate`` a second (20) in all, ``metrics_client_rate``
                           (5) per client address; beyond: ``429``. Answered after the
                           probes of the same round, one per round
probes                     never limited: answering one costs about what refusing it
                           would (accept, read, write, close)
=========================  ===========================================================

Probes are not budgeted per address on purpose: the kubelet shares its
address with whatever runs on the node's network (hostNetwork pods, traffic
SNATed to the node), and a budget shared with them is one they can spend.
What remains is the machine: a flood of more connections a second than the
port's thread handles (README: the figures) fills the kernel's queue, and
then every client waits, the kubelet too. Firewall the port (a
NetworkPolicy) as any management port. Used on the ``graceful-health-port``
thread only: nothing here is thread-safe.
"""

from __future__ import annotations

import collections
import dataclasses
import resource

__all__ = ["Bucket", "ClientBudgets", "Limits", "connection_capacity"]

#: Client addresses whose budgets are remembered; the least recently seen are forgotten first.
CLIENTS_REMEMBERED = 1024
#: The fewest connections the port keeps, whatever the file descriptor limit.
MIN_CONNECTIONS = 16


@dataclasses.dataclass(frozen=True)
class Limits:
    """The bounds above; every default in one place. Seconds for times, per second for rates."""

    max_connections: int = 4096
    max_request: int = 8192
    deadline: float = 2.0
    metrics_rate: float = 20.0
    metrics_client_rate: float = 5.0


def connection_capacity(limits: Limits, fd_limit: int | None = None) -> int:
    """``max_connections``, but at most a quarter of the soft file descriptor limit (read now unless given).

    The Gunicorn master needs descriptors of its own (listeners, pipes, one
    file per worker): the health port never takes more than a quarter.
    """
    if fd_limit is None:
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if fd_limit == resource.RLIM_INFINITY or fd_limit < 0:
        return limits.max_connections
    return min(limits.max_connections, max(MIN_CONNECTIONS, fd_limit // 4))


class Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` saved up; times are monotonic seconds."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = now

    def take(self, now: float) -> bool:
        """Take one token if there is one; return whether there was."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def give_back(self) -> None:
        """Return the token just taken (it was not used)."""
        self.tokens = min(self.burst, self.tokens + 1.0)


class ClientBudgets:
    """``/metrics`` answers: one bucket per client address (a second's worth saved up) and one for all."""

    def __init__(self, limits: Limits, now: float) -> None:
        self._rate = limits.metrics_client_rate
        self._clients: collections.OrderedDict[str, Bucket] = collections.OrderedDict()
        self._all = Bucket(limits.metrics_rate, limits.metrics_rate, now)

    def take(self, peer: str, now: float) -> bool:
        """Whether to answer one more ``/metrics`` from ``peer`` now: its own budget first, then the port's."""
        bucket = self._clients.get(peer)
        if bucket is None:
            bucket = self._clients[peer] = Bucket(self._rate, self._rate, now)
            if len(self._clients) > CLIENTS_REMEMBERED:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(peer)
        if not bucket.take(now):
            return False
        if not self._all.take(now):
            bucket.give_back()  # refused by the port's budget: the client's own is not spent
            return False
        return True
