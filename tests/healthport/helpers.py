"""Test helper shared by the health port's in-process tests: one GET to a port's listener."""

from __future__ import annotations

import http.client
import socket


def get(listener: socket.socket | None, path: str, timeout: float) -> tuple[int, str]:
    """GET ``path`` from the health port listening on ``listener``, on a fresh connection; status and body."""
    assert listener is not None
    conn = http.client.HTTPConnection("127.0.0.1", listener.getsockname()[1], timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()
