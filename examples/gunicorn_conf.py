"""An application's Gunicorn config composed with graceful's.

    gunicorn -c examples/gunicorn_conf.py examples.flask_app:app

It starts the example registry (examples/registry.py, standing in for a
Kubernetes webhook configuration) unless one answers already, registers this
server in it when Gunicorn is ready, and deregisters it in a pre-shutdown
hook: at SIGTERM, alongside the shutdown delay, before the listeners close.
Cleanup tasks live in the app (examples/flask_app.py): they run in every
worker.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import graceful
import graceful.conf
from graceful.conf import *  # noqa: F403 - graceful's server hooks and graceful_timeout

bind = os.environ.get("BIND", "127.0.0.1:8000")
worker_class = "gthread"
workers = 2
threads = 8

REGISTRY = os.environ.get("EXAMPLE_REGISTRY", "http://127.0.0.1:8001")
INSTANCE = f"web-{bind.replace(':', '-')}"
logger = logging.getLogger("examples.gunicorn_conf")


def _call(method: str, path: str) -> int:
    request = urllib.request.Request(REGISTRY + path, method=method)
    with urllib.request.urlopen(request, timeout=2) as response:
        return int(response.status)


def when_ready(server: Any) -> None:
    """Master, main thread: graceful's own when_ready, then start the registry and register."""
    graceful.conf.when_ready(server)
    try:
        _call("GET", "/instances")
    except (urllib.error.URLError, OSError):
        port = REGISTRY.rsplit(":", 1)[1]
        server.example_registry = subprocess.Popen([sys.executable, "-m", "examples.registry", port])
        for _ in range(50):  # bounded: 5 s
            try:
                _call("GET", "/instances")
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
    _call("PUT", f"/instances/{INSTANCE}")


def on_exit(server: Any) -> None:
    """Master, main thread, last: graceful's own on_exit, then stop the registry we started."""
    registry = getattr(server, "example_registry", None)
    if registry is not None:
        registry.terminate()
        registry.wait(5)
    graceful.conf.on_exit(server)


@graceful.pre_shutdown_hook("deregister", timeout=3)
def deregister() -> None:
    """Master, at SIGTERM: take this server out of the registry before it stops listening."""
    _call("DELETE", f"/instances/{INSTANCE}")
