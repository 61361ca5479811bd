"""The health port while other pods flood it: a kubelet's probes through bursts, slowloris, idle connections, /metrics.

    python bench/health_flood.py [--seconds 15] [--connections 1000] [--phases quiet burst ...]

One graceful Gunicorn (``gthread -w 2 --threads 4``, tests/live/load_app.py)
with ``GRACEFUL_HEALTH_BIND=127.0.0.1:PORT``. A kubelet-like prober on
127.0.0.1 opens a fresh connection every 250 ms, alternating ``/livez`` and
``/readyz``, with a 1 s timeout (each probe on its own thread, so a slow one
does not delay the next). Attackers run in their own processes (so they do
not take the prober's GIL), from 127.0.0.2-5, one selector loop each, in
phases of ``--seconds``:

==========  ====================================================================
quiet       nothing: the baseline
burst       ``--connections`` opened at once, held silent, again every 2 s
slowloris   ``--connections`` held open, each sending a byte of an endless
            header every 0.5 s; reopened as soon as one is closed
idle        ``--connections`` held open, silent; reopened as soon as closed
metrics     50 connections in a loop: ``GET /metrics`` and ``/readyz?verbose``
malformed   50 connections in a loop: TLS, binary, a 64 KB line, bad methods,
            half a request then a close, a request with no end
neighbour   50 connections in a loop from 127.0.0.1, the kubelet's own address
            (a hostNetwork pod): ``GET /readyz`` as fast as they are answered
all         every attacker above at once
shutdown    the same, and SIGTERM to the master 2 s in
            (``GRACEFUL_SHUTDOWN_DELAY`` longer than the phase): ``/readyz``
            must turn 503 and ``/livez`` stay 200
==========  ====================================================================

A probe fails on a timeout, a connection error, or a status other than 200
(``/readyz`` after SIGTERM: other than 503; within 0.2 s of it, either).
Per phase it prints the probes, failures, p50/p99/max latency (ms, connect
to the whole body), the master's file descriptors and RSS (largest sample,
every 0.5 s), its CPU (% of one core over the phase: the port's thread,
mostly), how long its threads waited for a CPU while runnable (% of the
phase, from ``/proc/PID/task/*/schedstat``: a busy machine, not the port's
own work), the connections the attackers opened, and the machine-wide
listen-queue overflows (``TcpExtListenOverflows``: other programs count
too). The attackers (other pods) are pinned to the last CPU, so they take
at most one; the server and the prober may use any. Bounded: every phase
ends after ``--seconds``, each attacker opens at most 200 x
``--connections``, everything is killed at the end. Linux only
(``/proc``). Target (issue 22): 0 failures and p99 <= 50 ms in every phase.
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from health_probes import Probes, probe

from tests.conftest import Processes
from tests.e2e_harness import Gunicorn, clean_env, free_port, markdown_table

PERIOD = 0.25
TIMEOUT = 1.0
#: Where the attackers come from: other pods, as far as the port can tell.
SOURCES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
PHASES = ("quiet", "burst", "slowloris", "idle", "metrics", "malformed", "neighbour", "all", "shutdown")
ATTACKS = PHASES[1:-2]
#: What each attacker kind keeps open at once: its share of --connections (None), or a fixed number.
LOOPING = 50
BURST_EVERY = 2.0
TRICKLE_EVERY = 0.5
#: Seconds into the shutdown phase SIGTERM is sent.
TERM_AFTER = 2.0
#: Each attacker opens at most this many times --connections over a phase.
OPEN_BOUND = 200
MALFORMED = (
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(64)),
    bytes(range(256)),
    b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\n\r\n",
    b"BREW /livez HTTP/1.1\r\n\r\n",
    b"GET /livez HTTP/9.9\r\n\r\n",
    b"GET /livez\r\n\r\n",
    b"get /livez HTTP/1.1\r\n\r\n",
    b"GET /livez HTTP/1.1\r\nHost: x\r\n",  # no end: held until the deadline
    b"GET /readyz HTTP/1.1\r\nX: " + b"y" * 20000 + b"\r\n\r\n",
    b"POST /readyz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    b"GET /%ff%00/../readyz?verbose&exclude=%ZZ HTTP/1.1\r\n\r\n",
)
LOOPED = {
    "metrics": (b"GET /metrics HTTP/1.1\r\n\r\n", b"GET /readyz?verbose HTTP/1.1\r\n\r\n"),
    "malformed": MALFORMED,
    "neighbour": (b"GET /readyz HTTP/1.1\r\n\r\n",),
}


# -- the attacker (its own process: python bench/health_flood.py --attack KIND ...) ------------------


class Attacker:
    """One kind of attack on 127.0.0.1:``port`` from SOURCES, in one selector loop, for ``seconds``."""

    def __init__(self, kind: str, port: int, seconds: float, connections: int) -> None:
        self.kind = kind
        self.port = port
        self.deadline = time.monotonic() + seconds
        self.size = LOOPING if kind in LOOPED else connections
        self.sources = ("127.0.0.1",) if kind == "neighbour" else SOURCES
        self.bound = OPEN_BOUND * connections
        self.selector = selectors.DefaultSelector()
        self.opened = 0
        self.next_burst = 0.0
        self.next_trickle = 0.0
        #: Slowloris connections that have sent the start of their request (a byte at a time from then on).
        self.begun: set[socket.socket] = set()

    def run(self) -> int:
        """Attack until the deadline; return how many connections were opened."""
        while time.monotonic() < self.deadline:
            now = time.monotonic()
            if self.kind == "burst":
                if now >= self.next_burst:
                    self._close_all()
                    self._fill()
                    self.next_burst = now + BURST_EVERY
            else:
                self._fill()
            if self.kind == "slowloris" and now >= self.next_trickle:
                self._trickle()
                self.next_trickle = now + TRICKLE_EVERY
            for key, _ in self.selector.select(0.05):
                self._ready(key.fileobj)  # type: ignore[arg-type]
        self._close_all()
        return self.opened

    def _fill(self) -> None:
        while len(self.selector.get_map()) < self.size and self.opened < self.bound:
            sock = socket.socket()
            sock.setblocking(False)
            # The port is picked at connect(), per destination: bind() alone would spend the source's ports.
            sock.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24), 1)
            try:
                sock.bind((self.sources[self.opened % len(self.sources)], 0))
                sock.connect_ex(("127.0.0.1", self.port))
            except OSError:
                sock.close()
                return  # out of ports or descriptors: try again next round
            self.opened += 1
            payload = self._payload()
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if payload else 0)
            self.selector.register(sock, events, payload)

    def _payload(self) -> bytes:
        looped = LOOPED.get(self.kind)
        return looped[self.opened % len(looped)] if looped else b""

    def _ready(self, sock: socket.socket) -> None:
        payload: bytes = self.selector.get_key(sock).data
        if payload:
            try:
                sent = sock.send(payload)
            except BlockingIOError:
                return
            except OSError:
                self._close(sock)
                return
            self.selector.modify(sock, selectors.EVENT_READ, payload[sent:])
            return
        try:
            if not sock.recv(65536):
                self._close(sock)
        except BlockingIOError:
            pass
        except OSError:
            self._close(sock)

    def _trickle(self) -> None:
        for key in list(self.selector.get_map().values()):
            sock: socket.socket = key.fileobj  # type: ignore[assignment]
            try:
                sock.send(b"a" if sock in self.begun else b"GET /livez HTTP/1.1\r\nX-Slow: ")
                self.begun.add(sock)
            except BlockingIOError:
                pass
            except OSError:
                self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        self.begun.discard(sock)
        self.selector.unregister(sock)
        sock.close()

    def _close_all(self) -> None:
        for key in list(self.selector.get_map().values()):
            self._close(key.fileobj)  # type: ignore[arg-type]


# -- the prober and the master's figures (this process) ----------------------------------------------


@dataclass
class Phase:
    """What one phase measured: the probes (bench/health_probes.py's), the master's figures, the attackers'."""

    probes: Probes
    fds: int = 0
    rss_kb: int = 0
    cpu_percent: float = 0.0
    wait_percent: float = 0.0
    opened: int = 0
    overflows: int = 0

    def row(self) -> list[str]:
        figures = [self.fds, f"{self.rss_kb / 1024:.1f}", f"{self.cpu_percent:.0f}", f"{self.wait_percent:.0f}"]
        return [*self.probes.row(), *map(str, figures), str(self.opened), str(self.overflows)]


def prober(port: int, into: Phase, seconds: float, term_at: list[float]) -> None:
    """A probe every PERIOD s for ``seconds``, alternating /livez and /readyz; /readyz expects 503 after SIGTERM."""
    threads = []
    start = time.monotonic()
    for index in range(int(seconds / PERIOD)):
        delay = start + index * PERIOD - time.monotonic()
        time.sleep(max(0.0, delay))
        path = ("/livez", "/readyz")[index % 2]
        expect = {200}
        if path == "/readyz" and term_at:
            since = time.monotonic() - term_at[0]
            expect = {503} if since > 0.2 else {200, 503}
        thread = threading.Thread(target=probe, args=(port, path, into.probes, expect), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(TIMEOUT + 5)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (every thread), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_queue_seconds(pid: int) -> float:
    """How long the threads of ``pid`` waited on a run queue, runnable but not running (schedstat, ns)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as schedstat:
                total += int(schedstat.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile, or a kernel without schedstats
    return total / 1e9


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def listen_overflows() -> int:
    """The machine's TcpExtListenOverflows (every program's listeners)."""
    with open("/proc/net/netstat") as netstat:
        lines = netstat.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split(), strict=True)).get("ListenOverflows", 0))
    return 0


def run_phase(
    name: str,
    server: Gunicorn,
    health: int,
    processes: Processes,
    args: argparse.Namespace,
    attack_cpus: set[int] | None,
) -> Phase:
    """One phase: its attackers, the prober, the master's figures sampled every 0.5 s."""
    phase = Phase(Probes(name))
    seconds, connections = args.seconds, args.connections
    kinds = {"quiet": [], "all": list(ATTACKS), "shutdown": list(ATTACKS)}.get(name, [name])
    attackers = [
        processes.start(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--attack",
                kind,
                "--port",
                str(health),
                "--seconds",
                str(seconds),
                "--connections",
                str(connections),
            ],
            env=clean_env(),
        )
        for kind in kinds
    ]
    for attacker in attackers:
        if attack_cpus:
            os.sched_setaffinity(attacker.pid, attack_cpus)
    term_at: list[float] = []
    overflows = listen_overflows()
    cpu, waited = cpu_seconds(server.pid), run_queue_seconds(server.pid)
    began = time.monotonic()
    thread = threading.Thread(target=prober, args=(health, phase, seconds, term_at), daemon=True)
    thread.start()
    while thread.is_alive() and time.monotonic() - began < seconds + TIMEOUT + 10:
        if name == "shutdown" and not term_at and time.monotonic() - began >= TERM_AFTER:
            term_at.append(server.terminate())
        phase.fds = max(phase.fds, len(os.listdir(f"/proc/{server.pid}/fd")))
        phase.rss_kb = max(phase.rss_kb, rss_kb(server.pid))
        thread.join(0.5)
    elapsed = time.monotonic() - began
    phase.cpu_percent = (cpu_seconds(server.pid) - cpu) / elapsed * 100
    phase.wait_percent = (run_queue_seconds(server.pid) - waited) / elapsed * 100
    phase.overflows = listen_overflows() - overflows
    for attacker in attackers:
        output, _ = attacker.communicate(timeout=30)
        phase.opened += int(output.split()[-1]) if output.strip() else 0
    return phase


def main() -> None:
    """Run the phases asked for against one Gunicorn; print one table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    parser.add_argument("--connections", type=int, default=1000, help="connections of burst, slowloris and idle")
    parser.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    parser.add_argument("--attack", choices=ATTACKS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        print(Attacker(args.attack, args.port, args.seconds, args.connections).run())
        return
    processes = Processes()
    rows = []
    before = os.getloadavg()
    cpus = sorted(os.sched_getaffinity(0))
    attack_cpus = {cpus[-1]} if len(cpus) > 1 else None
    try:
        health = free_port()
        env = {
            "GRACEFUL_HEALTH_BIND": f"127.0.0.1:{health}",
            "GRACEFUL_SHUTDOWN_DELAY": str(args.seconds + 10),
            "GRACEFUL_GRACE_PERIOD": str(args.seconds + 40),
        }
        server = Gunicorn(processes, free_port(), "gthread", graceful=True, env=env, args=("--threads", "4"))
        server.start().wait_ready()
        time.sleep(2.0)  # the workers' first snapshots
        for name in [p for p in PHASES if p in args.phases]:  # the shutdown last: it ends the server
            phase = run_phase(name, server, health, processes, args, attack_cpus)
            rows.append(phase.row())
            print(f"{name}: done", flush=True)
            time.sleep(2.0)  # let the deadlines close what the attackers left
    finally:
        processes.cleanup()
    after = os.getloadavg()
    where = f"attackers on CPU {sorted(attack_cpus)}" if attack_cpus else "attackers unpinned"
    print(f"load average before {before[0]:.2f}, after {after[0]:.2f} ({os.cpu_count()} CPUs; {where})")
    header = ["phase", "probes", "p50 ms", "p99 ms", "max ms", "failures", "fds", "RSS MB", "CPU %", "wait %"]
    header += ["opened", "ovfl"]
    print("\n".join(markdown_table(header, rows)))


if __name__ == "__main__":
    main()
