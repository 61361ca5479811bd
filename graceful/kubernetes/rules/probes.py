"""GC001-GC003: the probes that tell Kubernetes when to send traffic and when to restart.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.manifests import http_path, probe_seconds
from graceful.kubernetes.subject import Subject

__all__ = ["FAST_PERIOD", "FAST_PROBE", "FAST_THRESHOLD", "FAST_TIMEOUT", "fails_on_shutdown", "liveness", "readiness"]

#: The readiness probe timing the fixes suggest: a cheap /readyz can be probed every second,
#: and two failures in a row ride out one slow response.
FAST_PERIOD, FAST_THRESHOLD, FAST_TIMEOUT = 1, 2, 1
FAST_PROBE = f"periodSeconds: {FAST_PERIOD}, failureThreshold: {FAST_THRESHOLD}, timeoutSeconds: {FAST_TIMEOUT}"

#: The check behind ``/readyz`` that fails from SIGTERM on (see graceful.wsgi.health).
_SHUTDOWN_CHECK = "shutdown"


def fails_on_shutdown(path: str) -> bool:
    """Tell whether an HTTP path is a graceful readiness endpoint that fails from SIGTERM on."""
    route, _, query = path.partition("?")
    if route.rstrip("/") not in ("/readyz", f"/readyz/{_SHUTDOWN_CHECK}"):
        return False
    return _SHUTDOWN_CHECK not in parse_qs(query).get("exclude", [])


def readiness(c: Subject) -> Iterator[Finding]:
    """GC001 no readiness probe; GC002 a readiness probe that does not see the shutdown."""
    if c.readiness is None:
        yield c.finding(
            "error",
            "GC001",
            "no readinessProbe: /readyz failing at SIGTERM cannot take the pod out of its Services,"
            " and traffic arrives before the app is ready",
            f"add readinessProbe: {{httpGet: {{path: /readyz, port: <port>}}, {FAST_PROBE}}}",
        )
        return
    path = http_path(c.readiness)
    if path is None:
        probe_type = next((key for key in ("tcpSocket", "exec", "grpc") if key in c.readiness), "probe")
        yield c.finding(
            "warning",
            "GC002",
            f"readinessProbe is a {probe_type} probe, not an httpGet on /readyz: it keeps passing"
            " while the pod shuts down",
            "use readinessProbe.httpGet.path: /readyz",
        )
    elif not fails_on_shutdown(path):
        yield c.finding(
            "warning",
            "GC002",
            f"readinessProbe is on {path}, not /readyz: it keeps passing while the pod shuts down",
            "use readinessProbe.httpGet.path: /readyz",
        )


def liveness(c: Subject) -> Iterator[Finding]:
    """GC003: a liveness probe on /readyz restarts the container during its own shutdown."""
    path = http_path(c.liveness) if c.liveness is not None else None
    if path is not None and fails_on_shutdown(path):
        period = probe_seconds(c.liveness or {}, "periodSeconds")
        threshold = probe_seconds(c.liveness or {}, "failureThreshold")
        yield c.finding(
            "error",
            "GC003",
            f"livenessProbe is on {path}, which fails for the whole shutdown: periodSeconds {period}"
            f" x failureThreshold {threshold} = {period * threshold}s into it the kubelet restarts"
            " the container mid-drain",
            "point livenessProbe at /livez (it stays 200 during shutdown)",
        )
