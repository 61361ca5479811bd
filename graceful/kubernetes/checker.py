"""Running the rules over parsed documents: which containers run graceful, and what is wrong.

:func:`check_documents` is pure: it reads the parsed YAML documents only.
Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.manifests import argv, grace_period, mapping, mappings, pod_specs, pre_stop_sleep
from graceful.kubernetes.rules import RULES
from graceful.kubernetes.settings import read_env, runs_graceful, settings
from graceful.kubernetes.subject import Subject

__all__ = ["ENDPOINT_PROPAGATION", "check", "check_documents"]

#: Seconds allowed, after the readiness probe has seen ``/readyz`` fail, for the
#: endpoint change to reach every node and load balancer: the EndpointSlice
#: update travels through the API server's watch, and kube-proxy rewrites its
#: rules at most once a second (``minSyncPeriod``, 1 s by default). 2 s covers
#: one sync plus watch latency on a healthy cluster; ingress controllers and
#: cloud load balancers can need more (``--propagation``).
ENDPOINT_PROPAGATION = 2.0


def _subjects(docs: Iterable[Any], source: str, propagation: float) -> Iterator[Subject]:
    """Yield every container that runs graceful, with what the rules need."""
    for doc in docs:
        for kind, name, pod_spec in pod_specs(doc):
            for raw in mappings(pod_spec.get("containers")):
                command = argv(raw)
                values, unreadable, names = read_env(raw)
                if not runs_graceful(command, values, names):
                    continue
                yield Subject(
                    source=source,
                    kind=kind,
                    name=name,
                    container=str(raw.get("name", "<unnamed>")),
                    argv=command,
                    readiness=mapping(raw.get("readinessProbe")),
                    liveness=mapping(raw.get("livenessProbe")),
                    pre_stop_sleep=pre_stop_sleep(raw),
                    grace_period=grace_period(pod_spec),
                    settings=settings(values, unreadable),
                    propagation=propagation,
                )


def check(docs: Iterable[Any], source: str, propagation: float) -> tuple[int, list[Finding]]:
    """Return how many containers run graceful, and the findings about them."""
    count = 0
    findings: list[Finding] = []
    for subject in _subjects(docs, source, propagation):
        count += 1
        for rule in RULES:
            findings.extend(rule(subject))
    return count, findings


def check_documents(docs: Iterable[Any], source: str, *, propagation: float = ENDPOINT_PROPAGATION) -> list[Finding]:
    """Return the findings for every container that runs graceful in parsed Kubernetes documents.

    ``docs`` are what ``yaml.safe_load_all`` yields; ``None``, scalars and
    kinds without a pod spec are skipped, ``List`` items are looked into.
    ``source`` names the input in each finding. ``propagation`` is the
    endpoint-propagation allowance in seconds. Pure: reads nothing else.
    """
    return check(docs, source, propagation)[1]
