"""Closing asyncio servers without dropping a connection they accepted a moment before.

asyncio's selector loop accepts a connection on one turn and gives it its
transport on a later one; a server closed in between drops the accepted
connection without a word (its client sees a reset). Every server graceful
closes on an event loop (``graceful serve``'s Uvicorn, Gunicorn's ASGI
workers) closes through :func:`close_servers`, on that loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["close_servers"]

# Loop turns that let connections accepted before the readers were removed get their transports.
_ACCEPT_TURNS = 2


async def close_servers(servers: list[Any]) -> None:
    """On the loop: close these asyncio servers without dropping a connection accepted a moment before.

    Other processes sharing the listeners keep serving them; on uvloop (no
    ``_accept_connection``: it makes the transport as it accepts) the
    servers close at once.
    """
    loop: Any = asyncio.get_running_loop()
    if callable(getattr(loop, "_accept_connection", None)):
        for server in servers:
            for sock in server.sockets or ():
                loop.remove_reader(sock.fileno())  # nothing more accepted here
        for _ in range(_ACCEPT_TURNS):
            await asyncio.sleep(0)  # the connections accepted already get their transport, attached
    for server in servers:
        server.close()
