"""Tests for graceful.core.admission."""

from __future__ import annotations

import pytest

from graceful.core.admission import AdmissionLimit


class TestAdmissionLimit:
    def test_zero_admits_everything(self) -> None:
        """max_in_flight 0 means no limit."""
        limit = AdmissionLimit(0)
        assert not limit.enabled
        assert all(limit.try_acquire() for _ in range(1000))

    def test_full_limit_refuses_at_once(self) -> None:
        """With N slots taken, the next try_acquire returns False without blocking."""
        limit = AdmissionLimit(2)
        assert limit.try_acquire() and limit.try_acquire()
        assert limit.try_acquire() is False

    def test_release_frees_a_slot(self) -> None:
        """A released slot can be taken again."""
        limit = AdmissionLimit(1)
        assert limit.try_acquire()
        limit.release()
        assert limit.try_acquire()

    def test_over_release_is_an_error(self) -> None:
        """Releasing more than acquired raises (BoundedSemaphore)."""
        with pytest.raises(ValueError):
            AdmissionLimit(1).release()

    def test_negative_limit_is_refused(self) -> None:
        """A negative limit is a ValueError."""
        with pytest.raises(ValueError):
            AdmissionLimit(-1)
