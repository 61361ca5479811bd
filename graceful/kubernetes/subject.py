"""What a rule looks at: one container that runs graceful, in its workload, with its traffic.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import dataclasses
import functools

from graceful.core.budget import Budget
from graceful.kubernetes.findings import Finding, Severity
from graceful.kubernetes.manifests import Container, Workload
from graceful.kubernetes.settings import Settings
from graceful.kubernetes.sidecars import Drain, native_drains
from graceful.kubernetes.traffic import Traffic

__all__ = ["Subject"]


@dataclasses.dataclass(frozen=True)
class Subject:
    """One container that runs graceful, and everything a rule reads about it."""

    workload: Workload
    container: Container
    settings: Settings
    traffic: Traffic
    replicas: int | None  # the fewest replicas it runs (spec.replicas, or an autoscaler's minReplicas)
    replicas_text: str  # the number and where it comes from, for the findings ("replicas 1 (the default)")

    @functools.cached_property
    def budget(self) -> Budget:
        """Graceful's shutdown budget for this container's settings: ``Config.budget()``, computed once."""
        return self.settings.config.budget()

    @functools.cached_property
    def sidecar_drains(self) -> list[tuple[Container, Drain]]:
        """The pod's native sidecars whose drain is known, in the order they are stopped."""
        return native_drains(self.workload)

    @property
    def pre_stop_sleep(self) -> float:
        """Seconds the container's preStop hook sleeps before SIGTERM."""
        return self.container.pre_stop_sleep

    @property
    def grace_period(self) -> int:
        """The pod's terminationGracePeriodSeconds."""
        return self.workload.grace_period

    def finding(self, severity: Severity, code: str, message: str, fix: str) -> Finding:
        """Return a finding about this container."""
        workload = self.workload
        return Finding(severity, workload.source, workload.kind, workload.name, self.container.name, code, message, fix)
