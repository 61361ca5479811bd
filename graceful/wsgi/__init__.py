"""The request side: what runs on every request, in the request threads of every serving process.

- :mod:`.middleware` ``GracefulMiddleware``: health paths, admission, and the
  in-flight count of each response until it is closed
- :mod:`.health` evaluating and rendering ``/livez``, ``/readyz``, ``/healthz``
"""
