"""A plain WSGI app for tests/serve/test_server.py, served by ``graceful serve tests.live.server_app:app``.

Prints ``SIGNAL <name>`` for every lifecycle signal as it fires, ``POST-START``
when the post-start hook ran and ``CLEANUP`` when the cleanup task ran.
``SERVER_APP_PRE_SHUTDOWN`` (seconds, default 0.1) is how long the
pre-shutdown hook takes.

Routes: ``/`` answers ``hello`` with the client's port and the shutdown state
(``port=P initiated=B not_accepting=B``), ``/slow?seconds=S`` sleeps then
answers ``slept S``, ``/stream?chunks=N&interval=S`` streams ``chunk i`` lines.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

import graceful

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

lifecycle = graceful.default_lifecycle


def say(line: str) -> None:
    """Print one line with a single write: print() writes the text and the newline
    separately, so a log line on the merged stderr could land between them."""
    os.write(1, (line + "\n").encode())


lifecycle.subscribe(lambda name, _at: say(f"SIGNAL {name}"))
_pre_shutdown_seconds = float(os.environ.get("SERVER_APP_PRE_SHUTDOWN", "0.1"))


@graceful.pre_shutdown_hook("announce", timeout=5)
def announce() -> None:
    """Take a while, as deregistering from something would."""
    threading.Event().wait(_pre_shutdown_seconds)


@graceful.post_start_hook("warm-up")
def warm_up() -> None:
    """Mark start-up as done."""
    say("POST-START")


@graceful.cleanup_task("flush", timeout=5)
def flush() -> None:
    """Record that cleanup ran (the test counts these lines)."""
    say("CLEANUP")


def _stream(chunks: int, interval: float) -> Iterator[bytes]:
    for number in range(chunks):
        if number:
            time.sleep(interval)
        yield f"chunk {number}\n".encode()


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The test routes (see the module docstring)."""
    query = {key: values[0] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}
    path = environ.get("PATH_INFO", "/")
    headers = [("Content-Type", "text/plain")]
    if path == "/slow":
        seconds = min(float(query.get("seconds", "1")), 30.0)
        time.sleep(seconds)
        body = f"slept {seconds:g}\n".encode()
    elif path == "/stream":
        start_response("200 OK", headers)
        return _stream(min(int(query.get("chunks", "5")), 100), min(float(query.get("interval", "0.2")), 5.0))
    elif path == "/":
        initiated = lifecycle.shutdown_initiated.is_set()
        not_accepting = environ["graceful.shutting_down"].is_set()
        body = f"hello port={environ.get('REMOTE_PORT')} initiated={initiated} not_accepting={not_accepting}\n".encode()
    else:
        start_response("404 Not Found", headers)
        return [b"not found\n"]
    start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
    return [body]
