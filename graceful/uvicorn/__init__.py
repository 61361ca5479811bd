"""The Uvicorn wing: ``graceful serve`` of an ASGI app on one Uvicorn process.

- :mod:`.adapter` every Uvicorn internal graceful touches, probed once at
  start-up (Gunicorn's ``UvicornWorker`` will reuse it)
- :mod:`.server` the whole timeline in one process: start-up, the stop, the
  drain, the goodbyes, Uvicorn's shutdown beside the cleanup tasks, the record

Imported only to serve an ASGI app: Uvicorn is an extra
(``pip install 'graceful-wsgi[asgi]'``).
"""
