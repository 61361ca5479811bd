"""The Gunicorn wing: ``gunicorn -c python:graceful.conf`` (the public path, :mod:`graceful.conf`).

- :mod:`.hooks` the Gunicorn server hooks, each saying where Gunicorn runs it
- :mod:`.master` the arbiter's part: SIGTERM to Gunicorn's own stop (master process)
- :mod:`.worker` each worker's part: readiness, admission, drain, cleanup (worker processes)
- :mod:`.shared` the pipes the master and its forked workers share
- :mod:`.health` the health port: served by the master, fed by each worker (``GRACEFUL_HEALTH_BIND``)
"""
