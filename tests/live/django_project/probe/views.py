"""/fast and /slow as tests/live/load_app.py serves them, through Django and its database.

Each request runs a query (`SELECT 1` on the default database, kept open with
CONN_MAX_AGE), so the database is in every request the load generator sends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from django.db import connection
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def pattern(size: int) -> bytes:
    """The body the load generator checks (tests/e2e_harness.py's pattern)."""
    return (_ALPHABET * (size // len(_ALPHABET) + 1))[:size]


def _number(request: HttpRequest, name: str, default: int, upper: int) -> int:
    try:
        return min(max(int(request.GET.get(name, default)), 0), upper)
    except ValueError:
        return default


def _query() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _headers(response: HttpResponse | StreamingHttpResponse, size: int) -> None:
    response["Content-Length"] = str(size)
    response["X-Master-Pid"] = str(os.getppid())


def fast(request: HttpRequest) -> HttpResponse:
    _query()
    body = pattern(_number(request, "bytes", 256, 1 << 20))
    response = HttpResponse(body, content_type="application/octet-stream")
    _headers(response, len(body))
    return response


def slow(request: HttpRequest) -> StreamingHttpResponse:
    _query()
    body = pattern(_number(request, "bytes", 4096, 1 << 20))
    pause = _number(request, "ms", 100, 10_000) / 1000

    def chunks() -> Iterator[bytes]:
        half = len(body) // 2
        yield body[:half]
        time.sleep(pause)
        yield body[half:]

    response = StreamingHttpResponse(chunks(), content_type="application/octet-stream")
    _headers(response, len(body))
    return response


def pid(request: HttpRequest) -> HttpResponse:
    """This worker's pid, after a query: the connection it keeps is the cleanup task's to close."""
    _query()
    return HttpResponse(str(os.getpid()), content_type="text/plain")
