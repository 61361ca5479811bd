"""A Flask app with graceful termination: ``Graceful(app)`` is all it takes.

    graceful serve examples.flask_app:app --bind 127.0.0.1:8000
    gunicorn -c graceful/conf.py examples.flask_app:app

``Graceful(app)`` adds ``/livez``, ``/readyz`` and ``/healthz``, counts
requests in flight for the drain, and reads ``GRACEFUL_*`` settings from the
environment and ``app.config``. Both servers see that the app is wrapped
already and drive its lifecycle.

Routes: ``/`` says hello; ``/slow?seconds=N`` answers after N seconds (at
most 30); ``/stream?chunks=N`` streams N lines (at most 100), one every half
second. A request in flight when SIGTERM arrives, a stream included, is
finished before the process exits. (An endless stream would instead watch
``request.environ["graceful.shutting_down"]``, an Event set when the server
stops accepting requests, and be declared ``long_running`` to the extension.)

Pre-shutdown hooks are not registered here: under Gunicorn they run in the
master, so they belong in the Gunicorn config file (see graceful.conf).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from flask import Flask, Response, request, stream_with_context

from graceful.flask import Graceful

__all__ = ["app", "graceful"]

logger = logging.getLogger(__name__)

#: Longest ``/slow`` request, in seconds.
MAX_SLOW = 30.0
#: Most lines one ``/stream`` sends.
MAX_CHUNKS = 100

app = Flask(__name__)
graceful = Graceful(app)

# Stands in for a connection pool that opens at start-up and closes at exit.
_pool_open = threading.Event()
_pool_open.set()


@graceful.readiness_check("pool")
def pool_ready() -> bool:
    """Ready while the (pretend) connection pool is open."""
    return _pool_open.is_set()


@graceful.cleanup_task("close-pool", timeout=2)
def close_pool() -> None:
    """Runs once per serving process, after its requests drained: close the pool."""
    _pool_open.clear()
    logger.info("example: connection pool closed")


@app.get("/")
def hello() -> str:
    """Say hello."""
    return "Hello from Flask.\n"


@app.get("/slow")
def slow() -> tuple[str, int] | str:
    """Answer after ``seconds`` (at most 30)."""
    seconds = request.args.get("seconds", default=1.0, type=float)
    if seconds is None or not 0 <= seconds <= MAX_SLOW:
        return f"seconds must be a number between 0 and {MAX_SLOW:g}\n", 400
    time.sleep(seconds)
    return f"Slept {seconds:g}s.\n"


@app.get("/stream")
def stream() -> Response | tuple[str, int]:
    """Stream ``chunks`` lines, one every half second."""
    chunks = request.args.get("chunks", default=10, type=int)
    if chunks is None or not 1 <= chunks <= MAX_CHUNKS:
        return f"chunks must be a whole number between 1 and {MAX_CHUNKS}\n", 400

    def lines() -> Iterator[str]:
        for number in range(chunks):
            if number:
                time.sleep(0.5)
            yield f"chunk {number + 1} of {chunks}\n"

    return Response(stream_with_context(lines()), mimetype="text/plain")
