"""The seam between graceful and Gunicorn: the only package that touches Gunicorn's internals.

One adapter per side, each probing what it uses once, at start-up:

* the master: :mod:`.arbiter` (the arbiter's workers, listeners, signal
  queue, stop and re-exec), made in ``on_starting``;
* a worker: :mod:`.worker` (what every worker class has), made in
  ``post_fork``, with what differs per worker class: gthread's main loop
  (:mod:`.gthread`) and gevent's servers (:mod:`.gevent`), probed in
  ``post_worker_init``.

What differs between Gunicorn releases lives inside them; the rest of
graceful sees small typed interfaces (:class:`.arbiter.Arbiter`,
:class:`.worker.Worker`, :class:`.gthread.GthreadLoop`), which the unit tests
fake. :mod:`.release` names the release in every refusal.
"""

from __future__ import annotations

from typing import Any

__all__ = ["attach", "attached"]

# Gunicorn passes its own objects to every server hook: graceful keeps its state for a
# process on them, under this one attribute name.
_ATTRIBUTE = "graceful"


def attach(gunicorn_object: Any, state: object) -> None:
    """Keep ``state`` on Gunicorn's arbiter or worker, for the later hooks of the same process."""
    setattr(gunicorn_object, _ATTRIBUTE, state)


def attached(gunicorn_object: Any) -> Any:
    """What :func:`attach` kept on ``gunicorn_object``, or None."""
    return getattr(gunicorn_object, _ATTRIBUTE, None)
