"""The single-process wing: ``graceful serve module:app`` (one process, a bounded thread pool).

- :mod:`.server` the server and its whole timeline, signals to exit (main and shutdown threads)
- :mod:`.connection` one HTTP connection's requests (request threads)
- :mod:`.loading` finding the app (``module:app`` or ``module:factory()``) and wrapping it
"""
