"""GC008, GC011: GRACEFUL_* values graceful refuses, and values only known at run time.

GC008 **error**, a value graceful refuses at start-up (out of range, not a
number, a misspelt ``GRACEFUL_*`` name): the container does not start, and
nothing it would have served is served.

GC011 **info**, a value that comes from ``valueFrom``, ``envFrom`` or a
``$(VAR)`` reference: resolved by the kubelet at run time, it cannot be read
here, so graceful's default is assumed for it. Nothing is known to be wrong.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.subject import Subject

__all__ = ["refused", "unreadable"]


def refused(c: Subject) -> Iterator[Finding]:
    """GC008: a value graceful refuses at start-up."""
    for name, error in c.settings.refused:
        yield c.finding("error", "GC008", f"graceful refuses to start: {error}", f"correct or remove {name}")


def unreadable(c: Subject) -> Iterator[Finding]:
    """GC011: values that are resolved only at run time; their defaults are assumed."""
    for what in c.settings.unreadable:
        yield c.finding(
            "info",
            "GC011",
            f"{what} is resolved at run time and cannot be read here: graceful's defaults are assumed",
            "set GRACEFUL_* with value: in the container, or check the rendered pod spec",
        )
