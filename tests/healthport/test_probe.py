"""graceful.healthport.probe: where `graceful probe` asks, and what it makes of each answer (canned servers)."""

from __future__ import annotations

import ast
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from graceful.healthport import probe as probe_module
from graceful.healthport.address import HealthAddress
from graceful.healthport.probe import FALLBACK, probe, resolve
from tests.conftest import ROOT

#: Generous bound (s) for a canned exchange on a loaded machine.
SOON = 5.0


class Canned:
    """A listener on 127.0.0.1 that answers one connection with ``answer`` (None: never), then closes it.

    ``hold``: keep the connection open after the answer until the test is over.
    """

    def __init__(self, answer: bytes | None, hold: bool = False) -> None:
        self.answer = answer
        self.hold = hold
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.request = b""
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> HealthAddress:
        return HealthAddress("127.0.0.1", self.listener.getsockname()[1])

    def _serve(self) -> None:
        self.listener.settimeout(SOON)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(SOON)
            while b"\r\n\r\n" not in self.request:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                self.request += chunk
            if self.answer is not None:
                conn.sendall(self.answer)
            if self.answer is None or self.hold:
                self.done.wait(SOON)  # the connection stays open, silent, until the test is over

    def close(self) -> None:
        self.done.set()
        self._thread.join(SOON)
        self.listener.close()


@pytest.fixture
def canned() -> Iterator[list[Canned]]:
    servers: list[Canned] = []
    yield servers
    for server in servers:
        server.close()


def serve(servers: list[Canned], answer: bytes | None, hold: bool = False) -> Canned:
    server = Canned(answer, hold)
    servers.append(server)
    return server


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
LISTING = "[+]ping ok\n[-]shutdown failed: reason withheld\n[-]db failed: reason withheld\nreadyz check failed\n"
UNAVAILABLE = f"HTTP/1.1 503 Service Unavailable\r\nContent-Length: {len(LISTING)}\r\n\r\n{LISTING}".encode()


class TestResolve:
    """--address, then GRACEFUL_HEALTH_BIND, then the fallback; wildcards asked on loopback."""

    def test_address_wins(self) -> None:
        """--address is used even when GRACEFUL_HEALTH_BIND is set."""
        assert resolve("127.0.0.5:9000", {"GRACEFUL_HEALTH_BIND": "127.0.0.1:8081"}) == HealthAddress("127.0.0.5", 9000)

    def test_environment_then_fallback(self) -> None:
        """GRACEFUL_HEALTH_BIND when set; unset or empty: the app's default port, 127.0.0.1:8000."""
        assert resolve(None, {"GRACEFUL_HEALTH_BIND": "127.0.0.1:8081"}) == HealthAddress("127.0.0.1", 8081)
        assert str(resolve(None, {})) == FALLBACK == "127.0.0.1:8000"
        assert str(resolve(None, {"GRACEFUL_HEALTH_BIND": " "})) == FALLBACK

    @pytest.mark.parametrize(
        ("bind", "asked"), [("0.0.0.0:8081", "127.0.0.1:8081"), ("[::]:8081", "[::1]:8081"), ("unix:/x", "unix:/x")]
    )
    def test_wildcards_on_loopback(self, bind: str, asked: str) -> None:
        """A bind on every interface is asked on loopback; a Unix socket as it is."""
        assert str(resolve(None, {"GRACEFUL_HEALTH_BIND": bind})) == asked

    @pytest.mark.parametrize(
        ("address", "environ", "named"),
        [
            (":8081", {}, "--address=':8081' is not allowed"),
            ("", {}, "--address='' is not allowed"),
            (None, {"GRACEFUL_HEALTH_BIND": "8081"}, "GRACEFUL_HEALTH_BIND='8081' is not allowed"),
        ],
    )
    def test_bad_values_name_themselves(self, address: str | None, environ: dict[str, str], named: str) -> None:
        """A bad --address or GRACEFUL_HEALTH_BIND is a ValueError naming it and its value."""
        with pytest.raises(ValueError, match=named):
            resolve(address, environ)


class TestProbe:
    """Each answer (or its absence) gives a status and one line."""

    def test_200_is_success(self, canned: list[Canned]) -> None:
        """A 200 exits 0; the request is a GET of the endpoint that asks the server to close."""
        server = serve(canned, OK)
        outcome = probe("livez", server.address, SOON)
        assert (outcome.status, outcome.exit_status) == (200, 0)
        assert outcome.line.startswith(f"livez: 200 ok from {server.address} in ")
        assert server.request.startswith(b"GET /livez HTTP/1.1\r\n") and b"Connection: close\r\n" in server.request

    def test_503_names_the_failing_checks(self, canned: list[Canned]) -> None:
        """A 503 exits 1, its line naming the checks the listing marks failed."""
        outcome = probe("readyz", serve(canned, UNAVAILABLE).address, SOON)
        assert (outcome.status, outcome.exit_status) == (503, 1)
        assert "\n" not in outcome.line and outcome.line.endswith("(failing: shutdown, db)")

    def test_an_answer_kept_open_is_read_by_its_length(self, canned: list[Canned]) -> None:
        """A server that keeps the connection open after a whole answer is not waited for."""
        server = serve(canned, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", hold=True)
        assert probe("livez", server.address, SOON).exit_status == 0

    def test_refused(self) -> None:
        """Nobody listening: exit 1, 'connection refused'."""
        holder = socket.create_server(("127.0.0.1", 0))
        address = HealthAddress("127.0.0.1", holder.getsockname()[1])
        holder.close()
        outcome = probe("livez", address, SOON)
        assert (outcome.status, outcome.exit_status) == (None, 1)
        assert outcome.line == f"livez: connection refused by {address}"

    def test_deadline_covers_the_whole_exchange(self, canned: list[Canned]) -> None:
        """A server that accepts but never answers: 'no answer' once the deadline has passed (fake clock)."""
        server = serve(canned, None)
        times = iter([0.0, 0.1, 0.2, 5.0])  # start, connect, send, then past the deadline before the first read
        outcome = probe("readyz", server.address, 1.0, clock=lambda: next(times, 5.0))
        assert (outcome.status, outcome.exit_status) == (None, 1)
        assert outcome.line == f"readyz: no answer from {server.address} within 1s"

    def test_not_http(self, canned: list[Canned]) -> None:
        """An answer that is not HTTP: exit 1."""
        outcome = probe("livez", serve(canned, b"SSH-2.0-OpenSSH\r\n").address, SOON)
        assert outcome.exit_status == 1 and outcome.line.startswith("livez: not an HTTP answer from ")

    def test_unix_socket(self, tmp_path: Path) -> None:
        """A unix: address is asked over its socket file."""
        path = str(tmp_path / "health.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen()

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(OK)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        try:
            assert probe("healthz", HealthAddress(path=path), SOON).exit_status == 0
        finally:
            thread.join(SOON)
            listener.close()


def test_the_probe_imports_only_the_standard_library() -> None:
    """graceful.healthport.probe and the address module it uses import nothing outside the standard library."""
    for module in (probe_module.__file__, ROOT / "graceful" / "healthport" / "address.py"):
        tree = ast.parse(Path(str(module)).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        outside = {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names | {"graceful"}}
        graceful_modules = {name for name in imported if name.startswith("graceful")}
        assert outside == set() and graceful_modules <= {"graceful.healthport.address"}
