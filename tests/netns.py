"""A network namespace of one test's (or benchmark's) own, for tests/live/kubeproxy_model.py.

:func:`missing` says why none can be made here (not root, no ``ip`` or
``iptables-restore``); :func:`network_namespace` makes one with a unique name
and its loopback up, and at the end kills every process left in it (by the
pids ``ip netns pids`` lists for that name) and removes it. :func:`run_model`
runs the model inside it and returns its figures. Linux only; root only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tests.conftest import LIVE

__all__ = ["missing", "network_namespace", "run_model"]


def missing() -> str | None:
    """Why the model cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "needs root (ip netns, iptables)"
    for tool, package in (("ip", "iproute2"), ("iptables-restore", "iptables")):
        if shutil.which(tool) is None:
            return f"{tool} not found: apt-get install {package}"
    return None


@contextlib.contextmanager
def network_namespace(prefix: str = "graceful-kp") -> Iterator[str]:
    """A fresh namespace (its name), loopback up; raises OSError naming the reason when it cannot be made."""
    name = f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        raise OSError(f"ip netns add failed: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True, timeout=30)
        yield name
    finally:
        listed = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, timeout=30)
        for pid in listed.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)


def run_model(
    start: Callable[[list[str]], subprocess.Popen[str]], netns: str, args: list[str], timeout: float = 180.0
) -> dict[str, Any]:
    """Run the model in ``netns`` (started by ``start(argv)``, e.g. ``Processes.start``); its JSON figures.

    Raises RuntimeError with the model's output when it fails or outlives ``timeout`` seconds.
    """
    argv = ["ip", "netns", "exec", netns, sys.executable, str(LIVE / "kubeproxy_model.py"), *args]
    proc = start(argv)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the kube-proxy model did not finish within {timeout:g}s") from None
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the kube-proxy model failed ({proc.returncode}):\n{out[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
