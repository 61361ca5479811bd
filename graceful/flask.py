"""Flask extension: graceful termination for a Flask app in two lines.

    from graceful.flask import Graceful
    Graceful(app)

or, with an app factory::

    graceful = Graceful()

    def create_app():
        app = Flask(__name__)
        graceful.init_app(app)
        return app

served as ``gunicorn -c python:graceful.conf "pkg:create_app()"`` or
``graceful serve "pkg:create_app()"`` (a factory that does not use
``Graceful`` works the same: the server wraps the app it returns).

``init_app`` wraps ``app.wsgi_app`` in :class:`graceful.GracefulMiddleware`
(``/livez``, ``/readyz``, ``/healthz``, admission, the in-flight count) and
installs the middleware's bound ``__call__`` as ``app.wsgi_app`` (the
middleware object itself: ``Graceful.middleware(app)``),
configures the lifecycle from ``GRACEFUL_*`` settings and stores the extension
in ``app.extensions["graceful"]``. The extension keeps no reference to any app.

Which lifecycle drives it, in one rule:

* ``Graceful(app, lifecycle=...)`` uses the lifecycle given;
* otherwise the **first** ``Graceful`` built in a process uses
  ``graceful.default_lifecycle``, the one the Gunicorn integration
  (``gunicorn -c python:graceful.conf app:app``) and ``python -m graceful
  serve`` drive in every serving process, so a single app needs nothing more;
* every later ``Graceful`` gets a fresh :class:`graceful.Lifecycle`, so two
  apps in one process share no checks, counts or shutdown state. Pass
  ``lifecycle=graceful.default_lifecycle`` to one of them to have the server
  drive it instead.

Settings, highest precedence first (as :mod:`graceful.core.config` documents):
keyword arguments of ``Graceful``, ``GRACEFUL_*`` environment variables,
``GRACEFUL_*`` keys of ``app.config``, the defaults. A bad value raises
:class:`graceful.ConfigError` from ``init_app``, at start-up. One extension
has one lifecycle: ``init_app`` on several apps shares it among them, and the
last app's settings are in force.

Under Gunicorn, put the settings in the environment: the master reads its
own (the delay, retry-after mode, ``graceful_timeout``) from the environment
when the config loads, before any app is imported, so ``app.config`` values
would reach the workers only. The worker integration wraps the app once more
with the same lifecycle; that outer middleware finds this one (through
``app.wsgi_app``) and passes every request to it, so the options given here
(``long_running``, check timeouts) are the ones in force.

The decorators register on the extension's lifecycle and return the function
unchanged::

    @graceful.readiness_check("db")
    def db_ready():
        return pool.ping()
"""

from __future__ import annotations

import itertools
from typing import Any

from flask import Flask

from graceful.core import default as _default
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.core.registry import Registrations
from graceful.http.health import DEFAULT_CHECK_TIMEOUT
from graceful.wsgi.middleware import GracefulMiddleware, LongRunning, find_middleware

__all__ = ["EXTENSION_KEY", "Graceful"]

#: Where ``init_app`` stores the extension: ``app.extensions["graceful"]``.
EXTENSION_KEY = "graceful"

# The one-shot claim on graceful.default_lifecycle: the first Graceful without
# ``lifecycle=`` in a process draws 0 and takes it, every later one builds its own.
_default_claims = itertools.count()


class Graceful(Registrations):
    """Graceful termination for Flask apps: health endpoints, drain, hooks and checks.

    ``Graceful(app)`` or ``Graceful()`` then :meth:`init_app`. ``lifecycle``
    (see the module docstring for the default), ``long_running``,
    ``check_timeout`` and ``check_cache_ttl`` go to the middleware;
    ``settings`` are :class:`graceful.Config` fields (``shutdown_delay=10``)
    and beat the environment and ``app.config``. Raises ``TypeError`` for an
    unknown setting (at ``init_app``).
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        lifecycle: Lifecycle | None = None,
        long_running: LongRunning | None = None,
        check_timeout: float = DEFAULT_CHECK_TIMEOUT,
        check_cache_ttl: float = 0.0,
        **settings: Any,
    ) -> None:
        if lifecycle is None:
            lifecycle = _default.default_lifecycle if next(_default_claims) == 0 else Lifecycle()
        self.lifecycle = lifecycle
        # The decorators (Registrations) register on the lifecycle's own registry.
        self.registry = lifecycle.registry
        self._middleware_options: dict[str, Any] = {
            "long_running": long_running,
            "check_timeout": check_timeout,
            "check_cache_ttl": check_cache_ttl,
        }
        self._settings = settings
        if app is not None:
            self.init_app(app)

    def __repr__(self) -> str:
        return f"<Graceful lifecycle={self.lifecycle!r}>"

    def init_app(self, app: Flask) -> None:
        """Configure the lifecycle from ``app.config`` and wrap ``app.wsgi_app``; once per app.

        Raises :class:`graceful.ConfigError` for a bad ``GRACEFUL_*`` value,
        ``RuntimeError`` if the app already has a ``Graceful`` or the
        lifecycle's shutdown is running (see ``Lifecycle.configure``).
        """
        if EXTENSION_KEY in app.extensions:
            raise RuntimeError(f"{app.name!r} already has a Graceful extension (app.extensions[{EXTENSION_KEY!r}])")
        self.lifecycle.configure(Config.load(mapping=app.config, **self._settings))
        middleware = GracefulMiddleware(app.wsgi_app, self.lifecycle, **self._middleware_options)
        # Its bound __call__, not the object: Flask.__call__ then calls a method, which CPython
        # calls faster than an object's __call__ (once per request). See middleware().
        app.wsgi_app = middleware.__call__  # type: ignore[method-assign]
        app.extensions[EXTENSION_KEY] = self

    def middleware(self, app: Flask) -> GracefulMiddleware:
        """The :class:`GracefulMiddleware` that ``init_app`` installed in ``app``.

        Raises ``LookupError`` when there is none to be found (see
        :func:`graceful.wsgi.middleware.find_middleware`).
        """
        found = find_middleware(app, self.lifecycle)
        if found is None:
            raise LookupError(f"{app.name!r} has no GracefulMiddleware in app.wsgi_app")
        return found
