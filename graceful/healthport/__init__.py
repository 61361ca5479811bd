"""The health port: ``/livez``, ``/readyz``, ``/healthz``, ``/metrics`` on their own address (``GRACEFUL_HEALTH_BIND``).

A probe must not wait for a free app worker or thread: these answer from a
thread that never runs app code and never waits for a worker.

- :mod:`.address` ``GRACEFUL_HEALTH_BIND`` / ``--health-bind``: parsing, binding
- :mod:`.server` the HTTP server: one ``graceful-health-port`` thread, its fork gate
- :mod:`.bindwait` the bounded wait for an address in use at start-up (Gunicorn)
- :mod:`.request` one request: its parsing and its answer's bytes
- :mod:`.limits` the bounds on connections, sizes, time and ``/metrics``' rate
- :mod:`.table` the open connections: which is shed when the port is full, which have expired
- :mod:`.snapshot` one serving process's health at one moment, and its record format
- :mod:`.runner` the ``graceful-health`` thread of a serving process: checks, then snapshots
- :mod:`.view` the server's answers, from the snapshots of all its processes
- :mod:`.local` ``graceful serve --health-bind``: runner and port in one process
- :mod:`.probe` ``graceful probe``: the client, for exec probes and Docker's HEALTHCHECK

Under Gunicorn the port is served by the master and fed by every worker:
:mod:`graceful.gunicorn.health` (probes), :mod:`graceful.gunicorn.metrics` (``/metrics``).
"""
