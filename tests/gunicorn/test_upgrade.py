"""Unit tests of graceful.gunicorn.upgrade: finding a live USR2 peer from Gunicorn's bookkeeping."""

from __future__ import annotations

import os
from typing import Any

from graceful.gunicorn.upgrade import Peer, live_peer


class Arbiter:
    """The parts of Gunicorn's Arbiter live_peer reads; ``dead_successor`` is reaped by reap_workers()."""

    def __init__(self, reexec_pid: int = 0, master_pid: int = 0, dead_successor: bool = False) -> None:
        self.reexec_pid = reexec_pid
        self.master_pid = master_pid
        self.dead_successor = dead_successor
        self.reaped = 0

    def reap_workers(self) -> None:
        self.reaped += 1
        if self.dead_successor:
            self.reexec_pid = 0  # what Gunicorn does when it reaps the new master


class TestLivePeer:
    def test_no_upgrade_no_peer(self) -> None:
        """A master that never re-executed and was never re-executed: no peer."""
        assert live_peer(Arbiter()) is None

    def test_old_master_with_a_live_successor(self) -> None:
        """The old master after USR2: the new master (reexec_pid) is the peer."""
        assert live_peer(Arbiter(reexec_pid=4242)) == Peer("new", 4242)

    def test_a_dead_successor_is_reaped_first(self) -> None:
        """A successor that exited (a zombie until reaped) is not a peer: reaping comes first."""
        server: Any = Arbiter(reexec_pid=4242, dead_successor=True)
        assert live_peer(server) is None and server.reaped == 1

    def test_new_master_whose_predecessor_is_its_parent(self) -> None:
        """The new master, its old master still alive (still its parent): a rollback's peer."""
        assert live_peer(Arbiter(master_pid=os.getppid())) == Peer("old", os.getppid())

    def test_new_master_whose_predecessor_is_gone(self) -> None:
        """master_pid stays set up to a second after the old master died; it is no longer the parent: no peer."""
        assert live_peer(Arbiter(master_pid=os.getppid() + 100_000)) is None
