"""Tests for graceful.core.budget: the one formula, its messages, and what Gunicorn derives from it."""

from __future__ import annotations

import pytest

from graceful.core.budget import (
    BUDGET_MARGIN,
    Budget,
    derived_dirty_graceful_timeout,
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
        assert "lower graceful_timeout (or leave it unset: graceful derives it)" in message
        assert "lower dirty_graceful_timeout to 5s or less (or leave it unset" in message
        assert message.endswith("or raise GRACEFUL_GRACE_PERIOD (and terminationGracePeriodSeconds)")

    def test_room_after_is_what_the_grace_period_leaves(self) -> None:
        """room_after: the grace period less the first half and Gunicorn's wait for its HTTP workers."""
        assert budget(delay=5).room_after(21, 30) == 4
        assert budget(delay=5, pre=8).room_after(21, 30) == 1
        assert budget(delay=5).room_after(27, 30) == -2


class TestGunicornWaitsDerived:
    """Each combination of graceful_timeout and dirty_graceful_timeout, set by the user or derived."""

    def test_neither_set_graceful_defaults_fit(self) -> None:
        """graceful's defaults with a dirty pool: graceful_timeout 21 s, the dirty pool the 4 s left; no refusal."""
        defaults = budget()
        graceful_timeout = derived_graceful_timeout(15, 5)
        dirty = derived_dirty_graceful_timeout(defaults.room_after(graceful_timeout, 30))
        assert (graceful_timeout, dirty) == (21, 4)
        derived = {"graceful_timeout", "dirty_graceful_timeout"}
        assert defaults.graceful_timeout_overrun(graceful_timeout, 30, dirty, derived=derived) is None

    def test_neither_set_but_no_room_names_no_gunicorn_setting(self) -> None:
        """Neither set, a grace period with under 1 s left for the pool: the fix is graceful's settings, never
        to unset Gunicorn's (unset already)."""
        tight = budget()  # total 26 s: fits a 26 s grace period exactly
        dirty = derived_dirty_graceful_timeout(tight.room_after(21, 26))
        assert dirty == 0
        message = tight.graceful_timeout_overrun(21, 26, dirty, derived={"graceful_timeout", "dirty_graceful_timeout"})
        assert message is not None
        assert "dirty pool gets what GRACEFUL_GRACE_PERIOD 26s leaves after" in message
        assert "graceful_timeout 21s (derived: drain_timeout + longest cleanup task + margin): 0s" in message
        assert "less than the 1s its dirty_graceful_timeout needs" in message
        assert "unset" not in message
        assert "lower GRACEFUL_SHUTDOWN_DELAY, GRACEFUL_DRAIN_TIMEOUT or GRACEFUL_HOOK_TIMEOUT" in message
        assert "raise GRACEFUL_GRACE_PERIOD" in message

    def test_graceful_timeout_set_dirty_derived(self) -> None:
        """The user's graceful_timeout leaves the pool its room; one that leaves none names graceful_timeout only."""
        assert derived_dirty_graceful_timeout(budget().room_after(23, 30)) == 2
        assert budget().graceful_timeout_overrun(23, 30, 2, derived={"dirty_graceful_timeout"}) is None
        dirty = derived_dirty_graceful_timeout(budget().room_after(25, 30))
        message = budget().graceful_timeout_overrun(25, 30, dirty, derived={"dirty_graceful_timeout"})
        assert message is not None
        assert "Gunicorn's graceful_timeout 25s: 0s, less than the 1s" in message
        assert "lower graceful_timeout (or leave it unset: graceful derives it)" in message
        assert "dirty_graceful_timeout (or" not in message and "lower GRACEFUL_" not in message

    def test_dirty_set_graceful_timeout_derived(self) -> None:
        """The user's dirty_graceful_timeout must fit what the derived graceful_timeout leaves; the refusal says
        how far to lower it and never advises unsetting graceful_timeout."""
        assert budget().graceful_timeout_overrun(21, 30, 4, derived={"graceful_timeout"}) is None
        message = budget().graceful_timeout_overrun(21, 30, 30, derived={"graceful_timeout"})
        assert message is not None
        assert message.startswith(
            "graceful: max(shutdown_delay, longest pre-shutdown hook) 5s + Gunicorn's graceful_timeout 21s (derived:"
            " drain_timeout + longest cleanup task + margin) + dirty_graceful_timeout 30s = 56s >"
            " GRACEFUL_GRACE_PERIOD 30s:"
        )
        assert "lower dirty_graceful_timeout to 4s or less (or leave it unset" in message
        assert "graceful_timeout (or leave it unset" not in message

    def test_both_set(self) -> None:
        """Both the user's: both named as what to lower, with the room the pool has."""
        assert budget().graceful_timeout_overrun(22, 30, 3, derived=()) is None
        message = budget().graceful_timeout_overrun(22, 30, 5, derived=())
        assert message is not None and "= 32s > GRACEFUL_GRACE_PERIOD 30s" in message
        assert "lower graceful_timeout (or leave it unset: graceful derives it)" in message
        assert "lower dirty_graceful_timeout to 3s or less" in message

    def test_a_user_value_that_cannot_fit_at_all(self) -> None:
        """A user's dirty_graceful_timeout when graceful_timeout leaves no room: no bound to lower it to is given."""
        message = budget().graceful_timeout_overrun(25, 30, 1, derived=())
        assert message is not None and "= 31s > GRACEFUL_GRACE_PERIOD 30s" in message
        assert "lower dirty_graceful_timeout (or leave it unset" in message and " or less" not in message

    def test_a_derived_graceful_timeout_alone_that_overruns_names_graceful_settings(self) -> None:
        """No dirty pool, a derived graceful_timeout past the grace period (rounded up, or a shorter registered
        cleanup task than hook_timeout): the fix names graceful's settings, not unsetting graceful_timeout."""
        message = budget(cleanup=2).graceful_timeout_overrun(21, 24, None, derived={"graceful_timeout"})
        assert message is not None and "= 26s > GRACEFUL_GRACE_PERIOD 24s" in message
        assert "unset" not in message and "dirty" not in message


class TestGunicornTimeout:
    def test_derived_value_covers_drain_cleanup_and_margin(self) -> None:
        """Unset, graceful_timeout is drain + the longest cleanup + margin, rounded up to whole seconds."""
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
