"""GC015: a rollout that leaves no pod serving.

GC015 **warning**, a Deployment whose rollout may stop every old pod before a
new one is ready (``strategy: Recreate``, or ``maxUnavailable`` reaching the
replica count, as ``replicas: 1`` with ``maxSurge: 0`` does), or a StatefulSet
of one replica (a StatefulSet replaces a pod by deleting it first). For a
while no pod serves, so zero lost requests is impossible however graceful
each shutdown is. A warning, not an error: the configuration may be chosen
knowingly (a singleton, a volume only one pod can mount), and nothing the
pod does can fix it.

The numbers follow the Deployment controller (``ResolveFenceposts`` in
kubernetes ``pkg/controller/deployment/util``): a percentage of ``maxSurge``
rounds up, of ``maxUnavailable`` down, both default to 25%, and when both
come to 0 ``maxUnavailable`` is taken as 1. An autoscaler's ``minReplicas``
stands for ``spec.replicas`` when one targets the workload.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.subject import Subject

__all__ = ["rollout"]

_DEFAULT = "25%"


def _scaled(value: int | str | None, replicas: int, *, round_up: bool) -> int:
    """Return ``maxSurge``/``maxUnavailable`` in pods (Kubernetes' default 25% when left out)."""
    value = _DEFAULT if value is None else value
    if isinstance(value, int):
        return value
    share = int(value.rstrip("%")) * replicas / 100
    return math.ceil(share) if round_up else math.floor(share)


def rollout(c: Subject) -> Iterator[Finding]:
    """GC015: the rollout strategy may leave no pod serving."""
    workload, replicas = c.workload, c.replicas
    if replicas is None or replicas < 1:
        return
    if workload.kind == "Deployment" and workload.strategy == "Recreate":
        yield c.finding(
            "warning",
            "GC015",
            "strategy Recreate stops every pod before the new ones start: during a rollout no pod serves,"
            " so zero lost requests is impossible",
            "use strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}",
        )
    elif workload.kind == "Deployment":
        surge = _scaled(workload.max_surge, replicas, round_up=True)
        unavailable = _scaled(workload.max_unavailable, replicas, round_up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        if unavailable < replicas:
            return
        pods = "the only pod" if replicas == 1 else f"all {replicas} pods"
        yield c.finding(
            "warning",
            "GC015",
            f"{c.replicas_text} with maxSurge {surge} and maxUnavailable {unavailable}: a rollout"
            f" may stop {pods} before a replacement is ready, so for a while no pod serves and zero lost"
            " requests is impossible",
            "set rollingUpdate: {maxSurge: 1, maxUnavailable: 0}"
            + (" (or run 2 or more replicas)" if replicas == 1 else ""),
        )
    elif workload.kind == "StatefulSet" and replicas == 1:
        yield c.finding(
            "warning",
            "GC015",
            f"a StatefulSet with {c.replicas_text} replaces its only pod by deleting it first: during a"
            " rollout no pod serves, so zero lost requests is impossible",
            "run 2 or more replicas (a StatefulSet cannot surge)",
        )
