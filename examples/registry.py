"""A tiny service registry on 127.0.0.1, standing in for a Kubernetes webhook configuration.

    python -m examples.registry 8001

``PUT /instances/<name>`` registers an instance, ``DELETE /instances/<name>``
removes it, ``GET /instances`` lists them, one per line. The example Gunicorn
config (examples/gunicorn_conf.py) registers its server when it is ready and
deregisters it in a pre-shutdown hook, as a webhook server deletes its
webhook configuration before it stops serving.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_instances: set[str] = set()
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    """Answers the three routes above; runs on the server's request threads."""

    def _reply(self, status: int, body: str = "") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        with _lock:
            listing = "".join(f"{name}\n" for name in sorted(_instances))
        self._reply(200, listing) if self.path == "/instances" else self._reply(404)

    def do_PUT(self) -> None:
        self._change(add=True)

    def do_DELETE(self) -> None:
        self._change(add=False)

    def _change(self, add: bool) -> None:
        prefix = "/instances/"
        if not self.path.startswith(prefix) or len(self.path) == len(prefix):
            self._reply(404)
            return
        name = self.path[len(prefix) :]
        with _lock:
            (_instances.add if add else _instances.discard)(name)
        print(f"registry: {'registered' if add else 'deregistered'} {name}", flush=True)
        self._reply(204)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the register/deregister lines above are the log."""


def main(port: int) -> None:
    """Serve on 127.0.0.1:``port`` until killed."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"registry: listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8001)
