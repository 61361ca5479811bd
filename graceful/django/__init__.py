"""Django integration: ``"graceful.django"`` in ``INSTALLED_APPS``.

::

    INSTALLED_APPS = [..., "graceful.django"]
    GRACEFUL = {"SHUTDOWN_DELAY": 10, "DRAIN_TIMEOUT": 20}     # optional

When Django starts (``django.setup()``: every ``manage.py`` command, every
server that imports the project's ``wsgi.py``), the app
(:class:`graceful.django.apps.GracefulConfig`):

* configures ``graceful.default_lifecycle`` -- the lifecycle the Gunicorn
  integration and ``graceful serve`` drive -- from ``settings.GRACEFUL``
  (:mod:`graceful.django.settings`: keyword arguments, then ``GRACEFUL_*``
  environment variables, then ``settings.GRACEFUL``, then the defaults);
  refused settings are reported by the system checks under ``manage.py``
  and stop any other process at start-up with one line
  (:mod:`graceful.django.apps`);
* registers one readiness check per database, ``django-db-<alias>``, and the
  cleanup task ``django-db-connections``, which closes every database
  connection the process opened, whichever thread opened it
  (:mod:`graceful.django.database`);
* adds the system checks (``manage.py check``; :mod:`graceful.django.checks`):
  ``graceful.E001`` the shutdown budget with every hook and task the apps
  registered, ``graceful.E002``-``E004`` refused settings, each naming the
  key, the value and what is allowed.

Register your own hooks and checks with the usual decorators
(``@graceful.cleanup_task(...)``), e.g. in your app's ``AppConfig.ready()``.

ASGI (``mysite/asgi.py``, served by ``graceful serve mysite.asgi``, Uvicorn
or a Gunicorn ASGI worker): one import changes (:mod:`graceful.django.asgi`)::

    from graceful.django import get_asgi_application
    application = get_asgi_application()

Serving WSGI: under ``gunicorn -c python:graceful.django.conf mysite.wsgi`` every
worker wraps the app in :class:`graceful.GracefulMiddleware` and the master
reads ``settings.GRACEFUL`` too (:mod:`graceful.django.conf`); ``graceful
serve mysite.wsgi`` wraps it as well: nothing to add to ``wsgi.py``. Under
any other server (plain Gunicorn, uWSGI, ``manage.py runserver``), one line
in ``wsgi.py``::

    application = GracefulMiddleware(get_wsgi_application())

``manage.py runserver`` is a development server: it serves the health paths
when ``wsgi.py`` has that line, but has no shutdown timeline (Ctrl+C stops it
at once, no drain, no cleanup tasks).

Importing this package imports nothing from Django; its modules do
(``get_asgi_application`` is imported on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graceful.django.asgi import get_asgi_application


def __getattr__(name: str) -> object:
    """``graceful.django.get_asgi_application``, imported on first use: importing the package imports no Django."""
    if name == "get_asgi_application":
        from graceful.django.asgi import get_asgi_application

        return get_asgi_application
    raise AttributeError(f"module 'graceful.django' has no attribute {name!r}")


__all__ = ["get_asgi_application"]
