"""Tests for graceful.core.gate: the request sides' one interface to the lifecycle."""

from __future__ import annotations

from graceful.core.config import Config
from graceful.core.gate import DRAINING, FULL, Refusal
from graceful.core.lifecycle import Lifecycle
from graceful.core.waitgroup import Release
from graceful.http.replies import SHUTTING_DOWN, TOO_MANY, refusal_reply


class TestCheck:
    def test_before_a_shutdown_nothing_is_refused_or_counted(self) -> None:
        """Before ShutdownInitiated check() lets a request on, counts nothing and raises the flag."""
        lc = Lifecycle(Config())
        assert lc.gate.check() is None
        assert lc.stats.totals() == (0, 0)
        assert lc.gate.unhindered

    def test_during_the_delay_requests_are_arrivals(self) -> None:
        """From ShutdownInitiated each check counts an arrival of the delay and keeps the flag down."""
        lc = Lifecycle(Config())
        lc.shutdown_initiated.fire()
        assert lc.gate.check() is None
        assert lc.stats.arrivals()["delay"] == 1
        assert not lc.gate.unhindered

    def test_retry_after_mode_refuses_once_not_accepting(self) -> None:
        """send_retry_after: after NotAcceptingNewRequests a request is refused 429 with the config's Retry-After."""
        lc = Lifecycle(Config(send_retry_after=True, retry_after=9))
        lc.shutdown_initiated.fire()
        lc.not_accepting_new_requests.fire()
        assert lc.gate.check() == Refusal(429, "shutting_down", "9")
        assert lc.stats.arrivals()["draining"] == 1
        assert lc.stats.rejections()["shutting_down"] == 1


class TestSlots:
    def test_a_slot_counts_the_request_until_released(self) -> None:
        """take_slot() counts the request in flight and holds a slot; its Release frees both."""
        lc = Lifecycle(Config(max_in_flight=1))
        assert lc.gate.limited
        release = lc.gate.take_slot()
        assert isinstance(release, Release)
        assert lc.in_flight.count == 1
        assert lc.gate.take_slot() == FULL
        release()
        assert lc.in_flight.count == 0
        assert isinstance(lc.gate.take_slot(), Release)

    def test_a_slot_after_the_drain_began_is_refused_and_given_back(self) -> None:
        """Once the drain waits, take_slot() refuses with 503 and frees the slot it took."""
        lc = Lifecycle(Config(max_in_flight=1))
        lc.in_flight.wait(0)
        assert lc.gate.take_slot() == DRAINING
        assert lc.gate.admission.try_acquire()
        assert lc.stats.rejections()["draining"] == 1

    def test_configure_reads_the_limit_again(self) -> None:
        """A new config replaces the admission limit and takes the flag down."""
        lc = Lifecycle(Config(max_in_flight=2))
        assert lc.gate.admission.limit == 2
        lc.gate.refresh()
        lc.configure(Config())
        assert not lc.gate.unhindered
        assert lc.gate.admission.limit == 0


class TestReplies:
    def test_each_refusal_has_graceful_s_answer(self) -> None:
        """A full limit answers 'too many', a shutdown refusal 'shutting down', each with its Retry-After."""
        assert refusal_reply(FULL)[:3] == (429, TOO_MANY, "1")
        assert refusal_reply(DRAINING)[:3] == (503, SHUTTING_DOWN, "1")
