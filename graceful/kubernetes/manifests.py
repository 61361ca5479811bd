"""The Kubernetes objects ``graceful check`` reads, out of parsed YAML documents.

:class:`Inventory` takes documents one at a time and keeps, in small frozen
records, only what the rules need: the workloads with a container that runs
graceful (Pods, Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs,
CronJobs, PodTemplates, and the items of any ``*List``), and the objects
that say where their traffic comes from or how many replicas they run
(Services, Ingresses, the AWS load balancer controller's
TargetGroupBindings, HorizontalPodAutoscalers). The raw documents are not
kept, so a large input is read in bounded memory.

YAML can hold anything anywhere: a field of the wrong shape (a stray scalar
in ``helm template`` output, ``spec: oops``) is skipped as if absent. But a
number the checker needs that Kubernetes itself would refuse (negative,
``.inf``, ``.nan``, a fraction, beyond int64 seconds, a string) raises
:class:`ManifestError` naming the object, the field and the value: such a
manifest never reaches a cluster, and guessing its meaning would make the
findings wrong.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "Autoscaler",
    "Container",
    "Ingress",
    "Inventory",
    "ManifestError",
    "Probe",
    "Service",
    "TargetGroupBinding",
    "Workload",
    "shell_script",
]

#: Kubernetes' ``terminationGracePeriodSeconds`` when a pod spec leaves it out.
DEFAULT_GRACE_PERIOD = 30

#: Kubernetes' probe defaults: ``periodSeconds``, ``failureThreshold``, ``timeoutSeconds``.
_PROBE_DEFAULTS = {"periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 1}

#: The largest values of Kubernetes' integer fields (``int64`` seconds, ``int32`` counts).
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

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

#: Environment variables a rule reads: graceful's, and the proxy sidecars' drain settings.
_ENV_READ = frozenset({"GUNICORN_CMD_ARGS", "TERMINATION_DRAIN_DURATION_SECONDS", "PROXY_CONFIG"})

_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh"})
_RUNS_GRACEFUL = re.compile(r"graceful/(?:django/)?conf\.py|python:graceful\.(?:django\.)?conf|-m\s+graceful\b")
_GRACEFUL_SERVE = re.compile(r"(?:^|[\s/])graceful\s+serve\b")
_SLEEP_IN_SCRIPT = re.compile(r"(?:^|[;&|({\n\s])sleep\s+(\d+(?:\.\d+)?[smhd]?)(?![\w.])")
_SLEEP_ARGUMENT = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_SLEEP_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PERCENT = re.compile(r"\d{1,10}%")


class ManifestError(Exception):
    """A value Kubernetes would refuse, in a field the checker needs; the message names the object and field."""


# Records ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Probe:
    """A readiness or liveness probe: its handler and timing (Kubernetes' defaults filled in)."""

    handler: str  # httpGet, tcpSocket, exec, grpc, or "probe" when it names none
    path: str | None  # httpGet: the path, "/" when left out; exec: the one `graceful probe` asks, else None
    port: int | str | None  # httpGet/tcpSocket/grpc: a number, or the name of a containerPort
    period: int
    threshold: int
    timeout: int


@dataclasses.dataclass(frozen=True)
class Container:
    """What the rules read of one container."""

    name: str
    image: str
    argv: tuple[str, ...]  # command + args
    env: Mapping[str, str | None]  # the variables a rule reads; None: set by valueFrom
    env_from: tuple[str, ...]  # each envFrom entry, in words ("envFrom configMapRef settings")
    ports: Mapping[str, int]  # containerPort by name
    readiness: Probe | None
    liveness: Probe | None
    pre_stop_sleep: float  # seconds a preStop hook sleeps (the sleep action or a sleep command)
    stop_signal: str | None  # lifecycle.stopSignal (KEP-4960), as written
    restart_policy: str | None  # an init container with "Always" is a native sidecar (KEP-753)

    @property
    def runs_graceful(self) -> bool:
        """A ``GRACEFUL_*`` variable, or graceful's Gunicorn config or ``-m graceful`` in its command."""
        if any(name.startswith("GRACEFUL_") for name in self.env):
            return True
        return bool(
            _RUNS_GRACEFUL.search(" ".join(self.argv)) or _RUNS_GRACEFUL.search(self.env_text("GUNICORN_CMD_ARGS"))
        )

    @property
    def runs_graceful_serve(self) -> bool:
        """Its command is ``graceful serve`` (or ``python -m graceful serve``), not Gunicorn."""
        return bool(_GRACEFUL_SERVE.search(" ".join(self.argv)))

    def env_text(self, name: str) -> str:
        """Return a variable's literal value, ``""`` when it is absent or set by ``valueFrom``."""
        return self.env.get(name) or ""


@dataclasses.dataclass(frozen=True)
class Workload:
    """One object with a pod spec in which at least one container runs graceful."""

    source: str
    kind: str
    name: str
    namespace: str | None
    labels: Mapping[str, str]  # the pod template's
    annotations: Mapping[str, str]  # the pod template's
    grace_period: int  # terminationGracePeriodSeconds
    containers: tuple[Container, ...]
    sidecars: tuple[Container, ...]  # native sidecars (init containers with restartPolicy: Always), in start order
    replicas: int | None  # spec.replicas as written; None when left out or not a field of the kind
    strategy: str | None  # Deployment strategy.type, StatefulSet/DaemonSet updateStrategy.type
    max_surge: int | str | None  # Deployment rollingUpdate.maxSurge as written (a number or "25%")
    max_unavailable: int | str | None  # Deployment/StatefulSet rollingUpdate.maxUnavailable as written


@dataclasses.dataclass(frozen=True)
class Service:
    """A Service: which pods it selects, and the annotations that pick its load balancer."""

    source: str
    name: str
    namespace: str | None
    selector: Mapping[str, str]
    annotations: Mapping[str, str]
    type: str | None
    load_balancer_class: str | None

    def selects(self, workload: Workload) -> bool:
        """Tell whether the Service routes to the workload's pods (same namespace, selector matches)."""
        if not self.selector or not _same_namespace(self.namespace, workload.namespace):
            return False
        return all(workload.labels.get(key) == value for key, value in self.selector.items())


@dataclasses.dataclass(frozen=True)
class Ingress:
    """An Ingress: its class, annotations and the Services it sends traffic to."""

    source: str
    name: str
    namespace: str | None
    class_name: str | None  # spec.ingressClassName, or the kubernetes.io/ingress.class annotation
    annotations: Mapping[str, str]
    services: tuple[str, ...]

    def routes_to(self, service: Service) -> bool:
        """Tell whether a backend of the Ingress is the Service."""
        return service.name in self.services and _same_namespace(self.namespace, service.namespace)


@dataclasses.dataclass(frozen=True)
class TargetGroupBinding:
    """The AWS load balancer controller's binding of a target group to a Service."""

    source: str
    name: str
    namespace: str | None
    service: str
    target_type: str | None

    def binds(self, service: Service) -> bool:
        """Tell whether the binding registers the Service's endpoints."""
        return service.name == self.service and _same_namespace(self.namespace, service.namespace)


@dataclasses.dataclass(frozen=True)
class Autoscaler:
    """A HorizontalPodAutoscaler: the fewest replicas it keeps of its target."""

    source: str
    name: str
    namespace: str | None
    target_kind: str
    target_name: str
    min_replicas: int

    def scales(self, workload: Workload) -> bool:
        """Tell whether the autoscaler sets the workload's replicas."""
        same = (self.target_kind, self.target_name) == (workload.kind, workload.name)
        return same and _same_namespace(self.namespace, workload.namespace)


def _same_namespace(first: str | None, second: str | None) -> bool:
    """Objects without a namespace are taken to be in the namespace they are applied to, together."""
    return first is None or second is None or first == second


# The inventory -----------------------------------------------------------------


@dataclasses.dataclass
class Inventory:
    """What the rules need from a set of documents, gathered one document at a time."""

    workloads: list[Workload] = dataclasses.field(default_factory=list)
    services: list[Service] = dataclasses.field(default_factory=list)
    ingresses: list[Ingress] = dataclasses.field(default_factory=list)
    target_group_bindings: list[TargetGroupBinding] = dataclasses.field(default_factory=list)
    autoscalers: list[Autoscaler] = dataclasses.field(default_factory=list)

    def add(self, doc: object, source: str) -> None:
        """Read one parsed document (a ``*List`` with its items); raise :class:`ManifestError`."""
        pending = [doc]
        while pending:  # Lists of Lists are walked without recursion
            obj = _mapping(pending.pop())
            kind = obj.get("kind") if obj is not None else None
            if obj is None or not isinstance(kind, str):  # empty documents, stray scalars
                continue
            if kind.endswith("List"):
                pending.extend(reversed(_mappings(obj.get("items"))))
            else:
                self._add_object(obj, kind, source)

    def extend(self, other: Inventory) -> None:
        """Add everything another inventory holds (one input read in full)."""
        self.workloads.extend(other.workloads)
        self.services.extend(other.services)
        self.ingresses.extend(other.ingresses)
        self.target_group_bindings.extend(other.target_group_bindings)
        self.autoscalers.extend(other.autoscalers)

    def _add_object(self, obj: Mapping[str, Any], kind: str, source: str) -> None:
        """Read one object of a kind the rules use; ignore the others."""
        meta = _Meta.of(obj, kind)
        if kind in _POD_SPEC_PATHS:
            workload = _workload(obj, kind, meta, source)
            if workload is not None:
                self.workloads.append(workload)
        elif kind == "Service":
            self.services.append(_service(obj, meta, source))
        elif kind == "Ingress":
            self.ingresses.append(_ingress(obj, meta, source))
        elif kind == "TargetGroupBinding":
            binding = _target_group_binding(obj, meta, source)
            if binding is not None:
                self.target_group_bindings.append(binding)
        elif kind == "HorizontalPodAutoscaler":
            autoscaler = _autoscaler(obj, meta, source)
            if autoscaler is not None:
                self.autoscalers.append(autoscaler)


@dataclasses.dataclass(frozen=True)
class _Meta:
    """An object's kind, name and namespace, and how to name it in an error."""

    kind: str
    name: str
    namespace: str | None

    @classmethod
    def of(cls, obj: Mapping[str, Any], kind: str) -> _Meta:
        """Read ``metadata.name`` and ``metadata.namespace``."""
        meta = _mapping(obj.get("metadata")) or {}
        name, namespace = meta.get("name"), meta.get("namespace")
        return cls(
            kind,
            _scalar_text(name) if _is_scalar(name) and name not in (None, "") else "<unnamed>",
            _scalar_text(namespace) if _is_scalar(namespace) and namespace not in (None, "") else None,
        )

    def refuse(self, field: str, value: object, expected: str) -> ManifestError:
        """Return the error for a value Kubernetes would refuse."""
        return ManifestError(
            f"{self.kind}/{self.name}: {field} is {_show(value)}, outside what Kubernetes accepts ({expected})"
        )


# Reading workloads ---------------------------------------------------------------


def _workload(obj: Mapping[str, Any], kind: str, meta: _Meta, source: str) -> Workload | None:
    """Return the workload when a container of its pod spec runs graceful, else ``None``."""
    path = _POD_SPEC_PATHS[kind]
    spec = _dig(obj, path)
    if spec is None:
        return None
    where = ".".join(path)
    containers = tuple(_container(raw, meta, f"{where}.containers", i) for i, raw in _indexed(spec.get("containers")))
    if not any(container.runs_graceful for container in containers):
        return None
    init = (_container(raw, meta, f"{where}.initContainers", i) for i, raw in _indexed(spec.get("initContainers")))
    template = (_dig(obj, (*path[:-1], "metadata")) if kind != "Pod" else _mapping(obj.get("metadata"))) or {}
    controller = _mapping(obj.get("spec")) or {}
    deployment = kind == "Deployment"
    strategy = _mapping(controller.get("strategy" if deployment else "updateStrategy")) or {}
    rolling = _mapping(strategy.get("rollingUpdate")) or {}
    rollout = f"spec.{'strategy' if deployment else 'updateStrategy'}.rollingUpdate"
    grace = _whole(
        spec.get("terminationGracePeriodSeconds"),
        meta,
        f"{where}.terminationGracePeriodSeconds",
        default=DEFAULT_GRACE_PERIOD,
        maximum=INT64_MAX,
        unit="seconds",
    )
    replicated = kind in ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController")
    return Workload(
        source=source,
        kind=kind,
        name=meta.name,
        namespace=meta.namespace,
        labels=_labels(template.get("labels")),
        annotations=_labels(template.get("annotations")),
        grace_period=grace,
        containers=containers,
        sidecars=tuple(container for container in init if container.restart_policy == "Always"),
        replicas=_whole(controller.get("replicas"), meta, "spec.replicas", default=None, maximum=INT32_MAX)
        if replicated
        else None,
        strategy=_text(strategy.get("type")),
        max_surge=_int_or_percent(rolling.get("maxSurge"), meta, f"{rollout}.maxSurge") if deployment else None,
        max_unavailable=_int_or_percent(rolling.get("maxUnavailable"), meta, f"{rollout}.maxUnavailable"),
    )


def _container(raw: Mapping[str, Any], meta: _Meta, where: str, index: int) -> Container:
    """Read one container (``where`` is its list, such as ``spec.template.spec.containers``)."""
    name = _text(raw.get("name")) or "<unnamed>"
    where = f"{where}[{name if name != '<unnamed>' else index}]"
    env, env_from = _env(raw, meta, where)
    lifecycle = _mapping(raw.get("lifecycle")) or {}
    return Container(
        name=name,
        image=_text(raw.get("image")) or "",
        argv=_strings(raw.get("command"), meta, f"{where}.command") + _strings(raw.get("args"), meta, f"{where}.args"),
        env=env,
        env_from=env_from,
        ports=_ports(raw.get("ports"), meta, where),
        readiness=_probe(raw.get("readinessProbe"), meta, f"{where}.readinessProbe"),
        liveness=_probe(raw.get("livenessProbe"), meta, f"{where}.livenessProbe"),
        pre_stop_sleep=_pre_stop_sleep(_mapping(lifecycle.get("preStop")), meta, f"{where}.lifecycle.preStop"),
        stop_signal=_text(lifecycle.get("stopSignal")),
        restart_policy=_text(raw.get("restartPolicy")),
    )


def _env(raw: Mapping[str, Any], meta: _Meta, where: str) -> tuple[dict[str, str | None], tuple[str, ...]]:
    """Return the variables a rule reads (later entries win, as in the kubelet) and the envFrom entries."""
    env: dict[str, str | None] = {}
    for index, entry in _indexed(raw.get("env")):
        name = entry.get("name")
        if not isinstance(name, str) or not (name.startswith("GRACEFUL_") or name in _ENV_READ):
            continue
        value = entry.get("value")
        if "valueFrom" in entry:
            env[name] = None
        elif value is None:
            env[name] = ""
        elif _is_scalar(value):
            env[name] = _scalar_text(value)
        else:
            raise meta.refuse(f"{where}.env[{index}].value", value, "a string")
    return env, tuple(_env_from(entry) for entry in _mappings(raw.get("envFrom")))


def _env_from(entry: Mapping[str, Any]) -> str:
    """Describe an ``envFrom`` entry: ``envFrom configMapRef settings``."""
    for kind in ("configMapRef", "secretRef"):
        ref = _mapping(entry.get(kind))
        if ref is not None:
            return f"envFrom {kind} {_text(ref.get('name')) or '<unnamed>'}"
    return "envFrom"


def _ports(value: object, meta: _Meta, where: str) -> dict[str, int]:
    """Return the named containerPorts."""
    ports: dict[str, int] = {}
    for index, port in _indexed(value):
        name = _text(port.get("name"))
        field = f"{where}.ports[{index}].containerPort"
        number = _whole(port.get("containerPort"), meta, field, default=None, minimum=1, maximum=65535)
        if name and number is not None:
            ports[name] = number
    return ports


def _probe(value: object, meta: _Meta, where: str) -> Probe | None:
    """Read a probe, with Kubernetes' defaults for the timing it leaves out (or sets to 0)."""
    probe = _mapping(value)
    if probe is None:
        return None
    handler = next((key for key in ("httpGet", "tcpSocket", "exec", "grpc") if key in probe), "probe")
    action = _mapping(probe.get(handler)) or {}
    path = None
    if handler == "httpGet":
        written = action.get("path")
        path = written if isinstance(written, str) and written else "/"
    elif handler == "exec":  # `graceful probe readyz` asks the health port's /readyz
        path = graceful_probe_path(_strings(action.get("command"), meta, f"{where}.exec.command"))
    port = action.get("port")
    if isinstance(port, bool) or not isinstance(port, (int, str)):
        port = None
    elif isinstance(port, int) and not 1 <= port <= 65535:
        raise meta.refuse(f"{where}.{handler}.port", port, "a port number from 1 to 65535, or a port name")
    timing = {
        key: _whole(probe.get(key), meta, f"{where}.{key}", default=0, maximum=INT32_MAX) or default
        for key, default in _PROBE_DEFAULTS.items()
    }
    return Probe(handler, path, port, timing["periodSeconds"], timing["failureThreshold"], timing["timeoutSeconds"])


#: ``graceful probe ENDPOINT`` (or ``python -m graceful probe ENDPOINT``), also inside ``sh -c "..."``.
_GRACEFUL_PROBE = re.compile(r"(?:^|[\s/])(?:graceful|-m\s+graceful)\s+probe\s+(livez|readyz|healthz)(?![\w/])")


def graceful_probe_path(command: tuple[str, ...]) -> str | None:
    """The health path an exec probe's ``command`` asks with ``graceful probe``, or None for any other command."""
    found = _GRACEFUL_PROBE.search(" ".join(command))
    return None if found is None else f"/{found.group(1)}"


def _pre_stop_sleep(pre_stop: Mapping[str, Any] | None, meta: _Meta, where: str) -> float:
    """Return the seconds a preStop hook sleeps before SIGTERM: the ``sleep`` action or a sleep command."""
    if pre_stop is None:
        return 0.0
    sleep = _mapping(pre_stop.get("sleep"))
    if sleep is not None:  # the sleep action (beta in 1.30, GA in 1.34), counted like `exec: sleep`
        field = f"{where}.sleep.seconds"
        seconds = _whole(sleep.get("seconds"), meta, field, default=0, maximum=INT64_MAX, unit="seconds")
        return float(seconds)
    words = _strings((_mapping(pre_stop.get("exec")) or {}).get("command"), meta, f"{where}.exec.command")
    text = None
    if len(words) >= 2 and words[0].rsplit("/", 1)[-1] == "sleep":
        text = words[1]
    else:
        script = shell_script(words)
        match = _SLEEP_IN_SCRIPT.search(script) if script is not None else None
        text = match.group(1) if match else None
    if text is None:
        return 0.0
    match = _SLEEP_ARGUMENT.fullmatch(text)
    if match is None:
        return 0.0
    seconds = float(match.group(1)) * _SLEEP_UNITS[match.group(2)]
    if not seconds <= INT64_MAX:  # also inf: float("9" * 400) is inf
        raise meta.refuse(f"{where}.exec.command", f"sleep {text}", f"a sleep of at most {INT64_MAX} seconds")
    return seconds


def shell_script(command: Sequence[str]) -> str | None:
    """Return the script of ``sh -c SCRIPT`` (any common shell, any option order), else ``None``."""
    if not command or command[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    has_c = False
    rest = iter(command[1:])
    for token in rest:
        if token in ("-o", "+o"):  # `bash -o pipefail -c ...`: the option takes a value
            next(rest, None)
        elif token.startswith(("-", "+")) and token != "--":
            has_c = has_c or "c" in token[1:]
        elif token != "--":
            return token if has_c else None
    return None


def _int_or_percent(value: object, meta: _Meta, field: str) -> int | str | None:
    """Return ``maxSurge``/``maxUnavailable`` as written: a whole number, or a percentage such as ``25%``."""
    if isinstance(value, str):
        if not _PERCENT.fullmatch(value.strip()):
            raise meta.refuse(field, value, "a whole number or a percentage")
        return value.strip()
    number: int | None = _whole(value, meta, field, default=None, maximum=INT32_MAX)
    return number


# Reading Services, Ingresses and the rest ------------------------------------------


def _service(obj: Mapping[str, Any], meta: _Meta, source: str) -> Service:
    """Read a Service."""
    spec = _mapping(obj.get("spec")) or {}
    return Service(
        source=source,
        name=meta.name,
        namespace=meta.namespace,
        selector=_labels(spec.get("selector")),
        annotations=_labels((_mapping(obj.get("metadata")) or {}).get("annotations")),
        type=_text(spec.get("type")),
        load_balancer_class=_text(spec.get("loadBalancerClass")),
    )


def _ingress(obj: Mapping[str, Any], meta: _Meta, source: str) -> Ingress:
    """Read an Ingress (networking.k8s.io/v1, and the older extensions/v1beta1 backend fields)."""
    spec = _mapping(obj.get("spec")) or {}
    annotations = _labels((_mapping(obj.get("metadata")) or {}).get("annotations"))
    backends = [_mapping(spec.get("defaultBackend")), _mapping(spec.get("backend"))]
    for rule in _mappings(spec.get("rules")):
        backends.extend(_mappings((_mapping(rule.get("http")) or {}).get("paths")))
    services: list[str] = []
    for backend in backends:
        if backend is None:
            continue
        path_backend = _mapping(backend.get("backend")) or backend  # a path holds a backend
        name = _text((_mapping(path_backend.get("service")) or {}).get("name")) or _text(
            path_backend.get("serviceName")
        )
        if name:
            services.append(name)
    return Ingress(
        source=source,
        name=meta.name,
        namespace=meta.namespace,
        class_name=_text(spec.get("ingressClassName")) or annotations.get("kubernetes.io/ingress.class"),
        annotations=annotations,
        services=tuple(services),
    )


def _target_group_binding(obj: Mapping[str, Any], meta: _Meta, source: str) -> TargetGroupBinding | None:
    """Read an elbv2.k8s.aws TargetGroupBinding."""
    spec = _mapping(obj.get("spec")) or {}
    service = _text((_mapping(spec.get("serviceRef")) or {}).get("name"))
    if not service:
        return None
    return TargetGroupBinding(source, meta.name, meta.namespace, service, _text(spec.get("targetType")))


def _autoscaler(obj: Mapping[str, Any], meta: _Meta, source: str) -> Autoscaler | None:
    """Read a HorizontalPodAutoscaler (``minReplicas`` defaults to 1)."""
    spec = _mapping(obj.get("spec")) or {}
    target = _mapping(spec.get("scaleTargetRef")) or {}
    kind, name = _text(target.get("kind")), _text(target.get("name"))
    if not kind or not name:
        return None
    minimum = _whole(spec.get("minReplicas"), meta, "spec.minReplicas", default=1, maximum=INT32_MAX)
    return Autoscaler(source, meta.name, meta.namespace, kind, name, minimum)


# Shapes and numbers ---------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any] | None:
    """Return ``value`` if it is a mapping, else ``None`` (YAML can hold anything anywhere).

    Parsed YAML holds plain dicts; ``isinstance(value, dict)`` is several times
    cheaper than the ``Mapping`` ABC check, which counts on a 70,000-document input.
    """
    return value if isinstance(value, dict) else None


def _dig(value: object, path: Sequence[str]) -> Mapping[str, Any] | None:
    """Follow ``path`` through nested mappings; ``None`` when any step is missing."""
    node = _mapping(value)
    for key in path:
        node = _mapping(node.get(key)) if node is not None else None
    return node


def _mappings(value: object) -> list[Mapping[str, Any]]:
    """Return the mappings of a list, skipping anything else (``None`` is an empty list)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _indexed(value: object) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """Yield ``(index, item)`` for the mappings of a list, skipping anything else."""
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield index, item


def _is_scalar(value: object) -> bool:
    """Tell whether a YAML value is a scalar (not a list, mapping or set)."""
    return not isinstance(value, (dict, list, set, tuple))


def _scalar_text(value: object) -> str:
    """Return a scalar as the container would see it (YAML may have parsed "true" or "5" as a bool or number)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _text(value: object) -> str | None:
    """Return a string field, ``None`` when it is absent or not a string."""
    return value if isinstance(value, str) else None


def _labels(value: object) -> dict[str, str]:
    """Return labels, annotations or a selector: string keys with scalar values, as text."""
    items = _mapping(value) or {}
    return {key: _scalar_text(item) for key, item in items.items() if isinstance(key, str) and _is_scalar(item)}


def _strings(value: object, meta: _Meta, where: str) -> tuple[str, ...]:
    """Return a list of words (``command``, ``args``); a nested list or mapping in it is refused."""
    if not isinstance(value, list):
        return ()
    for index, item in enumerate(value):
        if not _is_scalar(item):
            raise meta.refuse(f"{where}[{index}]", item, "a string")
    return tuple(_scalar_text(item) for item in value)


def _whole(
    value: object,
    meta: _Meta,
    field: str,
    *,
    default: Any,
    minimum: int = 0,
    maximum: int,
    unit: str = "",
) -> Any:
    """Return an integer field, ``default`` when it is absent; refuse what Kubernetes would.

    A float with a whole value (``30.0``) is accepted, as kubectl's YAML to
    JSON conversion does; fractions, ``.inf``, ``.nan``, strings and anything
    out of range are refused.
    """
    if value is None:
        return default
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    if number is None or not minimum <= number <= maximum:
        noun = f"a whole number of {unit}" if unit else "a whole number"
        raise meta.refuse(field, value, f"{noun} from {minimum} to {maximum}")
    return number


def _show(value: object) -> str:
    """Return a value as the YAML that wrote it, shortened: ``.inf``, ``-40``, ``99999…(400 digits)``."""
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, (dict, list, set, tuple)):
        return "a mapping" if isinstance(value, dict) else "a list"
    text = repr(value) if isinstance(value, str) else _scalar_text(value)
    if len(text) > 40:
        return f"{text[:20]}…({len(text)} characters)"
    return text
