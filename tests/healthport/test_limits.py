"""graceful.healthport.limits: the buckets behind /metrics' budgets, the connection cap (times given, no sleeps)."""

from __future__ import annotations

import resource

from graceful.healthport.limits import (
    CLIENTS_REMEMBERED,
    MIN_CONNECTIONS,
    Bucket,
    ClientBudgets,
    Limits,
    connection_capacity,
)


class TestBucket:
    """A token bucket: a burst, then ``rate`` a second."""

    def test_burst_then_empty(self) -> None:
        """A full bucket gives ``burst`` tokens at once, then none."""
        bucket = Bucket(rate=10, burst=3, now=0.0)
        assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]

    def test_refills_at_rate_up_to_burst(self) -> None:
        """Tokens come back at ``rate`` a second and never exceed ``burst``."""
        bucket = Bucket(rate=10, burst=3, now=0.0)
        for _ in range(3):
            bucket.take(0.0)
        assert bucket.take(0.1) and not bucket.take(0.1)
        assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]

    def test_give_back(self) -> None:
        """A token given back can be taken again, up to the burst."""
        bucket = Bucket(rate=1, burst=1, now=0.0)
        assert bucket.take(0.0) and not bucket.take(0.0)
        bucket.give_back()
        assert bucket.take(0.0)
        bucket.give_back()
        bucket.give_back()
        assert bucket.tokens == 1.0


class TestClientBudgets:
    """/metrics: per client address first, then the port's budget."""

    def test_one_client_cannot_spend_anothers_budget(self) -> None:
        """A client over its budget is refused; another client is not."""
        budgets = ClientBudgets(Limits(metrics_client_rate=2, metrics_rate=100), now=0.0)
        assert [budgets.take("10.0.0.1", 0.0) for _ in range(3)] == [True, True, False]
        assert budgets.take("10.0.0.2", 0.0)

    def test_the_ports_budget_bounds_every_client(self) -> None:
        """The global budget (a second's worth at once) refuses every client once spent."""
        budgets = ClientBudgets(Limits(metrics_client_rate=100, metrics_rate=2), now=0.0)
        assert [budgets.take(f"10.0.0.{i}", 0.0) for i in range(3)] == [True, True, False]

    def test_refused_by_the_port_keeps_the_clients_token(self) -> None:
        """A refusal by the global budget does not spend the client's own."""
        budgets = ClientBudgets(Limits(metrics_client_rate=1, metrics_rate=1), now=0.0)
        assert budgets.take("a", 0.0)
        assert not budgets.take("b", 0.0)  # the port's single token went to "a"
        assert budgets.take("b", 1.0)  # "b" still has its own token once the port's refills

    def test_remembers_a_bounded_number_of_clients(self) -> None:
        """Beyond CLIENTS_REMEMBERED addresses the least recently seen is forgotten (a fresh budget)."""
        budgets = ClientBudgets(Limits(metrics_client_rate=1, metrics_rate=1e9), now=0.0)
        assert budgets.take("first", 0.0) and not budgets.take("first", 0.0)
        for index in range(CLIENTS_REMEMBERED):
            budgets.take(f"other-{index}", 0.0)
        assert budgets.take("first", 0.0)


class TestConnectionCapacity:
    """max_connections, within a quarter of the file descriptor limit."""

    def test_default_within_a_generous_limit(self) -> None:
        """With descriptors to spare the cap is max_connections."""
        assert connection_capacity(Limits(max_connections=512), fd_limit=1_048_576) == 512

    def test_a_quarter_of_a_small_limit(self) -> None:
        """With 1,024 descriptors the port keeps at most 256 connections."""
        assert connection_capacity(Limits(max_connections=512), fd_limit=1024) == 256

    def test_never_below_the_minimum(self) -> None:
        """A tiny limit still leaves MIN_CONNECTIONS."""
        assert connection_capacity(Limits(), fd_limit=8) == MIN_CONNECTIONS

    def test_unlimited(self) -> None:
        """No limit at all: max_connections."""
        assert connection_capacity(Limits(max_connections=100), fd_limit=resource.RLIM_INFINITY) == 100
