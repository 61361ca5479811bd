"""Tests for graceful.kubernetes.settings: which containers run graceful, their values, the health port."""

from __future__ import annotations

from typing import Any

import pytest

from graceful.kubernetes.manifests import Container, Inventory
from graceful.kubernetes.settings import Settings, health_port
from tests.kubernetes.helpers import codes_of, container, env, pod


class TestWhichContainers:
    """Only containers that run graceful are checked."""

    @pytest.mark.parametrize(
        "command",
        [
            ["gunicorn", "-c", "/srv/graceful/conf.py", "app:app"],
            ["gunicorn", "--config=python:graceful.conf", "app:app"],
            ["gunicorn", "-c", "python:graceful.django.conf", "mysite.wsgi"],
            ["gunicorn", "-c", "/srv/graceful/django/conf.py", "mysite.wsgi"],
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


class TestHealthPort:
    """GRACEFUL_HEALTH_BIND's port, as GC016 reads it."""

    @pytest.mark.parametrize(
        ("value", "port"),
        [
            ("0.0.0.0:9000", 9000),
            ("[::]:9001", 9001),
            (":9002", 9002),
            ("9003", 9003),
            ("localhost:0", None),
            ("0.0.0.0:70000", None),
            ("0.0.0.0:" + "9" * 5000, None),
            ("health", None),
            ("", None),
        ],
    )
    def test_ports(self, value: str, port: int | None) -> None:
        """host:port, [::]:port, :port and a bare port give the port; anything else none."""
        (found,) = _containers(pod(container(env=env(GRACEFUL_HEALTH_BIND=value))))
        assert health_port(found) == port


class TestSettings:
    """Each GRACEFUL_* value is validated as graceful does at start-up."""

    def test_refused_accepted_and_unreadable(self) -> None:
        """A bad value is refused with graceful's message; good ones count; valueFrom and $(VAR) are unreadable."""
        values: list[dict[str, Any]] = [
            *env(GRACEFUL_DRAIN_TIMEOUT="soon", GRACEFUL_SHUTDOWN_DELAY="7", GRACEFUL_HOOK_TIMEOUT="$(HOOK)"),
            {"name": "GRACEFUL_GRACE_PERIOD", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        ]
        (found,) = _containers(pod(container(env=values)))
        settings = Settings.of(found)
        assert [name for name, _ in settings.refused] == ["GRACEFUL_DRAIN_TIMEOUT"]
        assert "GRACEFUL_DRAIN_TIMEOUT='soon' is not allowed" in settings.refused[0][1]
        assert settings.config.shutdown_delay == 7.0
        assert settings.unreadable == (
            "GRACEFUL_HOOK_TIMEOUT (a $(VAR) reference)",
            "GRACEFUL_GRACE_PERIOD (valueFrom)",
        )

    def test_startup_refusal(self) -> None:
        """A budget over GRACEFUL_GRACE_PERIOD is graceful's own start-up error, kept once."""
        (found,) = _containers(pod(container(env=env(GRACEFUL_DRAIN_TIMEOUT="40"))))
        refusal = Settings.of(found).startup_refusal
        assert refusal is not None and "does not fit GRACEFUL_GRACE_PERIOD" in refusal


def _containers(doc: Any) -> tuple[Container, ...]:
    """Return the containers the inventory reads from one document."""
    inventory = Inventory()
    inventory.add(doc, "test")
    (workload,) = inventory.workloads
    return workload.containers
