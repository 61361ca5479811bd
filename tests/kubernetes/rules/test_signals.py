"""Tests for graceful.kubernetes.rules.signals: GC007."""

from __future__ import annotations

import pytest

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
