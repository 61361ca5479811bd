"""The core: the shutdown timeline and what it is made of. Knows no server and no WSGI.

Runs in every process that serves or owns a server: under Gunicorn the
master drives the first half of the timeline (:mod:`.lifecycle`) and each
worker the second; ``graceful serve`` drives both in one process.

- :mod:`.lifecycle` the timeline and its driver; :mod:`.signals` its one-shot facts
- :mod:`.hooks` running named hooks concurrently under timeouts; :mod:`.registry` where they are registered
- :mod:`.waitgroup` the in-flight count; :mod:`.admission` the ``max_in_flight`` limit
- :mod:`.config` the settings; :mod:`.budget` the shutdown budget they must fit
- :mod:`.clock` the time source; :mod:`.default` the one module-level lifecycle
"""
