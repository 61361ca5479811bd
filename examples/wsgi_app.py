"""A plain WSGI app that knows nothing of graceful; the server wraps it.

    graceful serve examples.wsgi_app:app --bind 127.0.0.1:8000
    gunicorn -c graceful/conf.py examples.wsgi_app:app

Either way ``/livez``, ``/readyz`` and ``/healthz`` answer next to the app's
routes, and SIGTERM runs the whole graceful shutdown.

Routes: ``/`` says hello; ``/slow?seconds=N`` answers after N seconds (at
most 30), to watch an in-flight request finish during a shutdown.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

__all__ = ["app"]

#: Longest ``/slow`` request, in seconds.
MAX_SLOW = 30.0


def _respond(start_response: StartResponse, status: str, text: str) -> list[bytes]:
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """Route ``/`` and ``/slow``; anything else is a 404."""
    path = environ.get("PATH_INFO", "/")
    if path == "/":
        return _respond(start_response, "200 OK", "Hello from a plain WSGI app.\n")
    if path == "/slow":
        query = parse_qs(environ.get("QUERY_STRING", ""))
        try:
            seconds = float(query.get("seconds", ["1"])[0])
        except ValueError:
            return _respond(start_response, "400 Bad Request", "seconds must be a number\n")
        if not 0 <= seconds <= MAX_SLOW:
            return _respond(start_response, "400 Bad Request", f"seconds must be between 0 and {MAX_SLOW:g}\n")
        time.sleep(seconds)
        return _respond(start_response, "200 OK", f"Slept {seconds:g}s.\n")
    return _respond(start_response, "404 Not Found", "Not found.\n")
