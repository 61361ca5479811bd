"""The health port of a real Gunicorn (gthread 2x4) flooded by other addresses while a kubelet probes it, then SIGTERM.

Attackers on 127.0.0.2-5 hold a few hundred connections, silent or sending a
byte at a time (reopened when the port closes them), and loop ``/metrics``,
``/readyz?verbose`` and malformed requests; a neighbour on the kubelet's own
address (a hostNetwork pod) loops ``/readyz`` as fast as it is answered; the
kubelet's probes come from 127.0.0.1 on fresh connections with a 1 s
timeout. Bounded in count and
time; the latencies are bench/health_flood.py's to measure.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.conftest import Processes
from tests.e2e_harness import Gunicorn, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn]

SOURCES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
#: Connections held open by the attackers, half silent, half trickling.
HELD = 400
#: The most connections the holders open in all (they reopen what the port closes).
OPEN_BOUND = 5000
#: The most requests the loopers send in all.
LOOP_BOUND = 2000
LOOPED = (
    b"GET /metrics HTTP/1.1\r\n\r\n",
    b"GET /readyz?verbose HTTP/1.1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
    b"BREW /livez HTTP/1.1\r\n\r\n",
    b"GET /livez HTTP/1.1\r\nHost: x\r\n",  # never ends: closed at the port's deadline
)


def probe(port: int, path: str) -> str:
    """A kubelet's probe: a fresh connection from 127.0.0.1, 1 s timeout; the status, or the error's class name."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return str(response.status)
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


class Flood:
    """The attackers: one thread holding connections, one looping requests; both stop at ``stop`` or the bounds."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.opened = self.looped = self.neighbour = 0
        self._threads = [
            threading.Thread(target=self._hold, daemon=True),
            threading.Thread(target=self._loop),
            threading.Thread(target=self._neighbour),
        ]

    def _connect(self, index: int) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=(SOURCES[index % 4], 0))

    def _hold(self) -> None:
        held: list[socket.socket | None] = [None] * HELD
        try:
            while not self.stop.is_set() and self.opened < OPEN_BOUND:
                for index, sock in enumerate(held):
                    if sock is None:
                        sock = held[index] = self._connect(index)
                        self.opened += 1
                        if index % 2:
                            sock.sendall(b"GET /livez HTTP/1.1\r\nX-Slow: ")
                    elif index % 2:
                        try:
                            sock.send(b"a")
                        except OSError:  # closed at the port's deadline: open another
                            sock.close()
                            held[index] = None
                    else:
                        sock.setblocking(False)
                        with contextlib.suppress(BlockingIOError):
                            if sock.recv(1) == b"":  # closed at the port's deadline: open another
                                sock.close()
                                held[index] = None
                        if held[index] is not None:
                            sock.setblocking(True)
                self.stop.wait(0.2)
        finally:
            for sock in held:
                if sock is not None:
                    sock.close()

    def _loop(self) -> None:
        while not self.stop.is_set() and self.looped < LOOP_BOUND:
            with self._connect(self.looped) as sock:
                sock.sendall(LOOPED[self.looped % len(LOOPED)])
                with contextlib.suppress(OSError):
                    while sock.recv(65536):
                        pass
            self.looped += 1

    def _neighbour(self) -> None:
        """Probes from the kubelet's address, back to back: the port never budgets probes, so it spends nothing."""
        while not self.stop.is_set() and self.neighbour < LOOP_BOUND:
            probe(self.port, "/readyz")
            self.neighbour += 1

    @contextlib.contextmanager
    def running(self) -> Iterator[Flood]:
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            for thread in self._threads:
                thread.join(15)


def test_probes_through_a_flood_and_a_shutdown(processes: Processes) -> None:
    """Through a flood from four other addresses, 60 of 60 probes are answered within 1 s: 200 while serving;
    after SIGTERM /livez 200 and /readyz 503; the master logs no traceback."""
    health = free_port()
    env = {
        "GRACEFUL_HEALTH_BIND": f"127.0.0.1:{health}",
        "GRACEFUL_SHUTDOWN_DELAY": "20",
        "GRACEFUL_GRACE_PERIOD": "60",
    }
    server = Gunicorn(processes, free_port(), "gthread", graceful=True, env=env, args=("--threads", "4")).start()
    server.wait_ready()
    with Flood(health).running() as flood:
        # Until the flood holds its connections, then 40 probes a kubelet's pace apart (bounded: 30 s).
        deadline = time.monotonic() + 30
        while flood.opened < HELD and time.monotonic() < deadline:
            flood.stop.wait(0.05)
        serving = []
        for index in range(40):
            serving.append(probe(health, ("/livez", "/readyz")[index % 2]))
            flood.stop.wait(0.1)
        server.terminate()
        assert probe(health, "/livez") == "200"  # the port still answers; /readyz turns 503 within moments
        deadline = time.monotonic() + 10
        while probe(health, "/readyz") != "503" and time.monotonic() < deadline:
            flood.stop.wait(0.05)
        stopping = []
        for index in range(20):
            stopping.append((("/livez", "/readyz")[index % 2], probe(health, ("/livez", "/readyz")[index % 2])))
            flood.stop.wait(0.1)
    assert flood.opened >= HELD and flood.looped >= 1 and flood.neighbour >= 40
    assert serving == ["200"] * 40
    assert stopping == [("/livez", "200"), ("/readyz", "503")] * 10
    assert server.problems() == []
