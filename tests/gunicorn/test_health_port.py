"""The health port under real Gunicorn: saturation, the readiness timeline, HUP, recycling, USR2, reuse_port, bad input.

Every Gunicorn here serves tests/live/health_app.py with GRACEFUL_HEALTH_BIND
on a free port. Probes are GETs on fresh connections with a 1 s timeout, as
a kubelet's with the default ``timeoutSeconds`` (probes are never budgeted; only
``/metrics`` is, per address), and probers that run at the same time come from
addresses of their own (127.0.0.2, 127.0.0.3). Timings are bounded and
generous; the figures are bench/health_probes.py's and bench/health_flood.py's.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import ROOT, Processes
from tests.e2e_harness import GRACEFUL_CONF, LIVE, clean_env, free_port
from tests.gunicorn.test_gunicorn import GUNICORN, Server, _gone, _has_control_socket, _stop_foreign_master

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn]

SHAPES = {
    "sync": ("-k", "sync", "-w", "2"),
    "gthread": ("-k", "gthread", "-w", "1", "--threads", "4"),
    "gevent": ("-k", "gevent", "-w", "1", "--worker-connections", "4"),
}
#: Requests each shape serves at once: its workers, threads or greenlets.
CAPACITY = {"sync": 2, "gthread": 4, "gevent": 4}
#: An answer that is an HTTP status (not a refusal, a reset or a timeout).
ANSWERED = re.compile(r"^\d{3}\b")


def gunicornc(socket_path: Path, *command: str) -> None:
    """One command on Gunicorn 25.1+'s control socket, as an operator runs it (raises when it fails)."""
    argv = [str(Path(GUNICORN).parent / "gunicornc"), "-s", str(socket_path), "-c", " ".join(command)]
    subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)


class WorkerDidNotBoot(AssertionError):
    """The Gunicorn master exited before its health port said it was ready."""


def probe(port: int, path: str, source: str = "127.0.0.1", timeout: float = 1.0) -> str:
    """``"<status> <failing lines>"`` of one GET on a fresh connection, or the error's class name."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        failing = [line.split(" ", 1)[0] for line in response.read().decode().splitlines() if line.startswith("[-]")]
        return " ".join([str(response.status), *failing])
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


class Instance:
    """A graceful Gunicorn with GRACEFUL_HEALTH_BIND (a free port), serving tests/live/health_app.py."""

    def __init__(
        self,
        processes: Processes,
        shape: str,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        control_socket: Path | None = None,
    ) -> None:
        self.port, self.health = free_port(), free_port()
        full_env = clean_env({"GRACEFUL_HEALTH_BIND": f"127.0.0.1:{self.health}", "GRACEFUL_SHUTDOWN_DELAY": "1"})
        full_env.update(env or {})
        argv = [GUNICORN, "-c", str(GRACEFUL_CONF), "--pythonpath", str(LIVE), "-b", f"127.0.0.1:{self.port}"]
        if control_socket is not None:
            argv += ["--control-socket", str(control_socket)]
        elif _has_control_socket():  # tests must not share ~/.gunicorn/gunicorn.ctl
            argv.append("--no-control-socket")
        argv += [*SHAPES[shape], *args, "health_app:app"]
        self.server = Server(processes.start(argv, env=full_env, cwd=ROOT), self.port)
        self.proc = self.server.proc

    def wait(self, path: str, expected: str, timeout: float = 30.0, source: str = "127.0.0.1") -> None:
        """Probe ``path`` every 0.1 s until its answer starts with ``expected`` (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if probe(self.health, path, source).startswith(expected):
                return
            if self.proc.poll() is not None:
                raise WorkerDidNotBoot("Gunicorn exited:\n" + "\n".join(self.server.lines[-30:]))
            time.sleep(0.1)
        raise AssertionError(f"{path} never answered {expected!r}:\n" + "\n".join(self.server.lines[-30:]))

    def master_lines(self, pattern: str) -> list[str]:
        """The master's output lines matching ``pattern``."""
        return self.server.matching(rf"\[{self.proc.pid}\].*{pattern}")


def busy(port: int, clients: int, seconds: float, stop: threading.Event) -> list[threading.Thread]:
    """``clients`` threads looping 3 s requests on the app's port, for at most ``seconds``."""

    def client() -> None:
        deadline = time.monotonic() + seconds
        while not stop.is_set() and time.monotonic() < deadline:
            probe(port, "/slow?ms=3000&bytes=64", timeout=10)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    return threads


@contextlib.contextmanager
def traffic(port: int, period: float = 0.01, seconds: float = 60.0) -> Iterator[list[str]]:
    """Fast requests on the app's port on a thread while the block runs (bounded); yields their outcomes."""
    outcomes: list[str] = []
    stop = threading.Event()

    def run() -> None:
        deadline = time.monotonic() + seconds
        while not stop.wait(period) and time.monotonic() < deadline and len(outcomes) < 20_000:
            outcomes.append(probe(port, "/fast", source="127.0.0.3", timeout=5))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield outcomes
    finally:
        stop.set()
        thread.join(10)


class TestSaturation:
    @pytest.mark.parametrize("shape", SHAPES)
    def test_probes_answer_while_every_worker_is_busy(self, processes: Processes, shape: str) -> None:
        """Every worker, thread or greenlet busy with 3 s requests: the app's port times out, the health port
        answers 40 of 40 probes within 1 s."""
        server = Instance(processes, shape)
        server.wait("/readyz", "200")
        stop = threading.Event()
        threads = busy(server.port, 2 * CAPACITY[shape], 20, stop)
        try:
            time.sleep(1.0)  # every worker busy, as many clients queued behind them
            assert probe(server.port, "/livez") == "TimeoutError"  # the app's port is saturated indeed
            answers = []
            for index in range(40):
                answers.append(probe(server.health, ("/livez", "/readyz")[index % 2]))
                time.sleep(0.05)  # bench/health_probes.py probes at a kubelet's pace; here 2 s is enough
            assert answers == ["200"] * 40
        finally:
            stop.set()
            for thread in threads:
                thread.join(15)


class TestTimeline:
    def test_readiness_from_boot_to_exit(self, processes: Processes) -> None:
        """/readyz: workers booting, post-start hook pending, ready, [-]shutdown from SIGTERM until exit 0;
        /livez 200 all along; the failing /readyz logged once per phase, not once per probe."""
        server = Instance(processes, "sync", env={"HEALTH_APP_IMPORT_S": "1.5", "HEALTH_APP_WARM_S": "1.5"})
        readies: list[str] = []
        lives: list[str] = []
        termed_at = None
        deadline = time.monotonic() + 60
        while server.proc.poll() is None and time.monotonic() < deadline:
            readies.append(probe(server.health, "/readyz?verbose"))
            lives.append(probe(server.health, "/livez", source="127.0.0.2"))
            if termed_at is None and readies[-3:] == ["200"] * 3:
                server.proc.send_signal(signal.SIGTERM)
                termed_at = len(readies)
            time.sleep(0.1)
        assert server.server.exit_code(30) == 0
        assert termed_at is not None
        phases = [answer for index, answer in enumerate(readies) if index == 0 or readies[index - 1] != answer]
        answered = [phase for phase in phases if ANSWERED.match(phase)]
        # Before the port was bound: refused. Then, in order:
        expected = [
            "503 [-]workers-ready",
            "503 [-]workers-ready [-]poststarthook/warm",
            "200",
            "503 [-]shutdown",
        ]
        assert answered[: len(expected)] == expected, phases
        # After the delay the workers stop too; the last probes may meet the process exiting.
        assert set(answered[len(expected) :]) <= {"503 [-]workers-ready [-]shutdown"}, phases
        after_term = readies[termed_at:]
        assert [a for a in after_term[:-3] if not ANSWERED.match(a)] == []
        assert len([a for a in after_term if a.startswith("503")]) >= 5  # through the whole 1 s delay
        bound = lives.index("200")
        assert set(lives[bound:-3]) == {"200"}
        logged = server.master_lines("graceful: /readyz check")
        assert len(readies) >= 30 and len(logged) <= 6, logged

    def test_a_check_failing_in_one_worker_is_a_warning(self, processes: Processes, tmp_path: Path) -> None:
        """db failing in one of two workers: /readyz passes (the other is ready) with a warn: line saying so."""
        marker = str(tmp_path / "failing-worker")
        server = Instance(processes, "sync", env={"HEALTH_APP_FAIL_ONE": marker})
        server.wait("/readyz", "200")
        deadline = time.monotonic() + 15
        body = ""
        while "warn:" not in body and time.monotonic() < deadline:  # until both workers have published
            conn = http.client.HTTPConnection("127.0.0.1", server.health, timeout=2)
            conn.request("GET", "/readyz?verbose")
            body = conn.getresponse().read().decode()
            conn.close()
            time.sleep(0.1)
        assert body.splitlines()[-3:] == ["[+]shutdown ok", "warn: db failing in 1 of 2 workers", "readyz check passed"]
        # The failing worker logged the reason once, where the check runs.
        assert len(server.server.matching("readiness check 'db' failing: RuntimeError: connection refused")) == 1


@pytest.mark.release
class TestRestarts:
    def test_hup_and_recycling_keep_answering(self, processes: Processes) -> None:
        """Through max_requests recycling under traffic and a HUP, /livez and /readyz answer 200 every time: the
        server serves while its workers are replaced (TestReplacementsUnderLoad, with slower boots)."""
        server = Instance(processes, "sync", args=("--max-requests", "40"))
        server.wait("/readyz", "200")
        lives, readies = [], []
        with traffic(server.port) as outcomes:
            for index in range(100):
                if index == 40:
                    server.proc.send_signal(signal.SIGHUP)
                lives.append(probe(server.health, "/livez"))
                readies.append(probe(server.health, "/readyz", source="127.0.0.2"))
                time.sleep(0.1)
        assert lives == ["200"] * 100
        assert readies == ["200"] * 100, sorted(set(readies))
        assert len(server.server.matching(r"Booting worker with pid")) >= 6  # 2 at boot, 2 on HUP, recycled ones
        assert len(outcomes) > 100 and server.proc.poll() is None

    def test_usr2_then_term_to_the_old_master_keeps_answering(self, processes: Processes) -> None:
        """USR2, then TERM to the old master: no probe is refused or times out; the new master answers after."""
        server = Instance(processes, "sync")
        server.wait("/readyz", "200")
        old = server.proc.pid
        server.proc.send_signal(signal.SIGUSR2)
        new = 0
        try:
            starts = server.server.wait_for(r"\[(\d+)\] \[INFO\] Starting gunicorn", count=2)
            new = int(re.findall(r"\[(\d+)\] \[INFO\] Starting gunicorn", starts[-1])[0])
            server.server.wait_for(r"Booting worker with pid", count=4)  # two workers under each master
            answers = []
            for _ in range(20):
                answers.append(probe(server.health, "/readyz"))
                time.sleep(0.1)
            server.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while not _gone(old) and time.monotonic() < deadline:
                answers.append(probe(server.health, "/readyz"))
                time.sleep(0.1)
            # The old master's stop is a process stop (no delay): it takes a few probes' time.
            while_stopping = len(answers) - 20
            assert server.server.exit_code(30) == 0
            for _ in range(20):  # the new master alone
                answers.append(probe(server.health, "/readyz"))
                time.sleep(0.1)
            assert all(ANSWERED.match(answer) for answer in answers), sorted(set(answers))
            assert answers[-1] == "200" and while_stopping >= 1 and len(answers) == while_stopping + 40
            assert server.server.matching(rf"\[{old}\].*health port .* handed to the new master \(pid {new}\)")
            assert server.server.matching(rf"\[{new}\].*the old master stopped serving the health port")
        finally:
            if new:
                _stop_foreign_master(new)

    def test_reuse_port(self, processes: Processes) -> None:
        """With reuse_port: ready, HUP, TERM: /livez answered 200 until the exit, /readyz 503 from the TERM."""
        server = Instance(processes, "gthread", args=("--reuse-port",))
        server.wait("/readyz", "200")
        server.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        server.wait("/readyz", "200")
        server.proc.send_signal(signal.SIGTERM)
        server.wait("/readyz?verbose", "503 [-]shutdown")
        lives = []
        while server.proc.poll() is None and len(lives) < 300:
            lives.append(probe(server.health, "/livez"))
            time.sleep(0.1)
        assert server.server.exit_code(30) == 0
        assert len(lives) >= 3 and set(lives[:-3]) <= {"200"}


class TestReplacementsUnderLoad:
    def test_readyz_stays_200_through_hups_recycling_ttin_and_ttou(self, processes: Processes, tmp_path: Path) -> None:
        """Steady traffic with max_requests recycling, a HUP a second, a TTIN and a TTOU (and on Gunicorn 25.1+
        the control socket's worker remove and add), for 12 s: each of the health port's /readyz probes (every
        100 ms) answers 200, as the app's port serves every request."""
        args = ("-w", "2", "--max-requests", "15", "--max-requests-jitter", "5")
        control = tmp_path / "g.ctl" if _has_control_socket() else None
        # Each worker takes 0.3 s to import the app, as a small real one does: replacements boot for that long.
        server = Instance(processes, "gthread", env={"HEALTH_APP_IMPORT_S": "0.3"}, args=args, control_socket=control)
        server.wait("/readyz", "200")
        readies: list[tuple[float, str]] = []
        commands: list[Future[None]] = []
        started = time.monotonic()
        with traffic(server.port, period=0.005, seconds=30) as outcomes, ThreadPoolExecutor(1) as operator:
            for index in range(120):
                if index % 10 == 5:
                    server.proc.send_signal(signal.SIGHUP)
                if index in (30, 80):
                    server.proc.send_signal(signal.SIGTTIN if index == 30 else signal.SIGTTOU)
                if control is not None and index in (50, 90):  # gunicornc is a process of its own: off the beat
                    commands.append(operator.submit(gunicornc, control, "worker", "remove" if index == 50 else "add"))
                readies.append((time.monotonic() - started, probe(server.health, "/readyz?verbose", "127.0.0.2")))
                time.sleep(max(0.0, started + (index + 1) * 0.1 - time.monotonic()))
        failed = [(round(at, 2), answer) for at, answer in readies if answer != "200"]
        assert failed == [], f"{len(failed)} of {len(readies)} probes failed: {failed}"
        assert set(outcomes) == {"200"} and len(outcomes) > 100, sorted(set(outcomes))
        server.server.wait_for(r"Hang up", count=12)
        for done in commands:
            done.result(30)  # each command was accepted
        if control is not None:
            server.server.wait_for(r"graceful: worker \d+ stopp(ed|ing) \(scale-in\)", count=2)  # TTOU, remove
        assert len(server.server.matching(r"graceful: worker \d+ stopping \(recycled\)")) >= 5  # max_requests
        assert server.proc.poll() is None


#: A budget that fits a 4 s grace period.
SHORT_BUDGET = {"GRACEFUL_SHUTDOWN_DELAY": "0.5", "GRACEFUL_DRAIN_TIMEOUT": "1", "GRACEFUL_HOOK_TIMEOUT": "1"}


class TestAddressInUse:
    """GRACEFUL_HEALTH_BIND held by another process at start-up: a bounded wait (the grace period, 4 s here)."""

    def held(self) -> socket.socket:
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        return holder

    def start(self, processes: Processes, holder: socket.socket) -> Instance:
        port = holder.getsockname()[1]
        env = {**SHORT_BUDGET, "GRACEFUL_GRACE_PERIOD": "4", "GRACEFUL_HEALTH_BIND": f"127.0.0.1:{port}"}
        server = Instance(processes, "gthread", env=env)
        server.health = port
        return server

    def test_bound_once_freed_and_the_app_port_says_so_meanwhile(self, processes: Processes) -> None:
        """The server starts; /readyz on the app's port fails its check healthport until the holder lets go;
        then the health port binds, saying after how long, and both ports' /readyz answer 200."""
        holder = self.held()
        try:
            server = self.start(processes, holder)
            server.server.wait_for(r"health port 127\.0\.0\.1:\d+ is in use .* for up to 4s, then stopping the server")
            deadline = time.monotonic() + 30
            answer = ""
            while not answer.startswith("503") and time.monotonic() < deadline:
                answer = probe(server.port, "/readyz?verbose", timeout=5)
                time.sleep(0.1)
            assert answer == "503 [-]healthport", answer
        finally:
            holder.close()
        server.wait("/readyz", "200")
        assert probe(server.port, "/readyz", timeout=5) == "200"
        assert server.master_lines(r"health port listening on 127\.0\.0\.1:\d+ .* after waiting \d+\.\ds")
        assert not server.server.matching("giving up") and server.proc.poll() is None

    def test_still_in_use_at_the_bound_stops_the_server(self, processes: Processes) -> None:
        """Never freed: after the grace period one ERROR line says it gives up, and the server stops as on SIGTERM."""
        holder = self.held()
        try:
            server = self.start(processes, holder)
            server.server.wait_for(r"is in use")
            started = time.monotonic()
            server.server.wait_for(r"\[ERROR\] graceful: health port .* still in use after 4\.\ds: giving up")
            assert server.server.exit_code(30) == 0
            assert time.monotonic() - started < 4 + 4 + 5  # the bound, then a shutdown within its grace period
            assert server.master_lines("SIGTERM: shutting down gracefully")
        finally:
            holder.close()


class TestBadInput:
    def test_bad_input_never_stops_the_master(self, processes: Processes) -> None:
        """Not HTTP, a byte a second, 1,000 idle connections, a 64 KB request line: each answered or closed,
        other probes answered meanwhile, the master alive and serving after."""
        server = Instance(processes, "sync")
        server.wait("/readyz", "200")

        def raw(data: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", server.health), timeout=5) as sock:
                sock.sendall(data)
                chunks = []
                with contextlib.suppress(ConnectionResetError):
                    while chunk := sock.recv(65536):
                        chunks.append(chunk)
                return b"".join(chunks)

        junk = raw(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" * 10)
        assert junk.startswith(b"HTTP/1.1 400 "), junk[:100]
        huge = raw(b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\n\r\n")
        assert huge.startswith(b"HTTP/1.1 431 "), huge[:100]

        # One byte a second: closed at the port's 2 s deadline; another client is answered meanwhile.
        slow = socket.create_connection(("127.0.0.1", server.health), timeout=5)
        closed_after = None
        started = time.monotonic()
        meanwhile = []
        for byte in b"GET /livez HTTP/1.1\r\n":
            try:
                slow.send(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            meanwhile.append(probe(server.health, "/livez", source="127.0.0.2"))
            slow.settimeout(1.0)
            try:
                if slow.recv(100) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except OSError:
                closed_after = time.monotonic() - started
                break
        slow.close()
        assert closed_after is not None and closed_after < 10, closed_after
        assert meanwhile and set(meanwhile) == {"200"}, meanwhile

        # 1,000 idle connections: another client's probes are answered.
        idle = []
        try:
            for _ in range(1000):
                idle.append(socket.create_connection(("127.0.0.1", server.health), timeout=5))
            # Opened as fast as can be, they came faster than the port accepts (1,000 a second): let the
            # kernel's accept queue drain, or a probe's SYN may meet it full and be retried only after 1 s.
            time.sleep(1.0)
            answers = []
            for _ in range(10):
                answers.append(probe(server.health, "/readyz", source="127.0.0.2"))
                time.sleep(0.1)
            assert answers == ["200"] * 10, answers
        finally:
            for sock in idle:
                sock.close()
        assert server.proc.poll() is None
        assert probe(server.health, "/livez", source="127.0.0.3") == "200"
        assert probe(server.port, "/fast", source="127.0.0.3", timeout=5) == "200"


class TestSettings:
    def _run(self, env: dict[str, str], bind: str) -> subprocess.CompletedProcess[str]:
        argv = [GUNICORN, "-c", str(GRACEFUL_CONF), "--pythonpath", str(LIVE), "-b", bind, "load_app:app"]
        if _has_control_socket():
            argv.append("--no-control-socket")
        return subprocess.run(argv, env=clean_env(env), cwd=ROOT, capture_output=True, text=True, timeout=30)

    def test_bad_health_bind_fails_at_start_up(self) -> None:
        """GRACEFUL_HEALTH_BIND=:8081 stops Gunicorn at start-up with one line naming the variable."""
        done = self._run({"GRACEFUL_HEALTH_BIND": ":8081"}, f"127.0.0.1:{free_port()}")
        assert done.returncode != 0
        output = done.stderr + done.stdout
        assert "GRACEFUL_HEALTH_BIND=':8081' is not allowed: write the host" in output
        assert "Traceback" not in output

    def test_health_port_on_gunicorns_bind_fails_at_start_up(self) -> None:
        """The health port on Gunicorn's own port stops it at start-up naming both."""
        port = free_port()
        done = self._run({"GRACEFUL_HEALTH_BIND": f"127.0.0.1:{port}"}, f"0.0.0.0:{port}")
        assert done.returncode != 0
        assert f"is also in Gunicorn's bind '0.0.0.0:{port}'" in done.stderr + done.stdout
