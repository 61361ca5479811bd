"""graceful.healthport.address: GRACEFUL_HEALTH_BIND's forms, its refusals, and binding."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graceful.healthport.address import ALLOWED, BACKLOG, HealthAddress, parse_address


class TestParseAddress:
    """parse_address accepts the documented forms and refuses the rest with the setting, value and fix."""

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("0.0.0.0:8081", HealthAddress("0.0.0.0", 8081)),
            ("127.0.0.1:0", HealthAddress("127.0.0.1", 0)),
            ("[::]:8081", HealthAddress("::", 8081)),
            ("[::1]:9000", HealthAddress("::1", 9000)),
            ("localhost:8081", HealthAddress("localhost", 8081)),
            ("health.example-1.svc:65535", HealthAddress("health.example-1.svc", 65535)),
            ("  10.0.0.5:81 ", HealthAddress("10.0.0.5", 81)),
            ("unix:/run/app/health.sock", HealthAddress(path="/run/app/health.sock")),
        ],
    )
    def test_accepted_forms(self, text: str, expected: HealthAddress) -> None:
        """HOST:PORT, [IPv6]:PORT, host names and unix:PATH parse to host and port, or path."""
        assert parse_address("GRACEFUL_HEALTH_BIND", text) == expected

    @pytest.mark.parametrize("text", ["", "   "])
    def test_empty_is_off(self, text: str) -> None:
        """An empty value turns the health port off."""
        assert parse_address("GRACEFUL_HEALTH_BIND", text) is None

    def test_port_alone_is_refused_with_the_reason(self) -> None:
        """``:8081`` is refused: the message says why, and what to write instead."""
        with pytest.raises(ValueError) as caught:
            parse_address("GRACEFUL_HEALTH_BIND", ":8081")
        message = str(caught.value)
        assert message.startswith("GRACEFUL_HEALTH_BIND=':8081' is not allowed: write the host")
        assert "Gunicorn reads :PORT as every interface, graceful serve as 127.0.0.1" in message
        assert "0.0.0.0:8081" in message and "127.0.0.1:8081" in message

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ("8081", ALLOWED),
            ("localhost", ALLOWED),
            ("127.0.0.1:65536", ALLOWED),
            ("127.0.0.1:-1", ALLOWED),
            ("127.0.0.1:http", ALLOWED),
            ("127.0.0.1:\u00b2", ALLOWED),
            ("127.0.0.1:\u0661\u0662", ALLOWED),
            ("::1:8081", "write an IPv6 address in brackets, as in [::1]:8081"),
            ("[not-v6]:8081", "'not-v6' is no IPv6 address"),
            ("[127.0.0.1]:8081", "'127.0.0.1' is no IPv6 address"),
            ("999.0.0.1:8081", "'999.0.0.1' is no host name or address"),
            ("bad_host:8081", "'bad_host' is no host name or address"),
            ("-lead.example:8081", "is no host name or address"),
            ("unix:", "a Unix socket path of 1-107 bytes"),
            ("unix:/" + "a" * 107, "a Unix socket path of 1-107 bytes"),
            ("unix:/run/\ud800", "a Unix socket path of 1-107 bytes"),
        ],
    )
    def test_refused_forms_name_the_setting_value_and_rule(self, text: str, says: str) -> None:
        """Each refusal names the setting and the value and says what is allowed."""
        with pytest.raises(ValueError) as caught:
            parse_address("--health-bind", text)
        message = str(caught.value)
        assert message.startswith(f"--health-bind={text!r} is not allowed: ")
        assert says in message

    @given(st.text())
    def test_any_text_is_an_address_off_or_a_value_error(self, text: str) -> None:
        """Whatever the text, the answer is an address, None (empty) or a ValueError naming the setting."""
        try:
            address = parse_address("GRACEFUL_HEALTH_BIND", text)
        except ValueError as exc:
            assert str(exc).startswith(f"GRACEFUL_HEALTH_BIND={text!r} is not allowed: ")
        else:
            assert (address is None) == (not text.strip())

    def test_not_a_string_is_refused(self) -> None:
        """A Python value other than a string (Flask's app.config) is refused."""
        with pytest.raises(ValueError, match=r"health_bind=8081 is not allowed"):
            parse_address("health_bind", 8081)

    def test_longest_unix_path_is_accepted(self) -> None:
        """A Unix socket path of exactly 107 bytes fits."""
        path = "/" + "a" * 106
        assert parse_address("GRACEFUL_HEALTH_BIND", f"unix:{path}") == HealthAddress(path=path)


class TestStr:
    """An address prints as it is written."""

    @pytest.mark.parametrize("text", ["0.0.0.0:8081", "[::1]:9000", "unix:/run/h.sock"])
    def test_round_trip(self, text: str) -> None:
        """str() gives back the form parsed."""
        assert str(parse_address("x", text)) == text


class TestConflicts:
    """conflicts_with: the health port may not share a port or a path with Gunicorn's bind."""

    @pytest.mark.parametrize(
        "bind", ["0.0.0.0:8081", "127.0.0.1:8081", "[::]:8081", "tcp://10.0.0.1:8081", ":8081", "localhost:8081"]
    )
    def test_same_tcp_port_conflicts_whatever_the_host(self, bind: str) -> None:
        """The same TCP port on any host is a conflict (binding it would fail)."""
        assert HealthAddress("0.0.0.0", 8081).conflicts_with(bind)

    @pytest.mark.parametrize("bind", ["0.0.0.0:8000", "unix:/run/app.sock", "fd://3", "[::1]:80"])
    def test_others_do_not(self, bind: str) -> None:
        """Another port, a Unix socket and fd:// are not conflicts."""
        assert not HealthAddress("0.0.0.0", 8081).conflicts_with(bind)

    def test_a_bare_host_means_gunicorns_default_port(self) -> None:
        """A bind entry without a port is Gunicorn's 8000."""
        assert HealthAddress("0.0.0.0", 8000).conflicts_with("localhost")
        assert not HealthAddress("0.0.0.0", 8081).conflicts_with("localhost")

    def test_port_zero_conflicts_with_nothing(self) -> None:
        """Port 0 picks a free port: it cannot be Gunicorn's."""
        assert not HealthAddress("127.0.0.1", 0).conflicts_with("127.0.0.1:0")

    def test_unix_paths(self) -> None:
        """A Unix path conflicts with the same path in either unix: form, not with TCP."""
        address = HealthAddress(path="/run/app.sock")
        assert address.conflicts_with("unix:/run/app.sock")
        assert address.conflicts_with("unix:///run/app.sock")
        assert not address.conflicts_with("unix:/run/other.sock")
        assert not address.conflicts_with("0.0.0.0:8000")


class TestBind:
    """bind() listens, non-blocking and not inheritable; a Unix socket file left by a dead server is replaced."""

    def test_tcp_port_zero(self) -> None:
        """Port 0 binds a free port on the host given."""
        sock = HealthAddress("127.0.0.1", 0).bind()
        try:
            host, port = sock.getsockname()
            assert host == "127.0.0.1" and port > 0
            assert not sock.getblocking() and not sock.get_inheritable()
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
            assert not sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
        finally:
            sock.close()

    def test_in_use_raises(self) -> None:
        """An address another socket listens on raises EADDRINUSE."""
        first = HealthAddress("127.0.0.1", 0).bind()
        try:
            with pytest.raises(OSError) as caught:
                HealthAddress("127.0.0.1", first.getsockname()[1]).bind()
            assert caught.value.errno == 98  # EADDRINUSE
        finally:
            first.close()

    def test_stale_unix_socket_is_replaced(self, tmp_path: Path) -> None:
        """A socket file nobody listens on (a killed server's) is unlinked and bound again."""
        path = str(tmp_path / "h.sock")
        dead = socket.socket(socket.AF_UNIX)
        dead.bind(path)
        dead.close()
        sock = HealthAddress(path=path).bind()
        try:
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(path)
        finally:
            sock.close()

    def test_live_unix_socket_is_kept(self, tmp_path: Path) -> None:
        """A socket file someone listens on is left alone: binding fails as in use."""
        path = str(tmp_path / "h.sock")
        live = socket.socket(socket.AF_UNIX)
        live.bind(path)
        live.listen(BACKLOG)
        try:
            with pytest.raises(OSError):
                HealthAddress(path=path).bind()
            assert os.path.exists(path)
        finally:
            live.close()

    def test_a_regular_file_is_not_removed(self, tmp_path: Path) -> None:
        """A path that is no socket is never unlinked; binding fails."""
        path = tmp_path / "h.sock"
        path.write_text("data")
        with pytest.raises(OSError):
            HealthAddress(path=str(path)).bind()
        assert path.read_text() == "data"
