"""The fault tests' apps (tests/gunicorn/test_faults.py): requests that hold, crash or upload slowly.

``app`` is the WSGI app (sync, gthread, gevent workers), ``asgi`` its ASGI
twin for Gunicorn's ASGI workers (``/hold`` and ``/`` only, on the worker's
event loop):

/hold?ms=N        prints "hold <pid>" as it starts, sleeps N ms, answers "held"
/crash?status=N   prints "crash <pid>", waits 0.2 s (the worker reports it in flight), exits N at once
/upload           reads its whole body, answers its length
/                 "ok"
Each worker prints "cleanup <pid>" from its cleanup task. FT_CLEANUP=hang: a
second task that never returns (timeout 0.5 s); FT_CLEANUP=raise: one that
raises. FT_IMPORT_S=N: loading the app (in each worker) takes N seconds.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs

import graceful
from graceful.asgi.types import Receive, Scope, Send


def say(line: str) -> None:
    """Print one line with a single write: workers share this stdout."""
    os.write(1, (line + "\n").encode())


time.sleep(float(os.environ.get("FT_IMPORT_S", "0")))


@graceful.cleanup_task("flush", timeout=1)
def flush() -> None:
    say(f"cleanup {os.getpid()}")


if os.environ.get("FT_CLEANUP") == "hang":

    @graceful.cleanup_task("hangs", timeout=0.5)
    def hangs() -> None:
        threading.Event().wait(3600)

elif os.environ.get("FT_CLEANUP") == "raise":

    @graceful.cleanup_task("raises", timeout=0.5)
    def raises() -> None:
        raise RuntimeError("the pool was gone already")


def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    query = parse_qs(environ.get("QUERY_STRING", ""))
    if path == "/hold":
        say(f"hold {os.getpid()}")
        time.sleep(int(query.get("ms", ["1000"])[0]) / 1000)
        body = b"held"
    elif path == "/crash":
        say(f"crash {os.getpid()}")
        time.sleep(0.2)
        os._exit(int(query.get("status", ["7"])[0]))
    elif path == "/upload":
        body = str(len(environ["wsgi.input"].read())).encode()
    else:
        body = b"ok"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
    """``/hold`` and ``/`` as ``app`` answers them; the lifespan protocol answered, nothing done at either end."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b"ok"
    if scope["path"] == "/hold":
        say(f"hold {os.getpid()}")
        await asyncio.sleep(int(parse_qs(scope["query_string"].decode()).get("ms", ["1000"])[0]) / 1000)
        body = b"held"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
