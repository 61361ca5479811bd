"""The gevent worker's servers (graceful.gunicorn.adapter.gevent), recorded and quieted, with a fake StreamServer.

:func:`record_servers` replaces ``gunicorn.workers.ggevent.StreamServer``; here
that module is a stand-in whose ``StreamServer`` plays gevent's: accepting
switched on and off, and ``do_read`` raising what ``accept()`` raised. No hub,
no socket, no patch of the interpreter.
"""

from __future__ import annotations

import errno
import logging
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from graceful.gunicorn.adapter.gevent import record_servers


class StreamServer:
    """gevent's ``StreamServer`` as the recorder subclasses it."""

    def __init__(self, listener: Any, handle: Any = None, spawn: Any = None) -> None:
        self.address = listener
        self.accepting = False
        #: What the next ``accept()`` raises (None: it accepts a connection).
        self.accept_error: OSError | None = None

    def start_accepting(self) -> None:
        self.accepting = True

    def stop_accepting(self) -> None:
        self.accepting = False

    def do_read(self) -> Any:
        if self.accept_error is not None:
            raise self.accept_error
        return ("client socket", ("127.0.0.1", 50000))


@pytest.fixture
def ggevent(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Gunicorn's gevent worker module as record_servers finds it (restored after the test)."""
    module = SimpleNamespace(StreamServer=StreamServer)
    monkeypatch.setitem(sys.modules, "gunicorn.workers.ggevent", module)
    return module


class TestRecordServers:
    def test_the_servers_the_worker_builds_are_recorded(self, ggevent: SimpleNamespace) -> None:
        """After record_servers, each StreamServer Gunicorn's run() builds is recorded, in order, and still gevent's."""
        recorded = record_servers()
        assert recorded is not None
        first = ggevent.StreamServer("127.0.0.1:8000")
        second = ggevent.StreamServer("127.0.0.1:8001")
        assert recorded.servers == [first, second]
        assert isinstance(first, StreamServer)
        assert first.do_read() == ("client socket", ("127.0.0.1", 50000))

    def test_stop_accepting_holds_even_when_gevents_pool_frees_a_slot(self, ggevent: SimpleNamespace) -> None:
        """Stopped for good: gevent's start_accepting (its pool freed a slot) no longer re-arms the server."""
        recorded = record_servers()
        assert recorded is not None
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.start_accepting()
        assert server.accepting
        recorded.stop_accepting()
        assert not server.accepting
        server.start_accepting()
        assert not server.accepting
        recorded.stop_accepting()  # idempotent
        assert not server.accepting

    def test_a_server_not_stopped_re_arms_as_gevent_does(self, ggevent: SimpleNamespace) -> None:
        """Until graceful stops it, a server's start_accepting is gevent's own."""
        record_servers()
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.stop_accepting()
        server.start_accepting()
        assert server.accepting

    def test_a_listener_shut_down_stops_accepting_with_one_info_line(
        self, ggevent: SimpleNamespace, caplog: pytest.LogCaptureFixture
    ) -> None:
        """accept()'s EINVAL (the master shut the listener down): one INFO line, no traceback, no more accepting."""
        record_servers()
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.start_accepting()
        server.accept_error = OSError(errno.EINVAL, "Invalid argument")
        with caplog.at_level(logging.INFO, logger="graceful"):
            assert server.do_read() is None
            assert server.do_read() is None
        assert not server.accepting
        [line] = [record.getMessage() for record in caplog.records]
        assert "listener 127.0.0.1:8000 shut down; stopped accepting" in line

    def test_other_accept_errors_are_gevents_to_handle(self, ggevent: SimpleNamespace) -> None:
        """Any other accept() error goes to gevent as before (it logs and goes on), accepting untouched."""
        record_servers()
        server = ggevent.StreamServer("127.0.0.1:8000")
        server.start_accepting()
        server.accept_error = OSError(errno.EMFILE, "Too many open files")
        with pytest.raises(OSError, match="Too many open files"):
            server.do_read()
        assert server.accepting

    @pytest.mark.parametrize("module", [None, SimpleNamespace(), SimpleNamespace(StreamServer=object)])
    def test_a_gevent_worker_without_a_stream_server_to_record_is_left_alone(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, module: Any
    ) -> None:
        """No StreamServer class with do_read in Gunicorn's gevent module: one warning, None, nothing replaced."""
        monkeypatch.setitem(sys.modules, "gunicorn.workers.ggevent", module)
        with caplog.at_level(logging.WARNING, logger="graceful"):
            assert record_servers() is None
        assert sys.modules["gunicorn.workers.ggevent"] is module
        assert module is None or getattr(module, "StreamServer", None) in (None, object)
        [line] = [record.getMessage() for record in caplog.records]
        assert "gevent worker has no StreamServer to record" in line
