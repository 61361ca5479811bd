"""What ``graceful check`` reports: one :class:`Finding` per problem in one container.

Runs only in the ``graceful check`` command, never in a serving process.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

__all__ = ["Finding", "Severity"]

#: ``error`` loses requests, kills the pod mid-drain or stops graceful from
#: starting; ``warning`` is probably wrong; ``info`` says what could not be checked.
Severity = Literal["error", "warning", "info"]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem in one container: what is wrong, with its numbers, and the fix.

    ``code`` is stable across releases (``GC001`` ...); ``kind`` and ``name``
    name the object (``Deployment``, ``web``); ``source`` is the file read.
    """

    severity: Severity
    source: str
    kind: str
    name: str
    container: str
    code: str
    message: str
    fix: str

    def line(self) -> str:
        """Return the one-line text form: ``source: severity CODE Kind/name[container]: ...``."""
        return (
            f"{self.source}: {self.severity} {self.code} {self.kind}/{self.name}"
            f"[{self.container}]: {self.message}; fix: {self.fix}"
        )
