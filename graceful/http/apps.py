"""Which protocol an app speaks: ASGI 3 or WSGI, decided once, where a server or middleware takes it.

An app of the wrong kind is refused in one line at start-up, never served
with 500s: :class:`graceful.GracefulMiddleware` (WSGI) refuses an ASGI app,
``graceful serve`` picks its server by the app's kind. Runs wherever an app
is wrapped or loaded (a Gunicorn worker's boot, ``graceful serve``'s main
thread), once per app.
"""

from __future__ import annotations

import inspect

__all__ = ["LIFECYCLE_KEY", "WrongKindOfApp", "is_asgi_app"]

#: WSGI environ and ASGI scope key: the :class:`graceful.Lifecycle` whose middleware handles the
#: request. A middleware that finds its own lifecycle there passes the request through (an app
#: wrapped twice, by its author and by a server, is handled once).
LIFECYCLE_KEY = "graceful.lifecycle"


class WrongKindOfApp(TypeError):
    """An ASGI app given where a WSGI app belongs, or the reverse; the message says what to use instead."""


def is_asgi_app(app: object) -> bool:
    """True for an ASGI 3 application: a coroutine function, or an object whose ``__call__`` is one.

    As Uvicorn decides it (``iscoroutinefunction`` of the app or of its
    ``__call__``); a WSGI app, ``(environ, start_response)`` returning an
    iterable, is not one.
    """
    if inspect.iscoroutinefunction(app):
        return True
    call = getattr(app, "__call__", None)  # noqa: B004 (the method itself, not whether app is callable)
    return call is not None and inspect.iscoroutinefunction(call)
