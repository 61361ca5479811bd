"""The other containers of a graceful pod that stop with it: proxy sidecars and native sidecars.

Two kinds stop on different schedules (KEP-753, "Termination of containers"):

- a **classic sidecar** is just another entry of ``containers``: it gets its
  preStop hook and SIGTERM at the same moment as the app. A proxy sidecar
  (``istio-proxy``, or an Envoy image) carries the app's inbound requests and
  its outbound calls, so once it is gone the app's remaining requests fail.
  Istio's pilot-agent keeps Envoy up for ``terminationDrainDuration`` after
  SIGTERM, 5 s unless the ``proxy.istio.io/config`` annotation (or the
  injected ``PROXY_CONFIG`` / ``TERMINATION_DRAIN_DURATION_SECONDS``) says
  otherwise; plain Envoy exits on SIGTERM without draining.
- a **native sidecar** is an init container with ``restartPolicy: Always``:
  it gets its preStop hook and then SIGTERM only after every app container
  has exited, one sidecar at a time in reverse start order, with whatever is
  left of ``terminationGracePeriodSeconds``; at the end of the grace period
  everything still running is killed. So its own preStop (a log shipper's
  ``sleep 5``) is spent after the app's whole budget, not beside it.

:func:`drain` says how long a sidecar needs after its SIGTERM, when that can
be read from the manifest; :func:`native_drains` adds a native sidecar's
preStop sleep to it (a sidecar whose drain is unknown still counts its sleep).

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import yaml

from graceful.kubernetes.loading import Unreadable, documents
from graceful.kubernetes.manifests import Container, Workload
from graceful.kubernetes.settings import Settings

__all__ = ["ISTIO_DRAIN", "Drain", "drain", "is_proxy", "native_drains"]

#: Istio's ``terminationDrainDuration`` when nothing sets it, in seconds.
ISTIO_DRAIN = 5.0

_ISTIO_CONFIG = "proxy.istio.io/config"
_GO_DURATION = re.compile(r"(?:\d+(?:\.\d*)?(?:ns|us|µs|ms|s|m|h))+|0")
_GO_UNIT = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclasses.dataclass(frozen=True)
class Drain:
    """How long a sidecar keeps working after its SIGTERM, and what says so."""

    seconds: float
    why: str


def is_istio(container: Container) -> bool:
    """Tell whether a container is Istio's proxy (by name, or the ``proxyv2`` image)."""
    image = container.image.rsplit("/", 1)[-1]
    return container.name == "istio-proxy" or image.startswith("proxyv2")


def is_envoy(container: Container) -> bool:
    """Tell whether a container runs Envoy: an image named ``envoy*`` (``envoyproxy/envoy:v1.30``), or named so."""
    image = container.image.split("@", 1)[0]
    directory, _, name = image.rpartition("/")
    parts = [*directory.split("/"), name.split(":", 1)[0]]  # a tag follows the last "/", a registry port does not
    return container.name == "envoy" or any(part.lower().startswith("envoy") for part in parts)


def is_proxy(container: Container) -> bool:
    """Tell whether a container is a proxy sidecar that carries the app's traffic."""
    return is_istio(container) or is_envoy(container)


def drain(container: Container, workload: Workload) -> Drain | None:
    """Return how long a sidecar works after SIGTERM, or ``None`` when the manifest does not say."""
    if is_istio(container):
        return _istio_drain(container, workload)
    if is_envoy(container):
        return Drain(0.0, "Envoy exits on SIGTERM without draining")
    if container.runs_graceful:
        total = Settings.of(container).config.budget().total
        return Drain(total, f"its own graceful budget {total:g}s")
    return None


def native_drains(workload: Workload) -> list[tuple[Container, Drain]]:
    """Return the native sidecars whose drain is known, with it, in the order they are stopped."""
    found: list[tuple[Container, Drain]] = []
    for sidecar in reversed(workload.sidecars):
        after_term = drain(sidecar, workload)
        sleep = sidecar.pre_stop_sleep
        if sleep and after_term is not None:
            found.append(
                (sidecar, Drain(sleep + after_term.seconds, f"preStop sleep {sleep:g}s, then {after_term.why}"))
            )
        elif sleep:
            found.append((sidecar, Drain(sleep, f"preStop sleep {sleep:g}s")))
        elif after_term is not None:
            found.append((sidecar, after_term))
    return found


def _istio_drain(container: Container, workload: Workload) -> Drain:
    """Return Istio's ``terminationDrainDuration``: the pod annotation, the injected env, or the default."""
    sources: list[tuple[str, object]] = []
    annotation = workload.annotations.get(_ISTIO_CONFIG)
    if annotation is not None:
        sources.append((f"annotation {_ISTIO_CONFIG}", _config_value(annotation)))
    seconds = container.env_text("TERMINATION_DRAIN_DURATION_SECONDS")
    if seconds:
        sources.append(("TERMINATION_DRAIN_DURATION_SECONDS", f"{seconds}s" if seconds.isdecimal() else seconds))
    proxy_config = container.env_text("PROXY_CONFIG")
    if proxy_config:
        sources.append(("PROXY_CONFIG", _config_value(proxy_config)))
    for where, value in sources:
        parsed = _go_duration(value)
        if parsed is not None:
            return Drain(parsed, f"terminationDrainDuration {parsed:g}s from {where}")
    return Drain(ISTIO_DRAIN, f"Istio's default terminationDrainDuration {ISTIO_DRAIN:g}s")


def _config_value(text: str) -> object:
    """Return ``terminationDrainDuration`` from an Istio ProxyConfig in YAML or JSON, ``None`` when absent."""
    try:
        config = next(documents(text), None)
    except (yaml.YAMLError, Unreadable):
        return None
    return config.get("terminationDrainDuration") if isinstance(config, Mapping) else None


def _go_duration(value: Any) -> float | None:
    """Return the seconds of a Go duration (``5s``, ``1m30s``, ``500ms``), ``None`` when it is not one."""
    if not isinstance(value, str) or len(value) > 64 or not _GO_DURATION.fullmatch(value.strip()):
        return None
    return sum(float(number) * _GO_UNITS[unit] for number, unit in _GO_UNIT.findall(value))
