"""Django's ASGI application behind graceful: ``mysite/asgi.py`` changes one import.

::

    from graceful.django import get_asgi_application    # was: from django.core.asgi import ...
    application = get_asgi_application()

:func:`get_asgi_application` is Django's own (``django.setup()``, then
Django's ``ASGIHandler``) wrapped in :class:`graceful.GracefulASGIMiddleware`
on ``graceful.default_lifecycle``: the lifecycle ``"graceful.django"``
configured from ``settings.GRACEFUL`` in its ``ready()``, with its database
readiness checks and its connection cleanup task, the one ``graceful serve``
drives. The middleware is built after ``django.setup()`` (it reads settings
the app's ``ready()`` gave the lifecycle), which is why this is one call
rather than a class around Django's.

What differs from the WSGI side:

- Django's ``ASGIHandler`` speaks no lifespan (it raises for a scope that is
  not ``http``): Uvicorn's ``lifespan="auto"`` logs that the app does not
  support it and serves on; graceful's ``lifespan`` readiness check passes
  (nothing to wait for). Django's WebSockets need Channels, not this handler.
- Database connections: Django runs each request's synchronous code (views,
  the ORM, the ``request_finished`` signal that closes connections past
  ``CONN_MAX_AGE``) on a thread of that request's own (asgiref's
  ``ThreadSensitiveContext``), so a connection is opened and, with the
  default ``CONN_MAX_AGE = 0``, closed there per request, as under WSGI;
  the ``django-db-connections`` cleanup task closes whatever a request left
  open (:mod:`graceful.django.database`). A persistent connection
  (``CONN_MAX_AGE > 0``) is not reused across requests under ASGI (Django's
  documentation says to leave it at 0 there, and pool instead).

Runs where the server imports ``asgi.py``: the serving process's main thread,
before its event loop serves (``graceful serve``, Uvicorn, a Gunicorn ASGI
worker).
"""

from __future__ import annotations

from graceful.asgi.middleware import GracefulASGIMiddleware
from graceful.core import default as _default
from graceful.django.settings import SettingsError
from graceful.http.health import DEFAULT_CHECK_TIMEOUT
from graceful.http.long_running import LongRunning

__all__ = ["APP_NAME", "get_asgi_application"]

#: The Django app that configures the lifecycle from ``settings.GRACEFUL``.
APP_NAME = "graceful.django"


def get_asgi_application(
    *,
    long_running: LongRunning | None = None,
    check_timeout: float = DEFAULT_CHECK_TIMEOUT,
    check_cache_ttl: float = 0.0,
) -> GracefulASGIMiddleware:
    """Django's ASGI application (``django.core.asgi.get_asgi_application()``) in graceful's middleware.

    Sets Django up (``django.setup()``: every app's ``ready()``, graceful's
    among them), then wraps Django's handler in
    :class:`~graceful.asgi.GracefulASGIMiddleware` on
    ``graceful.default_lifecycle``; the keyword arguments are the
    middleware's. Raises :class:`graceful.django.settings.SettingsError` when
    ``"graceful.django"`` is not in ``INSTALLED_APPS`` (the lifecycle would
    serve without ``settings.GRACEFUL``, its database checks and its
    cleanup), or when ``settings.GRACEFUL`` is refused (from ``ready()``).
    Main thread, while the server imports ``asgi.py``.
    """
    from django.apps import apps
    from django.core.asgi import get_asgi_application as django_asgi_application

    handler = django_asgi_application()
    if not apps.is_installed(APP_NAME):
        raise SettingsError(
            f"graceful.django.get_asgi_application(): {APP_NAME!r} is not in settings.INSTALLED_APPS:"
            f" add it, so that settings.GRACEFUL, the database checks and the connection cleanup apply"
        )
    return GracefulASGIMiddleware(
        handler,
        _default.default_lifecycle,
        long_running=long_running,
        check_timeout=check_timeout,
        check_cache_ttl=check_cache_ttl,
    )
