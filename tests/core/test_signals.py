"""Tests for graceful.core.signals: one-shot facts with a clock and an on_fire callback."""

from __future__ import annotations

import threading

import pytest

from graceful.core.signals import LifecycleSignal
from graceful.testing import FakeClock


class TestLifecycleSignal:
    def test_fires_once_at_the_clock_time(self) -> None:
        """fire() records the clock's time once; later calls return False and change nothing."""
        clock = FakeClock(start=0.0)
        clock.advance(3)
        signal = LifecycleSignal("ShutdownInitiated", clock)
        assert not signal.is_set()
        assert signal.fire()
        clock.advance(5)
        assert not signal.fire()
        assert signal.fired_at == 3 and signal.is_set() and signal.event.is_set()

    def test_on_fire_runs_once_set_before_the_event(self) -> None:
        """on_fire sees the signal set (fired_at recorded) while its event waiters still wait."""
        seen: list[tuple[bool, bool]] = []

        def on_fire(s: LifecycleSignal) -> None:
            seen.append((s.is_set(), s.event.is_set()))

        signal = LifecycleSignal("NotAcceptingNewRequests", FakeClock(), on_fire=on_fire)
        signal.fire()
        signal.fire()
        assert seen == [(True, False)]

    def test_event_is_set_even_when_on_fire_raises(self) -> None:
        """A failing on_fire does not leave waiters hanging: the event is set, the error propagates once."""

        def on_fire(_s: LifecycleSignal) -> None:
            raise RuntimeError("listener failed")

        signal = LifecycleSignal("CleanupFinished", FakeClock(), on_fire=on_fire)
        with pytest.raises(RuntimeError, match="listener failed"):
            signal.fire()
        assert signal.event.is_set() and signal.wait(0) and not signal.fire()

    def test_wait_times_out_on_its_clock(self) -> None:
        """wait(timeout) is bounded on the signal's clock and reports whether it fired."""
        signal = LifecycleSignal("AfterShutdownDelayDuration", FakeClock())
        assert signal.wait(10) is False
        threading.Timer(0.05, signal.fire).start()
        assert signal.wait(60) is True

    def test_reinit_after_fork_keeps_a_fired_signal_fired(self) -> None:
        """In a forked child the signal gets a fresh lock and stays fired if it had fired."""
        signal = LifecycleSignal("ShutdownInitiated", FakeClock())
        event = signal.event
        signal.fire()
        signal.reinit_after_fork()
        assert signal.event is event and event.is_set() and not signal.fire()

    def test_renew_after_patch_gives_a_new_event_set_if_fired(self) -> None:
        """renew_after_patch() gives a new event (and lock), set if the signal had fired; fire() sets the new one."""
        fired = LifecycleSignal("ShutdownInitiated", FakeClock())
        fired.fire()
        old = fired.event
        fired.renew_after_patch()
        assert fired.event is not old and fired.event.is_set() and not fired.fire()
        pending = LifecycleSignal("NotAcceptingNewRequests", FakeClock())
        old = pending.event
        pending.renew_after_patch()
        assert pending.event is not old and not pending.event.is_set()
        assert pending.fire() and pending.event.is_set() and not old.is_set()
