"""The workers' health channel (graceful.gunicorn.health.HealthChannel) when its master is gone."""

from __future__ import annotations

import os

from graceful.gunicorn.health import HealthChannel
from tests.gunicorn.test_health import snapshot


class TestMasterGone:
    def test_a_worker_whose_master_is_gone_sends_without_error_or_drop(self) -> None:
        """The read end closed (the master exited): a send raises nothing and counts no drop (not a full pipe)."""
        channel = HealthChannel()
        os.close(channel.fileno())  # what the master's exit does to the read end
        channel.send(snapshot(1))
        channel.send(snapshot(1))
        assert channel.dropped == 0
