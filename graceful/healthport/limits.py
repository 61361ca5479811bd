"""The health port's bounds: bad input never stops it, a flood cannot starve the app or the other probes.

=========================  ===========================================================
open connections           ``max_connections`` (64); at the cap a new connection evicts
                           the oldest one that has not sent a whole request
per client address         ``max_per_client`` (16); likewise, so one client cannot hold
                           every slot (1,000 idle connections keep no probe out)
request size               ``max_request`` bytes (8 KiB) of request line and headers;
                           beyond: ``431`` (a 64 KB request line is read no further)
time per connection        ``deadline`` seconds (2 s) from accept to the last byte of
                           the answer; then closed (a client sending a byte a second)
answers                    ``rate`` a second (200) in all, ``client_rate`` (20) per
                           client address: a connection beyond its client's budget is
                           closed unanswered right after accept(), so a flooding client
                           neither spends the others' budget nor holds them up in the
                           kernel's accept queue, which is first come, first served
accepting                  ``accept_rate`` a second (1000); beyond, the listener is left
                           alone and the kernel queues or drops: a flood costs a bounded
                           share of one CPU
=========================  ===========================================================

20 answers a second per address is far above what kubelets (a few probes per
container per period) and load balancers send. Many addresses can still spend
the global budget together: firewall the port (a NetworkPolicy) as any
management port. Used on the ``graceful-health-port`` thread only: nothing
here is thread-safe.
"""

from __future__ import annotations

import collections
import dataclasses

__all__ = ["Bucket", "ClientBudgets", "Limits"]

#: Client addresses whose budgets are remembered; the least recently seen are forgotten first.
CLIENTS_REMEMBERED = 1024


@dataclasses.dataclass(frozen=True)
class Limits:
    """The bounds above; every default in one place. Seconds for times, per second for rates."""

    max_connections: int = 64
    max_per_client: int = 16
    max_request: int = 8192
    deadline: float = 2.0
    rate: float = 200.0
    client_rate: float = 20.0
    accept_rate: float = 1000.0


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
    """One bucket per client address (``rate`` a second, a second's worth saved up) and one for all."""

    def __init__(self, limits: Limits, now: float) -> None:
        self._rate = limits.client_rate
        self._clients: collections.OrderedDict[str, Bucket] = collections.OrderedDict()
        self._all = Bucket(limits.rate, limits.rate / 2, now)

    def take(self, peer: str, now: float) -> bool:
        """Whether to answer one more connection from ``peer`` now: its own budget first, then the port's."""
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
