"""What both request sides (:mod:`graceful.wsgi`, :mod:`graceful.asgi`) share, written once.

- :mod:`.health` evaluating and rendering ``/livez``, ``/readyz``, ``/healthz``
- :mod:`.probes` which paths are graceful's, and the answer to each
- :mod:`.replies` graceful's own answers (probes, 429, 503, 404, 405)
- :mod:`.long_running` which requests the drain does not wait for
- :mod:`.goodbyes` when each long-lived connection is told to leave

What a request may do during a shutdown is decided by the lifecycle's
:class:`~graceful.core.gate.Gate`, the request sides' one interface to it.
Nothing here knows WSGI or ASGI.
"""
