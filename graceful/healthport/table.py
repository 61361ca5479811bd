"""The health port's open connections: who holds a slot, who is shed when every slot is taken, who has expired.

A connection is in one of four states::

    reading     accepted; its request is not whole yet (slowloris, idle, or just not arrived)
    queued      a whole ``/metrics`` request, waiting for the probes of this round to be answered
    writing     its answer does not fit the socket's buffer (a client that does not read)
    lingering   answered; what the client still sends is read and dropped until it closes

When a new connection finds every slot taken, one is shed, in this order
(:meth:`ConnectionTable.victim`):

1. the oldest *lingering* one: it has its answer, closing it early loses nothing;
2. a *reading* one of the client address holding the most reading
   connections, its oldest: whoever opens the most connections without
   sending a request loses them first, and the newest (a probe whose request
   is a packet away) last. A kubelet holds one connection at a time: a
   neighbour flooding from another address never sheds it, and one on the
   kubelet's own address sheds its own older connections first;
3. the oldest *queued* ``/metrics``: the most expensive answer;
4. the oldest *writing* one: its client is not reading its answer.

A probe whose request arrived with its connection is answered before it
takes a slot (:mod:`.server`), so in practice only connections still silent
are ever shed. Picking a victim costs O(1) whatever the number of
connections or addresses: reading connections are counted per address and
the addresses are kept in buckets by count.

Deadlines: a connection's ``deadline`` is set by the server; reading ones
are added in the order of their deadlines (accept time plus a constant) and
lingering ones are moved in that order (answer time plus a constant), so
both expire from the front; queued and writing ones are few and scanned.
Used on the ``graceful-health-port`` thread only: nothing here is
thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

__all__ = ["LINGERING", "QUEUED", "READING", "WRITING", "ConnectionTable", "Held"]

READING, QUEUED, WRITING, LINGERING = "reading", "queued", "writing", "lingering"


class Held(Protocol):
    """What the table needs of a connection: its client address, its deadline (monotonic s), its state."""

    peer: str
    deadline: float
    state: str


H = TypeVar("H", bound=Held)


class ConnectionTable(Generic[H]):
    """At most ``capacity`` connections, by state; see the module docstring."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._reading: dict[H, None] = {}
        self._others: dict[str, dict[H, None]] = {QUEUED: {}, WRITING: {}, LINGERING: {}}
        #: Reading connections per client address, oldest first.
        self._by_peer: dict[str, dict[H, None]] = {}
        #: Client addresses by how many reading connections they hold; ``_most`` is the highest count.
        self._peers_by_count: dict[int, dict[str, None]] = {}
        self._most = 0

    def __len__(self) -> int:
        return len(self._reading) + sum(len(conns) for conns in self._others.values())

    def __iter__(self) -> Iterator[H]:
        yield from list(self._reading)
        for conns in self._others.values():
            yield from list(conns)

    def __contains__(self, conn: object) -> bool:
        state = getattr(conn, "state", None)
        conns = self._reading if state == READING else self._others.get(state or "", {})
        return conn in conns

    def full(self) -> bool:
        """Whether a new connection needs another one shed first."""
        return len(self) >= self.capacity

    def count(self, state: str) -> int:
        """How many connections are in ``state``."""
        return len(self._reading) if state == READING else len(self._others[state])

    def add(self, conn: H) -> None:
        """A connection just accepted, reading its request (make room first: :meth:`victim`)."""
        conn.state = READING
        self._reading[conn] = None
        peer = self._by_peer.setdefault(conn.peer, {})
        peer[conn] = None
        self._recount(conn.peer, len(peer) - 1, len(peer))

    def move(self, conn: H, state: str) -> None:
        """``conn`` goes on to ``state`` (queued, writing or lingering): never back to reading."""
        self._forget(conn)
        conn.state = state
        self._others[state][conn] = None

    def remove(self, conn: H) -> bool:
        """Forget ``conn``; False if it was not here (dropped already)."""
        return self._forget(conn)

    def first(self, state: str) -> H | None:
        """The connection longest in ``state`` (queued: the next ``/metrics`` to answer)."""
        conns = self._reading if state == READING else self._others[state]
        return next(iter(conns), None)

    def victim(self) -> H | None:
        """The connection to shed for a new one, in the module docstring's order; None when empty."""
        lingering = self.first(LINGERING)
        if lingering is not None:
            return lingering
        if self._most:
            peer = next(iter(self._peers_by_count[self._most]))
            return next(iter(self._by_peer[peer]))
        return self.first(QUEUED) or self.first(WRITING)

    def expired(self, now: float) -> list[H]:
        """Every connection whose deadline is ``now`` or past (still in the table: :meth:`remove` each)."""
        found = []
        for conns in (self._reading, self._others[LINGERING]):
            for conn in conns:
                if conn.deadline > now:
                    break
                found.append(conn)
        for state in (QUEUED, WRITING):
            found.extend(conn for conn in self._others[state] if conn.deadline <= now)
        return found

    def next_deadline(self) -> float | None:
        """The earliest deadline of any connection, or None when there is none."""
        fronts = [self.first(READING), self.first(LINGERING)]
        fronts.extend(self._others[QUEUED])
        fronts.extend(self._others[WRITING])
        return min((conn.deadline for conn in fronts if conn is not None), default=None)

    def _forget(self, conn: H) -> bool:
        if conn.state == READING:
            if self._reading.pop(conn, False) is False:
                return False
            peer = self._by_peer[conn.peer]
            del peer[conn]
            self._recount(conn.peer, len(peer) + 1, len(peer))
            if not peer:
                del self._by_peer[conn.peer]
            return True
        return self._others[conn.state].pop(conn, False) is None

    def _recount(self, peer: str, before: int, after: int) -> None:
        """Move ``peer`` from the bucket of ``before`` reading connections to that of ``after``."""
        if before:
            bucket = self._peers_by_count[before]
            del bucket[peer]
            if not bucket:
                del self._peers_by_count[before]
                if self._most == before and after < before:
                    self._most = after  # it held the most alone: now one fewer (0: no reading connection)
        if after:
            self._peers_by_count.setdefault(after, {})[peer] = None
            self._most = max(self._most, after)
