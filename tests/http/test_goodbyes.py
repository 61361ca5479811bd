"""Tests for graceful.http.goodbyes: when each long-lived connection is told to leave."""

from __future__ import annotations

import itertools

import pytest

from graceful.core.config import Config
from graceful.http.goodbyes import spread, window_of


class TestSpread:
    def test_evenly_inside_the_window_oldest_first(self) -> None:
        """n connections leave at T0 + window * k / (n + 1): none at T0, none at the window's end."""
        assert spread(100.0, 4.0, 3) == pytest.approx([101.0, 102.0, 103.0])

    def test_one_connection_leaves_in_the_middle(self) -> None:
        """A single connection leaves halfway through the window."""
        assert spread(0.0, 5.0, 1) == pytest.approx([2.5])

    def test_ten_thousand_never_share_a_millisecond(self) -> None:
        """10,000 connections over a 5 s window leave about 0.5 ms apart, in order."""
        times = spread(0.0, 5.0, 10_000)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) == pytest.approx(5.0 / 10_001)
        assert times == sorted(times)

    def test_no_connections_no_times(self) -> None:
        """Nothing open, nothing to schedule."""
        assert spread(0.0, 5.0, 0) == []

    def test_a_zero_delay_tells_everyone_at_t0(self) -> None:
        """With no delay to spread over, everyone is told at T0."""
        assert spread(7.0, 0.0, 2) == [7.0, 7.0]


class TestWindow:
    def test_the_fixed_delay(self) -> None:
        """A fixed delay is the window."""
        assert window_of(Config(shutdown_delay=6)) == 6

    def test_the_adaptive_delays_floor(self) -> None:
        """An adaptive delay's floor is the window: the part of the delay sure to pass."""
        assert window_of(Config(shutdown_delay=20, shutdown_delay_min=3)) == 3
