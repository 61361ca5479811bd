"""The ASGI 3 callables' types, once for the ASGI side (the spec's shapes; no framework's)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send"]

#: A connection's scope (``type``, ``path``, ``headers``, ...).
Scope = MutableMapping[str, Any]
#: An event received or sent (``type`` and its keys).
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: An ASGI 3 application.
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
