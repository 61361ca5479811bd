"""A FastAPI app with graceful: a WebSocket, server-sent events, a slow endpoint and a lifespan.

One line gives it graceful (``app.add_middleware(GracefulASGIMiddleware)``):
``/livez``, ``/readyz`` and ``/healthz``, readiness gated on the lifespan's
startup, and during a shutdown ``Connection: close``, every WebSocket closed
with 1001 and every event stream ended cleanly, spread over the delay.

Served with graceful's whole shutdown timeline (Uvicorn, one process)::

    graceful serve examples.fastapi_app:app --bind 127.0.0.1:8000

or by plain Uvicorn, to compare (the health paths and the goodbyes' code are
there, but Uvicorn's own SIGTERM: its listener closes at once, WebSockets get
1012 in the same millisecond)::

    uvicorn examples.fastapi_app:app --port 8000

Then::

    curl -s 'localhost:8000/readyz?verbose'        # [+]lifespan ok ...
    curl -N localhost:8000/events                   # data: tick 0, tick 1, ... (Ctrl+C)
    python -m websockets ws://localhost:8000/ws     # type a line: "echo ..."; "tick N" every second
    curl localhost:8000/slow?seconds=3              # a request a SIGTERM waits for

Runs on the server's event loop; nothing here blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Query, WebSocket, WebSocketDisconnect
from fastapi.responses import PlainTextResponse, StreamingResponse

from graceful import GracefulASGIMiddleware

logger = logging.getLogger("examples.fastapi_app")

#: Bounds of the query parameters: seconds between ticks, seconds to sleep.
EVERY = Query(1.0, ge=0.0, le=60.0)
SECONDS = Query(1.0, ge=0.0, le=10.0)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Startup: graceful's /readyz fails (check "lifespan") until this yields.
    app.state.websockets = 0
    logger.info("fastapi_app: started")
    yield
    # Shutdown: after graceful's drain (graceful serve), beside its cleanup tasks.
    logger.info("fastapi_app: lifespan shutdown, %d WebSocket(s) served", app.state.websockets)


app = FastAPI(lifespan=lifespan)
app.add_middleware(GracefulASGIMiddleware)


@app.get("/", response_class=PlainTextResponse)
async def index() -> str:
    return "hello from FastAPI\n"


@app.get("/slow", response_class=PlainTextResponse)
async def slow(seconds: float = SECONDS) -> str:
    """Sleeps ``?seconds=S`` (at most 10): counted in flight, so a SIGTERM meanwhile waits for it."""
    await asyncio.sleep(seconds)
    return f"slept {seconds:g}\n"


@app.get("/events")
async def events(every: float = EVERY) -> StreamingResponse:
    """Server-sent events, ``data: tick N`` every ``?every=S`` seconds until the client (or graceful) ends it."""

    async def ticks() -> AsyncIterator[str]:
        tick = 0
        while True:
            yield f"data: tick {tick}\n\n"
            tick += 1
            await asyncio.sleep(every)

    return StreamingResponse(ticks(), media_type="text/event-stream")


@app.websocket("/ws")
async def websocket(socket: WebSocket, every: float = EVERY) -> None:
    """Echoes each text message (``echo TEXT``) and pushes ``tick N`` every ``?every=S`` seconds."""
    await socket.accept()
    socket.app.state.websockets += 1

    async def ticker() -> None:
        tick = 0
        while True:
            await socket.send_text(f"tick {tick}")
            tick += 1
            await asyncio.sleep(every)

    pushing = asyncio.create_task(ticker())
    try:
        while True:
            await socket.send_text(f"echo {await socket.receive_text()}")
    except WebSocketDisconnect as gone:
        # 1001 when graceful told it to leave (the client reconnects elsewhere), else the client's code.
        logger.info("fastapi_app: WebSocket closed with %d", gone.code)
    finally:
        pushing.cancel()
        # The ticker ends cancelled, or with the error a send raises once the socket closed.
        with contextlib.suppress(asyncio.CancelledError, OSError, WebSocketDisconnect):
            await pushing
