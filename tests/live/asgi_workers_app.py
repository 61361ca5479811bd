"""A Starlette app for the ASGI workers' end-to-end tests: slow, SSE, WebSocket, lifespan marker files per worker pid.

Runs in each Gunicorn ASGI worker (``-k asgi``, Uvicorn's), on its event
loop. ``ASGI_MARKS`` names the directory the lifespan writes
``startup-PID`` and ``shutdown-PID`` in.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

MARKS = Path(os.environ.get("ASGI_MARKS", "."))


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    (MARKS / f"startup-{os.getpid()}").touch()
    yield
    (MARKS / f"shutdown-{os.getpid()}").touch()


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


async def slow(request: Request) -> PlainTextResponse:
    await asyncio.sleep(float(request.query_params.get("s", "2")))
    return PlainTextResponse("slow done")


async def sse(request: Request) -> StreamingResponse:
    async def events() -> AsyncIterator[str]:
        n = 0
        while True:
            yield f"data: {n}\n\n"
            n += 1
            await asyncio.sleep(0.1)

    return StreamingResponse(events(), media_type="text/event-stream")


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            await websocket.send_text(await websocket.receive_text())
    except (WebSocketDisconnect, OSError):
        pass


app = Starlette(
    routes=[Route("/", hello), Route("/slow", slow), Route("/sse", sse), WebSocketRoute("/ws", echo)],
    lifespan=lifespan,
)
