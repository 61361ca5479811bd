"""/fast and /slow as tests/live/load_app.py serves them, each after a query; and the request's in-flight count."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from flask import Blueprint, Response, request

from flaskr.db import get_db

bp = Blueprint("load", __name__)

_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def pattern(size: int) -> bytes:
    """The body the load generator checks (tests/e2e_harness.py's pattern)."""
    return (_ALPHABET * (size // len(_ALPHABET) + 1))[:size]


def _number(name: str, default: int, upper: int) -> int:
    value = request.args.get(name, default, type=int)
    return min(max(default if value is None else value, 0), upper)


def _response(body: bytes | Iterator[bytes], size: int) -> Response:
    response = Response(body, mimetype="application/octet-stream")
    response.headers["Content-Length"] = str(size)
    response.headers["X-Master-Pid"] = str(os.getppid())
    return response


@bp.get("/fast")
def fast() -> Response:
    get_db().execute("SELECT count(*) FROM post").fetchone()
    body = pattern(_number("bytes", 256, 1 << 20))
    return _response(body, len(body))


@bp.get("/slow")
def slow() -> Response:
    get_db().execute("SELECT count(*) FROM post").fetchone()
    body = pattern(_number("bytes", 4096, 1 << 20))
    pause = _number("ms", 100, 10_000) / 1000

    def chunks() -> Iterator[bytes]:
        half = len(body) // 2
        yield body[:half]
        time.sleep(pause)
        yield body[half:]

    return _response(chunks(), len(body))


@bp.get("/in-flight")
@bp.get("/uncounted/in-flight")
def in_flight() -> str:
    """How many requests this process counts as in flight, this one included if it is counted."""
    return str(request.environ["graceful.lifecycle"].in_flight.count)
