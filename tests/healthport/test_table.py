"""graceful.healthport.table: which connection is shed when the health port is full, and which have expired."""

from __future__ import annotations

from graceful.healthport.table import LINGERING, QUEUED, READING, WRITING, ConnectionTable


class Fake:
    """A connection as the table sees it: a name, a client address, a deadline, a state."""

    def __init__(self, name: str, peer: str, deadline: float = 10.0) -> None:
        self.name = name
        self.peer = peer
        self.deadline = deadline
        self.state = ""

    def __repr__(self) -> str:
        return f"Fake({self.name!r})"


def table_of(*conns: Fake, capacity: int = 100) -> ConnectionTable[Fake]:
    table: ConnectionTable[Fake] = ConnectionTable(capacity)
    for conn in conns:
        table.add(conn)
    return table


class TestStates:
    """Adding, moving, removing, counting."""

    def test_add_reads_and_counts(self) -> None:
        """A new connection is reading; the table counts it and reports full at capacity."""
        a, b = Fake("a", "10.0.0.1"), Fake("b", "10.0.0.2")
        table = table_of(a, capacity=2)
        assert a.state == READING and len(table) == 1 and not table.full()
        table.add(b)
        assert table.full() and table.count(READING) == 2

    def test_move_and_remove(self) -> None:
        """A moved connection leaves reading for its new state; removing twice says it was gone."""
        a = Fake("a", "p")
        table = table_of(a)
        table.move(a, QUEUED)
        assert (a.state, table.count(READING), table.count(QUEUED)) == (QUEUED, 0, 1)
        assert a in table and table.first(QUEUED) is a
        assert table.remove(a) and not table.remove(a)
        assert len(table) == 0 and a not in table

    def test_iterates_every_state(self) -> None:
        """Iteration yields every connection whatever its state, and tolerates removal meanwhile."""
        conns = [Fake(str(i), "p") for i in range(4)]
        table = table_of(*conns)
        for conn, state in zip(conns[1:], (QUEUED, WRITING, LINGERING), strict=True):
            table.move(conn, state)
        for conn in table:
            table.remove(conn)
        assert len(table) == 0


class TestVictim:
    """The shedding order: lingering, the most-connected address's oldest reading, queued, writing."""

    def test_empty_has_none(self) -> None:
        """Nothing to shed in an empty table."""
        assert table_of().victim() is None

    def test_lingering_first(self) -> None:
        """An answered connection goes before any reading one, the oldest answered first."""
        reading, first, second = Fake("r", "p"), Fake("l1", "q"), Fake("l2", "q")
        table = table_of(reading, first, second)
        table.move(first, LINGERING)
        table.move(second, LINGERING)
        assert table.victim() is first

    def test_the_address_holding_the_most_loses_its_oldest(self) -> None:
        """Three silent connections from one address, one from the kubelet's: the flooder's oldest goes."""
        kubelet = Fake("kubelet", "10.0.0.1")
        flood = [Fake(f"f{i}", "10.0.0.9") for i in range(3)]
        table = table_of(kubelet, *flood)
        assert table.victim() is flood[0]

    def test_a_kubelet_is_never_shed_by_another_address(self) -> None:
        """Shedding for 1,000 connections from four other addresses never picks the kubelet's."""
        kubelet = Fake("kubelet", "10.0.0.1")
        table = table_of(kubelet, capacity=8)
        shed = []
        for index in range(1000):
            if table.full():
                victim = table.victim()
                assert victim is not None
                shed.append(victim)
                table.remove(victim)
            table.add(Fake(f"f{index}", f"10.0.0.{2 + index % 4}"))
        assert kubelet in table and kubelet not in shed and len(shed) == 1000 - 7

    def test_a_neighbour_on_the_kubelets_address_sheds_its_own_older_first(self) -> None:
        """On a shared address the oldest silent connection goes: the neighbour's, opened before the probe."""
        neighbour = [Fake(f"n{i}", "10.0.0.1") for i in range(5)]
        probe = Fake("probe", "10.0.0.1")
        table = table_of(*neighbour, probe, capacity=6)
        for index in range(5):  # five more from the neighbour: each sheds the address's oldest
            victim = table.victim()
            assert victim is not None and victim is not probe
            table.remove(victim)
            table.add(Fake(f"m{index}", "10.0.0.1"))
        assert probe in table

    def test_ties_between_addresses(self) -> None:
        """Equal counts: a connection of one of them; counts are kept as connections leave."""
        a1, a2, b1 = Fake("a1", "a"), Fake("a2", "a"), Fake("b1", "b")
        table = table_of(a1, a2, b1)
        assert table.victim() is a1
        table.remove(a1)
        assert table.victim() in (a2, b1)
        table.remove(a2)
        assert table.victim() is b1
        table.remove(b1)
        assert table.victim() is None

    def test_a_reading_connection_moving_on_updates_the_counts(self) -> None:
        """An address whose connections sent their requests no longer counts as holding the most."""
        a1, a2, b1 = Fake("a1", "a"), Fake("a2", "a"), Fake("b1", "b")
        table = table_of(a1, a2, b1)
        table.move(a1, WRITING)
        table.move(a2, WRITING)
        assert table.victim() is b1

    def test_queued_metrics_then_writing(self) -> None:
        """With no reading or lingering connection, a queued /metrics goes before an answer being written."""
        writing, queued = Fake("w", "p"), Fake("q", "p")
        table = table_of(writing, queued)
        table.move(writing, WRITING)
        table.move(queued, QUEUED)
        assert table.victim() is queued
        table.remove(queued)
        assert table.victim() is writing


class TestDeadlines:
    """What has expired, and when the next deadline is."""

    def test_expired_from_every_state(self) -> None:
        """Connections past their deadline in any state are returned; the others are not."""
        old, young, lingering, queued, writing = (
            Fake("old", "p", 1.0),
            Fake("young", "p", 5.0),
            Fake("l", "p", 2.0),
            Fake("q", "p", 3.0),
            Fake("w", "p", 9.0),
        )
        table = table_of(old, young, lingering, queued, writing)
        table.move(lingering, LINGERING)
        table.move(queued, QUEUED)
        table.move(writing, WRITING)
        assert table.next_deadline() == 1.0
        assert table.expired(0.5) == []
        assert sorted(c.name for c in table.expired(3.0)) == ["l", "old", "q"]
        for conn in table.expired(3.0):
            table.remove(conn)
        assert table.next_deadline() == 5.0

    def test_no_deadline_when_empty(self) -> None:
        """An empty table has no next deadline."""
        assert table_of().next_deadline() is None
