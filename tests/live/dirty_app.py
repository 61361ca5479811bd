"""A WSGI app whose requests wait on Gunicorn 27's dirty pool (``dirty_workers``, ``dirty_apps``).

    gunicorn -c graceful/conf.py --dirty-workers 1 --dirty-app tests.live.dirty_app:Sleeper \\
        tests.live.dirty_app:app

``/dirty?ms=N``: the request asks a dirty worker to sleep N ms and answers 200 with N, or 502 with the
error when the dirty call failed. ``/``: 200 at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from gunicorn.dirty import DirtyApp, DirtyError, get_dirty_client

DIRTY_APP = "tests.live.dirty_app:Sleeper"


class Sleeper(DirtyApp):  # type: ignore[misc]  # Gunicorn has no type hints
    """A dirty app whose one action blocks its worker, as a model's inference would."""

    def __call__(self, action: str, *args: Any, **kwargs: Any) -> Any:
        if action != "sleep":
            raise ValueError(f"unknown action {action!r}")
        ms = int(args[0])
        time.sleep(ms / 1000)
        return ms


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO") == "/dirty":
        ms = int(parse_qs(environ.get("QUERY_STRING", "")).get("ms", ["100"])[0])
        try:
            slept = get_dirty_client().execute(DIRTY_APP, "sleep", ms)
        except (DirtyError, OSError) as exc:  # the dirty pool failed this call: say so, with its error
            start_response("502 Bad Gateway", [("Content-Type", "text/plain")])
            return [f"{type(exc).__name__}: {exc}".encode()]
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(slept).encode()]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
