"""WSGI config of the example project, as `django-admin startproject` writes it.

Under Gunicorn with graceful's config (gunicorn_conf.py here) every worker
wraps this application in graceful's middleware itself, and so does
`graceful serve mysite.wsgi`: nothing to add. Under any other server (plain
Gunicorn, uWSGI, `manage.py runserver`) add one line at the end:

    from graceful import GracefulMiddleware
    application = GracefulMiddleware(application)
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

application = get_wsgi_application()
