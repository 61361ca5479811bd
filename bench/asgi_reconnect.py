"""What a reconnecting WebSocket client pays during a shutdown: graceful serve against plain Uvicorn.

    python bench/asgi_reconnect.py [--clients 20] [--delay 2]

Each server (``graceful serve`` on Uvicorn, then plain ``uvicorn``) serves
``tests/live/asgi_app.py``'s ``/ws``. ``--clients`` WebSocket clients connect
and, whenever their socket closes, reconnect at once, as a browser's retrying
client does (one attempt every 50 ms at most, for ``--delay`` + 3 s). Then
SIGTERM. Per server it prints: the close codes clients saw, how many
connections each client opened (1 + its reconnections), how many of those
were served, how many attempts were refused (no pod is listening here: in a
cluster the balancer sends them to another pod), and the spread of the
closes (first to last, in seconds after SIGTERM).

The single server is the worst case: in a cluster a reconnection after the
balancers have dropped the pod goes to another pod at once. Bounded in time
and count; 127.0.0.1 only; every server started is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import websockets  # noqa: E402 (after the path)


@dataclass
class Client:
    opened: int = 0
    refused: int = 0
    codes: list[int] = field(default_factory=list)
    closed_at: list[float] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(kind: str, port: int, delay: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": ROOT, "GRACEFUL_SHUTDOWN_DELAY": str(delay), "GRACEFUL_DRAIN_TIMEOUT": "2"}
    if kind == "graceful":
        argv = [sys.executable, "-m", "graceful", "serve", "tests.live.asgi_app:app", "--bind", f"127.0.0.1:{port}"]
    else:
        argv = [sys.executable, "-m", "uvicorn", "tests.live.asgi_app:app", "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def wait_listening(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise TimeoutError("the server did not listen")


async def run_client(url: str, client: Client, t0: list[float], until: float) -> None:
    while time.monotonic() < until:
        started = time.monotonic()
        try:
            async with websockets.connect(url, open_timeout=2, close_timeout=2) as ws:
                client.opened += 1
                try:
                    while True:
                        await asyncio.wait_for(ws.recv(), max(0.05, until - time.monotonic()))
                except websockets.ConnectionClosed as closed:
                    code = closed.rcvd.code if closed.rcvd is not None else 1006
                    client.codes.append(code)
                    if t0[0]:
                        client.closed_at.append(time.monotonic() - t0[0])
                except asyncio.TimeoutError:
                    return
        except (OSError, websockets.InvalidHandshake, asyncio.TimeoutError):
            client.refused += 1
        await asyncio.sleep(max(0.0, 0.05 - (time.monotonic() - started)))


async def measure(kind: str, clients: int, delay: float) -> None:
    port = free_port()
    proc = start(kind, port, delay)
    try:
        await wait_listening(port, time.monotonic() + 15)
        t0 = [0.0]
        until = time.monotonic() + 1 + delay + 3
        states = [Client() for _ in range(clients)]
        tasks = [asyncio.ensure_future(run_client(f"ws://127.0.0.1:{port}/ws", c, t0, until)) for c in states]
        await asyncio.sleep(1)
        t0[0] = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait(tasks, timeout=until - time.monotonic() + 5)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    codes = Counter(code for c in states for code in c.codes)
    closes = sorted(at for c in states for at in c.closed_at)
    opened = Counter(c.opened for c in states)
    refused = sum(c.refused for c in states)
    spread = f"{closes[0]:.3f}-{closes[-1]:.3f} s" if closes else "-"
    print(
        f"{kind:<9} clients {clients}: close codes {dict(codes)};"
        f" connections per client {dict(sorted(opened.items()))}; attempts refused {refused};"
        f" closes after SIGTERM {spread}; exit status {proc.returncode}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--delay", type=float, default=2.0)
    args = parser.parse_args()
    for kind in ("graceful", "plain"):
        asyncio.run(measure(kind, args.clients, args.delay))


if __name__ == "__main__":
    main()
