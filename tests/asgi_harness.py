"""The load suite's harness for one Uvicorn process: tests/live/asgi_load_app.py, graceful or plain.

tests/e2e_harness.py's scenarios drive a :class:`~tests.e2e_harness.Gunicorn`
instance; :class:`Uvicorn` is the same instance (start, ``/readyz`` wait,
SIGTERM, exit wait, log tail) for the ASGI app served by

* ``graceful serve -b 127.0.0.1:PORT asgi_load_app:app`` (graceful's timeline
  on Uvicorn; :data:`GRACEFUL_SERVE` is the command, a parameter so another
  server of the same command line can be put in its place), or
* ``python -m uvicorn asgi_load_app:app --host 127.0.0.1 --port PORT`` (plain
  Uvicorn: its own SIGTERM handling, the app's stand-in ``/readyz``).

Both run without an access log (24 keep-alive clients would log thousands of
lines through the harness's tail). Like every harness process: 127.0.0.1
only, its own process group, killed by the Processes fixture.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tests.e2e_harness import LIVE, ROOT, Gunicorn, MakeInstance, Starter

#: The graceful side's command; the bind address and the app follow it.
GRACEFUL_SERVE: tuple[str, ...] = (sys.executable, "-m", "graceful", "serve")
#: The app both sides serve (tests/live on the path).
ASGI_APP = "asgi_load_app:app"


class Uvicorn(Gunicorn):
    """One Uvicorn process serving tests/live/asgi_load_app.py on 127.0.0.1:``port``.

    ``graceful=True``: ``serve_command`` (default :data:`GRACEFUL_SERVE`) ``-b
    127.0.0.1:PORT --no-access-log APP``; False: plain ``python -m uvicorn``.
    Its pid is the one process's, the ``X-Master-Pid`` the app serves.
    """

    def __init__(
        self,
        starter: Starter,
        port: int,
        *,
        graceful: bool,
        env: dict[str, str] | None = None,
        name: str = "uvicorn",
        serve_command: Sequence[str] = GRACEFUL_SERVE,
        app: str = ASGI_APP,
    ) -> None:
        full_env = dict(env or {})
        # The app's folder on the path (uvicorn's --app-dir does it for plain Uvicorn too, but one way for both).
        full_env["PYTHONPATH"] = ":".join([str(ROOT), str(LIVE)])
        super().__init__(starter, port, "uvicorn", graceful=graceful, env=full_env, name=name)
        self.serve_command = list(serve_command)
        self.app = app

    def argv(self) -> list[str]:
        """The command line."""
        if self.graceful:
            return [*self.serve_command, "-b", f"127.0.0.1:{self.port}", "--no-access-log", self.app]
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--no-access-log",
            self.app,
        ]


def uvicorn_instances(
    starter: Starter, *, graceful: bool, serve_command: Sequence[str] = GRACEFUL_SERVE
) -> MakeInstance:
    """A ``make`` for :func:`tests.e2e_harness.rolling_restart`: Uvicorn instances of the ASGI app."""

    def make(port: int, name: str, env: dict[str, str]) -> Gunicorn:
        return Uvicorn(starter, port, graceful=graceful, env=env, name=name, serve_command=serve_command)

    return make
