"""Run by tests/gunicorn/test_gevent_worker.py in its own process: gevent's monkey-patching, then graceful's prepare.

    python tests/live/gevent_check.py renew|stale

Does what a Gunicorn gevent worker does: the lifecycle and the app's middleware
exist before ``monkey.patch_all()`` (made in the master, or at import), then
graceful's gevent preparation (the lifecycle renewed, the servers recorded) runs (``renew``; ``stale`` skips
it: gevent's own StreamServer, the control). A request greenlet waits on ``environ["graceful.shutting_down"]``
while a ticker greenlet counts 10 ms ticks and a third fires
NotAcceptingNewRequests after 0.3 s. Then a StreamServer is built from
Gunicorn's module global on a real listener, which is shut down as the master
does. Prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import time
from typing import Any

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.wsgi.middleware import SHUTTING_DOWN_KEY, GracefulMiddleware

mode = sys.argv[1]
lifecycle = Lifecycle(Config(shutdown_delay=0))
waited: dict[str, float] = {}
events: list[object] = []


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    began = time.monotonic()
    waited["set"] = float(environ[SHUTTING_DOWN_KEY].wait(2.0))
    waited["seconds"] = time.monotonic() - began
    events.append(environ[SHUTTING_DOWN_KEY])
    start_response("200 OK", [])
    return [b"ok"]


middleware = GracefulMiddleware(app, lifecycle)  # before the patch: as an app imported in the master

from gevent import monkey  # noqa: E402

monkey.patch_all()

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import gunicorn.workers.ggevent as ggevent  # noqa: E402

from graceful.gunicorn.adapter.gevent import record_servers  # noqa: E402

logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
servers = None
if mode == "renew":  # what a gevent worker's post_worker_init does (graceful.gunicorn.worker)
    lifecycle.renew_after_patch()
    servers = record_servers()

ticks: list[float] = []


def ticker() -> None:
    for _ in range(300):
        gevent.sleep(0.01)
        ticks.append(time.monotonic())


def request() -> None:
    environ = {"PATH_INFO": "/", "REQUEST_METHOD": "GET"}
    middleware(environ, lambda status, headers: None)


def stop_accepting() -> None:
    gevent.sleep(0.3)
    lifecycle.initiate_shutdown()
    lifecycle.stop_accepting()


started = time.monotonic()
jobs = [gevent.spawn(ticker), gevent.spawn(request), gevent.spawn(stop_accepting)]
gevent.joinall(jobs[1:], timeout=10)
waiting_ticks = sum(1 for tick in ticks if started < tick < started + waited.get("seconds", 0.0))
jobs[0].kill()

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(8)
server = ggevent.StreamServer(listener, handle=lambda client, address: None)
server.start()
gevent.sleep(0.05)
listener.shutdown(socket.SHUT_RD)  # what the master does when the server stops listening
gevent.sleep(0.2)
print(
    json.dumps(
        {
            "gevent_event": all(isinstance(event, gevent.event.Event) for event in events) and bool(events),
            "woken": bool(waited.get("set")),
            "waited": round(waited.get("seconds", -1.0), 3),
            "ticks_while_waiting": waiting_ticks,
            "recorded": len(servers.servers) if servers is not None else None,
            # graceful's server stops accepting and keeps its socket; gevent's own closes it.
            "stopped": bool(getattr(server, "stopped_accepting", False) or server.closed),
            "socket_open": not server.closed,
        }
    ),
    flush=True,
)
