"""The Starlette app of every ASGI end-to-end test: ``graceful serve`` (Uvicorn) and Gunicorn's ASGI workers.

Runs on the serving process's event loop (Uvicorn's, or each Gunicorn ASGI
worker's). Prints ``SIGNAL <name>`` for every lifecycle signal (graceful
only), ``CLEANUP`` when the cleanup task ran. Its lifespan appends
``startup PID`` and ``shutdown PID`` lines to the file named by
``ASGI_APP_MARKER`` (if set; one write of one line, so workers sharing the
file do not mix).

Routes: ``/`` answers ``hello``; ``/slow?seconds=S`` prints ``slow PID``
(which worker holds it), sleeps, then answers ``slept S``; ``/sse`` streams
``data: tick N`` events every 0.1 s until the client or the server ends it;
``/ws`` accepts a WebSocket, echoes what it receives (``pid`` is answered
``pid PID``) and sends ``tick`` every 0.1 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

import graceful

_MARKER = os.environ.get("ASGI_APP_MARKER", "")


def say(line: str) -> None:
    """One line with a single write (print() writes the text and the newline separately)."""
    os.write(1, (line + "\n").encode())


def mark(line: str) -> None:
    """Append ``line`` and this process's pid to the marker file, when there is one (one write, O_APPEND)."""
    if _MARKER:
        fd = os.open(_MARKER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


graceful.default_lifecycle.subscribe(lambda name, _at: say(f"SIGNAL {name}"))


@graceful.cleanup_task("flush", timeout=5)
def flush() -> None:
    """Record that cleanup ran."""
    say("CLEANUP")


async def hello(request: Request) -> Response:
    """A quick answer."""
    return PlainTextResponse("hello")


async def slow(request: Request) -> Response:
    """Say ``slow PID`` (which worker holds it), sleep ``seconds``, then answer."""
    say(f"slow {os.getpid()}")
    seconds = float(request.query_params.get("seconds", "1"))
    await asyncio.sleep(seconds)
    return PlainTextResponse(f"slept {seconds:g}")


async def sse(request: Request) -> Response:
    """Server-sent events until the stream is ended."""

    async def events() -> AsyncIterator[str]:
        number = 0
        while True:
            yield f"data: tick {number}\n\n"
            number += 1
            await asyncio.sleep(0.1)

    return StreamingResponse(events(), media_type="text/event-stream")


async def ws(websocket: WebSocket) -> None:
    """Echo (``pid``: this process's pid), and tick every 0.1 s, until either side closes."""
    await websocket.accept()

    async def ticks() -> None:
        while True:
            await asyncio.sleep(0.1)
            await websocket.send_text("tick")

    ticker = asyncio.ensure_future(ticks())
    try:
        while True:
            text = await websocket.receive_text()
            await websocket.send_text(f"pid {os.getpid()}" if text == "pid" else text)
    except (WebSocketDisconnect, OSError):
        pass
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError, RuntimeError, WebSocketDisconnect):
            await ticker


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Mark the startup and the shutdown."""
    mark("startup")
    yield
    mark("shutdown")


app = Starlette(
    routes=[Route("/", hello), Route("/slow", slow), Route("/sse", sse), WebSocketRoute("/ws", ws)],
    lifespan=lifespan,
)
