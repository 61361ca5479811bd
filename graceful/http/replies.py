"""graceful's own answers: health probes, metrics, 429 and 503 refusals, 404, 405.

Every one has ``text/plain; charset=utf-8`` (the metrics: Prometheus' text
format), ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store``,
a ``Content-Length``, and no body for HEAD. A :class:`Reply` says what to
answer; each request side writes it in its protocol (WSGI:
:func:`graceful.wsgi.middleware.send_reply`, ASGI:
:func:`graceful.asgi.replies.send_reply`), on the thread or event loop that
answers the request. The health port (:mod:`graceful.healthport.request`, on
its own thread) writes the same status lines and headers from :data:`STATUS`
and :func:`headers_for`, plus its 400 and 431 for bad input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from graceful.core.stats import REASON_MAX_IN_FLIGHT

if TYPE_CHECKING:
    from graceful.core.gate import Refusal

__all__ = [
    "NOT_ALLOWED",
    "NO_METRICS",
    "SHUTTING_DOWN",
    "STATUS",
    "TEXT",
    "TOO_MANY",
    "Reply",
    "headers_for",
    "refusal_reply",
]

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


class Reply(NamedTuple):
    """One of graceful's answers, before a request side writes it: status, body and headers."""

    status: int
    body: bytes
    retry_after: str | None = None
    allow: str | None = None
    content_type: str = TEXT

    @property
    def headers(self) -> list[tuple[str, str]]:
        """Its headers (:func:`headers_for`)."""
        return headers_for(self.body, self.retry_after, self.allow, self.content_type)


def refusal_reply(refusal: Refusal) -> Reply:
    """graceful's answer to a request its lifecycle's gate refused: 429 or 503, ``Retry-After``."""
    body = TOO_MANY if refusal.reason == REASON_MAX_IN_FLIGHT else SHUTTING_DOWN
    return Reply(refusal.status, body, refusal.retry_after)
