"""Tests for graceful.kubernetes.rules.values: GC008 and GC011."""

from __future__ import annotations

from typing import Any

import pytest

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import codes_in, codes_of, container, env, findings_in, pod


class TestRefusedValues:
    """GC008: a GRACEFUL_* value that graceful refuses at start-up."""

    def test_manifest(self) -> None:
        """A bad value and an unknown name are one GC008 each, errors naming the variable."""
        findings = findings_in("gc008-refused-value.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC008", "error"), ("GC008", "error")]
        assert "GRACEFUL_DRAIN_TIMEOUT='15s'" in findings[0].message
        assert findings[0].fix == "correct or remove GRACEFUL_DRAIN_TIMEOUT"
        assert "GRACEFUL_DELAY is not a graceful setting" in findings[1].message

    def test_refused_grace_period(self) -> None:
        """A refused GRACEFUL_GRACE_PERIOD is GC008; the default 30 is used for the rest."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="5", GRACEFUL_GRACE_PERIOD="0")
        assert codes_of(pod(container(env=values))) == ["GC008"]

    def test_later_entries_win(self) -> None:
        """A variable listed twice takes its last value, as in the kubelet."""
        values = env(GRACEFUL_DRAIN_TIMEOUT="soon") + env(GRACEFUL_DRAIN_TIMEOUT="10")
        assert codes_of(pod(container(env=values))) == []

    def test_checker_environment_is_ignored(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """GRACEFUL_* variables of the shell running the check do not leak into the pod's settings."""
        monkeypatch.setenv("GRACEFUL_DRAIN_TIMEOUT", "soon")
        assert codes_in("clean.yaml") == []

    def test_yaml_booleans_and_numbers(self) -> None:
        """Unquoted YAML values are read as the container sees them ("true", "5")."""
        values: list[dict[str, Any]] = [
            {"name": "GRACEFUL_SHUTDOWN_DELAY", "value": 5},
            {"name": "GRACEFUL_SEND_RETRY_AFTER", "value": True},
        ]
        assert codes_of(pod(container(env=values))) == []


class TestUnreadableValues:
    """GC011: values resolved only at run time; defaults are assumed."""

    def test_manifest(self) -> None:
        """valueFrom and envFrom are one GC011 each, info only."""
        findings = findings_in("gc011-value-from.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC011", "info"), ("GC011", "info")]
        assert findings[0].message.startswith("GRACEFUL_SHUTDOWN_DELAY (valueFrom)")
        assert findings[1].message.startswith("envFrom configMapRef graceful-settings")

    def test_secret_ref_and_other_variables(self) -> None:
        """envFrom secretRef is GC011 too; other variables (PORT, from valueFrom) are no concern."""
        values: list[dict[str, Any]] = [
            {"name": "PORT", "value": "8000"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            *env(GRACEFUL_SHUTDOWN_DELAY="5"),
        ]
        doc = pod(container(env=values, envFrom=[{"secretRef": {"name": "creds"}}, {"prefix": "X_"}]))
        messages = [f.message for f in check_documents([doc], "test")]
        assert [m.split(" is resolved")[0] for m in messages] == ["envFrom secretRef creds", "envFrom"]

    def test_variable_reference(self) -> None:
        """A $(VAR) reference is expanded by the kubelet: GC011, and the default is used."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="$(DELAY)")
        assert codes_of(pod(container(env=values))) == ["GC011"]

    def test_value_from_marks_a_graceful_container(self) -> None:
        """A GRACEFUL_* variable from valueFrom still makes the container one to check."""
        values = [{"name": "GRACEFUL_DRAIN_TIMEOUT", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
        assert codes_of(pod(container(command=["app"], env=values, readinessProbe=None))) == [
            "GC001",
            "GC011",
        ]
