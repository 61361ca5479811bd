"""What a rule looks at: one container that runs graceful, with what its pod says about it.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from graceful.kubernetes.findings import Finding, Severity
from graceful.kubernetes.settings import Settings

__all__ = ["Subject"]


@dataclasses.dataclass(frozen=True)
class Subject:
    """One container of one workload: everything a rule looks at."""

    source: str
    kind: str
    name: str
    container: str
    argv: tuple[str, ...]
    readiness: Mapping[str, Any] | None
    liveness: Mapping[str, Any] | None
    pre_stop_sleep: float
    grace_period: int  # the pod's terminationGracePeriodSeconds
    settings: Settings
    propagation: float

    def finding(self, severity: Severity, code: str, message: str, fix: str) -> Finding:
        """Return a finding about this container."""
        return Finding(severity, self.source, self.kind, self.name, self.container, code, message, fix)
