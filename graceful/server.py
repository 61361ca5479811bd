"""The single-process server: ``graceful serve module:app`` (Werkzeug's request handling).

One process serves the app on a bounded pool of threads and runs the whole
shutdown timeline itself::

    start-up    bind; check the budget (bad GRACEFUL_* values stop us here);
                install the signal trap; start serving; run post-start hooks
    SIGTERM     /readyz fails; keep serving, every response with
                "Connection: close"; pre-shutdown hooks run
    stop        default mode: shrink the backlog, accept what the kernel
                already queued, close the listener and idle keep-alive
                connections (new connections are refused, queued ones are
                served, not reset); send_retry_after mode: keep listening,
                new requests get 429 until drained, then stop the same way
    drain       wait for the in-flight requests (the middleware's wait group:
                request threads are daemons, nothing else waits for them)
    cleanup     cleanup tasks, then exit 0; a second signal exits 1 at once

Threads, and what runs on each:

``MainThread``
    :func:`serve`: binds, installs the :class:`~graceful.trap.SignalTrap`,
    starts the others, runs the post-start hooks, waits for CleanupFinished.
``graceful-serve``
    :meth:`GracefulServer.serve_forever`: one selector over the listener and
    every connection waiting for a request (new or idle keep-alive); accepts,
    hands connections that have a request to the pool, closes idle ones.
``graceful-worker-N``
    ``threads`` of them; each serves one request at a time with
    :class:`RequestHandler` (Werkzeug's ``WSGIRequestHandler`` for parsing and
    the WSGI environ), so an idle keep-alive connection holds no thread.
``graceful-signals``, ``graceful-shutdown``
    the trap's thread and the lifecycle's timeline; the shutdown thread calls
    :meth:`GracefulServer.stop_listening`.

Keep-alive: HTTP/1.1 connections stay open between requests for
``keep_alive`` seconds (0 turns keep-alive off). Once ShutdownInitiated has
fired, every response carries ``Connection: close`` and the connection is
closed after it; the app never sets hop-by-hop headers (PEP 3333), the
server does.
"""

from __future__ import annotations

import ast
import errno
import importlib
import io
import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from werkzeug.exceptions import InternalServerError
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler

from graceful import _default
from graceful.lifecycle import Lifecycle
from graceful.listeners import close_after_queue_drains
from graceful.middleware import GracefulMiddleware
from graceful.trap import SignalTrap

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from _typeshed.wsgi import InputStream, StartResponse, WSGIApplication, WSGIEnvironment

__all__ = [
    "DEFAULT_KEEP_ALIVE",
    "DEFAULT_THREADS",
    "AppImportError",
    "GracefulServer",
    "RequestHandler",
    "load_app",
    "serve",
    "wrap_app",
]

logger = logging.getLogger(__name__)
_access_log = logging.getLogger("graceful.access")

#: Request threads in the pool unless told otherwise.
DEFAULT_THREADS = 8
#: Seconds an idle keep-alive connection stays open unless told otherwise.
DEFAULT_KEEP_ALIVE = 5.0

# Seconds a socket operation may block while a request is read or written, and
# a new connection may stay silent before it is closed.
_IO_TIMEOUT = 30.0
# Bound (s) on waiting for the kernel's accept queue to empty at the stop.
_QUEUE_DRAIN_TIMEOUT = 1.0
# Seconds a connection accepted before the stop, still silent, may take to send its request.
_NEW_CONNECTION_GRACE = 1.0
# Bound (s) on waiting, at the stop, until every accepted request is counted in the drain.
_STOP_TIMEOUT = 5.0
# An unread request body up to this size is read and dropped to keep the connection; larger closes it.
_DISCARD_LIMIT = 64 * 1024
_DISCARD_TIMEOUT = 1.0
# Bound (s) on reading and dropping what a client still sends after its connection's last response.
_LINGER = 2.0
# Seconds the main thread gives responses still being written (health probes, 429s) before exiting.
_EXIT_GRACE = 1.0
# How often the main thread looks at the server loop while it waits for the shutdown.
_MAIN_WAIT = 1.0

# environ key: called when the request reaches the app (past the middleware's admission).
_ADMITTED_KEY = "graceful.server.admitted"
# Messages to graceful-serve.
_STOP = "stop"
_CLOSE = "close"
_LISTENER = "listener"
_WAKEUP = "wakeup"


class AppImportError(ValueError):
    """``module:attr`` names no importable WSGI app; the message says which part is wrong."""


# -- the app -------------------------------------------------------------------


def load_app(spec: str) -> WSGIApplication:
    """Import the WSGI app named by ``module:attr`` (or ``module:factory(args)``), like Gunicorn.

    ``module`` alone means ``module:application``. A call is made with literal
    arguments only. Raises :class:`AppImportError` when the module or the
    attribute does not exist or the result is not callable; exceptions raised
    while the module itself runs propagate unchanged. Main thread, at start-up.
    """
    module_name, _, expression = spec.partition(":")
    expression = expression or "application"
    if not module_name:
        raise AppImportError(f"{spec!r} names no module: expected module:attr, such as myapp:app")
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        raise AppImportError(f"{expression!r} is neither a name nor a call such as create_app()") from None
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    call = tree if isinstance(tree, ast.Call) else None
    if call is not None:
        tree = call.func
        try:
            args = [ast.literal_eval(arg) for arg in call.args]
            kwargs = {str(kw.arg): ast.literal_eval(kw.value) for kw in call.keywords}
        except ValueError:
            raise AppImportError(f"{expression!r}: factory arguments must be literals") from None
    if not isinstance(tree, ast.Name):
        raise AppImportError(f"{expression!r} is neither a name nor a call such as create_app()")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise  # the module exists but imports something missing: show the traceback
        raise AppImportError(f"no module named {exc.name!r} (while importing {spec!r})") from None
    try:
        target = getattr(module, tree.id)
    except AttributeError:
        raise AppImportError(f"module {module_name!r} has no attribute {tree.id!r}") from None
    app = target(*args, **kwargs) if call is not None else target
    if not callable(app):
        raise AppImportError(f"{spec!r} is a {type(app).__name__}, not a WSGI application")
    return app  # type: ignore[no-any-return]


class _MarkAdmitted:
    """The innermost WSGI layer: tells the server the request got past the middleware's admission.

    Request thread. Placed inside :class:`GracefulMiddleware`, so when it runs
    the request is already counted in ``lifecycle.in_flight`` (or is
    long-running and not meant to be): the server may let the drain begin.
    """

    __slots__ = ("app",)

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        admitted = environ.get(_ADMITTED_KEY)
        if admitted is not None:
            admitted()
        return self.app(environ, start_response)


def _find_middleware(app: object) -> GracefulMiddleware | None:
    """The GracefulMiddleware ``app`` is, or has as its Flask ``wsgi_app`` (looking through ``.app`` wrappers)."""
    for start in (app, getattr(app, "wsgi_app", None)):
        current = start
        for _ in range(8):  # a chain of wrappers, each keeping the next in .app (ProxyFix, ...)
            if isinstance(current, GracefulMiddleware):
                return current
            current = getattr(current, "app", None)
            if current is None:
                break
    return None


def wrap_app(app: WSGIApplication, lifecycle: Lifecycle | None = None) -> tuple[WSGIApplication, Lifecycle]:
    """Return ``app`` ready for :class:`GracefulServer` and the lifecycle that drives it.

    A plain WSGI app is wrapped in ``GracefulMiddleware(app, lifecycle)``
    (``lifecycle`` defaults to ``graceful.default_lifecycle``). An app that is
    a ``GracefulMiddleware`` already, or a Flask app that uses
    ``graceful.flask.Graceful``, is served as it is, with the lifecycle it
    was given; the middleware's ``app`` attribute gains a thin inner layer
    that tells the server when a request was admitted. Raises ``ValueError``
    when ``lifecycle`` differs from the one the app is already wrapped with.
    Main thread, at start-up.
    """
    found = _find_middleware(app)
    if found is None:
        extensions = getattr(app, "extensions", None)
        extension = extensions.get("graceful") if isinstance(extensions, dict) else None
        lifecycle = lifecycle or getattr(extension, "lifecycle", None) or _default.default_lifecycle
        # An outer middleware of the same lifecycle makes any inner one pass requests straight on.
        return GracefulMiddleware(_MarkAdmitted(app), lifecycle), lifecycle
    if lifecycle is not None and found.lifecycle is not lifecycle:
        raise ValueError("the app is already wrapped in a GracefulMiddleware of another lifecycle")
    if not isinstance(found.app, _MarkAdmitted):
        found.app = _MarkAdmitted(found.app)
    return app, found.lifecycle


# -- one connection, one request --------------------------------------------------


class _Connection:
    """A client connection: its socket, buffered streams and what the server knows of it.

    ``admitted`` is False from the moment a request may be on its way (accepted,
    or readable again) until the app admitted it or the response ended; it is
    guarded by the server's lock.
    """

    __slots__ = ("address", "admitted", "deadline", "linger", "requests", "rfile", "sock", "wfile")

    def __init__(self, sock: socket.socket, address: Any) -> None:
        self.sock = sock
        self.address = address
        self.rfile = sock.makefile("rb")
        self.wfile = sock.makefile("wb")
        self.requests = 0
        self.deadline = time.monotonic() + _IO_TIMEOUT
        self.admitted = True
        #: The client may still be sending a body nobody reads: close gently (see close()).
        self.linger = False

    def close(self) -> None:
        """Close the streams and the socket.

        With ``linger`` set, first send our FIN and read and drop what the
        client still sends, for up to ``_LINGER`` seconds: closing with unread
        bytes would make the kernel reset the connection, and a reset can
        destroy the response before the client has read it.
        """
        for stream in (self.wfile, self.rfile):
            try:
                stream.close()
            except OSError:  # a failed flush of a dead connection: it is going anyway
                continue
        if self.linger:
            deadline = time.monotonic() + _LINGER
            try:
                self.sock.shutdown(socket.SHUT_WR)
                while (left := deadline - time.monotonic()) > 0:
                    self.sock.settimeout(left)
                    if not self.sock.recv(65536):
                        break
            except OSError:  # reset, or timed out: nothing more to save
                pass
        self.sock.close()


class _Body(io.RawIOBase):
    """A request body of known length, read from the connection's stream and never past its end."""

    def __init__(self, rfile: io.BufferedReader, length: int) -> None:
        super().__init__()
        self._rfile = rfile
        self.remaining = length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self.remaining <= 0:
            return 0
        with memoryview(buffer) as view:
            count = self._rfile.readinto1(view[: self.remaining])
        self.remaining -= count
        return count


class _Response:
    """One response on one connection: headers on the first write, then the body, framed.

    Request thread. A body of unknown length goes out chunked to HTTP/1.1
    clients (so the connection can be kept); ``HEAD``, 1xx, 204 and 304
    responses carry none. Hop-by-hop ``Connection`` and ``Keep-Alive`` headers
    from the app are dropped: the server decides them.
    """

    __slots__ = ("chunked", "handler", "head", "headers", "headers_sent", "no_body", "status")

    def __init__(self, handler: RequestHandler, environ: WSGIEnvironment) -> None:
        self.handler = handler
        self.head = environ.get("REQUEST_METHOD") == "HEAD"
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []
        self.headers_sent = False
        self.chunked = False
        self.no_body = False

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        """WSGI ``start_response``."""
        if exc_info is not None:
            try:
                if self.headers_sent:
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None
        elif self.status is not None:
            raise AssertionError("start_response() called a second time without exc_info")
        self.status = status
        self.headers = list(headers)
        return self.write

    def write(self, data: bytes) -> None:
        """Send ``data`` (the headers first, on the first call); flushed at once, for streams."""
        if not self.headers_sent:
            self._send_headers()
        if not data or self.no_body:
            return
        wfile = self.handler.wfile
        if self.chunked:
            wfile.write(b"%x\r\n" % len(data))
            wfile.write(data)
            wfile.write(b"\r\n")
        else:
            wfile.write(data)
        wfile.flush()

    def finish(self) -> None:
        """End the response: send headers not sent yet, then the last chunk."""
        if not self.headers_sent:
            self._send_headers()
        if self.chunked:
            self.handler.wfile.write(b"0\r\n\r\n")
        self.handler.wfile.flush()

    def _send_headers(self) -> None:
        if self.status is None:
            raise AssertionError("the app returned without calling start_response()")
        handler = self.handler
        code_text, _, reason = self.status.partition(" ")
        code = int(code_text)
        handler.send_response(code, reason)
        length_known = False
        framed_by_app = False
        for name, value in self.headers:
            lower = name.lower()
            if lower in ("connection", "keep-alive"):
                continue
            if lower == "content-length":
                length_known = True
            elif lower == "transfer-encoding":
                framed_by_app = True
            handler.send_header(name, value)
        self.no_body = self.head or code < 200 or code in (204, 304)
        if framed_by_app:
            handler.close_connection = True
        elif not (self.no_body or length_known):
            if handler.request_version == "HTTP/1.1":
                self.chunked = True
                handler.send_header("Transfer-Encoding", "chunked")
            else:
                handler.close_connection = True  # the body ends when the connection does
        if handler.should_close():
            handler.send_header("Connection", "close")  # also sets handler.close_connection
        handler.end_headers()
        self.headers_sent = True


class RequestHandler(WSGIRequestHandler):
    """Serves exactly one request of a connection; the server decides what the connection does next.

    Runs on a ``graceful-worker-N`` thread. Reuses Werkzeug's request parsing
    and WSGI environ; writes the response itself (:class:`_Response`), so that
    HTTP/1.1 connections can be kept alive, and so that once the lifecycle's
    ShutdownInitiated has fired every response says ``Connection: close`` and
    the connection is closed after it.
    """

    protocol_version = "HTTP/1.1"
    server: GracefulServer

    def __init__(self, conn: _Connection, server: GracefulServer) -> None:
        self.conn = conn
        self._body: _Body | None = None
        super().__init__(conn.sock, conn.address, server)

    def setup(self) -> None:
        """Use the connection's own streams: bytes buffered past one request belong to the next."""
        self.connection = self.conn.sock
        self.rfile = self.conn.rfile
        self.wfile = self.conn.wfile

    def finish(self) -> None:
        """Flush what is left; the streams stay open with the connection."""
        try:
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def handle_expect_100(self) -> bool:
        """Send ``100 Continue`` at once (the connection's writer is buffered)."""
        proceed = super().handle_expect_100()
        self.wfile.flush()
        return proceed

    def handle(self) -> None:
        """Read and serve one request; a dropped or timed-out connection is closed quietly."""
        self.close_connection = True
        try:
            self.handle_one_request()
        except (ConnectionError, TimeoutError) as exc:
            self.close_connection = True
            self.connection_dropped(exc)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """One access-log line on the ``graceful.access`` logger (plain text), unless the server has it off."""
        if self.server.access_log:
            _access_log.info('%s "%s" %s %s', self.address_string(), self.requestline, code, size)

    def should_close(self) -> bool:
        """True when this response must end the connection (decided as its headers go out)."""
        body = self._body
        return (
            self.close_connection
            or self.request_version != "HTTP/1.1"
            or self.server.keep_alive <= 0
            or self.server.lifecycle.shutdown_initiated.is_set()
            or self.server.closing
            or body is None
            or body.remaining > _DISCARD_LIMIT
        )

    def run_wsgi(self) -> None:
        """Run the app for the parsed request and write its response (every ``do_<METHOD>``)."""
        environ = self.make_environ()
        if not self._set_body(environ):
            return
        environ[_ADMITTED_KEY] = self._admitted
        response = _Response(self, environ)
        try:
            result = self.server.app(environ, response.start_response)
            try:
                for data in result:
                    response.write(data)
                response.finish()
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except (ConnectionError, TimeoutError) as exc:
            self.close_connection = True
            self.connection_dropped(exc, environ)
            return
        except Exception:
            logger.exception("graceful: error on request %s %s", self.command, environ.get("PATH_INFO"))
            self.close_connection = True
            if not response.headers_sent:
                self._send_internal_error(environ)
        self._drain_body(environ["wsgi.input"])

    def _admitted(self) -> None:
        self.server.settle(self.conn)

    def _set_body(self, environ: WSGIEnvironment) -> bool:
        """Give the app a ``wsgi.input`` that ends where the body does; False after a 400."""
        if "HTTP_TRANSFER_ENCODING" in environ:
            # Werkzeug dechunks a chunked body; whether the app read it all is known only after.
            self._body = None
            return True
        text = environ.get("CONTENT_LENGTH") or "0"
        if not text.isdigit():
            self.send_error(400, "Bad Content-Length")
            return False
        length = int(text)
        self._body = _Body(self.conn.rfile, length)
        environ["wsgi.input"] = io.BufferedReader(self._body) if length else io.BytesIO()
        environ["wsgi.input_terminated"] = True
        return True

    def _drain_body(self, stream: InputStream) -> None:
        """Read and drop a small unread rest of the request body.

        Then the connection can carry the next request, and closing it does
        not reset it (unread bytes make the kernel answer a close with a
        reset, which can destroy the response before the client reads it).
        A larger rest, or one that does not arrive in time, closes it.
        """
        body = self._body
        if body is not None:
            stream = body  # what the app's buffered reader has not taken from the socket
            if not body.remaining:
                return
        left = _DISCARD_LIMIT + 1
        try:
            self.connection.settimeout(_DISCARD_TIMEOUT)
            while left > 0 and (data := stream.read(min(left, 65536))):
                left -= len(data)
            self.connection.settimeout(_IO_TIMEOUT)
        except (OSError, ValueError):  # timed out, reset, or a stream the app closed
            left = 0
        if body is None or body.remaining or left <= 0:
            self.close_connection = True
            self.conn.linger = left <= 0 or (body is not None and body.remaining > 0)

    def _send_internal_error(self, environ: WSGIEnvironment) -> None:
        """Answer 500 after the app raised before any byte of its response was sent."""
        response = _Response(self, environ)
        try:
            for data in InternalServerError()(environ, response.start_response):
                response.write(data)
            response.finish()
        except OSError:
            self.close_connection = True


# -- the server --------------------------------------------------------------------


class GracefulServer(BaseWSGIServer):
    """A threaded WSGI server with a bounded pool, keep-alive, and a graceful stop.

    It is the :class:`~graceful.lifecycle.ServerAdapter` of its lifecycle
    (:meth:`stop_listening`). Build it on the main thread (it binds at once;
    Werkzeug prints the error and exits 1 when the address is taken), then
    :meth:`start` it. ``port`` 0 binds a free port (see ``server.port``).
    """

    multithread = True

    def __init__(
        self,
        host: str,
        port: int,
        app: WSGIApplication,
        lifecycle: Lifecycle,
        *,
        threads: int = DEFAULT_THREADS,
        keep_alive: float = DEFAULT_KEEP_ALIVE,
        access_log: bool = True,
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads={threads!r} is not allowed: expected a whole number >= 1")
        if not keep_alive >= 0:
            raise ValueError(f"keep_alive={keep_alive!r} is not allowed: expected seconds >= 0")
        self.lifecycle = lifecycle
        self.threads = threads
        self.keep_alive = keep_alive
        self.access_log = access_log
        #: True once close() began: responses end their connections.
        self.closing = False
        #: True when graceful-serve died of an unexpected error.
        self.failed = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._connections: set[_Connection] = set()  # guarded by _lock
        self._unadmitted = 0  # connections whose request is not admitted yet; guarded by _lock
        self._serving: set[_Connection] = set()  # connections a worker is serving; guarded by _lock
        self._stop_done = False  # graceful-serve closed the listener; guarded by _lock
        self._work: queue.SimpleQueue[_Connection | None] = queue.SimpleQueue()
        self._inbox: queue.SimpleQueue[_Connection | str] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._loop: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        # Binds at once (Werkzeug prints the error and exits 1 when it cannot).
        super().__init__(host, port, app, handler=RequestHandler)
        # Owned by graceful-serve alone:
        self._waiting: set[_Connection] = set()
        self._listening = True
        self._accept_paused_until = 0.0

    # -- main thread ----------------------------------------------------------------

    def start(self) -> None:
        """Main thread: start graceful-serve and the worker threads; serving begins."""
        for number in range(1, self.threads + 1):
            worker = threading.Thread(target=self._work_loop, name=f"graceful-worker-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._loop = threading.Thread(target=self._run_loop, name="graceful-serve", daemon=True)
        self._loop.start()

    @property
    def serving(self) -> bool:
        """True while graceful-serve runs."""
        return self._loop is not None and self._loop.is_alive()

    def close(self, timeout: float = _EXIT_GRACE) -> None:
        """Main thread, after CleanupFinished: stop graceful-serve, give responses still being
        written up to ``timeout`` seconds, close every socket and stop the workers."""
        deadline = time.monotonic() + timeout
        self.closing = True
        self._post(_CLOSE)
        if self._loop is not None:
            self._loop.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._changed.wait_for(lambda: not self._serving, max(0.0, deadline - time.monotonic()))
            idle = self._connections - self._serving
        for conn in idle:  # waiting for a request, or queued for a worker that will not take it
            self._close_connection(conn)
        for _ in self._workers:
            self._work.put(None)
        self.server_close()
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def server_close(self) -> None:
        """Close the listening socket (once graceful-serve no longer watches it)."""
        if self.serving and self._listening:
            return  # graceful-serve owns it until the stop
        self.socket.close()

    # -- graceful-shutdown thread --------------------------------------------------------

    def stop_listening(self) -> None:
        """Shutdown thread: stop listening without resetting the connections the kernel queued.

        1. Shrink the backlog and wait (bounded) until the accept queue is
           empty while graceful-serve keeps accepting (graceful.listeners).
        2. graceful-serve closes the listener: new connections are refused.
           It serves idle keep-alive connections whose next request is already
           there and closes the rest; connections still silent get
           ``_NEW_CONNECTION_GRACE`` seconds to send their request.
        3. Wait (bounded) until every accepted request has been admitted by
           the middleware (so the drain counts it) or answered.
        """
        if self.serving:
            close_after_queue_drains([self.socket], _QUEUE_DRAIN_TIMEOUT)
            self._post(_STOP)
        else:
            self.socket.close()
            with self._lock:
                self._stop_done = True
        with self._lock:
            settled = self._changed.wait_for(
                lambda: (self._stop_done or not self.serving) and self._unadmitted == 0, _STOP_TIMEOUT
            )
            unadmitted = self._unadmitted
        if not settled:
            logger.warning(
                "graceful: %d accepted request(s) not yet admitted after %gs; the drain may refuse them",
                unadmitted,
                _STOP_TIMEOUT,
            )

    # -- bookkeeping, any thread ------------------------------------------------------------

    def settle(self, conn: _Connection) -> None:
        """The request on ``conn`` was admitted by the middleware, or ended: the stop need not wait for it."""
        if conn.admitted:
            return
        with self._lock:
            if conn.admitted:
                return
            conn.admitted = True
            self._unadmitted -= 1
            if not self._unadmitted:
                self._changed.notify_all()

    def _expect_request(self, conn: _Connection) -> None:
        with self._lock:
            if conn.admitted:
                conn.admitted = False
                self._unadmitted += 1

    def _dispatch(self, conn: _Connection) -> None:
        """Hand a connection with a request (or an EOF) waiting to the pool."""
        self._expect_request(conn)
        self._work.put(conn)

    def _post(self, message: _Connection | str) -> None:
        """Send graceful-serve a message and wake it."""
        self._inbox.put(message)
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):  # a wake-up is pending already, or we are closed
            return

    def _close_connection(self, conn: _Connection) -> None:
        self.settle(conn)
        with self._lock:
            if conn not in self._connections:
                return
            self._connections.discard(conn)
        conn.close()

    # -- graceful-worker-N threads -------------------------------------------------------------

    def _work_loop(self) -> None:
        """Worker thread: serve one request at a time from the pool's queue, until told to stop."""
        while True:
            conn = self._work.get()  # a None from close() ends the thread
            if conn is None:
                return
            self._serve_one(conn)

    def _serve_one(self, conn: _Connection) -> None:
        """Serve the request waiting on ``conn``, then keep the connection or close it."""
        with self._lock:
            closing = self.closing
            if not closing:
                self._serving.add(conn)
        if closing:  # the process is exiting
            self._close_connection(conn)
            return
        try:
            keep = False
            try:
                conn.sock.settimeout(_IO_TIMEOUT)
                keep = not RequestHandler(conn, self).close_connection
            except Exception:
                logger.exception("graceful: error serving a connection from %s", conn.address)
            finally:
                self.settle(conn)
            if keep and not self.closing:
                self._keep(conn)
            else:
                self._close_connection(conn)
        finally:
            with self._lock:
                self._serving.discard(conn)
                if not self._serving:
                    self._changed.notify_all()

    def _keep(self, conn: _Connection) -> None:
        """After a kept-alive response: serve a request already buffered, else watch the connection."""
        conn.requests += 1
        try:
            conn.sock.settimeout(0.0)
            pending = conn.rfile.peek(1)
        except OSError:
            self._close_connection(conn)
            return
        if pending:
            self._dispatch(conn)  # pipelined: the next request is here already
            return
        conn.deadline = time.monotonic() + self.keep_alive
        self._post(conn)

    # -- graceful-serve thread -------------------------------------------------------------------

    def _run_loop(self) -> None:
        try:
            self.serve_forever()
        except Exception:
            self.failed = True
            logger.exception("graceful: the server loop failed; shutting down")
            self.lifecycle.request_shutdown()
        finally:
            with self._lock:
                self._changed.notify_all()

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """graceful-serve: accept, watch waiting connections, hand readable ones to the pool.

        ``poll_interval`` is ignored: the loop sleeps until a socket is ready,
        a message arrives or the earliest connection deadline.
        """
        selector = selectors.DefaultSelector()
        self.socket.setblocking(False)
        selector.register(self.socket, selectors.EVENT_READ, _LISTENER)
        selector.register(self._wake_r, selectors.EVENT_READ, _WAKEUP)
        try:
            while not self.closing:
                for key, _ in selector.select(self._next_timeout()):
                    if key.data == _LISTENER:
                        if self._listening:
                            self._accept(selector)
                    elif key.data == _WAKEUP:
                        self._read_inbox(selector)
                    elif key.data in self._waiting:  # not handled earlier in this round
                        self._unwatch(selector, key.data)
                        self._dispatch(key.data)
                self._expire(selector)
        finally:
            for conn in list(self._waiting):
                self._unwatch(selector, conn)
                self._close_connection(conn)
            selector.close()

    def _next_timeout(self) -> float | None:
        deadlines = [conn.deadline for conn in self._waiting]
        if self._accept_paused_until:
            deadlines.append(self._accept_paused_until)
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _watch(self, selector: selectors.BaseSelector, conn: _Connection) -> None:
        selector.register(conn.sock, selectors.EVENT_READ, conn)
        self._waiting.add(conn)

    def _unwatch(self, selector: selectors.BaseSelector, conn: _Connection) -> None:
        selector.unregister(conn.sock)
        self._waiting.discard(conn)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        """Accept every connection the kernel has queued; each waits for its request in the selector."""
        for _ in range(256):  # then let the other sockets have a turn
            try:
                sock, address = self.socket.accept()
            except BlockingIOError:
                return
            except ConnectionAbortedError:  # reset by the client while queued
                continue
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.EBADF):  # the stop shut the listener down
                    self._stop_accepting(selector)
                    return
                # Out of file descriptors or similar: pause accepting instead of spinning.
                logger.error("graceful: accept() failed: %s; pausing for 0.5s", exc)
                selector.unregister(self.socket)
                self._accept_paused_until = time.monotonic() + 0.5
                return
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each flush is one whole piece
            conn = _Connection(sock, address)
            with self._lock:
                self._connections.add(conn)
            self._expect_request(conn)
            self._watch(selector, conn)

    def _stop_accepting(self, selector: selectors.BaseSelector) -> None:
        if self._listening and not self._accept_paused_until:
            selector.unregister(self.socket)
        self._accept_paused_until = 0.0
        self._listening = False

    def _read_inbox(self, selector: selectors.BaseSelector) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(message, _Connection):
                if self._listening:
                    self._watch(selector, message)  # idle keep-alive: wait for its next request
                else:
                    self._close_connection(message)
            elif message == _STOP:
                self._stop(selector)
            elif message == _CLOSE:
                self.closing = True

    def _stop(self, selector: selectors.BaseSelector) -> None:
        """Close the listener; serve idle connections whose request is here, close the other idle ones."""
        self._stop_accepting(selector)
        self.socket.close()
        ready = {key.data for key, _ in selector.select(0) if isinstance(key.data, _Connection)}
        grace = time.monotonic() + _NEW_CONNECTION_GRACE
        for conn in list(self._waiting):
            if conn in ready:
                self._unwatch(selector, conn)
                self._dispatch(conn)
            elif conn.requests:  # idle keep-alive
                self._unwatch(selector, conn)
                self._close_connection(conn)
            else:  # accepted before the stop, request not here yet
                conn.deadline = min(conn.deadline, grace)
        with self._lock:
            self._stop_done = True
            self._changed.notify_all()
        logger.info("graceful: stopped listening on %s:%d", self.host, self.port)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            if self._listening:
                selector.register(self.socket, selectors.EVENT_READ, _LISTENER)
        for conn in [conn for conn in self._waiting if conn.deadline <= now]:
            self._unwatch(selector, conn)
            self._close_connection(conn)


# -- running it ----------------------------------------------------------------------------


def serve(
    app: WSGIApplication,
    host: str,
    port: int,
    *,
    threads: int = DEFAULT_THREADS,
    lifecycle: Lifecycle | None = None,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    access_log: bool = True,
) -> int:
    """Serve ``app`` until a SIGTERM/SIGINT shutdown completes; return the exit status (0).

    Main thread only (it installs the signal trap, and restores the previous
    handlers on return). ``app`` is wrapped as :func:`wrap_app` says; the
    lifecycle's config and budget are checked before binding and raise
    :class:`graceful.ConfigError`. Returns 0 once CleanupFinished fired, 1 if
    the server loop failed or the shutdown overran ``grace_period``. A second
    signal ends the process with status 1 at once. Call
    ``lifecycle.exit(status)`` afterwards to end the process without waiting
    for hung hook threads.
    """
    app, lifecycle = wrap_app(app, lifecycle)
    lifecycle.check_budget()  # reads the config: a bad GRACEFUL_* value raises here
    server = GracefulServer(host, port, app, lifecycle, threads=threads, keep_alive=keep_alive, access_log=access_log)
    lifecycle.adapter = server
    trap = SignalTrap(lambda _signum: lifecycle.request_shutdown()).install()
    try:
        server.start()
        logger.info(
            "graceful: listening on http://%s:%d with %d threads (pid %d)",
            _display_host(server.host),
            server.port,
            threads,
            os.getpid(),
        )
        lifecycle.run_post_start_hooks()
        status = _wait_for_cleanup(server, lifecycle)
        server.close()
        return status
    finally:
        trap.uninstall()


def _wait_for_cleanup(server: GracefulServer, lifecycle: Lifecycle) -> int:
    """Main thread: wait for CleanupFinished; 1 if the loop failed or the shutdown overran its budget."""
    # A signal's waiters wake before its listeners run: wait for ours, subscribed after the app's.
    announced = threading.Event()
    lifecycle.subscribe(lambda name, _at: announced.set() if name == lifecycle.cleanup_finished.name else None)
    while not lifecycle.wait_finished(_MAIN_WAIT):
        if not server.serving and not lifecycle.shutdown_initiated.is_set():
            logger.error("graceful: the server loop stopped; shutting down")
            server.failed = True
            lifecycle.request_shutdown()
        started = lifecycle.shutdown_initiated.fired_at
        if started is not None and lifecycle.clock.now() - started > lifecycle.config.grace_period:
            logger.error(
                "graceful: shutdown did not finish within GRACEFUL_GRACE_PERIOD %gs; exiting",
                lifecycle.config.grace_period,
            )
            return 1
    announced.wait(_EXIT_GRACE)
    return 1 if server.failed else 0


def _display_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
