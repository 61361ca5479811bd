"""ASGI config of the example project: Django's, with one import changed.

`from graceful.django import get_asgi_application` instead of Django's own:
Django's ASGI handler in graceful's ASGI middleware, on the lifecycle that
"graceful.django" (INSTALLED_APPS) configures from settings.GRACEFUL. Serve it
with `graceful serve mysite.asgi` (the whole shutdown timeline, on Uvicorn) or
any ASGI server (`uvicorn mysite.asgi:application`: the health paths and the
readiness gate; Uvicorn's own shutdown). Over ASGI, Django's documentation asks
for CONN_MAX_AGE 0 (settings.py keeps 60 for its WSGI servers): a request's
connection is not reused by the next one there.
"""

import os

from graceful.django import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

application = get_asgi_application()
