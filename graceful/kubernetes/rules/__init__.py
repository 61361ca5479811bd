"""The rules of ``graceful check``: each takes one :class:`~graceful.kubernetes.subject.Subject`
(a container that runs graceful) and yields its findings.

What happens when Kubernetes deletes a pod, and what each finding guards::

    T0        the pod is marked for deletion. The EndpointSlice controller marks
              its endpoints ready: false at once, whatever the readiness probe
              says (KEP-1672); every router stops sending new requests once
              that reaches it, a few seconds in-cluster, a minute or two behind
              cloud load balancers that target pod IPs (traffic.py).
              preStop hooks run (a preStop sleep delays everything below: GC006)
    T0+s      SIGTERM reaches PID 1: it must be the server, not a shell (GC007),
              and the stop signal must mean "drain" (GC012). /readyz fails,
              serving goes on for shutdown_delay, which must outlast the
              routers (GC004); an adaptive delay's floor must outlast what
              the pod cannot observe (GC017); a liveness probe on /readyz would restart the
              container now (GC003). A classic proxy sidecar got SIGTERM too
              and must outlast the serving and the drain (GC014)
    ...       listeners close, in-flight requests drain, cleanup tasks run
    T0+grace  SIGKILL: the whole budget must fit terminationGracePeriodSeconds
              (GC005), and what it leaves must fit the native sidecars that
              stop after the app (GC013); graceful's own GRACEFUL_GRACE_PERIOD
              must agree (GC010), and graceful must accept its settings at all
              (GC008, GC009). Values read only at run time are listed (GC011).

Outside the shutdown: a new pod must not get traffic before it listens
(GC001, GC002), probes should use the health port when there is one (GC016),
and a rollout must keep a pod serving (GC015).

Severities follow one question. ``error``: this loses requests (or keeps
graceful from starting, which loses all of them). ``warning``: this is
probably wrong, but loses nothing by itself, or nothing the pod can help.
``info``: something could not be checked. Each rule module says, per code,
why it has its severity.

| code  | severity       | module     |
|-------|----------------|------------|
| GC001 | error          | probes     |
| GC002 | warning        | probes     |
| GC003 | error          | probes     |
| GC004 | error          | delay      |
| GC005 | error          | budget     |
| GC006 | warning        | delay      |
| GC007 | error          | signals    |
| GC008 | error          | values     |
| GC009 | error          | budget     |
| GC010 | warning / info | budget     |
| GC011 | info           | values     |
| GC012 | error          | signals    |
| GC013 | warning        | sidecars   |
| GC014 | error          | sidecars   |
| GC015 | warning        | rollout    |
| GC016 | warning        | probes     |
| GC017 | warning / info | delay      |

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.rules import budget, delay, probes, rollout, sidecars, signals, values
from graceful.kubernetes.subject import Subject

__all__ = ["RULES"]

#: Every rule, in the order of the codes it reports (the order findings are listed in).
RULES: tuple[Callable[[Subject], Iterator[Finding]], ...] = (
    probes.readiness,  # GC001, GC002
    probes.liveness,  # GC003
    delay.shutdown_delay,  # GC004
    budget.budget,  # GC005
    delay.pre_stop_sleep,  # GC006
    signals.shell_form,  # GC007
    values.refused,  # GC008
    budget.startup_budget,  # GC009
    budget.grace_period,  # GC010
    values.unreadable,  # GC011
    signals.stop_signal,  # GC012
    sidecars.native_sidecars,  # GC013
    sidecars.proxy_sidecars,  # GC014
    rollout.rollout,  # GC015
    probes.health_port_probes,  # GC016
    delay.adaptive_floor,  # GC017
)
