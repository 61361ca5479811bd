"""WSGI middleware: health endpoints, admission during shutdown, and the in-flight count.

What happens to one request, in order::

    /livez /readyz /healthz          answered here (graceful.wsgi.health), GET and HEAD
    /<endpoint>/<check>              only; never rejected, counted or delayed
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
served normally. The middleware never sets hop-by-hop headers (PEP 3333
forbids them; ``Connection: close`` during shutdown is the server's job:
Gunicorn's ``req.force_close()`` in ``pre_request``, the Werkzeug server's
handler). Health paths are exact: ``/readyz/`` and ``/readyz/unknown`` are
404s, ``/readyzz`` goes to the app. They are matched against ``PATH_INFO``,
so an app mounted under a ``SCRIPT_NAME`` has them under that prefix.

WSGI environ keys set on every request the app sees:

``graceful.shutting_down``
    ``threading.Event`` (``lifecycle.not_accepting_new_requests.event``), set
    at ``NotAcceptingNewRequests``. Long-running handlers (streams, web
    sockets, long polls) wait on it, or poll it, to end early.
``graceful.core.lifecycle``
    the :class:`graceful.Lifecycle` serving this request.

Wrapped twice with one lifecycle (the Gunicorn worker integration wraps
every app; a Flask app may carry its own ``Graceful``), a request is handled
once, by the innermost middleware, whose options (``long_running``, check
timeouts) are the app's own: an outer middleware that finds one of its
lifecycle inside the app at construction (through ``wsgi_app`` and ``app``
attributes, as Flask and Werkzeug's middlewares keep them) passes every
request straight through. One it cannot find is noticed per request: the
inner one then sees ``graceful.core.lifecycle`` already set and passes through.

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
  A werkzeug release that kept its callbacks otherwise would merely get the
  wrapper.
- The server's ``sendfile`` fast path: when the app returns an instance of
  the server's ``environ["wsgi.file_wrapper"]`` class (Gunicorn's and
  wsgiref's are such classes; the class is read from the first request's
  environ), that very object is returned, with its ``close`` attribute
  replaced by one that also ends the count; should the object refuse the
  attribute, it is wrapped like any other.

A list response is copied into a list subclass, so ``len()`` still works
(wsgiref sets ``Content-Length`` from it).

Cost per request: a ``PATH_INFO`` lookup, two environ writes, one flag
(``Lifecycle.refresh_unhindered``: NotAcceptingNewRequests has not fired and
there is no ``max_in_flight``, so nothing else to check), a token appended
to and popped from the wait group's deque, and one small object or two
callbacks (``python bench/middleware.py`` measures it). Thread-safe; under
Gunicorn every worker process wraps its own copy of the app and counts its
own requests.
"""

from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Callable, Iterable
from types import MethodType
from typing import TYPE_CHECKING

from graceful.core import default as _default
from graceful.core.admission import AdmissionLimit
from graceful.core.lifecycle import Lifecycle
from graceful.core.waitgroup import WaitGroupClosed
from graceful.wsgi.health import DEFAULT_CHECK_TIMEOUT, ENDPOINTS, HealthChecks, HealthResponse

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
]

logger = logging.getLogger(__name__)

#: environ key: the ``threading.Event`` set at NotAcceptingNewRequests.
SHUTTING_DOWN_KEY = "graceful.shutting_down"
#: environ key: the :class:`graceful.Lifecycle` serving the request.
LIFECYCLE_KEY = "graceful.core.lifecycle"

#: Tells whether a request is long-running (not counted in the drain, no admission limit).
LongRunning = Callable[["WSGIEnvironment"], bool]

_ROOT_PATHS = {f"/{endpoint}": endpoint for endpoint in ENDPOINTS}
_CHECK_PREFIXES = tuple(f"/{endpoint}/" for endpoint in ENDPOINTS)
_STATUS = {
    200: "200 OK",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    429: "429 Too Many Requests",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}


def _werkzeug_closing_iterator() -> type | None:
    """Werkzeug's ClosingIterator, if werkzeug is loaded and keeps close callbacks in a list ``_callbacks``.

    Looked up, not imported: an app that does not use werkzeug returns none
    of its responses, and a Gunicorn worker should not load werkzeug (and
    tear it down at exit) for nothing.
    """
    cls = getattr(sys.modules.get("werkzeug.wsgi"), "ClosingIterator", None)
    if not isinstance(cls, type):
        return None
    try:
        callbacks = getattr(cls(()), "_callbacks", None)
    except TypeError:  # a werkzeug whose ClosingIterator we do not know: its responses get the wrapper
        return None
    return cls if type(callbacks) is list else None


_UNSEEN = object()  # GracefulMiddleware._file_wrapper and _closing_iterator before the first response
_SHUTTING_DOWN = b"The server is shutting down, please try again later.\n"
_TOO_MANY = b"Too many requests, please try again later.\n"
_NOT_ALLOWED = b"Method not allowed: health endpoints answer GET and HEAD.\n"


def path_prefixes(*prefixes: str) -> LongRunning:
    """Build a ``long_running`` predicate that matches requests under any of these paths.

    Matching is by whole path segments on ``PATH_INFO``: ``path_prefixes("/stream")``
    matches ``/stream`` and ``/stream/news`` but not ``/streams``. Raises
    ``ValueError`` unless every prefix is a string starting with ``/``.
    """
    if not prefixes:
        raise ValueError("path_prefixes() needs at least one prefix, such as '/stream'")
    for prefix in prefixes:
        if not isinstance(prefix, str) or not prefix.startswith("/"):
            raise ValueError(f"a path prefix must be a string starting with '/', got {prefix!r}")
    exact = frozenset(prefix.rstrip("/") for prefix in prefixes)
    under = tuple(prefix.rstrip("/") + "/" for prefix in prefixes)

    def long_running(environ: WSGIEnvironment) -> bool:
        path = environ.get("PATH_INFO")
        return isinstance(path, str) and (path in exact or path.startswith(under))

    return long_running


class _InFlightResponse(itertools.chain[bytes]):
    """The app's response iterable; ``close()`` closes it once, then ends the request's count.

    A one-iterable ``itertools.chain``, so iterating it runs no Python code;
    built by :func:`_wrap` (``_InFlightResponse(it)``, then ``_iterable`` and ``_release``).
    """

    __slots__ = ("_iterable", "_release")
    _iterable: Iterable[bytes]
    _release: Callable[[], None] | None

    def close(self) -> None:
        """Call the app's ``close()`` (if any), then release; later calls do nothing."""
        release = self._release
        if release is None:
            return
        self._release = None
        try:
            close = getattr(self._iterable, "close", None)
            if close is not None:
                close()
        finally:
            release()


class _InFlightList(list[bytes]):
    """A list response, copied: iterated and measured (``len``) at C speed; ``close()`` releases once.

    Servers may look at ``len()`` of a list (wsgiref sets ``Content-Length``
    for a one-item list), and iterating a list needs no Python frame.
    """

    __slots__ = ("_release",)
    _release: Callable[[], None] | None

    def close(self) -> None:
        """Release; later calls do nothing (a list has no ``close()`` of its own)."""
        release = self._release
        if release is None:
            return
        self._release = None
        release()


def _in_flight(result: Iterable[bytes], release: Callable[[], None], environ: WSGIEnvironment) -> Iterable[bytes]:
    """Return the response the server gets: ``result`` with a ``close()`` that also releases."""
    kind = type(result)
    if kind is list:
        listed = _InFlightList(result)
        listed._release = release
        return listed
    if kind is environ.get("wsgi.file_wrapper"):
        return _keep_file_wrapper(result, release)
    return _wrap(result, release)


def _wrap(result: Iterable[bytes], release: Callable[[], None]) -> _InFlightResponse:
    response = _InFlightResponse(result)
    response._iterable = result
    response._release = release
    return response


class _CloseThenRelease:
    """Replaces a ``wsgi.file_wrapper`` object's ``close``, so the server keeps using sendfile."""

    __slots__ = ("_close", "_release")

    def __init__(self, close: Callable[[], object] | None, release: Callable[[], None]) -> None:
        self._close = close
        self._release: Callable[[], None] | None = release

    def __call__(self) -> None:
        release = self._release
        if release is None:
            return
        self._release = None
        try:
            if self._close is not None:
                self._close()
        finally:
            release()


class _ReleaseBoth:
    """Ends the in-flight count, then frees the admission slot (``max_in_flight`` on)."""

    __slots__ = ("_admission", "_done")

    def __init__(self, done: Callable[[], None], admission: AdmissionLimit) -> None:
        self._done = done
        self._admission = admission

    def __call__(self) -> None:
        try:
            self._done()
        finally:
            self._admission.release()


class GracefulMiddleware:
    """Wrap a WSGI app with graceful's health endpoints, admission and in-flight count.

    ``lifecycle`` defaults to ``graceful.default_lifecycle`` (the one the
    Gunicorn integration drives in each worker). ``long_running`` tells which
    requests are not counted in the drain nor limited by ``max_in_flight``
    (none by default; see :func:`path_prefixes`). ``check_timeout`` and
    ``check_cache_ttl`` (seconds) bound and cache the health checks (see
    :class:`graceful.wsgi.health.HealthChecks`).

    The lifecycle's config is read when a request needs it, never here, so a
    config set after wrapping (``lifecycle.configure``) is the one in force.
    Thread-safe. Exceptions from the app propagate (its count ended); the
    middleware itself raises for no request, whatever its environ holds.
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
        self.app = app
        self.lifecycle = lifecycle if lifecycle is not None else _default.default_lifecycle
        self.long_running = long_running
        self.health = HealthChecks(self.lifecycle, check_timeout=check_timeout, check_cache_ttl=check_cache_ttl)
        #: A middleware of the same lifecycle inside ``app``; when set, this one passes everything through.
        self.inner = find_middleware(app, self.lifecycle)
        self._transparent = self.inner is not None
        # The server's wsgi.file_wrapper class, remembered from its first request (one server per
        # process). Were it to change, file wrappers would merely be wrapped, losing sendfile.
        self._file_wrapper: object = _UNSEEN
        # Werkzeug's ClosingIterator (see _werkzeug_closing_iterator), looked up at the same time.
        self._closing_iterator: object = _UNSEEN
        # Bound once: the hot path below reads only locals and these.
        self._not_accepting = self.lifecycle.not_accepting_new_requests
        self._shutting_down = self._not_accepting.event
        self._in_flight = in_flight = self.lifecycle.in_flight
        # The wait group's deque, for the hot path: one token per request. Every response
        # wrapper below calls its release once, however often it is closed.
        self._enter = in_flight._tokens.append
        self._leave = in_flight._tokens.pop

    def __repr__(self) -> str:
        return f"<GracefulMiddleware app={self.app!r} lifecycle={self.lifecycle!r}>"

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        lifecycle = self.lifecycle
        # Another GracefulMiddleware of this lifecycle handles it: one inside, or one outside.
        if self._transparent or (LIFECYCLE_KEY in environ and environ[LIFECYCLE_KEY] is lifecycle):
            return self.app(environ, start_response)
        environ[LIFECYCLE_KEY] = lifecycle
        environ[SHUTTING_DOWN_KEY] = self._shutting_down
        try:
            path = environ["PATH_INFO"]
            # Every health path has a "z", few others do: one quick test for the rest.
            health = "z" in path and (path in _ROOT_PATHS or path.startswith(_CHECK_PREFIXES))
        except (KeyError, TypeError):  # no PATH_INFO, or no string (the server's bug): no health path
            health = False
        if health:
            return self._health(environ, start_response, path)
        if not lifecycle._unhindered:
            # Shutting down, or a max_in_flight: the checks (set back when there is nothing to check).
            answer = self._hindered(environ, start_response)
            if answer is not None:
                return answer
        long_running = self.long_running
        if long_running is not None and self._is_long_running(long_running, environ):
            return self.app(environ, start_response)
        # SafeWaitGroup.add(), inlined: a token, unless the drain has begun.
        self._enter(None)
        if self._in_flight._waiting:
            self._leave()
            return _reply(environ, start_response, 503, _SHUTTING_DOWN, "1")
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
        response._iterable = result
        response._release = self._leave
        return response

    def _hindered(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes] | None:
        """The checks a request skips while the lifecycle is unhindered: the answer, or None to count it."""
        lifecycle = self.lifecycle
        stopped = self._not_accepting.fired_at is not None
        if stopped and lifecycle.config.send_retry_after:
            return _reply(environ, start_response, 429, _SHUTTING_DOWN, str(lifecycle.config.retry_after))
        admission = lifecycle.admission
        if not admission.limit:
            if not stopped:  # nothing to check: let the next requests skip this
                lifecycle.refresh_unhindered()
            return None
        long_running = self.long_running
        if long_running is not None and self._is_long_running(long_running, environ):
            return self.app(environ, start_response)
        return self._call_limited(environ, start_response, admission)

    def _call_limited(
        self, environ: WSGIEnvironment, start_response: StartResponse, admission: AdmissionLimit
    ) -> Iterable[bytes]:
        """The counted path with ``max_in_flight`` on: a slot from admission to close()."""
        if not admission.try_acquire():
            return _reply(environ, start_response, 429, _TOO_MANY, "1")
        try:
            done = self._in_flight.add()
        except WaitGroupClosed:
            admission.release()
            return _reply(environ, start_response, 503, _SHUTTING_DOWN, "1")
        release = _ReleaseBoth(done, admission)
        try:
            result = self.app(environ, start_response)
        except BaseException:
            release()
            raise
        return _in_flight(result, release, environ)

    def _first_response(
        self, result: Iterable[bytes], release: Callable[[], None], environ: WSGIEnvironment
    ) -> Iterable[bytes]:
        """Remember the server's file_wrapper class and werkzeug's, then wrap the first non-list response."""
        self._file_wrapper = environ.get("wsgi.file_wrapper")
        self._closing_iterator = _werkzeug_closing_iterator()
        if type(result) is self._closing_iterator:
            return _join_close_callbacks(result, release)
        return _in_flight(result, release, environ)

    @staticmethod
    def _is_long_running(long_running: LongRunning, environ: WSGIEnvironment) -> bool:
        try:
            return bool(long_running(environ))
        except Exception:
            logger.exception("graceful: the long_running predicate raised; counting the request as usual")
            return False

    def _health(self, environ: WSGIEnvironment, start_response: StartResponse, path: str) -> Iterable[bytes]:
        """Answer a health path; anything unexpected becomes a logged 500, never an exception."""
        try:
            endpoint = _ROOT_PATHS.get(path)
            check = None
            if endpoint is None:
                endpoint, _, check = path[1:].partition("/")
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                return _reply(environ, start_response, 405, _NOT_ALLOWED, allow="GET, HEAD")
            query = environ.get("QUERY_STRING")
            response = self.health.respond(endpoint, check, query if isinstance(query, str) else "")
        except Exception:
            logger.exception("graceful: health endpoint %r failed", path)
            response = HealthResponse(500, "internal error\n")
        body = response.body.encode("utf-8", "replace")
        return _reply(environ, start_response, response.status, body)


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


def _join_close_callbacks(result: Iterable[bytes], release: Callable[[], None]) -> Iterable[bytes]:
    """Return werkzeug's ClosingIterator itself, ``release`` and its list's ``clear`` appended to its callbacks.

    Its close() calls them in order: the count ends after the app's own
    callbacks, then the list is emptied, so a second close() runs nothing.
    """
    callbacks = result._callbacks  # type: ignore[attr-defined]
    callbacks.append(release)
    callbacks.append(callbacks.clear)
    return result


def _keep_file_wrapper(result: Iterable[bytes], release: Callable[[], None]) -> Iterable[bytes]:
    """Return the server's own file wrapper with a ``close`` that also releases (keeps sendfile)."""
    try:
        setattr(result, "close", _CloseThenRelease(getattr(result, "close", None), release))  # noqa: B010
    except (AttributeError, TypeError):  # __slots__ or a read-only close
        return _wrap(result, release)
    return result


def _reply(
    environ: WSGIEnvironment,
    start_response: StartResponse,
    status: int,
    body: bytes,
    retry_after: str | None = None,
    allow: str | None = None,
) -> list[bytes]:
    """Start a plain-text response of graceful's own; no body for HEAD."""
    headers = [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(body))),
        ("X-Content-Type-Options", "nosniff"),
        ("Cache-Control", "no-store"),
    ]
    if retry_after is not None:
        headers.append(("Retry-After", retry_after))
    if allow is not None:
        headers.append(("Allow", allow))
    start_response(_STATUS[status], headers)
    return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]
