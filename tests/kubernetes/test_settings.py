"""Tests for graceful.kubernetes.settings: which containers run graceful."""

from __future__ import annotations

import pytest

from tests.kubernetes.helpers import codes_of, container, env, pod


class TestWhichContainers:
    """Only containers that run graceful are checked."""

    @pytest.mark.parametrize(
        "command",
        [
            ["gunicorn", "-c", "/srv/graceful/conf.py", "app:app"],
            ["gunicorn", "--config=python:graceful.conf", "app:app"],
            ["python", "-m", "graceful", "serve", "app:app"],
        ],
    )
    def test_by_command(self, command: list[str]) -> None:
        """A Gunicorn command with graceful's config, or ``python -m graceful``, is checked."""
        assert codes_of(pod(container(command=command, env=None, readinessProbe=None))) == ["GC001"]

    def test_by_gunicorn_cmd_args(self) -> None:
        """GUNICORN_CMD_ARGS naming graceful's config marks a graceful container."""
        values = env(GUNICORN_CMD_ARGS="-c python:graceful.conf")
        doc = pod(container(command=["gunicorn", "app:app"], env=values, readinessProbe=None))
        assert codes_of(doc) == ["GC001"]

    def test_by_env(self) -> None:
        """Any GRACEFUL_* variable marks a graceful container, whatever its command."""
        doc = pod(container(command=None, env=env(GRACEFUL_DRAIN_TIMEOUT="10"), readinessProbe=None))
        assert codes_of(doc) == ["GC001"]

    def test_others_are_skipped(self) -> None:
        """Plain Gunicorn, sidecars and init containers are not checked."""
        plain = container(command=["gunicorn", "app:app"], env=None, readinessProbe=None)
        sidecar = {"name": "proxy", "image": "envoy", "command": ["sh", "-c", "envoy"]}
        doc = pod(plain, sidecar, initContainers=[container(readinessProbe=None)])
        assert codes_of(doc) == []
