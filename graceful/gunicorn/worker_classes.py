"""The Gunicorn worker classes graceful supports, and the refusal of every other one.

Runs in the master, main thread, in ``on_starting``: Gunicorn has loaded the
worker class (``-k sync`` with ``--threads`` > 1 is already ThreadWorker) but
forked no worker yet. In a worker, :func:`worker_kind` names its class. Gunicorn 22-27.

Supported: ``sync`` (SyncWorker), ``gthread`` (ThreadWorker) and ``gevent``
(GeventWorker). Each needs its own handling in the worker, and each is
tested with the whole timeline on the oldest and newest supported Gunicorn.
Every other class is refused by its qualified name, subclasses included:
``gevent_pywsgi``/``gevent_wsgi`` (gevent's own WSGI server, which calls no
``pre_request``, so no ``Connection: close`` when stopping), ``tornado``,
Gunicorn's ``asgi`` worker, ``eventlet``, third-party classes such as
Uvicorn's. A class Gunicorn itself cannot import fails before graceful runs,
with Gunicorn's own message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graceful.gunicorn.adapter.arbiter import ArbiterAdapter

__all__ = ["SUPPORTED", "refuse_unsupported", "worker_kind"]

#: Qualified class name -> the ``-k`` name of each supported worker class.
SUPPORTED: dict[str, str] = {
    "gunicorn.workers.sync.SyncWorker": "sync",
    "gunicorn.workers.gthread.ThreadWorker": "gthread",
    "gunicorn.workers.ggevent.GeventWorker": "gevent",
}


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def worker_kind(worker: Any) -> str | None:
    """``sync``, ``gthread`` or ``gevent`` for a worker (or worker class) graceful supports, else None."""
    cls = worker if isinstance(worker, type) else type(worker)
    return SUPPORTED.get(_qualified_name(cls))


def refuse_unsupported(arbiter: ArbiterAdapter) -> None:
    """Raise RuntimeError naming the worker class and the supported ones, unless it is supported.

    Gunicorn prints the message as one ``Error:`` line and exits 1, with no
    traceback. The pidfile Gunicorn wrote just before ``on_starting`` is
    removed first, so no stale one is left behind.
    """
    cls = arbiter.worker_class()
    if worker_kind(cls) is not None:
        return
    arbiter.remove_pidfile()
    setting = arbiter.worker_class_setting()
    given = f" (-k {setting})" if setting else ""
    name = _qualified_name(cls) if isinstance(cls, type) else repr(cls)
    raise RuntimeError(
        f"graceful: Gunicorn worker class {name}{given} is not supported; use one of: {', '.join(SUPPORTED.values())}"
    )
