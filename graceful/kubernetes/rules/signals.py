"""GC007: whether SIGTERM reaches the server at all.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.manifests import shell_script
from graceful.kubernetes.subject import Subject

__all__ = ["shell_form"]

#: ``exec`` where a command starts: the shell replaces itself, SIGTERM reaches the server.
_EXEC_COMMAND = re.compile(r"(?:^|[;&|({\n]|\b(?:then|do|else)\s)\s*exec\s+[^\s;&|)]")


def shell_form(c: Subject) -> Iterator[Finding]:
    """GC007: a shell as PID 1 does not pass SIGTERM on, so graceful never starts its shutdown."""
    script = shell_script(c.argv)
    if script is None or _EXEC_COMMAND.search(script):
        return
    shell = c.argv[0].rsplit("/", 1)[-1]
    yield c.finding(
        "error",
        "GC007",
        f"the command runs through `{shell} -c` without exec: SIGTERM goes to the shell, not Gunicorn,"
        " so nothing drains and the pod is killed at terminationGracePeriodSeconds",
        'start the server with exec ("exec gunicorn ...") or use the exec form:'
        ' command: ["gunicorn", "-c", "python:graceful.conf", ...]',
    )
