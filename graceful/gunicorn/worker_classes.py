"""The Gunicorn worker classes graceful supports, and the refusal of every other one.

Runs in the master, main thread, in ``on_starting``: Gunicorn has loaded the
worker class (``-k sync`` with ``--threads`` > 1 is already ThreadWorker) but
forked no worker yet. In a worker, :func:`worker_kind` names its class. Gunicorn 22-27.

Supported: ``sync`` (SyncWorker), ``gthread`` (ThreadWorker) and ``gevent``
(GeventWorker) for WSGI apps; for ASGI apps Gunicorn's own ``asgi``
(ASGIWorker, Gunicorn 25.1+) and Uvicorn's worker
(``uvicorn_worker.UvicornWorker``, and the older
``uvicorn.workers.UvicornWorker``; their ``UvicornH11Worker`` too). Each
needs its own handling in the worker, and each is tested with the whole
timeline. An ASGI class is also probed here, once: a release whose
internals moved is refused in one line naming it (its adapter's
``class_problem``). Every other class is refused by its qualified name,
subclasses included: ``gevent_pywsgi``/``gevent_wsgi`` (gevent's own WSGI
server, which calls no ``pre_request``, so no ``Connection: close`` when
stopping), ``tornado``, ``eventlet``, third-party classes. A class Gunicorn
itself cannot import fails before graceful runs, with Gunicorn's own message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graceful.gunicorn.adapter.arbiter import ArbiterAdapter

__all__ = ["ASGI_KINDS", "SUPPORTED", "refuse_unsupported", "worker_kind"]

#: Qualified class name -> the kind of each supported worker class (how graceful handles it).
SUPPORTED: dict[str, str] = {
    "gunicorn.workers.sync.SyncWorker": "sync",
    "gunicorn.workers.gthread.ThreadWorker": "gthread",
    "gunicorn.workers.ggevent.GeventWorker": "gevent",
    "gunicorn.workers.gasgi.ASGIWorker": "asgi",
    "uvicorn_worker._workers.UvicornWorker": "uvicorn",
    "uvicorn_worker._workers.UvicornH11Worker": "uvicorn",
    "uvicorn.workers.UvicornWorker": "uvicorn",
    "uvicorn.workers.UvicornH11Worker": "uvicorn",
}

#: The kinds that serve ASGI apps, on an event loop.
ASGI_KINDS = frozenset({"asgi", "uvicorn"})

#: How the refusal names the supported classes (their ``-k`` values).
_K_NAMES = ("sync", "gthread", "gevent", "asgi", "uvicorn_worker.UvicornWorker", "uvicorn.workers.UvicornWorker")


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def worker_kind(worker: Any) -> str | None:
    """The kind (``sync``, ``gthread``, ``gevent``, ``asgi``, ``uvicorn``) of a supported worker or class, else None."""
    cls = worker if isinstance(worker, type) else type(worker)
    return SUPPORTED.get(_qualified_name(cls))


def refuse_unsupported(arbiter: ArbiterAdapter) -> None:
    """Raise RuntimeError naming the worker class and the supported ones, unless it is supported.

    Gunicorn prints the message as one ``Error:`` line and exits 1, with no
    traceback. The pidfile Gunicorn wrote just before ``on_starting`` is
    removed first, so no stale one is left behind.
    """
    cls = arbiter.worker_class()
    kind = worker_kind(cls)
    if kind is not None:
        problem = _release_problem(cls, kind)
        if problem is None:
            return
        arbiter.remove_pidfile()
        raise RuntimeError(problem)
    arbiter.remove_pidfile()
    setting = arbiter.worker_class_setting()
    given = f" (-k {setting})" if setting else ""
    name = _qualified_name(cls) if isinstance(cls, type) else repr(cls)
    supported = ", ".join(_K_NAMES)
    raise RuntimeError(f"graceful: Gunicorn worker class {name}{given} is not supported; use one of: {supported}")


def _release_problem(cls: type, kind: str) -> str | None:
    """An ASGI class's probe, once, in the master: the one-line refusal of its release, or None."""
    if kind == "asgi":
        from graceful.gunicorn.adapter.gasgi import class_problem

        return class_problem(cls)
    if kind == "uvicorn":
        from graceful.gunicorn.adapter.uvicorn_worker import class_problem as uvicorn_problem

        return uvicorn_problem(cls)
    return None
