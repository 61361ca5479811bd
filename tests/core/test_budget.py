"""Tests for graceful.core.budget: the one formula, its messages, and what Gunicorn derives from it."""

from __future__ import annotations

import pytest

from graceful.core.budget import (
    BUDGET_MARGIN,
    Budget,
    derived_graceful_timeout,
    graceful_timeout_problem,
    seconds_left,
)


def budget(delay: float = 5, pre: float = 5, drain: float = 15, cleanup: float = 5) -> Budget:
    return Budget(
        shutdown_delay=delay, longest_pre_shutdown_hook=pre, drain_timeout=drain, longest_cleanup_task=cleanup
    )


class TestBudget:
    def test_hooks_overlap_the_delay(self) -> None:
        """The first half is the longer of the delay and the longest pre-shutdown hook, not their sum."""
        assert budget(delay=5, pre=3).first_half == 5
        assert budget(delay=2, pre=9).first_half == 9

    def test_total_adds_drain_cleanup_and_margin(self) -> None:
        """total = max(delay, hook) + drain + cleanup + margin."""
        assert budget(delay=5, pre=3, drain=15, cleanup=2).total == 5 + 15 + 2 + BUDGET_MARGIN

    def test_terms_name_each_part(self) -> None:
        """terms() names every part and the total, as graceful check prints them."""
        assert budget().terms() == {
            "shutdown_delay": 5,
            "longest pre-shutdown hook": 5,
            "drain_timeout": 15,
            "longest cleanup task": 5,
            "margin": BUDGET_MARGIN,
            "total": 26,
        }

    def test_overrun_is_none_when_it_fits(self) -> None:
        """A budget that fits (equal counts as fitting) has no overrun."""
        assert budget().overrun(26) is None

    def test_overrun_message_shows_terms_sum_and_fix(self) -> None:
        """The overrun names each term, the sum, the grace period and what to change."""
        message = budget(delay=10, drain=20).overrun(30)
        assert message is not None
        for part in ("shutdown_delay 10s", "drain_timeout 20s", "margin 1s", "= 36s", "grace_period 30s"):
            assert part in message
        assert "GRACEFUL_GRACE_PERIOD" in message

    def test_graceful_timeout_overrun(self) -> None:
        """Gunicorn's wait after the first half must end inside the grace period."""
        assert budget(delay=5).graceful_timeout_overrun(25, 30) is None
        message = budget(delay=5).graceful_timeout_overrun(26, 30)
        assert message is not None and "= 31s > GRACEFUL_GRACE_PERIOD 30s" in message
        assert "dirty" not in message

    def test_gunicorns_dirty_pool_stops_after_the_workers(self) -> None:
        """Gunicorn 27's dirty pool stops after the HTTP workers: its graceful timeout counts, and is named."""
        assert budget(delay=5).graceful_timeout_overrun(20, 30, dirty_graceful_timeout=5) is None
        message = budget(delay=5).graceful_timeout_overrun(20, 30, dirty_graceful_timeout=6)
        assert message is not None
        assert "graceful_timeout 20s + dirty_graceful_timeout 6s = 31s > GRACEFUL_GRACE_PERIOD 30s" in message
        assert "lower graceful_timeout (or leave it unset) or dirty_graceful_timeout or raise" in message


class TestGunicornTimeout:
    def test_derived_value_covers_drain_cleanup_and_margin(self) -> None:
        """Unset, graceful_timeout is drain + hook timeout + margin, rounded up to whole seconds."""
        assert derived_graceful_timeout(15, 5) == 21
        assert derived_graceful_timeout(1.2, 0.5) == 3

    def test_problem_when_shorter_than_drain_and_cleanup(self) -> None:
        """A graceful_timeout shorter than drain + longest cleanup would kill workers mid-drain."""
        assert graceful_timeout_problem(20, 15, 5) is None
        message = graceful_timeout_problem(10, 15, 5)
        assert message is not None and "10s is shorter than drain_timeout 15s" in message


class TestSecondsLeft:
    @pytest.mark.parametrize(
        ("started", "now", "cap", "left"),
        [
            (None, 50.0, 5.0, 5.0),  # not shutting down: the whole cap
            (100.0, 101.0, 5.0, 5.0),  # plenty left: the cap
            (100.0, 127.0, 5.0, 2.0),  # 30 s grace - 1 s margin - 27 s gone
            (100.0, 140.0, 5.0, 0.0),  # past the end: never negative
        ],
    )
    def test_bounded_by_cap_and_grace_period(self, started: float | None, now: float, cap: float, left: float) -> None:
        """What is left of the grace period, less the margin, at most the cap and at least 0."""
        assert seconds_left(started, 30.0, now, cap) == pytest.approx(left)
