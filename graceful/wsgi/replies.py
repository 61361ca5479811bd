"""graceful's own answers: health probes, metrics, 429 and 503 refusals, 404, 405.

Every one has ``text/plain; charset=utf-8`` (the metrics: Prometheus' text
format), ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store``,
a ``Content-Length``, and no body for HEAD. :func:`reply` runs on the request
thread that answers (under Gunicorn: a worker's); the health port
(:mod:`graceful.healthport.request`, on its own thread) writes the same status
lines and headers from :data:`STATUS` and :func:`headers_for`, plus its 400
and 431 for bad input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

__all__ = ["NOT_ALLOWED", "NO_METRICS", "SHUTTING_DOWN", "STATUS", "TEXT", "TOO_MANY", "headers_for", "reply"]

STATUS = {
    200: "200 OK",
    400: "400 Bad Request",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    429: "429 Too Many Requests",
    431: "431 Request Header Fields Too Large",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}
SHUTTING_DOWN = b"The server is shutting down, please try again later.\n"
TOO_MANY = b"Too many requests, please try again later.\n"
NOT_ALLOWED = b"Method not allowed: health endpoints answer GET and HEAD.\n"
NO_METRICS = b"No metrics here: install prometheus_client (pip install 'graceful-wsgi[prometheus]').\n"
#: The content type of every answer but the metrics.
TEXT = "text/plain; charset=utf-8"


def headers_for(
    body: bytes, retry_after: str | None = None, allow: str | None = None, content_type: str = TEXT
) -> list[tuple[str, str]]:
    """The headers of one of graceful's answers with this body."""
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("X-Content-Type-Options", "nosniff"),
        ("Cache-Control", "no-store"),
    ]
    if retry_after is not None:
        headers.append(("Retry-After", retry_after))
    if allow is not None:
        headers.append(("Allow", allow))
    return headers


def reply(
    environ: WSGIEnvironment,
    start_response: StartResponse,
    status: int,
    body: bytes,
    retry_after: str | None = None,
    allow: str | None = None,
    content_type: str = TEXT,
) -> list[bytes]:
    """Start a response of graceful's own (plain text unless told); no body for HEAD."""
    start_response(STATUS[status], headers_for(body, retry_after, allow, content_type))
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]
