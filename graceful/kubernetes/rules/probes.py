"""GC001, GC002, GC003, GC016: the probes that tell Kubernetes when to send traffic and when to restart.

GC001 **error**, no readiness probe: the pod counts as ready as soon as its
containers start, so a new pod gets requests before Gunicorn listens
(refused connections at every rollout and scale-up), and a pod that is
shutting down looks ready to kube-proxy's fallback to terminating endpoints
(KEP-1669). Loses requests.

GC002 **warning**, a readiness probe that does not see the shutdown (another
path, ``?exclude=shutdown``, a tcpSocket or exec probe): a deleted pod leaves
its Services whatever the probe says (KEP-1672), so in-cluster traffic is not
lost; but readiness checks graceful runs (post-start hooks, ``@readiness_check``)
are not seen either, and the KEP-1669 fallback keeps choosing a pod that is
draining. Probably wrong.

GC003 **error**, a liveness probe on ``/readyz``: ``/readyz`` fails for the
whole shutdown, so ``periodSeconds x failureThreshold`` into it the kubelet
restarts the container mid-drain. Loses the requests in flight.

GC016 **warning**, ``GRACEFUL_HEALTH_BIND`` set but a readiness or liveness
probe still on the app's port: the probe is answered by the app's workers
and threads, so a saturated app fails it (and a liveness probe then restarts
a container that was only busy). Probably wrong: the port is given, the probe
does not use it.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.manifests import Probe
from graceful.kubernetes.settings import HEALTH_BIND, health_port
from graceful.kubernetes.subject import Subject

__all__ = ["FAST_PROBE", "FAST_TIMING", "fails_on_shutdown", "health_port_probes", "liveness", "readiness"]

#: The readiness probe timing the fixes suggest, (periodSeconds, failureThreshold, timeoutSeconds):
#: a cheap /readyz can be probed every second, and two failures in a row ride out one slow response.
FAST_TIMING = (1, 2, 1)
FAST_PROBE = "periodSeconds: {}, failureThreshold: {}, timeoutSeconds: {}".format(*FAST_TIMING)

#: The check behind ``/readyz`` that fails from SIGTERM on (see graceful.http.health).
_SHUTDOWN_CHECK = "shutdown"


def fails_on_shutdown(path: str) -> bool:
    """Tell whether an HTTP path is a graceful readiness endpoint that fails from SIGTERM on."""
    route, _, query = path.partition("?")
    if route.rstrip("/") not in ("/readyz", f"/readyz/{_SHUTDOWN_CHECK}"):
        return False
    return _SHUTDOWN_CHECK not in parse_qs(query).get("exclude", [])


def readiness(c: Subject) -> Iterator[Finding]:
    """GC001 no readiness probe; GC002 a readiness probe that does not see the shutdown."""
    probe = c.container.readiness
    if probe is None:
        port = health_port(c.container) or "<port>"
        yield c.finding(
            "error",
            "GC001",
            "no readinessProbe: a new pod gets requests as soon as its container starts, before the server"
            " listens (refused at every rollout), and a pod shutting down still looks ready to kube-proxy's"
            " fallback to terminating endpoints",
            f"add readinessProbe: {{httpGet: {{path: /readyz, port: {port}}}, {FAST_PROBE}}}",
        )
        return
    if probe.path is None:
        article = "an" if probe.handler[0] in "aeiou" else "a"
        what = f"{article} {probe.handler} probe, not an httpGet on /readyz"
    elif not fails_on_shutdown(probe.path):
        what = f"on {probe.path}, not /readyz"
    else:
        return
    yield c.finding(
        "warning",
        "GC002",
        f"readinessProbe is {what}: it keeps passing while the pod shuts down and does not see graceful's"
        " readiness checks (a deleted pod still leaves its Services, but kube-proxy's fallback to"
        " terminating endpoints keeps choosing it)",
        "use readinessProbe.httpGet.path: /readyz",
    )


def liveness(c: Subject) -> Iterator[Finding]:
    """GC003: a liveness probe on /readyz restarts the container during its own shutdown."""
    probe = c.container.liveness
    if probe is None or probe.path is None or not fails_on_shutdown(probe.path):
        return
    yield c.finding(
        "error",
        "GC003",
        f"livenessProbe is on {probe.path}, which fails for the whole shutdown: periodSeconds {probe.period}"
        f" x failureThreshold {probe.threshold} = {probe.period * probe.threshold}s into it the kubelet"
        " restarts the container mid-drain",
        "point livenessProbe at /livez (it stays 200 during shutdown)",
    )


def health_port_probes(c: Subject) -> Iterator[Finding]:
    """GC016: GRACEFUL_HEALTH_BIND is set, but a probe still goes to the app's port."""
    port = health_port(c.container)
    if port is None:
        return
    for field, probe in (("readinessProbe", c.container.readiness), ("livenessProbe", c.container.liveness)):
        number = _port_number(probe, c) if probe is not None else None
        if probe is None or number is None or number == port:
            continue
        shown = f"{number} ({probe.port})" if isinstance(probe.port, str) else str(number)
        yield c.finding(
            "warning",
            "GC016",
            f"{HEALTH_BIND} answers probes on port {port}, but the {field} is on port {shown}, where the"
            " app's workers answer it: a saturated app fails the probe"
            + (" and the kubelet restarts a container that was only busy" if field == "livenessProbe" else ""),
            f"set {field}.{probe.handler}.port: {port}",
        )


def _port_number(probe: Probe, c: Subject) -> int | None:
    """Return the port a probe connects to: its number, or the containerPort its name stands for."""
    if isinstance(probe.port, str):
        return c.container.ports.get(probe.port)
    return probe.port
