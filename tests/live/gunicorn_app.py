"""A plain WSGI app for the Gunicorn tests; graceful wraps it in each worker.

/            "ok"
/slow?ms=N   sleeps N ms, then a body of N bytes
/stream      5 chunks, 200 ms apart
Each worker prints "cleanup <pid>" when its cleanup task runs.
GT_FAILING_CHECK=1: a readiness check "db" that fails. GT_WORKER_CHECK=1: a
passing readiness check "worker-<pid>" in each worker, which names the worker
that answered a probe (and its metrics). GT_APP_IMPORT_S=N: importing this
module (loading the app, in each worker) takes N seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs

import graceful


def say(line: str) -> None:
    """Print one line with a single write: workers share this stdout."""
    os.write(1, (line + "\n").encode())


time.sleep(float(os.environ.get("GT_APP_IMPORT_S", "0")))

if os.environ.get("GT_APP_PRE_SHUTDOWN_HOOK"):
    # Wrong place without preload_app: only workers import this module.
    @graceful.pre_shutdown_hook("in-app")
    def in_app() -> None:
        say("in-app pre-shutdown hook ran")


if os.environ.get("GT_LONG_CLEANUP"):
    # Longer than GRACEFUL_GRACE_PERIOD allows: the worker must refuse to boot.
    graceful.cleanup_task("slow-flush", timeout=25)(lambda: None)


if os.environ.get("GT_FAILING_CHECK"):
    graceful.readiness_check("db")(lambda: False)


if os.environ.get("GT_WORKER_CHECK"):
    graceful.readiness_check(f"worker-{os.getpid()}")(lambda: True)


@graceful.cleanup_task("flush", timeout=2)
def flush() -> None:
    say(f"cleanup {os.getpid()}")


def _stream() -> Iterator[bytes]:
    for i in range(5):
        time.sleep(0.2)
        yield b"chunk%d\n" % i


def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    if path == "/slow":
        ms = int(parse_qs(environ.get("QUERY_STRING", "")).get("ms", ["500"])[0])
        time.sleep(ms / 1000)
        body = b"x" * ms
    elif path == "/fork":
        # An app that forks (multiprocessing, subprocess with preexec_fn) must not hang.
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
        body = b"forked"
    elif path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return _stream()
    else:
        body = b"ok"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
