"""The examples run as documented: the composed Gunicorn config, the systemd unit and the FastAPI app."""

from __future__ import annotations

import asyncio
import configparser
import importlib.util
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from graceful.core import default as _default
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from tests.conftest import ROOT, Processes, read_until
from tests.gunicorn.test_gunicorn import _has_control_socket, free_port

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))


@pytest.mark.e2e
@pytest.mark.gunicorn
class TestGunicornConfigExample:
    def test_registers_when_ready_and_deregisters_before_the_listeners_close(self, processes: Processes) -> None:
        """The example config registers in the registry and deregisters at SIGTERM, before NotAccepting."""
        port, registry = free_port(), free_port()
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            BIND=f"127.0.0.1:{port}",
            EXAMPLE_REGISTRY=f"http://127.0.0.1:{registry}",
            GRACEFUL_SHUTDOWN_DELAY="1",
        )
        argv = [GUNICORN, "-c", "examples/gunicorn_conf.py", "examples.flask_app:app"]
        if _has_control_socket():  # tests must not share ~/.gunicorn/gunicorn.ctl
            argv.insert(1, "--no-control-socket")
        proc = processes.start(argv, env=env)
        read_until(proc, f"registry: registered web-127.0.0.1-{port}")
        proc.send_signal(signal.SIGTERM)
        lines = read_until(proc, "graceful: NotAcceptingNewRequests")
        assert any(f"registry: deregistered web-127.0.0.1-{port}" in line for line in lines)
        assert proc.wait(30) == 0


class TestSystemdUnit:
    def test_unit_matches_the_budget(self) -> None:
        """The unit notifies, sends SIGTERM to the master only, and allows GRACEFUL_GRACE_PERIOD to stop."""
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read(ROOT / "examples" / "systemd" / "graceful-example.service")
        service = parser["Service"]
        assert service["Type"] == "notify" and service["KillMode"] == "mixed"
        grace = re.search(r"GRACEFUL_GRACE_PERIOD=(\d+)", "\n".join(service.values()))
        assert grace is not None and service["TimeoutStopSec"] == grace.group(1)


Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


@pytest.fixture
def fastapi_example(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ModuleType, Lifecycle]]:
    """examples/fastapi_app.py loaded afresh, its one-line middleware on a lifecycle of this test's own."""
    lifecycle = Lifecycle(Config())
    monkeypatch.setattr(_default, "default_lifecycle", lifecycle)  # what add_middleware's default resolves to
    spec = importlib.util.spec_from_file_location("fastapi_app_under_test", ROOT / "examples" / "fastapi_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module, lifecycle


class Conversation:
    """One in-process ASGI connection: the app's receive (a queue) and what it sent."""

    def __init__(self, app: ASGIApp, scope: MutableMapping[str, Any], *incoming: Message) -> None:
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        for message in incoming:
            self.inbox.put_nowait(message)
        self.sent: list[Message] = []
        self.arrived = asyncio.Event()
        self.task = asyncio.ensure_future(app(scope, self.inbox.get, self.send))

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        self.arrived.set()

    async def until(self, done: Callable[[list[Message]], bool]) -> list[Message]:
        """Wait (at most 5 s in all) until what the app sent satisfies ``done``."""
        deadline = asyncio.get_running_loop().time() + 5
        while not done(self.sent):
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), max(0.0, deadline - asyncio.get_running_loop().time()))
        return self.sent

    async def end(self, message: Message) -> None:
        """Send the client's last message and wait (at most 5 s) for the app to return."""
        self.inbox.put_nowait(message)
        await asyncio.wait_for(self.task, 5)


def _scope(
    kind: str, path: str, query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
) -> dict[str, Any]:
    return {
        "type": kind,
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "ws" if kind == "websocket" else "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": [(b"host", b"testserver"), *(headers or [])],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 50000),
        "subprotocols": [],
    }


class TestFastAPIExample:
    def test_routes_health_and_lifespan_in_process(self, fastapi_example: tuple[ModuleType, Lifecycle]) -> None:
        """The app's routes, its WebSocket (echo, ticks) and SSE, /readyz gated on its lifespan, which ends cleanly."""
        module, lifecycle = fastapi_example
        app = module.app

        async def scenario() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as http:
                lifespan = Conversation(app, {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}})
                lifespan.inbox.put_nowait({"type": "lifespan.startup"})
                await lifespan.until(lambda sent: len(sent) == 1)
                seen["startup"] = lifespan.sent[0]["type"]
                seen["after"] = (await http.get("/readyz?verbose")).text
                seen["index"] = (await http.get("/")).text
                seen["slow"] = (await http.get("/slow?seconds=0")).text
                seen["livez"] = (await http.get("/livez")).status_code
                sse = Conversation(
                    app,
                    _scope("http", "/events", b"every=0", [(b"accept", b"text/event-stream")]),
                    {"type": "http.request", "body": b"", "more_body": False},
                )
                sent = await sse.until(lambda sent: sum(m["type"] == "http.response.body" for m in sent) >= 2)
                seen["sse_headers"] = dict(sent[0]["headers"])
                seen["sse_body"] = b"".join(m.get("body", b"") for m in sent[1:3])
                await sse.end({"type": "http.disconnect"})
                ws = Conversation(
                    app,
                    _scope("websocket", "/ws", b"every=0.01"),
                    {"type": "websocket.connect"},
                    {"type": "websocket.receive", "text": "hi"},
                )
                texts = await ws.until(lambda sent: {"echo hi", "tick 1"} <= {m.get("text") for m in sent})
                seen["ws"] = [m.get("text", m["type"]) for m in texts]
                await ws.end({"type": "websocket.disconnect", "code": 1001})
                await lifespan.end({"type": "lifespan.shutdown"})
                seen["shutdown"] = lifespan.sent[-1]["type"]
                seen["websockets"] = app.state.websockets
            return seen

        seen = asyncio.run(scenario())
        assert seen["startup"] == "lifespan.startup.complete"
        assert "[+]lifespan ok" in seen["after"] and seen["after"].endswith("readyz check passed\n")
        assert (seen["index"], seen["slow"], seen["livez"]) == ("hello from FastAPI\n", "slept 0\n", 200)
        assert seen["sse_headers"][b"content-type"].startswith(b"text/event-stream")
        assert seen["sse_body"] == b"data: tick 0\n\ndata: tick 1\n\n"
        assert seen["ws"][0] == "websocket.accept" and "echo hi" in seen["ws"] and "tick 1" in seen["ws"]
        assert seen["shutdown"] == "lifespan.shutdown.complete" and seen["websockets"] == 1
        # The one line's middleware is on this test's lifecycle: its /readyz answers were tallied there.
        assert ("readyz", "lifespan") in {(tally.endpoint, tally.name) for tally in lifecycle.stats.health_checks()}
