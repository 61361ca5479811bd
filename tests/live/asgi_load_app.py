"""The Starlette app the ASGI load suite and bench/uvicorn_throughput.py put under load (no graceful import).

    graceful serve -b 127.0.0.1:8000 asgi_load_app:app             # graceful (Uvicorn), tests/live on the path
    uvicorn --app-dir tests/live asgi_load_app:app --port 8000      # plain Uvicorn
    uvicorn --app-dir tests/live --factory asgi_load_app:with_graceful   # plain Uvicorn, the app in
                                                                         # GracefulASGIMiddleware

The ASGI twin of tests/live/load_app.py: the same paths and bodies, so
tests/e2e_harness.py's load generator checks its answers the same way.

``/``
    ``Hello, world!`` (the benchmark's hello world).
``/fast?bytes=B``
    ``B`` bytes (default 256) of :func:`pattern`, at once.
``/slow?ms=N&bytes=B``
    ``B`` bytes (default 4096), half sent at once and half after ``N`` ms
    (0-10000, an ``asyncio.sleep``: the loop serves others meanwhile), so a
    connection cut while the request is in flight shows up as an incomplete
    body, not as a short wait.
``/readyz``
    Always ``200 ok``: plain Uvicorn's stand-in for a readiness endpoint.
    Under graceful the middleware answers ``/readyz`` before the app sees it.

Every response of ``/fast`` and ``/slow`` carries ``Content-Length`` and
``X-Master-Pid`` (the serving process's pid, Uvicorn being one process:
which instance served it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MAX_BYTES = 1 << 20
_MAX_MS = 10_000


def pattern(size: int) -> bytes:
    """The ``size``-byte body every path serves: the client checks length and content."""
    repeats = size // len(_ALPHABET) + 1
    return (_ALPHABET * repeats)[:size]


def _int_arg(request: Request, name: str, default: int, upper: int) -> int:
    try:
        value = int(request.query_params.get(name, str(default)))
    except ValueError:
        return default
    return min(max(value, 0), upper)


def _headers(size: int) -> dict[str, str]:
    return {"X-Master-Pid": str(os.getpid()), "Content-Length": str(size)}


async def hello(request: Request) -> Response:
    """The hello world."""
    return PlainTextResponse("Hello, world!")


async def fast(request: Request) -> Response:
    """``bytes`` bytes at once."""
    body = pattern(_int_arg(request, "bytes", 256, _MAX_BYTES))
    return Response(body, media_type="application/octet-stream", headers=_headers(len(body)))


async def _halves(body: bytes, pause_s: float) -> AsyncIterator[bytes]:
    half = len(body) // 2
    yield body[:half]
    await asyncio.sleep(pause_s)
    yield body[half:]


async def slow(request: Request) -> Response:
    """``bytes`` bytes, the second half ``ms`` milliseconds after the first."""
    body = pattern(_int_arg(request, "bytes", 4096, _MAX_BYTES))
    pause_s = _int_arg(request, "ms", 100, _MAX_MS) / 1000
    return StreamingResponse(_halves(body, pause_s), media_type="application/octet-stream", headers=_headers(len(body)))


async def readyz(request: Request) -> Response:
    """Plain Uvicorn's stand-in readiness endpoint (graceful answers /readyz itself)."""
    return PlainTextResponse("ok")


app = Starlette(
    routes=[
        Route("/", hello),
        Route("/fast", fast),
        Route("/slow", slow),
        Route("/readyz", readyz),
    ]
)


def with_graceful() -> Any:
    """``app`` in graceful's ASGI middleware (a ``--factory`` for plain Uvicorn; imports graceful only then)."""
    from graceful.asgi import GracefulASGIMiddleware

    return GracefulASGIMiddleware(app)
