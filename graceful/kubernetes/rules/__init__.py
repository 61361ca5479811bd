"""The rules of ``graceful check``: each takes one :class:`~graceful.kubernetes.subject.Subject`
and yields its findings.

What happens when Kubernetes deletes a pod, and what each finding guards::

    T0        the pod is marked for deletion; a preStop hook runs, if any
              (a preStop sleep delays everything below: GC006)
    T0+s      SIGTERM reaches PID 1; it must be Gunicorn, not a shell (GC007)
              /readyz starts failing, serving goes on for shutdown_delay
    ...       the readiness probe sees the failure after at most
              periodSeconds x failureThreshold + timeoutSeconds; the endpoint
              change then takes the propagation allowance to reach every node and
              load balancer. A shorter shutdown_delay sends requests to a
              closed socket (GC004); without a /readyz readiness probe the
              failure is never seen (GC001, GC002); a liveness probe on
              /readyz restarts the container mid-drain (GC003)
    ...       listeners close, in-flight requests drain, cleanup tasks run
    T0+grace  SIGKILL: the whole budget must fit terminationGracePeriodSeconds
              (GC005), graceful's own GRACEFUL_GRACE_PERIOD must agree with it
              (GC010), and graceful must accept its settings at all (GC008,
              GC009). Values that cannot be read here are reported (GC011).

Severities: ``error`` loses requests, kills the pod mid-drain or stops graceful
from starting; ``warning`` is probably wrong; ``info`` says what could not be
checked.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.rules import budget, delay, probes, signals, values
from graceful.kubernetes.subject import Subject

__all__ = ["RULES"]

#: Every rule, in the order its findings are listed.
RULES: tuple[Callable[[Subject], Iterator[Finding]], ...] = (
    probes.readiness,
    probes.liveness,
    delay.shutdown_delay,
    budget.budget,
    delay.pre_stop_sleep,
    signals.shell_form,
    values.refused,
    budget.startup_budget,
    budget.grace_period,
    values.unreadable,
)
