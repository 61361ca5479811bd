"""WSGI middleware: health endpoints, admission during shutdown, and the in-flight count.

This module is the request hot path: every request runs
:meth:`GracefulMiddleware.__call__`. Its tricks live here and nowhere else,
each with its reason: the wait group's unchecked ``enter``/``leave`` pair,
the gate's ``unhindered`` flag, joining Werkzeug's close callbacks, and
keeping the server's ``wsgi.file_wrapper``. What is not on the hot path is
apart, shared with the ASGI side (:mod:`graceful.http`): the health paths
(:mod:`graceful.http.probes`), graceful's own answers
(:mod:`graceful.http.replies`), long-running requests
(:mod:`graceful.http.long_running`), and what a request may do during a
shutdown (the lifecycle's :class:`~graceful.core.gate.Gate`).

What happens to one request, in order::

    /livez /readyz /healthz          answered here (graceful.http.health), GET and HEAD
    /<endpoint>/<check>              only; never rejected, counted or delayed
    /metrics                         the same, only with config.metrics_on_app_port
                                     (graceful.metrics; 404 without prometheus_client)
    after ShutdownInitiated          counted as an arrival (graceful.core.stats), then:
    NotAcceptingNewRequests and      429, Retry-After: config.retry_after
      config.send_retry_after
    long_running(environ) is true    straight to the app: not counted, no limit
    max_in_flight slots all taken    429, Retry-After: 1
    the drain has begun              503, Retry-After: 1 (the request raced
      (in_flight.add() refused)        lifecycle.in_flight.wait)
    otherwise                        the app; in flight until the response
                                     iterable's close() (a stream counts until
                                     it ends), admission slot held as long

Before ``ShutdownInitiated`` and during the shutdown delay every request is
served normally. Each refusal is counted by its reason (``lifecycle.stats``),
and so is each request that arrives after ShutdownInitiated (on the checked
path, which every request takes from then on: nothing is counted on the hot
path before a shutdown). The middleware never sets hop-by-hop headers (PEP 3333
forbids them; ``Connection: close`` during shutdown is the server's job:
Gunicorn's ``req.force_close()`` in ``pre_request``, the Werkzeug server's
handler). Health paths are exact: ``/readyz/`` and ``/readyz/unknown`` are
404s, ``/readyzz`` goes to the app. They are matched against ``PATH_INFO``,
so an app mounted under a ``SCRIPT_NAME`` has them under that prefix.

WSGI environ keys set on every request the app sees:

``graceful.shutting_down``
    ``threading.Event`` (``lifecycle.not_accepting_new_requests.event``), set
    at ``NotAcceptingNewRequests``. Long-running handlers (streams, web
    sockets, long polls) wait on it, or poll it, to end early. Read from the
    signal on every request, not kept: a gevent worker renews it after
    monkey-patching (then it is gevent's cooperative ``Event``).
``graceful.lifecycle``
    the :class:`graceful.Lifecycle` serving this request.

Wrapped twice with one lifecycle (the Gunicorn worker integration wraps
every app; a Flask app may carry its own ``Graceful``), a request is handled
once, by the innermost middleware, whose options (``long_running``, check
timeouts) are the app's own: an outer middleware that finds one of its
lifecycle inside the app at construction (through ``wsgi_app`` and ``app``
attributes, as Flask and Werkzeug's middlewares keep them) passes every
request straight through. One it cannot find is noticed per request: the
inner one then sees ``graceful.lifecycle`` already set and passes through.

The response iterable: the app's own is wrapped in a small object whose
``close()`` calls the app's ``close()`` exactly once and then ends the
request's count, however often the server calls it. Two exceptions:

- Werkzeug's ``ClosingIterator`` (what every Flask and Werkzeug response
  returns) is returned as it is: the count's end joins its list of close
  callbacks, last, followed by the list's own ``clear``, so a second
  ``close()`` runs nothing. No Python code of ours then runs at the end of
  the request. Should one of the app's callbacks raise, werkzeug stops
  there: the request stays counted and the drain waits out its
  ``drain_timeout`` (it loses nothing; the error reaches the server's log).
  This rests on werkzeug's internals, so it is checked by behaviour, once,
  at the first such response: a throwaway ``ClosingIterator`` must run an
  appended callback on ``close()``, and only once on a second ``close()``.
  A werkzeug release that fails that gets the wrapper, with one warning
  naming its version.
- The server's ``sendfile`` fast path: when the app returns an instance of
  the server's ``environ["wsgi.file_wrapper"]`` class (Gunicorn's and
  wsgiref's are such classes; the class is read from the first request's
  environ), that very object is returned, with its ``close`` attribute
  replaced by one that also ends the count; should the object refuse the
  attribute, it is wrapped like any other.

A list response is copied into a list subclass, so ``len()`` still works
(wsgiref sets ``Content-Length`` from it).

Cost per request: a ``PATH_INFO`` lookup, two environ writes, one flag
(``Gate.unhindered``: ShutdownInitiated has not fired and there
is no ``max_in_flight``, so nothing else to check), a token appended to and
popped from the wait group's deque (``SafeWaitGroup.enter``/``leave``), and
one small object or two callbacks (``python bench/middleware.py`` measures
it). Thread-safe; under
Gunicorn every worker process wraps its own copy of the app and counts its
own requests.
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from types import MethodType
from typing import TYPE_CHECKING

from graceful.core import default as _default
from graceful.core.gate import Refusal
from graceful.core.lifecycle import Lifecycle
from graceful.core.waitgroup import ClosesOnce, Release
from graceful.http.apps import LIFECYCLE_KEY, WrongKindOfApp, is_asgi_app
from graceful.http.health import DEFAULT_CHECK_TIMEOUT, HealthChecks
from graceful.http.long_running import LongRunning, is_long_running, path_prefixes
from graceful.http.probes import CHECK_PREFIXES, METRICS_PATH, ROOT_PATHS, answer_probe
from graceful.http.replies import STATUS, Reply, refusal_reply

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = [
    "LIFECYCLE_KEY",
    "SHUTTING_DOWN_KEY",
    "GracefulMiddleware",
    "LongRunning",
    "as_middleware",
    "find_middleware",
    "path_prefixes",
    "send_reply",
]

logger = logging.getLogger(__name__)

#: environ key: the ``threading.Event`` set at NotAcceptingNewRequests.
SHUTTING_DOWN_KEY = "graceful.shutting_down"

_UNSEEN = object()  # GracefulMiddleware._file_wrapper and _closing_iterator before the first response
# GracefulMiddleware._special: why a request cannot take the plain path at once (None: it can).
_PASS_THROUGH = "pass through"  # a GracefulMiddleware of the same lifecycle is inside
_METRICS_ROUTE = "metrics route"  # config.metrics_on_app_port: /metrics is answered here


def _werkzeug_closing_iterator() -> type | None:
    """Werkzeug's ClosingIterator, if werkzeug is loaded and its close callbacks behave as the hot path needs.

    Looked up, not imported: an app that does not use werkzeug returns none
    of its responses, and a Gunicorn worker should not load werkzeug (and
    tear it down at exit) for nothing. Checked by behaviour on a throwaway
    iterator, exactly as the hot path joins a response: a callback appended
    to ``_callbacks`` must run on ``close()``, the list's own ``clear``
    appended after it must keep a second ``close()`` from running it again.
    """
    module = sys.modules.get("werkzeug.wsgi")
    cls = getattr(module, "ClosingIterator", None)
    if not isinstance(cls, type):
        return None
    ran: list[None] = []
    try:
        probe = cls(())
        callbacks = getattr(probe, "_callbacks", None)
        if type(callbacks) is not list:
            raise TypeError("no list of close callbacks")
        callbacks.append(lambda: ran.append(None))
        callbacks.append(callbacks.clear)
        probe.close()
        probe.close()
    except Exception as exc:  # noqa: BLE001 (logged below): a werkzeug we do not know gets the wrapper
        problem = f"{type(exc).__name__}: {exc}"
    else:
        if len(ran) == 1:
            return cls
        problem = f"an appended close callback ran {len(ran)} times, not once"
    logger.warning(
        "graceful: werkzeug %s: its ClosingIterator does not behave as graceful's fast path needs (%s);"
        " Flask and Werkzeug responses get the generic wrapper",
        _werkzeug_version(),
        problem,
    )
    return None


def _werkzeug_version() -> str:
    try:
        return metadata.version("werkzeug")
    except metadata.PackageNotFoundError:
        return "(version unknown)"


class _InFlightResponse(ClosesOnce, itertools.chain[bytes]):
    """The app's response iterable; ``close()`` closes it once, then ends the request's count.

    A one-iterable ``itertools.chain``, so iterating it runs no Python code;
    built by :func:`_wrap`.
    """

    __slots__ = ("_before", "_release")


class _InFlightList(ClosesOnce, list[bytes]):
    """A list response, copied: iterated and measured (``len``) at C speed; ``close()`` releases once.

    Servers may look at ``len()`` of a list (wsgiref sets ``Content-Length``
    for a one-item list), and iterating a list needs no Python frame.
    """

    __slots__ = ("_release",)
    _before = None  # a list has no close() of its own

    def close(self) -> None:
        """Release; later calls do nothing.

        ClosesOnce.close, less the app's close a list does not have: inherited, it
        measured 240 more instructions per request on this path (``bench/instructions.py``).
        """
        release = self._release
        if release is None:
            return
        self._release = None
        release()


def _in_flight(result: Iterable[bytes], release: Callable[[], object], environ: WSGIEnvironment) -> Iterable[bytes]:
    """Return the response the server gets: ``result`` with a ``close()`` that also releases."""
    kind = type(result)
    if kind is list:
        listed = _InFlightList(result)
        listed._release = release
        return listed
    if kind is environ.get("wsgi.file_wrapper"):
        return _keep_file_wrapper(result, release)
    return _wrap(result, release)


def _wrap(result: Iterable[bytes], release: Callable[[], object]) -> _InFlightResponse:
    response = _InFlightResponse(result)
    response._before = getattr(result, "close", None)
    response._release = release
    return response


class GracefulMiddleware:
    """Wrap a WSGI app with graceful's health endpoints, admission and in-flight count.

    ``lifecycle`` defaults to ``graceful.default_lifecycle`` (the one the
    Gunicorn integration drives in each worker). ``long_running`` tells which
    requests are not counted in the drain nor limited by ``max_in_flight``
    (none by default; see :func:`path_prefixes`). ``check_timeout`` and
    ``check_cache_ttl`` (seconds) bound and cache the health checks (see
    :class:`graceful.http.health.HealthChecks`).

    The lifecycle's config is read when a request needs it, so a config set
    after wrapping (``lifecycle.configure``) is the one in force; only
    ``metrics_on_app_port`` is read here, when the routes are fixed.
    Thread-safe (under Gunicorn: a worker's request threads call it at once).
    An ASGI app is refused at once (:class:`~graceful.http.apps.WrongKindOfApp`, a ``TypeError``).
    Exceptions from the app propagate (its count ended); the middleware
    itself raises for no request, whatever its environ holds.
    """

    def __init__(
        self,
        app: WSGIApplication,
        lifecycle: Lifecycle | None = None,
        *,
        long_running: LongRunning | None = None,
        check_timeout: float = DEFAULT_CHECK_TIMEOUT,
        check_cache_ttl: float = 0.0,
    ) -> None:
        if is_asgi_app(app):
            raise WrongKindOfApp(
                f"graceful: {app!r} is an ASGI app; GracefulMiddleware wraps WSGI apps:"
                " use graceful.GracefulASGIMiddleware (and an ASGI server: graceful serve, Uvicorn)"
            )
        self.app = app
        self.lifecycle = lifecycle if lifecycle is not None else _default.default_lifecycle
        self.long_running = long_running
        self.health = HealthChecks(self.lifecycle, check_timeout=check_timeout, check_cache_ttl=check_cache_ttl)
        #: A middleware of the same lifecycle inside ``app``; when set, this one passes everything through.
        self.inner = find_middleware(app, self.lifecycle)
        # Looked at by every request already (the pass-through test), so /metrics on the app port
        # costs nothing when it is off: the health paths' "z" test stays as it is.
        self._special: str | None = None
        if self.inner is not None:
            self._special = _PASS_THROUGH
        elif self.lifecycle.config.metrics_on_app_port:
            self._special = _METRICS_ROUTE
        # The server's wsgi.file_wrapper class, remembered from its first request (one server per
        # process). Were it to change, file wrappers would merely be wrapped, losing sendfile.
        self._file_wrapper: object = _UNSEEN
        # Werkzeug's ClosingIterator (see _werkzeug_closing_iterator), looked up at the same time.
        self._closing_iterator: object = _UNSEEN
        # Bound once: the hot path below reads only locals and these.
        self._gate = gate = self.lifecycle.gate
        self._not_accepting = gate.not_accepting
        self._in_flight = in_flight = gate.in_flight
        # The wait group's unchecked pair, one token per request: a bound C call each, where
        # add() and its Release would cost two Python frames. Every response below ends
        # its count once, however often it is closed.
        self._enter = in_flight.enter
        self._leave = in_flight.leave

    def __repr__(self) -> str:
        return f"<GracefulMiddleware app={self.app!r} lifecycle={self.lifecycle!r}>"

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        lifecycle = self.lifecycle
        if self._special or (LIFECYCLE_KEY in environ and environ[LIFECYCLE_KEY] is lifecycle):
            # Another GracefulMiddleware of this lifecycle handles it: one inside, or one outside.
            if self._special is not _METRICS_ROUTE or (
                LIFECYCLE_KEY in environ and environ[LIFECYCLE_KEY] is lifecycle
            ):
                return self.app(environ, start_response)
            # Or this one answers /metrics, on the app port; every other path goes on as usual.
            if "PATH_INFO" in environ and environ["PATH_INFO"] == METRICS_PATH:
                return self._probe(environ, start_response, METRICS_PATH)
        environ[LIFECYCLE_KEY] = lifecycle
        environ[SHUTTING_DOWN_KEY] = self._not_accepting.event
        try:
            path = environ["PATH_INFO"]
            # probes.is_probe_path(), inlined: every health path has a "z", few others do.
            health = "z" in path and (path in ROOT_PATHS or path.startswith(CHECK_PREFIXES))
        except (KeyError, TypeError):  # no PATH_INFO, or no string (the server's bug): no health path
            health = False
        if health:
            return self._probe(environ, start_response, path)
        if not self._gate.unhindered:
            # Shutting down, or a max_in_flight: the checks (set back when there is nothing to check).
            answer = self._hindered(environ, start_response)
            if answer is not None:
                return answer
        long_running = self.long_running
        if long_running is not None and is_long_running(long_running, environ):
            return self.app(environ, start_response)
        # SafeWaitGroup.add(), unchecked: a token, then refused if the drain has begun.
        self._enter(None)
        if self._in_flight.waiting:
            self._leave()
            return send_reply(environ, start_response, refusal_reply(self._gate.refuse_draining()))
        try:
            result = self.app(environ, start_response)
        except BaseException:
            self._leave()
            raise
        # What _first_response() does with the classes it remembered, inlined (a call less per request).
        kind = type(result)
        if kind is self._closing_iterator:
            # Every Flask response. _join_close_callbacks(), inlined: it is the Flask hot path.
            callbacks = result._callbacks  # type: ignore[attr-defined]
            callbacks.append(self._leave)
            callbacks.append(callbacks.clear)
            return result
        if kind is list:
            listed = _InFlightList(result)
            listed._release = self._leave
            return listed
        if kind is self._file_wrapper:
            return _keep_file_wrapper(result, self._leave)
        if self._file_wrapper is _UNSEEN:
            return self._first_response(result, self._leave, environ)
        response = _InFlightResponse(result)
        response._before = getattr(result, "close", None)
        response._release = self._leave
        return response

    def _hindered(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes] | None:
        """The checks a request skips while the gate is unhindered: the answer, or None to count it.

        From ShutdownInitiated on every request comes here (the gate counts it as an arrival).
        """
        gate = self._gate
        refusal = gate.check()
        if refusal is not None:
            return send_reply(environ, start_response, refusal_reply(refusal))
        if not gate.limited:
            return None
        long_running = self.long_running
        if long_running is not None and is_long_running(long_running, environ):
            return self.app(environ, start_response)
        # The counted path with max_in_flight on: a slot from admission to close().
        release = gate.take_slot()
        if isinstance(release, Refusal):
            return send_reply(environ, start_response, refusal_reply(release))
        try:
            result = self.app(environ, start_response)
        except BaseException:
            release()
            raise
        return _in_flight(result, release, environ)

    def _probe(self, environ: WSGIEnvironment, start_response: StartResponse, path: str) -> list[bytes]:
        """Answer a health path (or ``/metrics``) with :func:`graceful.http.probes.answer_probe`."""
        query = environ.get("QUERY_STRING")
        answer = answer_probe(self.health, environ.get("REQUEST_METHOD"), path, query)
        return send_reply(environ, start_response, answer)

    def _first_response(
        self, result: Iterable[bytes], release: Callable[[], object], environ: WSGIEnvironment
    ) -> Iterable[bytes]:
        """Remember the server's file_wrapper class and werkzeug's, then wrap the first non-list response."""
        self._file_wrapper = environ.get("wsgi.file_wrapper")
        self._closing_iterator = _werkzeug_closing_iterator()
        if type(result) is self._closing_iterator:
            return _join_close_callbacks(result, release)
        return _in_flight(result, release, environ)


def find_middleware(app: object, lifecycle: Lifecycle | None = None) -> GracefulMiddleware | None:
    """Return the :class:`GracefulMiddleware` of ``lifecycle`` that ``app`` is or holds, else None.

    Looks through a Flask app's ``wsgi_app`` and a middleware's ``app``
    attributes (Werkzeug's middlewares keep it there), at most 16 deep; stops
    at the first GracefulMiddleware, which must be of ``lifecycle`` (of any
    lifecycle when None). The Gunicorn integration can use it to wrap an app
    only when it has no middleware of its own.
    """
    node: object = app
    for _ in range(16):  # a chain of middlewares, not a cycle
        found = as_middleware(node)
        if found is not None:
            return found if lifecycle is None or found.lifecycle is lifecycle else None
        try:
            inside = getattr(node, "wsgi_app", None)
            if inside is None:
                inside = getattr(node, "app", None)
        except RuntimeError:  # an unbound werkzeug LocalProxy: stop looking
            return None
        if inside is None:
            return None
        node = inside
    return None


def as_middleware(node: object) -> GracefulMiddleware | None:
    """``node`` if it is a :class:`GracefulMiddleware`, its middleware if it is one's bound
    ``__call__`` (as ``graceful.flask.Graceful`` installs it), else None."""
    if isinstance(node, MethodType) and node.__func__ is GracefulMiddleware.__call__:
        node = node.__self__
    return node if isinstance(node, GracefulMiddleware) else None


def _join_close_callbacks(result: Iterable[bytes], release: Callable[[], object]) -> Iterable[bytes]:
    """Return werkzeug's ClosingIterator itself, ``release`` and its list's ``clear`` appended to its callbacks.

    Its close() calls them in order: the count ends after the app's own
    callbacks, then the list is emptied, so a second close() runs nothing.
    """
    callbacks = result._callbacks  # type: ignore[attr-defined]
    callbacks.append(release)
    callbacks.append(callbacks.clear)
    return result


def _keep_file_wrapper(result: Iterable[bytes], release: Callable[[], object]) -> Iterable[bytes]:
    """Return the server's own file wrapper with a ``close`` that also releases (keeps sendfile)."""
    try:
        setattr(result, "close", Release(release, before=getattr(result, "close", None)))  # noqa: B010
    except (AttributeError, TypeError):  # __slots__ or a read-only close
        return _wrap(result, release)
    return result


def send_reply(environ: WSGIEnvironment, start_response: StartResponse, answer: Reply) -> list[bytes]:
    """Start one of graceful's answers (:class:`graceful.http.replies.Reply`); no body for HEAD."""
    start_response(STATUS[answer.status], answer.headers)
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [answer.body]
