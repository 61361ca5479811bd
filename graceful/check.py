"""``graceful check``: find the Kubernetes settings that make a graceful pod lose requests.

What happens when Kubernetes deletes a pod, and what each finding guards::

    T0        the pod is marked for deletion; a preStop hook runs, if any
              (a preStop sleep delays everything below: GC006)
    T0+s      SIGTERM reaches PID 1; it must be Gunicorn, not a shell (GC007)
              /readyz starts failing, serving goes on for shutdown_delay
    ...       the readiness probe sees the failure after at most
              periodSeconds x failureThreshold + timeoutSeconds; the endpoint
              change then takes ENDPOINT_PROPAGATION to reach every node and
              load balancer. A shorter shutdown_delay sends requests to a
              closed socket (GC004); without a /readyz readiness probe the
              failure is never seen (GC001, GC002); a liveness probe on
              /readyz restarts the container mid-drain (GC003)
    ...       listeners close, in-flight requests drain, cleanup tasks run
    T0+grace  SIGKILL: the whole budget must fit terminationGracePeriodSeconds
              (GC005), graceful's own GRACEFUL_GRACE_PERIOD must agree with it
              (GC010), and graceful must accept its settings at all (GC008,
              GC009). Values that cannot be read here are reported (GC011).

A container is checked when it runs graceful: it sets a ``GRACEFUL_*``
variable, or its command (or ``GUNICORN_CMD_ARGS``) names ``graceful/conf.py``,
``python:graceful.conf`` (or Django's ``graceful.django.conf``) or ``-m graceful``.

Severities: ``error`` loses requests, kills the pod mid-drain or stops graceful
from starting; ``warning`` is probably wrong; ``info`` says what could not be
checked. :func:`main` exits 0 when there is no error, 1 when there is one, and 2
when an input cannot be read. :func:`check_documents` is pure: it reads the
parsed YAML documents only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TextIO
from urllib.parse import parse_qs

import yaml

from graceful._args import seconds
from graceful.core.config import Config, ConfigError

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "ENDPOINT_PROPAGATION",
    "Finding",
    "Severity",
    "check_documents",
    "main",
]

#: Seconds allowed, after the readiness probe has seen ``/readyz`` fail, for the
#: endpoint change to reach every node and load balancer: the EndpointSlice
#: update travels through the API server's watch, and kube-proxy rewrites its
#: rules at most once a second (``minSyncPeriod``, 1 s by default). 2 s covers
#: one sync plus watch latency on a healthy cluster; ingress controllers and
#: cloud load balancers can need more (``--propagation``).
ENDPOINT_PROPAGATION = 2.0

#: Kubernetes' ``terminationGracePeriodSeconds`` when a pod spec leaves it out.
DEFAULT_GRACE_PERIOD = 30

#: Kubernetes' probe defaults: ``periodSeconds``, ``failureThreshold``, ``timeoutSeconds``.
_PROBE_DEFAULTS = {"periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 1}

#: Where the pod spec sits in each kind that holds one.
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}

_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh"})
_RUNS_GRACEFUL = re.compile(r"graceful/(?:django/)?conf\.py|python:graceful\.(?:django\.)?conf|-m\s+graceful\b")
#: ``exec`` where a command starts: the shell replaces itself, SIGTERM reaches the server.
_EXEC_COMMAND = re.compile(r"(?:^|[;&|({\n]|\b(?:then|do|else)\s)\s*exec\s+[^\s;&|)]")
_SLEEP_IN_SCRIPT = re.compile(r"(?:^|[;&|({\n\s])sleep\s+(\d+(?:\.\d+)?[smhd]?)(?![\w.])")
_SLEEP_ARGUMENT = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_SLEEP_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The check behind ``/readyz`` that fails from SIGTERM on (see DESIGN.md).
_SHUTDOWN_CHECK = "shutdown"

Severity = Literal["error", "warning", "info"]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem in one container: what is wrong, with its numbers, and the fix.

    ``code`` is stable across releases (``GC001`` ...); ``kind`` and ``name``
    name the object (``Deployment``, ``web``); ``source`` is the file read.
    """

    severity: Severity
    source: str
    kind: str
    name: str
    container: str
    code: str
    message: str
    fix: str

    def line(self) -> str:
        """Return the one-line text form: ``source: severity CODE Kind/name[container]: ...``."""
        return (
            f"{self.source}: {self.severity} {self.code} {self.kind}/{self.name}"
            f"[{self.container}]: {self.message}; fix: {self.fix}"
        )


class _UnbudgetedConfig(Config):
    """A :class:`Config` whose values are validated but whose budget is not.

    The checker compares the budget with the pod's own grace period, and asks
    :class:`Config` separately whether graceful would refuse to start (GC009).
    """

    def check_budget(
        self,
        pre_shutdown_timeouts: Iterable[float] = (),
        cleanup_timeouts: Iterable[float] = (),
    ) -> None:
        """Skip the start-up budget check; :func:`_startup_refusal` runs the real one."""


@dataclasses.dataclass(frozen=True)
class _Settings:
    """The graceful settings of one container, as far as they can be read."""

    config: Config  # refused and unreadable values fall back to their defaults
    env: Mapping[str, str]  # the readable, accepted GRACEFUL_* values
    refused: tuple[tuple[str, str], ...]  # (variable, graceful's error message)
    unreadable: tuple[str, ...]  # what could not be read, in words


@dataclasses.dataclass(frozen=True)
class _Container:
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
    settings: _Settings
    propagation: float

    def finding(self, severity: Severity, code: str, message: str, fix: str) -> Finding:
        """Return a finding about this container."""
        return Finding(severity, self.source, self.kind, self.name, self.container, code, message, fix)


# Reading the documents -----------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any] | None:
    """Return ``value`` if it is a mapping, else ``None`` (YAML can hold anything anywhere)."""
    return value if isinstance(value, Mapping) else None


def _dig(value: object, path: Sequence[str]) -> Mapping[str, Any] | None:
    """Follow ``path`` through nested mappings; ``None`` when any step is missing."""
    node = _mapping(value)
    for key in path:
        node = _mapping(node.get(key)) if node is not None else None
    return node


def _mappings(value: object) -> list[Mapping[str, Any]]:
    """Return the mappings of a list, skipping anything else (``None`` is an empty list)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _pod_specs(doc: object) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """Yield ``(kind, name, pod spec)`` for every pod spec in a document, ``List`` items included."""
    obj = _mapping(doc)
    if obj is None:  # empty documents and stray scalars in `helm template` output
        return
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return
    if kind.endswith("List"):
        for item in _mappings(obj.get("items")):
            yield from _pod_specs(item)
        return
    path = _POD_SPEC_PATHS.get(kind)
    spec = _dig(obj, path) if path is not None else None
    if spec is not None:
        name = (_dig(obj, ("metadata",)) or {}).get("name")
        yield kind, str(name) if name else "<unnamed>", spec


def _argv(container: Mapping[str, Any]) -> tuple[str, ...]:
    """Return ``command + args`` as strings (``args`` alone when the image's entrypoint is kept)."""
    parts: list[str] = []
    for key in ("command", "args"):
        value = container.get(key)
        if isinstance(value, list):
            parts.extend(str(item) for item in value)
    return tuple(parts)


def _grace_period(pod_spec: Mapping[str, Any]) -> int:
    """Return the pod's ``terminationGracePeriodSeconds``, or Kubernetes' default of 30."""
    value = pod_spec.get("terminationGracePeriodSeconds")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return DEFAULT_GRACE_PERIOD


def _probeseconds(probe: Mapping[str, Any], key: str) -> int:
    """Return a probe field, or Kubernetes' default when it is absent or zero (as the API server does)."""
    value = probe.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return _PROBE_DEFAULTS[key]


def _http_path(probe: Mapping[str, Any]) -> str | None:
    """Return an httpGet probe's path (``/`` when left out), ``None`` for other probe types."""
    http = _mapping(probe.get("httpGet"))
    if http is None:
        return None
    path = http.get("path")
    return path if isinstance(path, str) and path else "/"


def _fails_on_shutdown(path: str) -> bool:
    """Tell whether an HTTP path is a graceful readiness endpoint that fails from SIGTERM on."""
    route, _, query = path.partition("?")
    if route.rstrip("/") not in ("/readyz", f"/readyz/{_SHUTDOWN_CHECK}"):
        return False
    return _SHUTDOWN_CHECK not in parse_qs(query).get("exclude", [])


def _shell_script(argv: Sequence[str]) -> str | None:
    """Return the script of ``sh -c SCRIPT`` (any common shell, any option order), else ``None``."""
    if not argv or argv[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    has_c = False
    rest = iter(argv[1:])
    for token in rest:
        if token in ("-o", "+o"):  # `bash -o pipefail -c ...`: the option takes a value
            next(rest, None)
        elif token.startswith(("-", "+")) and token != "--":
            has_c = has_c or "c" in token[1:]
        elif token != "--":
            return token if has_c else None
    return None


def _sleepseconds(text: str) -> float:
    """Return the seconds of a ``sleep`` argument (``5``, ``5s``, ``0.5m``); 0 when unreadable."""
    match = _SLEEP_ARGUMENT.fullmatch(text)
    return float(match.group(1)) * _SLEEP_UNITS[match.group(2)] if match else 0.0


def _pre_stop_sleep(container: Mapping[str, Any]) -> float:
    """Return the seconds a preStop hook sleeps before SIGTERM (``sleep`` action or command)."""
    pre_stop = _dig(container, ("lifecycle", "preStop"))
    if pre_stop is None:
        return 0.0
    sleep = _dig(pre_stop, ("sleep",))
    if sleep is not None:  # the `sleep` lifecycle action (Kubernetes 1.29+)
        seconds = sleep.get("seconds")
        return float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0
    command = (_dig(pre_stop, ("exec",)) or {}).get("command")
    argv = [str(item) for item in command] if isinstance(command, list) else []
    if len(argv) >= 2 and argv[0].rsplit("/", 1)[-1] == "sleep":
        return _sleepseconds(argv[1])
    script = _shell_script(argv)
    match = _SLEEP_IN_SCRIPT.search(script) if script is not None else None
    return _sleepseconds(match.group(1)) if match else 0.0


# Graceful's settings -------------------------------------------------------


def _env_text(value: object) -> str:
    """Return an env value as the container would see it (YAML may have parsed it as a number)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _read_env(container: Mapping[str, Any]) -> tuple[dict[str, str], list[str], set[str]]:
    """Return the readable ``GRACEFUL_*``/``GUNICORN_CMD_ARGS`` values, what cannot be read, and every name.

    Later entries win, as in the kubelet. ``valueFrom``, ``envFrom`` and
    ``$(VAR)`` references are resolved only at run time: they are unknown here.
    """
    env = _mappings(container.get("env"))
    entries = {entry["name"]: entry for entry in env if isinstance(entry.get("name"), str)}
    values: dict[str, str] = {}
    unreadable: list[str] = []
    for name, entry in entries.items():
        if not (name.startswith("GRACEFUL_") or name == "GUNICORN_CMD_ARGS"):
            continue
        text = _env_text(entry.get("value", ""))
        if "valueFrom" in entry:
            unreadable.append(f"{name} (valueFrom)")
        elif "$(" in text:
            unreadable.append(f"{name} (a $(VAR) reference)")
        else:
            values[name] = text
    unreadable.extend(_env_from(entry) for entry in _mappings(container.get("envFrom")))
    return values, unreadable, set(entries)


def _env_from(entry: Mapping[str, Any]) -> str:
    """Describe an ``envFrom`` entry: ``envFrom configMapRef settings``."""
    for kind in ("configMapRef", "secretRef"):
        ref = _mapping(entry.get(kind))
        if ref is not None:
            return f"envFrom {kind} {ref.get('name', '<unnamed>')!s}"
    return "envFrom"


def _settings(values: Mapping[str, str], unreadable: Sequence[str]) -> _Settings:
    """Validate each ``GRACEFUL_*`` value the way graceful does at start-up, one at a time.

    One at a time, so that every refused variable is reported, and the others
    still count when the budget is computed.
    """
    accepted: dict[str, str] = {}
    refused: list[tuple[str, str]] = []
    for name, value in values.items():
        if not name.startswith("GRACEFUL_"):
            continue
        try:
            _UnbudgetedConfig.load({name: value})
        except ConfigError as exc:
            refused.append((name, str(exc)))
        else:
            accepted[name] = value
    config = _UnbudgetedConfig.load(accepted)
    return _Settings(config, accepted, tuple(refused), tuple(unreadable))


def _startup_refusal(settings: _Settings) -> str | None:
    """Return graceful's own start-up error for accepted values (the budget check), if any."""
    try:
        Config.load(settings.env)
    except ConfigError as exc:
        return str(exc)
    return None


def _runs_graceful(argv: Sequence[str], env: Mapping[str, str], names: Iterable[str]) -> bool:
    """Tell whether a container runs graceful: a ``GRACEFUL_*`` variable, or graceful's Gunicorn config."""
    if any(name.startswith("GRACEFUL_") for name in names):
        return True
    return bool(_RUNS_GRACEFUL.search(" ".join(argv)) or _RUNS_GRACEFUL.search(env.get("GUNICORN_CMD_ARGS", "")))


def _containers(docs: Iterable[Any], source: str, propagation: float) -> Iterator[_Container]:
    """Yield every container that runs graceful, with what the rules need."""
    for doc in docs:
        for kind, name, pod_spec in _pod_specs(doc):
            for raw in _mappings(pod_spec.get("containers")):
                argv = _argv(raw)
                values, unreadable, names = _read_env(raw)
                if not _runs_graceful(argv, values, names):
                    continue
                yield _Container(
                    source=source,
                    kind=kind,
                    name=name,
                    container=str(raw.get("name", "<unnamed>")),
                    argv=argv,
                    readiness=_mapping(raw.get("readinessProbe")),
                    liveness=_mapping(raw.get("livenessProbe")),
                    pre_stop_sleep=_pre_stop_sleep(raw),
                    grace_period=_grace_period(pod_spec),
                    settings=_settings(values, unreadable),
                    propagation=propagation,
                )


# The rules: each yields its findings for one container ---------------------

#: The readiness probe timing the fixes suggest: a cheap /readyz can be probed every second,
#: and two failures in a row ride out one slow response.
_FAST_PERIOD, _FAST_THRESHOLD, _FAST_TIMEOUT = 1, 2, 1
_FAST_PROBE = f"periodSeconds: {_FAST_PERIOD}, failureThreshold: {_FAST_THRESHOLD}, timeoutSeconds: {_FAST_TIMEOUT}"


def _rule_readiness_probe(c: _Container) -> Iterator[Finding]:
    """GC001 no readiness probe; GC002 a readiness probe that does not see the shutdown."""
    if c.readiness is None:
        yield c.finding(
            "error",
            "GC001",
            "no readinessProbe: /readyz failing at SIGTERM cannot take the pod out of its Services,"
            " and traffic arrives before the app is ready",
            f"add readinessProbe: {{httpGet: {{path: /readyz, port: <port>}}, {_FAST_PROBE}}}",
        )
        return
    path = _http_path(c.readiness)
    if path is None:
        probe_type = next((key for key in ("tcpSocket", "exec", "grpc") if key in c.readiness), "probe")
        yield c.finding(
            "warning",
            "GC002",
            f"readinessProbe is a {probe_type} probe, not an httpGet on /readyz: it keeps passing"
            " while the pod shuts down",
            "use readinessProbe.httpGet.path: /readyz",
        )
    elif not _fails_on_shutdown(path):
        yield c.finding(
            "warning",
            "GC002",
            f"readinessProbe is on {path}, not /readyz: it keeps passing while the pod shuts down",
            "use readinessProbe.httpGet.path: /readyz",
        )


def _rule_liveness_probe(c: _Container) -> Iterator[Finding]:
    """GC003: a liveness probe on /readyz restarts the container during its own shutdown."""
    path = _http_path(c.liveness) if c.liveness is not None else None
    if path is not None and _fails_on_shutdown(path):
        period = _probeseconds(c.liveness or {}, "periodSeconds")
        threshold = _probeseconds(c.liveness or {}, "failureThreshold")
        yield c.finding(
            "error",
            "GC003",
            f"livenessProbe is on {path}, which fails for the whole shutdown: periodSeconds {period}"
            f" x failureThreshold {threshold} = {period * threshold}s into it the kubelet restarts"
            " the container mid-drain",
            "point livenessProbe at /livez (it stays 200 during shutdown)",
        )


def _rule_shutdown_delay(c: _Container) -> Iterator[Finding]:
    """GC004: the delay ends before the endpoint change has reached every node."""
    if c.readiness is None:  # GC001 already; there is no probe to size the delay from
        return
    period = _probeseconds(c.readiness, "periodSeconds")
    threshold = _probeseconds(c.readiness, "failureThreshold")
    timeout = _probeseconds(c.readiness, "timeoutSeconds")
    needed = period * threshold + timeout + c.propagation
    delay = c.settings.config.shutdown_delay
    serving = c.pre_stop_sleep + delay
    if serving >= needed:
        return
    where = f"preStop sleep {c.pre_stop_sleep:g}s + " if c.pre_stop_sleep else ""
    outcome = "get 429" if c.settings.config.send_retry_after else "reach a closed socket"
    fast = _FAST_PERIOD * _FAST_THRESHOLD + _FAST_TIMEOUT + c.propagation
    yield c.finding(
        "error",
        "GC004",
        f"{where}shutdown_delay {delay:g}s < periodSeconds {period} x failureThreshold {threshold}"
        f" + timeoutSeconds {timeout} + endpoint propagation {c.propagation:g}s = {needed:g}s:"
        f" for up to {needed - serving:g}s requests still routed here {outcome}",
        f"set GRACEFUL_SHUTDOWN_DELAY={needed - c.pre_stop_sleep:g} (and terminationGracePeriodSeconds"
        f" to fit), or probe faster ({_FAST_PROBE} needs {fast:g}s)",
    )


def _budget_text(c: _Container) -> tuple[float, str]:
    """Return the pod's whole shutdown budget and how it adds up."""
    terms = c.settings.config.budget().terms()
    text = (
        f"max(shutdown_delay {terms['shutdown_delay']:g}s, pre-shutdown hook"
        f" {terms['longest pre-shutdown hook']:g}s) + drain_timeout {terms['drain_timeout']:g}s"
        f" + cleanup {terms['longest cleanup task']:g}s + margin {terms['margin']:g}s"
    )
    if c.pre_stop_sleep:
        text = f"preStop sleep {c.pre_stop_sleep:g}s + {text}"
    return c.pre_stop_sleep + terms["total"], text


def _rule_budget(c: _Container) -> Iterator[Finding]:
    """GC005: the shutdown does not fit terminationGracePeriodSeconds; SIGKILL ends the drain."""
    total, text = _budget_text(c)
    if total <= c.grace_period:
        return
    yield c.finding(
        "error",
        "GC005",
        f"{text} = {total:g}s > terminationGracePeriodSeconds {c.grace_period}: the pod is killed mid-drain",
        f"set terminationGracePeriodSeconds: {math.ceil(total)} (and GRACEFUL_GRACE_PERIOD="
        f"{math.ceil(total) - c.pre_stop_sleep:g}),"
        " or lower GRACEFUL_SHUTDOWN_DELAY, GRACEFUL_DRAIN_TIMEOUT or GRACEFUL_HOOK_TIMEOUT",
    )


def _rule_pre_stop_sleep(c: _Container) -> Iterator[Finding]:
    """GC006: a preStop sleep before graceful's own delay waits twice."""
    delay = c.settings.config.shutdown_delay
    if c.pre_stop_sleep and delay:
        yield c.finding(
            "warning",
            "GC006",
            f"preStop sleep {c.pre_stop_sleep:g}s runs before SIGTERM, then graceful keeps serving for"
            f" shutdown_delay {delay:g}s: the delay is counted twice ({c.pre_stop_sleep + delay:g}s)",
            "remove the preStop hook and size GRACEFUL_SHUTDOWN_DELAY alone"
            " (graceful fails /readyz and keeps serving during it)",
        )


def _rule_shell_form(c: _Container) -> Iterator[Finding]:
    """GC007: a shell as PID 1 does not pass SIGTERM on, so graceful never starts its shutdown."""
    script = _shell_script(c.argv)
    if script is None or _EXEC_COMMAND.search(script):
        return
    shell = c.argv[0].rsplit("/", 1)[-1]
    yield c.finding(
        "error",
        "GC007",
        f"the command runs through `{shell} -c` without exec: SIGTERM goes to the shell, not Gunicorn,"
        " so nothing drains and the pod is killed at terminationGracePeriodSeconds",
        'start the server with exec ("exec gunicorn ...") or use the exec form:'
        ' command: ["gunicorn", "-c", "python:graceful.conf", ...]',
    )


def _rule_refused_values(c: _Container) -> Iterator[Finding]:
    """GC008 a value graceful refuses; GC009 a budget over graceful's own grace period."""
    for name, error in c.settings.refused:
        yield c.finding("error", "GC008", f"graceful refuses to start: {error}", f"correct or remove {name}")
    if c.settings.refused:  # graceful stops at the first bad value; the budget is moot
        return
    refusal = _startup_refusal(c.settings)
    if refusal is not None:
        total, _ = _budget_text(c)
        need = math.ceil(total - c.pre_stop_sleep)
        yield c.finding(
            "error",
            "GC009",
            f"graceful refuses to start: {refusal}",
            f"set GRACEFUL_GRACE_PERIOD={need} (and terminationGracePeriodSeconds to at least"
            f" {math.ceil(total)}), or lower the budget",
        )


def _rule_grace_period(c: _Container) -> Iterator[Finding]:
    """GC010: graceful's GRACEFUL_GRACE_PERIOD disagrees with the time the pod really has."""
    ours = c.settings.config.grace_period
    available = c.grace_period - c.pre_stop_sleep
    if ours == available:
        return
    origin = "GRACEFUL_GRACE_PERIOD" if "GRACEFUL_GRACE_PERIOD" in c.settings.env else "graceful's default"
    has = f"terminationGracePeriodSeconds {c.grace_period}"
    if c.pre_stop_sleep:
        has += f" - preStop sleep {c.pre_stop_sleep:g}s = {available:g}s"
    if ours > available:
        yield c.finding(
            "warning",
            "GC010",
            f"{origin} grace_period {ours:g}s > {has}: graceful's start-up budget check passes"
            " budgets the pod cannot keep",
            f"set GRACEFUL_GRACE_PERIOD={available:g}",
        )
    else:
        yield c.finding(
            "info",
            "GC010",
            f"{origin} grace_period {ours:g}s < {has}: graceful's start-up budget check is stricter than the pod",
            f"set GRACEFUL_GRACE_PERIOD={available:g}",
        )


def _rule_unreadable(c: _Container) -> Iterator[Finding]:
    """GC011: values that are resolved only at run time; their defaults are assumed."""
    for what in c.settings.unreadable:
        yield c.finding(
            "info",
            "GC011",
            f"{what} is resolved at run time and cannot be read here: graceful's defaults are assumed",
            "set GRACEFUL_* with value: in the container, or check the rendered pod spec",
        )


_RULES: tuple[Callable[[_Container], Iterator[Finding]], ...] = (
    _rule_readiness_probe,
    _rule_liveness_probe,
    _rule_shutdown_delay,
    _rule_budget,
    _rule_pre_stop_sleep,
    _rule_shell_form,
    _rule_refused_values,
    _rule_grace_period,
    _rule_unreadable,
)


def _check(docs: Iterable[Any], source: str, propagation: float) -> tuple[int, list[Finding]]:
    """Return how many containers run graceful, and the findings about them."""
    count = 0
    findings: list[Finding] = []
    for container in _containers(docs, source, propagation):
        count += 1
        for rule in _RULES:
            findings.extend(rule(container))
    return count, findings


def check_documents(docs: Iterable[Any], source: str, *, propagation: float = ENDPOINT_PROPAGATION) -> list[Finding]:
    """Return the findings for every container that runs graceful in parsed Kubernetes documents.

    ``docs`` are what ``yaml.safe_load_all`` yields; ``None``, scalars and
    kinds without a pod spec are skipped, ``List`` items are looked into.
    ``source`` names the input in each finding. ``propagation`` is the
    endpoint-propagation allowance in seconds. Pure: reads nothing else.
    """
    return _check(docs, source, propagation)[1]


# The command line ----------------------------------------------------------


class _Unreadable(Exception):
    """An input that is not a readable YAML file; the message says why, for the user."""


def _load(path: str) -> tuple[str, list[Any]]:
    """Return an input's name for findings and its parsed documents; raise :class:`_Unreadable`."""
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as stream:
                text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _Unreadable(f"cannot read {source}: {reason}") from None
    try:
        return source, list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise _Unreadable(f"{source} is not valid YAML: {_yaml_reason(exc)}") from None


def _yaml_reason(exc: yaml.YAMLError) -> str:
    """Return a one-line reason with the line and column, instead of PyYAML's multi-line text."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem or exc.context} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc).replace("\n", " ")


def _parser() -> argparse.ArgumentParser:
    """Return the parser for ``graceful check``'s arguments."""
    parser = argparse.ArgumentParser(
        prog="graceful check",
        description="Check Kubernetes manifests (kubectl YAML, `helm template` output) for the"
        " settings that make a graceful pod lose requests.",
        epilog="Exit status: 0 no error, 1 an error-severity finding, 2 an unreadable input.",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="manifest files; - reads standard input (the default)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.add_argument(
        "--propagation",
        type=seconds,
        default=ENDPOINT_PROPAGATION,
        metavar="SECONDS",
        help="seconds allowed for an endpoint change to reach every node and load balancer"
        f" (default {ENDPOINT_PROPAGATION:g})",
    )
    return parser


def _write_text(out: TextIO, err: TextIO, findings: Sequence[Finding], checked: int, read: int) -> None:
    """Print one line per finding, then a summary on standard error."""
    for finding in findings:
        print(finding.line(), file=out)
    if not read:  # every input was unreadable, and said so already
        return
    if not checked:
        print(
            "graceful check: no container runs graceful (set a GRACEFUL_* variable, or run Gunicorn"
            " with -c python:graceful.conf)",
            file=err,
        )
        return
    counts = {severity: sum(f.severity == severity for f in findings) for severity in ("error", "warning", "info")}
    print(
        f"graceful check: {checked} container(s) checked: {counts['error']} error(s),"
        f" {counts['warning']} warning(s), {counts['info']} info",
        file=err,
    )


def _write_json(out: TextIO, findings: Sequence[Finding], checked: int, unreadable: Sequence[str]) -> None:
    """Print one JSON document: ``containers_checked``, ``findings`` and ``unreadable`` inputs."""
    report = {
        "containers_checked": checked,
        "findings": [dataclasses.asdict(finding) for finding in findings],
        "unreadable": list(unreadable),
    }
    json.dump(report, out, indent=2)
    out.write("\n")


def _exit_status(exc: SystemExit) -> int:
    """Return argparse's exit status (0 after --help, 2 after a usage error) as an int."""
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``graceful check [FILE...]``; return 0 (clean), 1 (an error finding) or 2 (unreadable input).

    Findings go to standard output, one line each (or one JSON document with
    ``--format json``); the summary and unreadable inputs go to standard error.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors; we return instead
        return _exit_status(exc)
    paths: list[str] = args.files or ["-"]
    if paths == ["-"] and not args.files and sys.stdin.isatty():
        print(
            "graceful check: no FILE given and standard input is a terminal (try: - or a file)",
            file=sys.stderr,
        )
        return 2
    checked = read = 0
    findings: list[Finding] = []
    unreadable: list[str] = []
    for path in paths:
        try:
            source, docs = _load(path)
        except _Unreadable as exc:
            unreadable.append(str(exc))
            print(f"graceful check: {exc}", file=sys.stderr)
            continue
        count, found = _check(docs, source, args.propagation)
        read += 1
        checked += count
        findings.extend(found)
    if args.format == "json":
        _write_json(sys.stdout, findings, checked, unreadable)
    else:
        _write_text(sys.stdout, sys.stderr, findings, checked, read)
    if unreadable:
        return 2
    return 1 if any(finding.severity == "error" for finding in findings) else 0
