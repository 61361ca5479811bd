"""One connection, one request: the HTTP/1.1 layer of the single-process server.

:class:`Connection` is a client connection (socket, buffered streams, what
the server knows of it); :class:`RequestHandler` serves exactly one request
on it with Werkzeug's request parsing and WSGI environ, giving the app a
``wsgi.input`` that ends with the body (:class:`_Body`) and writing the
response itself (:class:`_Response`): chunked when its length is unknown,
``Connection: close`` once ShutdownInitiated has fired. The server
(:class:`graceful.serve.server.GracefulServer`) decides what the connection does next.

Threads: everything here runs on a ``graceful-worker-N`` thread, except
:meth:`Connection.close`, which runs on whichever thread closes the
connection (a worker, ``graceful-serve`` or the main thread at exit).
"""

from __future__ import annotations

import io
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from werkzeug.exceptions import InternalServerError
from werkzeug.serving import WSGIRequestHandler

from graceful.serve.loading import ADMITTED_KEY

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from _typeshed.wsgi import InputStream, WSGIApplication, WSGIEnvironment
    from werkzeug.serving import BaseWSGIServer

    from graceful.core.lifecycle import Lifecycle

__all__ = ["IO_TIMEOUT", "Connection", "ConnectionOwner", "RequestHandler"]

logger = logging.getLogger(__name__)
_access_log = logging.getLogger("graceful.access")

# Seconds a socket operation may block while a request is read or written, and
# a new connection may stay silent before it is closed.
IO_TIMEOUT = 30.0
# An unread request body up to this size is read and dropped to keep the connection; larger closes it.
_DISCARD_LIMIT = 64 * 1024
_DISCARD_TIMEOUT = 1.0
# Bound (s) on reading and dropping what a client still sends after its connection's last response.
_LINGER = 2.0


class Connection:
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
        self.deadline = time.monotonic() + IO_TIMEOUT
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

    def send(self, body: Iterable[bytes]) -> None:
        """Write every piece of ``body``, then end the response (:meth:`finish`)."""
        for data in body:
            self.write(data)
        self.finish()

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


class ConnectionOwner(Protocol):
    """What a connection's request handler needs of its server (``GracefulServer`` has it).

    Read on the request's ``graceful-worker-N`` thread; ``settle`` is safe from any thread.
    """

    app: WSGIApplication
    lifecycle: Lifecycle
    #: False: no access log lines.
    access_log: bool
    #: Seconds an idle connection stays open; 0: close after every response.
    keep_alive: float
    #: True once the server is closing: every connection closes after its response.
    closing: bool

    def settle(self, conn: Connection) -> None:
        """The request on ``conn`` was admitted by the middleware, or ended: the stop need not wait for it."""


class RequestHandler(WSGIRequestHandler):
    """Serves exactly one request of a connection; the server decides what the connection does next.

    Runs on a ``graceful-worker-N`` thread. Reuses Werkzeug's request parsing
    and WSGI environ; writes the response itself (:class:`_Response`), so that
    HTTP/1.1 connections can be kept alive, and so that once the lifecycle's
    ShutdownInitiated has fired every response says ``Connection: close`` and
    the connection is closed after it.
    """

    protocol_version = "HTTP/1.1"

    def __init__(self, conn: Connection, server: BaseWSGIServer, owner: ConnectionOwner) -> None:
        # ``server`` is what Werkzeug's parsing reads; ``owner`` (the same GracefulServer) is
        # what this module reads: the seam that keeps it from importing the server.
        self.conn = conn
        self.owner = owner
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
        if self.owner.access_log:
            _access_log.info('%s "%s" %s %s', self.address_string(), self.requestline, code, size)

    def should_close(self) -> bool:
        """True when this response must end the connection (decided as its headers go out)."""
        body = self._body
        return (
            self.close_connection
            or self.request_version != "HTTP/1.1"
            or self.owner.keep_alive <= 0
            or self.owner.lifecycle.shutdown_initiated.is_set()
            or self.owner.closing
            or body is None
            or body.remaining > _DISCARD_LIMIT
        )

    def run_wsgi(self) -> None:
        """Run the app for the parsed request and write its response (every ``do_<METHOD>``)."""
        environ = self.make_environ()
        if not self._set_body(environ):
            return
        environ[ADMITTED_KEY] = self._admitted
        response = _Response(self, environ)
        try:
            result = self.owner.app(environ, response.start_response)
            try:
                response.send(result)
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
        self.owner.settle(self.conn)

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
            self.connection.settimeout(IO_TIMEOUT)
        except (OSError, ValueError):  # timed out, reset, or a stream the app closed
            left = 0
        if body is None or body.remaining or left <= 0:
            self.close_connection = True
            self.conn.linger = left <= 0 or (body is not None and body.remaining > 0)

    def _send_internal_error(self, environ: WSGIEnvironment) -> None:
        """Answer 500 after the app raised before any byte of its response was sent."""
        response = _Response(self, environ)
        try:
            response.send(InternalServerError()(environ, response.start_response))
        except OSError:
            self.close_connection = True
