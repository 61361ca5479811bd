"""graceful.healthport.bindwait: how long the health port waits for an address in use, on a fake clock."""

from __future__ import annotations

import errno

from graceful.healthport.bindwait import RETRY_BIND, BindWait
from graceful.testing import FakeClock

IN_USE = OSError(errno.EADDRINUSE, "Address already in use")


class TestBound:
    def test_tries_every_half_second_and_gives_up_at_the_bound(self) -> None:
        """Tries every RETRY_BIND s; the try at or past ``patience`` s since the start gives up."""
        clock = FakeClock(start=100.0)
        wait = BindWait("127.0.0.1:8081", 30.0, clock.now())
        assert wait.next_try == 100.0 + RETRY_BIND
        tries = 0
        while True:
            clock.advance(RETRY_BIND)
            tries += 1
            if wait.failed(clock.now()):
                break
            assert wait.next_try == clock.now() + RETRY_BIND
        assert clock.now() == 130.0 and tries == 60

    def test_a_live_usr2_predecessor_holds_the_bound_back(self) -> None:
        """While a USR2 old master lives the wait goes on; the bound counts from when it is gone."""
        clock = FakeClock(start=0.0)
        old_master = [4242]
        wait = BindWait("127.0.0.1:8081", 10.0, clock.now(), predecessor=lambda: old_master[0])
        clock.advance(120.0)
        assert not wait.failed(clock.now())  # two minutes: the operator has not stopped the old master yet
        old_master[0] = 0
        clock.advance(9.5)
        assert not wait.failed(clock.now())
        clock.advance(0.5)
        assert wait.failed(clock.now())


class TestLines:
    def test_the_waiting_line_says_how_long_and_what_meanwhile(self) -> None:
        """The first line: the address, the error, the retry period, the bound, the stop, the app port's check."""
        line = BindWait("0.0.0.0:8081", 30.0, 0.0).waiting(IN_USE)
        assert line == (
            "graceful: health port 0.0.0.0:8081 is in use (Address already in use); trying again every 0.5s for up"
            " to 30s, then stopping the server; until then probes reach whatever holds it, and /readyz on the app's"
            " port fails its check healthport"
        )

    def test_the_waiting_line_names_a_usr2_predecessor(self) -> None:
        """With a USR2 old master alive, the line says the wait lasts while it holds the address."""
        line = BindWait("0.0.0.0:8081", 30.0, 0.0, predecessor=lambda: 77).waiting(IN_USE)
        assert "while the old master (pid 77) holds it, then up to 30s" in line

    def test_bound_and_giving_up_say_how_long_it_waited(self) -> None:
        """Bound: how long it waited; at the bound: how long, giving up, stopping the server, what to do."""
        wait = BindWait("0.0.0.0:8081", 30.0, 10.0)
        assert wait.bound(12.25) == "after waiting 2.2s for the address"
        assert wait.giving_up(40.0) == (
            "graceful: health port 0.0.0.0:8081 still in use after 30.0s: giving up; stopping the server (free the"
            " address, or give GRACEFUL_HEALTH_BIND another)"
        )
