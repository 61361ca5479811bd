"""Unit tests of graceful.gunicorn.upgrade: finding a live USR2 peer from Gunicorn's bookkeeping."""

from __future__ import annotations

import os

from graceful.gunicorn.upgrade import Peer, live_peer
from tests.gunicorn.fakes import FakeArbiter


class TestLivePeer:
    def test_no_upgrade_no_peer(self) -> None:
        """A master that never re-executed and was never re-executed: no peer."""
        assert live_peer(FakeArbiter()) is None

    def test_old_master_with_a_live_successor(self) -> None:
        """The old master after USR2: the new master (reexec_pid) is the peer."""
        assert live_peer(FakeArbiter(successor=4242)) == Peer("new", 4242)

    def test_a_dead_successor_is_reaped_first(self) -> None:
        """A successor that exited (a zombie until reaped) is not a peer: reaping comes first."""
        arbiter = FakeArbiter(successor=4242)
        arbiter.on_reap = lambda: setattr(arbiter, "successor", 0)  # what Gunicorn does when it reaps the new master
        assert live_peer(arbiter) is None and arbiter.calls == ["reap"]

    def test_new_master_whose_predecessor_is_its_parent(self) -> None:
        """The new master, its old master still alive (still its parent): a rollback's peer."""
        assert live_peer(FakeArbiter(predecessor=os.getppid())) == Peer("old", os.getppid())

    def test_new_master_whose_predecessor_is_gone(self) -> None:
        """master_pid stays set up to a second after the old master died; it is no longer the parent: no peer."""
        assert live_peer(FakeArbiter(predecessor=os.getppid() + 100_000)) is None
