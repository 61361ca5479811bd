"""The WSGI app the zero-loss suite and the benchmarks put under load (plain WSGI, no graceful import).

    gunicorn -c graceful/conf.py --pythonpath tests/live load_app:app    # graceful
    gunicorn --pythonpath tests/live load_app:app                         # plain Gunicorn

Paths (GET):

``/fast?bytes=B``
    ``B`` bytes (default 256) of :func:`pattern`, at once.
``/slow?ms=N&bytes=B``
    ``B`` bytes (default 4096), half sent at once and half after ``N`` ms
    (0-10000), so a connection cut while the request is in flight shows up
    as an incomplete body, not as a short wait.
``/readyz``
    Always ``200 ok``: plain Gunicorn's stand-in for a readiness endpoint.
    Under graceful the middleware answers ``/readyz`` before the app sees it.

Every response carries ``Content-Length`` and ``X-Master-Pid`` (the
Gunicorn master's pid: which instance served it). ``LOAD_APP_CLEANUP=K:S``
registers K graceful cleanup tasks that sleep S seconds each (for
``bench/shutdown.py``); it imports graceful only then.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MAX_BYTES = 1 << 20
_MAX_MS = 10_000


def pattern(size: int) -> bytes:
    """The ``size``-byte body every path serves: the client checks length and content."""
    repeats = size // len(_ALPHABET) + 1
    return (_ALPHABET * repeats)[:size]


def _int_arg(query: dict[str, list[str]], name: str, default: int, upper: int) -> int:
    try:
        value = int(query.get(name, [str(default)])[0])
    except ValueError:
        return default
    return min(max(value, 0), upper)


def _slow_body(body: bytes, pause_s: float) -> Iterator[bytes]:
    half = len(body) // 2
    yield body[:half]
    time.sleep(pause_s)
    yield body[half:]


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """Serve ``/fast``, ``/slow`` and a stand-in ``/readyz``; 404 otherwise."""
    path = environ.get("PATH_INFO", "")
    query = parse_qs(environ.get("QUERY_STRING", ""))
    headers = [("Content-Type", "application/octet-stream"), ("X-Master-Pid", str(os.getppid()))]
    if path == "/fast":
        body = pattern(_int_arg(query, "bytes", 256, _MAX_BYTES))
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [body]
    if path == "/slow":
        body = pattern(_int_arg(query, "bytes", 4096, _MAX_BYTES))
        pause_s = _int_arg(query, "ms", 100, _MAX_MS) / 1000
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return _slow_body(body, pause_s)
    if path == "/readyz":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "10")])
    return [b"not found\n"]


def _register_cleanup(spec: str) -> None:
    """``K:S``: K cleanup tasks of S seconds each, registered on graceful's default lifecycle."""
    import graceful

    count, _, seconds = spec.partition(":")
    for index in range(int(count)):
        graceful.cleanup_task(f"sleep-{index}", timeout=float(seconds) + 1)(lambda: time.sleep(float(seconds)))


if os.environ.get("LOAD_APP_CLEANUP"):
    _register_cleanup(os.environ["LOAD_APP_CLEANUP"])
