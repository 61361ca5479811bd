"""Tests for graceful.kubernetes.rules.rollout: GC015."""

from __future__ import annotations

from typing import Any

import pytest

from graceful.kubernetes import check_documents
from tests.kubernetes.helpers import codes_of, container, deployment, findings_in, pod


def rolling(surge: Any, unavailable: Any) -> dict[str, Any]:
    """Return a RollingUpdate strategy with these limits (``None`` leaves one out)."""
    limits = {key: value for key, value in (("maxSurge", surge), ("maxUnavailable", unavailable)) if value is not None}
    return {"type": "RollingUpdate", "rollingUpdate": limits}


class TestRollout:
    """GC015: a rollout that may leave no pod serving."""

    def test_recreate_manifest(self) -> None:
        """strategy Recreate is GC015, a warning, whatever the replicas."""
        (finding,) = findings_in("gc015-recreate.yaml")
        assert (finding.code, finding.severity) == ("GC015", "warning")
        assert finding.message.startswith("strategy Recreate stops every pod before the new ones start")

    def test_single_replica_manifest(self) -> None:
        """replicas 1, maxSurge 0, maxUnavailable 1 is GC015 with the numbers."""
        (finding,) = findings_in("gc015-single-replica.yaml")
        assert (finding.code, finding.severity) == ("GC015", "warning")
        assert "replicas 1 with maxSurge 0 and maxUnavailable 1: a rollout may stop the only pod" in finding.message

    def test_surge_manifest(self) -> None:
        """replicas 1 with maxSurge 1 and maxUnavailable 0: no finding."""
        assert findings_in("gc015-rolling-surge.yaml") == []

    @pytest.mark.parametrize(
        ("replicas", "strategy", "gap"),
        [
            (1, None, False),  # defaults: 25% surge rounds up to 1, 25% unavailable down to 0
            (None, None, False),  # replicas left out is 1, same defaults
            (1, rolling(0, None), True),  # both 0: the controller takes maxUnavailable 1
            (1, rolling("0%", "0%"), True),
            (2, rolling(0, 1), False),  # one pod keeps serving
            (2, rolling(1, "100%"), True),  # 100% of 2 rounds down to 2: all may go
            (3, rolling(1, "50%"), False),  # 1.5 rounds down to 1
            (4, rolling(0, 4), True),
        ],
    )
    def test_fenceposts(self, replicas: int | None, strategy: dict[str, Any] | None, gap: bool) -> None:
        """maxSurge rounds up, maxUnavailable down, both 0 means 1: GC015 when it reaches the replicas."""
        spec = {"strategy": strategy} if strategy is not None else {}
        doc = deployment(container(), replicas=replicas, **spec)
        assert ("GC015" in codes_of(doc)) is gap

    def test_autoscaler_minimum_counts(self) -> None:
        """An HPA's minReplicas stands for replicas: 2 at the least is no gap even when replicas says 1."""
        doc = deployment(container(), replicas=1, strategy=rolling(0, 1))
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 2,
            },
        }
        assert codes_of(doc) == ["GC015"]
        assert codes_of(doc, hpa) == []
        hpa["spec"]["minReplicas"] = 1
        (finding,) = check_documents([doc, hpa], "test")
        assert finding.message.startswith("minReplicas 1 (HorizontalPodAutoscaler/web) with maxSurge 0")

    def test_single_replica_statefulset(self) -> None:
        """A StatefulSet of one replica deletes it before replacing it: GC015; two replicas do not."""
        sts = deployment(container(), replicas=1)
        sts["kind"] = "StatefulSet"
        (finding,) = check_documents([sts], "test")
        assert finding.message.startswith("a StatefulSet with replicas 1 replaces its only pod by deleting it first")
        sts["spec"]["replicas"] = 2
        assert codes_of(sts) == []

    def test_bare_pods_and_zero_replicas(self) -> None:
        """A bare Pod has no rollout, and a Deployment scaled to 0 serves nothing anyway: no GC015."""
        assert codes_of(pod(container())) == []
        assert codes_of(deployment(container(), replicas=0, strategy={"type": "Recreate"})) == []
