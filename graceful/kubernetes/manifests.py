"""Reading Kubernetes objects out of parsed YAML: pod specs, containers, probes, preStop hooks.

YAML can hold anything anywhere: every accessor here takes ``object`` and
returns ``None`` or a default for what is not the expected shape, so that a
stray scalar in ``helm template`` output is skipped, not a crash.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "argv",
    "dig",
    "grace_period",
    "http_path",
    "mapping",
    "mappings",
    "pod_specs",
    "pre_stop_sleep",
    "probe_seconds",
    "shell_script",
]

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
_SLEEP_IN_SCRIPT = re.compile(r"(?:^|[;&|({\n\s])sleep\s+(\d+(?:\.\d+)?[smhd]?)(?![\w.])")
_SLEEP_ARGUMENT = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_SLEEP_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def mapping(value: object) -> Mapping[str, Any] | None:
    """Return ``value`` if it is a mapping, else ``None`` (YAML can hold anything anywhere)."""
    return value if isinstance(value, Mapping) else None


def dig(value: object, path: Sequence[str]) -> Mapping[str, Any] | None:
    """Follow ``path`` through nested mappings; ``None`` when any step is missing."""
    node = mapping(value)
    for key in path:
        node = mapping(node.get(key)) if node is not None else None
    return node


def mappings(value: object) -> list[Mapping[str, Any]]:
    """Return the mappings of a list, skipping anything else (``None`` is an empty list)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def pod_specs(doc: object) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """Yield ``(kind, name, pod spec)`` for every pod spec in a document, ``List`` items included."""
    obj = mapping(doc)
    if obj is None:  # empty documents and stray scalars in `helm template` output
        return
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return
    if kind.endswith("List"):
        for item in mappings(obj.get("items")):
            yield from pod_specs(item)
        return
    path = _POD_SPEC_PATHS.get(kind)
    spec = dig(obj, path) if path is not None else None
    if spec is not None:
        name = (dig(obj, ("metadata",)) or {}).get("name")
        yield kind, str(name) if name else "<unnamed>", spec


def argv(container: Mapping[str, Any]) -> tuple[str, ...]:
    """Return ``command + args`` as strings (``args`` alone when the image's entrypoint is kept)."""
    parts: list[str] = []
    for key in ("command", "args"):
        value = container.get(key)
        if isinstance(value, list):
            parts.extend(str(item) for item in value)
    return tuple(parts)


def grace_period(pod_spec: Mapping[str, Any]) -> int:
    """Return the pod's ``terminationGracePeriodSeconds``, or Kubernetes' default of 30."""
    value = pod_spec.get("terminationGracePeriodSeconds")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return DEFAULT_GRACE_PERIOD


def probe_seconds(probe: Mapping[str, Any], key: str) -> int:
    """Return a probe field, or Kubernetes' default when it is absent or zero (as the API server does)."""
    value = probe.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return _PROBE_DEFAULTS[key]


def http_path(probe: Mapping[str, Any]) -> str | None:
    """Return an httpGet probe's path (``/`` when left out), ``None`` for other probe types."""
    http = mapping(probe.get("httpGet"))
    if http is None:
        return None
    path = http.get("path")
    return path if isinstance(path, str) and path else "/"


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


def _sleep_seconds(text: str) -> float:
    """Return the seconds of a ``sleep`` argument (``5``, ``5s``, ``0.5m``); 0 when unreadable."""
    match = _SLEEP_ARGUMENT.fullmatch(text)
    return float(match.group(1)) * _SLEEP_UNITS[match.group(2)] if match else 0.0


def pre_stop_sleep(container: Mapping[str, Any]) -> float:
    """Return the seconds a preStop hook sleeps before SIGTERM (``sleep`` action or command)."""
    pre_stop = dig(container, ("lifecycle", "preStop"))
    if pre_stop is None:
        return 0.0
    sleep = dig(pre_stop, ("sleep",))
    if sleep is not None:  # the `sleep` lifecycle action (Kubernetes 1.29+)
        seconds = sleep.get("seconds")
        return float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0
    command = (dig(pre_stop, ("exec",)) or {}).get("command")
    words = [str(item) for item in command] if isinstance(command, list) else []
    if len(words) >= 2 and words[0].rsplit("/", 1)[-1] == "sleep":
        return _sleep_seconds(words[1])
    script = shell_script(words)
    match = _SLEEP_IN_SCRIPT.search(script) if script is not None else None
    return _sleep_seconds(match.group(1)) if match else 0.0
