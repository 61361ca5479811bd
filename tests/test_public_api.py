"""The public API: what `import graceful` offers."""

from __future__ import annotations

from pathlib import Path

import pytest

import graceful
import graceful.core.default


class TestPublicApi:
    def test_all_is_sorted_and_importable(self) -> None:
        """Every name in graceful.__all__ exists, and the list is sorted."""
        assert graceful.__all__ == sorted(graceful.__all__)
        for name in graceful.__all__:
            assert hasattr(graceful, name), name

    def test_package_is_typed(self) -> None:
        """py.typed ships with the package, so type checkers use its hints."""
        assert (Path(graceful.__file__).parent / "py.typed").is_file()

    def test_decorators_register_on_the_default_lifecycle(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """graceful.readiness_check and friends register on the default lifecycle."""
        fresh = graceful.Lifecycle()
        monkeypatch.setattr(graceful.core.default, "default_lifecycle", fresh)  # keep the real one clean

        @graceful.readiness_check("db")
        def check() -> bool:
            return True

        graceful.cleanup_task("flush")(lambda: None)
        assert [h.name for h in fresh.registry.hooks("readiness check")] == ["db"]
        assert [h.name for h in fresh.registry.hooks("cleanup task")] == ["flush"]
