"""GC007, GC012: whether the signal that stops the pod reaches the server, and means "drain".

GC007 **error**, a ``sh -c`` command without ``exec``: the shell is PID 1 and
does not pass SIGTERM on, so graceful never starts its shutdown and the pod is
SIGKILLed at the end of its grace period with every request in flight.

GC012 **error**, a ``lifecycle.stopSignal`` (KEP-4960) that is not a graceful
stop: SIGINT and SIGQUIT make Gunicorn stop at once (no delay, no drain);
SIGKILL stops everything at once; others (SIGHUP reloads, SIGUSR1 reopens
logs, ...) do not stop the server at all, so SIGKILL ends it at the end of the
grace period. Loses requests either way. ``graceful serve`` treats SIGINT
like SIGTERM, so SIGINT is fine there.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.manifests import shell_script
from graceful.kubernetes.subject import Subject

__all__ = ["shell_form", "stop_signal"]

#: ``exec`` where a command starts: the shell replaces itself, SIGTERM reaches the server.
_EXEC_COMMAND = re.compile(r"(?:^|[;&|({\n]|\b(?:then|do|else)\s)\s*exec\s+[^\s;&|)]")

#: What Gunicorn's arbiter does on each signal that is not a graceful stop.
_GUNICORN = {
    "SIGINT": "stops at once, without the delay or the drain",
    "SIGQUIT": "stops at once, without the delay or the drain",
    "SIGKILL": "is killed at once",
    "SIGHUP": "reloads its workers and keeps running",
    "SIGUSR1": "reopens its log files and keeps running",
    "SIGUSR2": "starts a new master and keeps running",
    "SIGTTIN": "adds a worker and keeps running",
    "SIGTTOU": "removes a worker and keeps running",
    "SIGWINCH": "stops its workers (when daemonized) and keeps running",
}


def shell_form(c: Subject) -> Iterator[Finding]:
    """GC007: a shell as PID 1 does not pass SIGTERM on, so graceful never starts its shutdown."""
    argv = c.container.argv
    script = shell_script(argv)
    if script is None or _EXEC_COMMAND.search(script):
        return
    shell = argv[0].rsplit("/", 1)[-1]
    yield c.finding(
        "error",
        "GC007",
        f"the command runs through `{shell} -c` without exec: SIGTERM goes to the shell, not Gunicorn,"
        " so nothing drains and the pod is killed at terminationGracePeriodSeconds",
        'start the server with exec ("exec gunicorn ...") or use the exec form:'
        ' command: ["gunicorn", "-c", "python:graceful.conf", ...]',
    )


def stop_signal(c: Subject) -> Iterator[Finding]:
    """GC012: lifecycle.stopSignal is not one the server stops gracefully on."""
    written = c.container.stop_signal
    if written is None:
        return
    name = written.strip().upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    if name == "SIGTERM" or (name == "SIGINT" and c.container.runs_graceful_serve):
        return
    if c.container.runs_graceful_serve:
        what = "graceful serve stops gracefully only on SIGTERM or SIGINT"
    else:
        what = f"Gunicorn {_GUNICORN.get(name, 'does not stop gracefully on it')}"
    yield c.finding(
        "error",
        "GC012",
        f"lifecycle.stopSignal is {written}: {what}, so requests in flight are cut"
        " (at once, or by SIGKILL at terminationGracePeriodSeconds)",
        "remove lifecycle.stopSignal (SIGTERM is the default) or set it to SIGTERM",
    )
