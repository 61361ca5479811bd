"""Running the rules: which containers run graceful, in which workload, with which traffic.

:func:`check` reads an :class:`~graceful.kubernetes.manifests.Inventory`;
:func:`check_documents` is the same for parsed documents, and pure: it reads
nothing else.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.manifests import Autoscaler, Inventory, Workload
from graceful.kubernetes.rules import RULES
from graceful.kubernetes.settings import Settings
from graceful.kubernetes.subject import Subject
from graceful.kubernetes.traffic import Routing

__all__ = ["check", "check_documents"]

#: The kinds whose ``spec.replicas`` defaults to 1 when left out.
_REPLICATED = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"})


def check(
    inventory: Inventory, *, traffic: str | None = None, propagation: float | None = None
) -> tuple[int, list[Finding]]:
    """Return how many containers run graceful, and the findings about them, in input order.

    ``traffic`` states where the traffic comes from for every workload (one
    of :data:`graceful.kubernetes.traffic.CASES`; read from the input when
    ``None``); ``propagation`` replaces that case's figure, in seconds.
    """
    routing = Routing(inventory, case=traffic, propagation=propagation)
    autoscalers: dict[tuple[str, str], list[Autoscaler]] = {}
    for autoscaler in inventory.autoscalers:
        autoscalers.setdefault((autoscaler.target_kind, autoscaler.target_name), []).append(autoscaler)
    settings: dict[object, Settings] = {}  # by env: a chart's many copies of one container are validated once
    count = 0
    findings: list[Finding] = []
    for workload in inventory.workloads:
        replicas, replicas_text = _replicas(workload, autoscalers.get((workload.kind, workload.name), []))
        where = routing.traffic(workload)
        for container in workload.containers:
            if not container.runs_graceful:
                continue
            count += 1
            key = (tuple(container.env.items()), container.env_from)
            if key not in settings:
                settings[key] = Settings.of(container)
            subject = Subject(workload, container, settings[key], where, replicas, replicas_text)
            for rule in RULES:
                findings.extend(rule(subject))
    return count, findings


def _replicas(workload: Workload, autoscalers: list[Autoscaler]) -> tuple[int | None, str]:
    """Return the fewest replicas the workload runs, and in words where that comes from."""
    for autoscaler in autoscalers:
        if autoscaler.scales(workload):
            return (
                autoscaler.min_replicas,
                f"minReplicas {autoscaler.min_replicas} (HorizontalPodAutoscaler/{autoscaler.name})",
            )
    if workload.kind not in _REPLICATED:
        return None, ""
    if workload.replicas is None:
        return 1, "replicas 1 (the default)"
    return workload.replicas, f"replicas {workload.replicas}"


def check_documents(
    docs: Iterable[Any], source: str, *, traffic: str | None = None, propagation: float | None = None
) -> list[Finding]:
    """Return the findings for every container that runs graceful in parsed Kubernetes documents.

    ``docs`` are what ``yaml.safe_load_all`` yields; ``None``, scalars and
    kinds the rules do not use are skipped, ``List`` items are looked into.
    ``source`` names the input in each finding; ``traffic`` and
    ``propagation`` are as for :func:`check`. Raises
    :class:`~graceful.kubernetes.manifests.ManifestError` for a value
    Kubernetes would refuse.
    """
    inventory = Inventory()
    for doc in docs:
        inventory.add(doc, source)
    return check(inventory, traffic=traffic, propagation=propagation)[1]
