"""What GracefulASGIMiddleware adds to one HTTP request, beside the floor of a middleware that only counts.

    python bench/asgi_middleware.py [--rounds 9] [--number 100000]

Each call does what an ASGI server does per request: a fresh scope (a copy),
``await app(scope, receive, send)``, the app sending its start and body
messages. Four sides, measured in the same process, in alternating rounds,
each keeping its median round:

- ``bare``: the app alone;
- ``floor``: the app behind a pass-through middleware that only counts (a
  deque append before the ``await``, a pop after): the least any in-flight
  count can cost, and what graceful's cost is judged against;
- ``graceful``: the app behind ``GracefulASGIMiddleware`` before a shutdown
  (the hot path);
- for context, ``shutting down``: the same during the shutdown delay (the
  checked path: an arrival counted, ``send`` wrapped for ``Connection: close``).

For a bare ASGI function and a Starlette hello-world app, it prints
nanoseconds per request, graceful minus the floor (target: at most 300 ns)
and graceful / bare.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from graceful.asgi.middleware import GracefulASGIMiddleware
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SCOPE: Scope = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.4"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/hello",
    "raw_path": b"/hello",
    "query_string": b"",
    "root_path": "",
    "headers": [
        (b"host", b"127.0.0.1:8000"),
        (b"user-agent", b"bench"),
        (b"accept", b"*/*"),
        (b"accept-encoding", b"gzip, deflate"),
        (b"connection", b"keep-alive"),
    ],
    "client": ("127.0.0.1", 50000),
    "server": ("127.0.0.1", 8000),
}
REQUEST: Message = {"type": "http.request", "body": b"", "more_body": False}


async def receive() -> Message:
    return REQUEST


async def send(message: Message) -> None:
    return None


async def bare_app(scope: Scope, receive: Receive, send: Send) -> None:
    """The smallest useful ASGI app."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def starlette_app() -> App:
    """A Starlette hello-world app (one route)."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def hello(request: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/hello", hello)])


class Counting:
    """The floor: a pass-through middleware that only counts requests in flight."""

    def __init__(self, app: App) -> None:
        self.app = app
        tokens: deque[None] = deque()
        self._enter = tokens.append
        self._leave = tokens.pop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._enter(None)
        try:
            await self.app(scope, receive, send)
        finally:
            self._leave()


async def per_request(app: App, number: int) -> float:
    """Seconds per request over ``number`` requests, each with a fresh scope, as a server calls it."""
    scope = SCOPE
    started = time.perf_counter()
    for _ in range(number):
        await app(dict(scope), receive, send)
    return (time.perf_counter() - started) / number


def measure(name: str, app: App, rounds: int, number: int) -> dict[str, float]:
    """Median ns per request of each side, rounds alternating between them."""
    quiet = Lifecycle(Config(shutdown_delay=3600))
    busy = Lifecycle(Config(shutdown_delay=3600))
    busy.shutdown_initiated.fire()
    sides: dict[str, App] = {
        "bare": app,
        "floor": Counting(app),
        "graceful": GracefulASGIMiddleware(app, quiet),
        "shutting down": GracefulASGIMiddleware(app, busy),
    }
    times: dict[str, list[float]] = {side: [] for side in sides}

    async def run() -> None:
        for side in sides.values():  # warm up: first-request work, caches
            await per_request(side, 2000)
        for _ in range(rounds):
            for label, side in sides.items():
                times[label].append(await per_request(side, number))

    asyncio.run(run())
    medians = {label: statistics.median(values) * 1e9 for label, values in times.items()}
    added = medians["graceful"] - medians["floor"]
    print(
        f"{name:<24} bare {medians['bare']:7.0f} ns  floor {medians['floor']:7.0f} ns  graceful"
        f" {medians['graceful']:7.0f} ns  shutting down {medians['shutting down']:7.0f} ns"
        f"  | graceful - floor {added:+5.0f} ns (target <= 300)"
        f"  graceful / bare {medians['graceful'] / medians['bare']:.3f}"
    )
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=100_000)
    args = parser.parse_args()
    print(f"CPython {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    measure("bare ASGI function", bare_app, args.rounds, args.number)
    measure("Starlette hello world", starlette_app(), args.rounds, max(1, args.number // 5))


if __name__ == "__main__":
    main()
