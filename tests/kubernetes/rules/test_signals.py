"""Tests for graceful.kubernetes.rules.signals: GC007 and GC012."""

from __future__ import annotations

import pytest

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import codes_of, container, findings_in, pod


class TestShellForm:
    """GC007: a shell as PID 1 keeps SIGTERM from Gunicorn."""

    def test_manifest(self) -> None:
        """The GC007 manifest (command sh -c, script in args) has exactly GC007, an error."""
        (finding,) = findings_in("gc007-shell-form.yaml")
        assert (finding.code, finding.severity) == ("GC007", "error")
        assert "`sh -c` without exec" in finding.message

    @pytest.mark.parametrize(
        "command",
        [
            ["sh", "-c", "exec gunicorn -c python:graceful.conf app:app"],
            ["/bin/bash", "-c", "cd /srv && exec gunicorn -c python:graceful.conf app:app"],
            ["bash", "-o", "pipefail", "-ec", "set -u\nexec gunicorn -c python:graceful.conf app:app"],
            ["gunicorn", "-c", "python:graceful.conf", "app:app"],
            ["sh", "/entrypoint.sh"],
            ["sh", "-c"],
            ["sh", "-e", "-c", "--", "exec gunicorn -c python:graceful.conf app:app"],
        ],
    )
    def test_fine_commands(self, command: list[str]) -> None:
        """exec in the script, the exec form and a script file are not GC007."""
        assert codes_of(pod(container(command=command))) == []

    @pytest.mark.parametrize(
        "command",
        [
            ["bash", "-c", "gunicorn -c python:graceful.conf app:app"],
            ["/bin/sh", "-ec", "echo exec; gunicorn -c python:graceful.conf app:app"],
            ["bash", "-o", "pipefail", "-c", "gunicorn -c python:graceful.conf app:app | tee log"],
        ],
    )
    def test_shell_without_exec(self, command: list[str]) -> None:
        """A shell script without an exec command is GC007, whatever the options."""
        assert codes_of(pod(container(command=command))) == ["GC007"]


class TestStopSignal:
    """GC012: a lifecycle.stopSignal that does not make the server drain."""

    def test_manifest(self) -> None:
        """The GC012 manifest (stopSignal SIGINT under Gunicorn) has exactly GC012, an error."""
        (finding,) = findings_in("gc012-stop-signal.yaml")
        assert (finding.code, finding.severity) == ("GC012", "error")
        assert (
            "lifecycle.stopSignal is SIGINT: Gunicorn stops at once, without the delay or the drain" in finding.message
        )
        assert "set it to SIGTERM" in finding.fix

    def test_sigterm_manifest(self) -> None:
        """stopSignal SIGTERM is what Kubernetes sends anyway: no finding."""
        assert findings_in("gc012-stop-signal-sigterm.yaml") == []

    @pytest.mark.parametrize(
        ("signal", "says"),
        [
            ("SIGQUIT", "stops at once"),
            ("SIGKILL", "is killed at once"),
            ("SIGHUP", "reloads its workers and keeps running"),
            ("SIGUSR2", "starts a new master"),
            ("SIGPWR", "does not stop gracefully on it"),
            ("INT", "stops at once"),
        ],
    )
    def test_other_signals_under_gunicorn(self, signal: str, says: str) -> None:
        """Every stop signal but SIGTERM is GC012 under Gunicorn, saying what Gunicorn does instead."""
        (finding,) = check_documents([pod(container(lifecycle={"stopSignal": signal}), os={"name": "linux"})], "test")
        assert finding.code == "GC012"
        assert says in finding.message

    def test_sigint_under_graceful_serve(self) -> None:
        """graceful serve shuts down gracefully on SIGINT too: no finding; SIGQUIT still is one."""
        command = ["python", "-m", "graceful", "serve", "app:app"]
        assert codes_of(pod(container(command=command, lifecycle={"stopSignal": "SIGINT"}))) == []
        (finding,) = check_documents([pod(container(command=command, lifecycle={"stopSignal": "SIGQUIT"}))], "t")
        assert "graceful serve stops gracefully only on SIGTERM or SIGINT" in finding.message

    def test_no_stop_signal(self) -> None:
        """Without lifecycle.stopSignal (the usual case) there is no finding."""
        assert codes_of(pod(container(lifecycle={"preStop": {"httpGet": {"path": "/x", "port": 8000}}}))) == []
