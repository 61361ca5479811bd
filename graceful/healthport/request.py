"""One request on the health port: reading it, and the bytes of its answer.

One request per connection, answered with ``Connection: close``. The
request line is read as a WSGI server would read it (the path
percent-decoded, path and query as bytes read as latin-1) and routed as the
app's port routes it (:mod:`graceful.http.probes`), so both ports answer a
path alike. The status lines and headers are graceful's own
(:mod:`graceful.http.replies`). Headers other than the request line are
read past, not used. Runs on the ``graceful-health-port`` thread.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import unquote_to_bytes

from graceful.http.probes import METRICS, METRICS_PATH, is_probe_path, probe_target
from graceful.http.replies import NOT_ALLOWED, STATUS, TEXT, headers_for

__all__ = ["NOT_FOUND", "NOT_HTTP", "TOO_LARGE", "Probe", "Refusal", "encode", "parse"]

NOT_HTTP = b"not an HTTP/1.x request\n"
TOO_LARGE = b"request line and headers too large\n"
NOT_FOUND = b"not found: the health port serves /livez, /readyz, /healthz and /metrics\n"


@dataclasses.dataclass(frozen=True)
class Probe:
    """A health path to answer: ``endpoint`` and ``check`` as :func:`probe_target` gives them, the raw query.

    ``/metrics`` is the endpoint :data:`~graceful.http.probes.METRICS`, with no check.
    """

    endpoint: str
    check: str | None
    query: str
    head: bool


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A request answered without asking the responder: 400, 404, 405 or 431."""

    status: int
    body: bytes
    head: bool = False
    allow: str | None = None


def parse(inbox: bytes | bytearray, max_request: int) -> Probe | Refusal | None:
    """Read what a client has sent so far: None while the request is not whole yet.

    A first byte that cannot start a method (TLS, binary junk) is refused at
    once; more than ``max_request`` bytes without the end of the headers is a
    431, without reading on.
    """
    end = inbox.find(b"\r\n\r\n")
    if end < 0:
        end = inbox.find(b"\n\n")
    if end < 0:
        if len(inbox) > max_request:
            return Refusal(431, TOO_LARGE)
        if inbox[:1] and not inbox[:1].isupper():  # every method starts with an upper-case letter
            return Refusal(400, NOT_HTTP)
        return None
    if end > max_request:
        return Refusal(431, TOO_LARGE)
    line = bytes(inbox[: inbox.find(b"\n")]).rstrip(b"\r")
    return route(line)


def route(line: bytes) -> Probe | Refusal:
    """What to do with one request line (``GET /readyz?verbose HTTP/1.1``)."""
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1.") or not (parts[0].isalpha() and parts[0].isupper()):
        return Refusal(400, NOT_HTTP)
    method, target, _ = parts
    head = method == b"HEAD"
    if target.startswith((b"http://", b"https://")):  # the absolute form: keep its path
        slash = target.find(b"/", target.find(b"//") + 2)
        target = target[slash:] if slash >= 0 else b"/"
    raw_path, _, raw_query = target.partition(b"?")
    # As a WSGI server would: PATH_INFO percent-decoded, both as bytes read as latin-1.
    path = unquote_to_bytes(raw_path).decode("latin-1")
    metrics = path == METRICS_PATH
    if not (metrics or is_probe_path(path)):
        return Refusal(404, NOT_FOUND, head)
    if method not in (b"GET", b"HEAD"):
        return Refusal(405, NOT_ALLOWED, head, allow="GET, HEAD")
    endpoint, check = (METRICS, None) if metrics else probe_target(path)
    return Probe(endpoint, check, raw_query.decode("latin-1"), head)


def encode(
    status: int,
    body: bytes,
    *,
    head: bool = False,
    allow: str | None = None,
    retry_after: str | None = None,
    content_type: str = TEXT,
) -> bytes:
    """A whole ``Connection: close`` response with graceful's status line and headers; no body for HEAD."""
    lines = [f"HTTP/1.1 {STATUS[status]}"]
    headers = headers_for(body, retry_after=retry_after, allow=allow, content_type=content_type)
    lines.extend(f"{name}: {value}" for name, value in headers)
    lines.append("Connection: close")
    head_bytes = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head_bytes if head else head_bytes + body
