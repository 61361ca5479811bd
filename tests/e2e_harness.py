"""End-to-end harness: real Gunicorn instances, a real HAProxy, a bounded load generator.

Used by tests/test_zero_loss.py (graceful and plain Gunicorn, side by side)
and by bench/. Traffic goes to 127.0.0.1 only; every loop is bounded in
count and in time; every process is started through ``tests.conftest.Processes``
(or anything with its ``start(argv, env)``), which kills what is left by PID.

Every request the load generator sends becomes one :class:`Record` with an
outcome class, so a red run says what went wrong:

=================  ============================================================
``ok``             200 with the full body (length and content checked)
``refused``        the TCP connection was refused (nothing listening)
``reset``          the connection was reset before a response arrived
``disconnected``   the server closed the connection before sending a response
``incomplete body`` the response started but its body was cut short or wrong
``timeout``        no answer within the client's timeout (connect 3 s, read 10 s)
``http NNN``       a complete response with status NNN (HAProxy's 503 included)
``other``          anything else (a harness bug: the detail says what)
=================  ============================================================

Through HAProxy, a backend that closes or resets a connection HAProxy had
sent a request on shows up as ``disconnected``: HAProxy then closes the
client's keep-alive connection without a response (so that a browser may
retry), or as ``http 502``; a backend that refuses connections shows up as
``http 503`` (``retries 0``, no redispatch: HAProxy passes the failure on,
as kube-proxy would).

Scenarios (each returns a :class:`Run`):

:func:`rolling_restart`
    two instances behind HAProxy (health checks on ``/readyz``, inter 1 s,
    fall 2, rise 1), 24 keep-alive clients through it; SIGTERM to the first,
    its replacement started on the same port once it has exited (a
    Deployment with maxSurge 0), then the same for the second.
:func:`direct_sigterm`
    one instance, the clients straight at it, SIGTERM. With no load
    balancer to go elsewhere, connections made after the listeners close
    are refused: that is reported, not a loss. ``/readyz`` and ``/livez``
    are probed on new connections every 50 ms from the SIGTERM to the
    delay's end (:class:`Probe`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import http.client
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import requests
import urllib3.exceptions

ROOT = Path(__file__).resolve().parent.parent
LIVE = ROOT / "tests" / "live"
GRACEFUL_CONF = ROOT / "graceful" / "conf.py"

OK = "ok"
REFUSED = "refused"
RESET = "reset"
DISCONNECTED = "disconnected"
INCOMPLETE = "incomplete body"
TIMEOUT = "timeout"
OTHER = "other"

#: Gunicorn's worker options for each worker class under test.
WORKERS: dict[str, tuple[str, ...]] = {
    "sync": ("-k", "sync", "-w", "4"),
    "gthread": ("-k", "gthread", "-w", "2", "--threads", "8"),
    "gevent": ("-k", "gevent", "-w", "2"),
}

#: Lines that must never appear in a graceful Gunicorn's log (a traceback, gevent's listener error).
LOG_PROBLEMS = re.compile(r"Traceback|Errno 22|failed with")

#: gevent's open issue 2130: on CPython 3.13, under monkey-patching, a thread that ends (graceful's
#: sampler at CleanupFinished) may make threading raise a KeyError in its own _delete(), printed
#: either by threading ("Exception ignored in thread started by <bound method Thread._bootstrap ...")
#: or by gevent (a traceback through Thread._bootstrap, then "<Greenlet ...> failed with KeyError").
_GEVENT_2130_START = re.compile(r"Exception ignored in thread started by <bound method Thread\._bootstrap|Traceback \(")
_GEVENT_2130_END = re.compile(r"KeyError: \d+")
_GEVENT_2130_AFTER = re.compile(r"<Greenlet at .*Thread\._bootstrap.* failed with KeyError")


def without_gevent_2130(lines: Sequence[str]) -> list[str]:
    """``lines`` without the blocks of gevent's issue 2130 (see above): every other line, traceback or not."""
    kept: list[str] = []
    i = 0
    while i < len(lines):
        if _GEVENT_2130_START.match(lines[i]):
            block = lines[i : i + 14]
            end = next((k for k, line in enumerate(block) if _GEVENT_2130_END.fullmatch(line.strip())), None)
            if (
                end is not None
                and any("in _delete" in line for line in block[:end])
                and any("_bootstrap" in line for line in block[:end])
            ):
                i += end + 1
                if i < len(lines) and _GEVENT_2130_AFTER.search(lines[i]):
                    i += 1
                continue
        kept.append(lines[i])
        i += 1
    return kept


ROLLING = "rolling restart behind HAProxy"
DIRECT = "direct SIGTERM, no load balancer"

#: Requests started this close (s) to the end of the delay are not counted as "sent during the delay":
#: the client stamps a request's start a little before its connection reaches the server.
DELAY_EDGE = 0.1

#: Client timeouts (s): connect, read.
CLIENT_TIMEOUT = (3.0, 10.0)

_ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def pattern(size: int) -> bytes:
    """The body tests/live/load_app.py serves for ``bytes=size`` (same definition)."""
    return (_ALPHABET * (size // len(_ALPHABET) + 1))[:size]


class Starter(Protocol):
    """What the harness needs from ``tests.conftest.Processes``."""

    def start(
        self, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[str]: ...


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``GRACEFUL_*`` (graceful refuses unknown ones), plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One GET on a fresh connection to 127.0.0.1:``port``: status, headers (any case), body.

    Raises OSError or HTTPException on failure.
    """
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


# -- outcomes ---------------------------------------------------------------------------


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and everything it wraps (cause, context, urllib3's ``reason``, exception args)."""
    seen: set[int] = set()
    stack = [exc]
    while stack and len(seen) < 50:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = (current.__cause__, current.__context__, getattr(current, "reason", None), *current.args)
        stack.extend(item for item in linked if isinstance(item, BaseException))


_TIMEOUTS = (requests.Timeout, TimeoutError, urllib3.exceptions.TimeoutError)
_INCOMPLETE = (http.client.IncompleteRead, urllib3.exceptions.IncompleteRead)


def classify(exc: BaseException, *, body_started: bool) -> str:
    """The outcome class of a failed request; ``body_started``: the status line had arrived."""
    causes = list(_causes(exc))

    def has(kinds: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
        return any(isinstance(cause, kinds) for cause in causes)

    # urllib3's NewConnectionError (refused, unreachable) subclasses its ConnectTimeoutError.
    timed_out = any(
        isinstance(cause, _TIMEOUTS) and not isinstance(cause, urllib3.exceptions.NewConnectionError)
        for cause in causes
    )
    if timed_out:
        return TIMEOUT
    if body_started:
        return INCOMPLETE
    if has(http.client.RemoteDisconnected):  # a ConnectionResetError subclass: test it first
        return DISCONNECTED
    if has(ConnectionRefusedError):
        return REFUSED
    if has((ConnectionResetError, BrokenPipeError)):
        return RESET
    if has(_INCOMPLETE):
        return INCOMPLETE
    return OTHER


def _root_detail(exc: BaseException) -> str:
    innermost = list(_causes(exc))[-1]
    return f"{type(exc).__name__}: {type(innermost).__name__}: {innermost}"[:300]


@dataclasses.dataclass(frozen=True)
class Record:
    """One request the load generator sent; times are ``time.monotonic()``."""

    client: int
    path: str
    started: float
    ended: float
    outcome: str
    status: int | None = None
    received: int = 0
    expected: int = 0
    served_by: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        """200 with the whole expected body."""
        return self.outcome == OK

    def in_flight_at(self, moment: float) -> bool:
        """Started before ``moment`` and not finished by it."""
        return self.started <= moment < self.ended


def fetch(session: requests.Session, base_url: str, path: str, expected: int, client: int = -1) -> Record:
    """Send one GET and classify what came back (never raises for a network failure)."""
    started = time.monotonic()
    status: int | None = None
    served_by = ""
    body = b""
    try:
        response = session.get(base_url + path, timeout=CLIENT_TIMEOUT, stream=True)
    except (requests.RequestException, OSError, http.client.HTTPException, urllib3.exceptions.HTTPError) as exc:
        return Record(
            client, path, started, time.monotonic(), classify(exc, body_started=False), detail=_root_detail(exc)
        )
    try:
        status = response.status_code
        served_by = response.headers.get("X-Master-Pid", "")
        body = response.content
    except (requests.RequestException, OSError, http.client.HTTPException, urllib3.exceptions.HTTPError) as exc:
        outcome = classify(exc, body_started=True)
        return Record(
            client, path, started, time.monotonic(), outcome, status, 0, expected, served_by, _root_detail(exc)
        )
    finally:
        response.close()
    ended = time.monotonic()
    if status != 200:
        return Record(client, path, started, ended, f"http {status}", status, len(body), expected, served_by)
    if len(body) != expected or body != pattern(expected):
        detail = f"{len(body)} of {expected} bytes" + ("" if len(body) != expected else ", wrong content")
        return Record(client, path, started, ended, INCOMPLETE, status, len(body), expected, served_by, detail)
    return Record(client, path, started, ended, OK, status, len(body), expected, served_by)


# -- load -------------------------------------------------------------------------------


class LoadGenerator:
    """``clients`` keep-alive clients on threads: even ones ask ``/fast``, odd ones ``/slow`` (0-500 ms).

    Bounded: each client stops after ``max_requests`` requests, at
    ``duration`` seconds after ``start()``, or at ``stop()``, whichever is
    first. After a failed request a client pauses ``pause_after_error``
    seconds, so a dead server is not hammered in a tight loop.
    """

    def __init__(
        self,
        base_url: str,
        *,
        clients: int = 24,
        duration: float = 30.0,
        max_requests: int = 20_000,
        slow_max_ms: int = 500,
        fast_bytes: int = 256,
        slow_bytes: int = 4096,
        pause_after_error: float = 0.05,
        seed: int = 20240601,
    ) -> None:
        self.base_url = base_url
        self.clients = clients
        self.duration = duration
        self.max_requests = max_requests
        self.slow_max_ms = slow_max_ms
        self.fast_bytes = fast_bytes
        self.slow_bytes = slow_bytes
        self.pause_after_error = pause_after_error
        self.seed = seed
        self._records: list[Record] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._deadline = 0.0

    def start(self) -> LoadGenerator:
        """Start every client thread."""
        self._deadline = time.monotonic() + self.duration
        for index in range(self.clients):
            thread = threading.Thread(target=self._client, args=(index,), name=f"load-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()
        return self

    def stop(self) -> list[Record]:
        """Stop the clients (each finishes its current request) and return every record."""
        self._stop.set()
        limit = time.monotonic() + sum(CLIENT_TIMEOUT) + 5
        for thread in self._threads:
            thread.join(max(0.0, limit - time.monotonic()))
        stuck = [thread.name for thread in self._threads if thread.is_alive()]
        if stuck:
            raise RuntimeError(f"load clients still running after their timeouts: {stuck}")
        return self.records

    def one_off(self, path: str, expected: int) -> threading.Thread:
        """Send one extra request on its own connection and thread (recorded as client -1)."""

        def run() -> None:
            with requests.Session() as session:
                session.trust_env = False
                self._add(fetch(session, self.base_url, path, expected))

        thread = threading.Thread(target=run, name="load-one-off", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    @property
    def records(self) -> list[Record]:
        """A copy of the records so far."""
        with self._changed:
            return list(self._records)

    def wait_for(self, predicate: Callable[[Record], bool], timeout: float) -> Record | None:
        """Wait until a record arriving from now on matches ``predicate``; None after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._changed:
            seen = len(self._records)
            while True:
                for record in self._records[seen:]:
                    if predicate(record):
                        return record
                seen = len(self._records)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(min(remaining, 0.5))

    def _add(self, record: Record) -> None:
        with self._changed:
            self._records.append(record)
            self._changed.notify_all()

    def _client(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        slow = index % 2 == 1
        with requests.Session() as session:
            session.trust_env = False  # no proxy from the environment: straight to 127.0.0.1
            for _ in range(self.max_requests):
                if self._stop.is_set() or time.monotonic() >= self._deadline:
                    return
                if slow:
                    path = f"/slow?ms={rng.randint(0, self.slow_max_ms)}&bytes={self.slow_bytes}"
                    expected = self.slow_bytes
                else:
                    path = f"/fast?bytes={self.fast_bytes}"
                    expected = self.fast_bytes
                record = fetch(session, self.base_url, path, expected, index)
                self._add(record)
                if not record.ok:
                    self._stop.wait(self.pause_after_error)


# -- processes ----------------------------------------------------------------------------


class OutputTail:
    """Reads a process's merged stdout/stderr on a thread, keeping each line with its arrival time."""

    def __init__(self, proc: subprocess.Popen[str], name: str) -> None:
        self.name = name
        self.lines: list[tuple[float, str]] = []
        self._proc = proc
        self._thread = threading.Thread(target=self._read, name=f"tail-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        stream = self._proc.stdout
        if stream is None:
            return
        with contextlib.suppress(ValueError, OSError):  # closed under us at teardown
            for line in stream:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    def join(self, timeout: float = 5.0) -> None:
        """Wait for end of output (the process and its children have exited)."""
        self._thread.join(timeout)

    def first(self, regex: str, after: float = 0.0) -> float | None:
        """Arrival time of the first line after ``after`` matching ``regex``, or None."""
        compiled = re.compile(regex)
        for at, line in list(self.lines):
            if at >= after and compiled.search(line):
                return at
        return None

    def text(self, last: int = 60) -> str:
        """The last ``last`` lines, for failure messages."""
        return "\n".join(f"  [{self.name}] {line}" for _at, line in self.lines[-last:])

    def matching(self, regex: re.Pattern[str]) -> list[str]:
        """Every line so far that ``regex`` finds something in."""
        return [line for _at, line in list(self.lines) if regex.search(line)]


def wait_exit(proc: subprocess.Popen[str], timeout: float) -> float:
    """Wait until ``proc`` exits; return the monotonic time it did (to the millisecond, via pidfd)."""
    if hasattr(os, "pidfd_open") and proc.returncode is None:
        try:
            fd = os.pidfd_open(proc.pid)
        except OSError:  # already reaped, or pidfd unsupported by the kernel
            fd = -1
        if fd >= 0:
            try:
                if not select.select([fd], [], [], timeout)[0]:
                    raise subprocess.TimeoutExpired(proc.args, timeout)
                exited = time.monotonic()
            finally:
                os.close(fd)
            proc.wait(1)
            return exited
    proc.wait(timeout)
    return time.monotonic()


def _gunicorn_supports(setting: str) -> bool:
    from gunicorn.config import KNOWN_SETTINGS

    return any(known.name == setting for known in KNOWN_SETTINGS)


class Managed:
    """A process the harness started (its own process group) and whose output it tails."""

    #: How many output lines ``log()`` gives by default.
    log_lines = 60

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.output: OutputTail | None = None

    def kill(self) -> None:
        """SIGKILL its whole process group, if still running (teardown)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.output is not None:
            self.output.join()

    def log(self, last: int | None = None) -> str:
        """The last ``last`` lines of its output (``log_lines`` by default)."""
        return self.output.text(last or self.log_lines) if self.output is not None else ""

    def problems(self) -> list[str]:
        """Its output lines that must never appear (:data:`LOG_PROBLEMS`)."""
        if self.output is None:
            return []
        lines = without_gevent_2130([line for _at, line in self.output.lines])
        return [line for line in lines if LOG_PROBLEMS.search(line)]


class Gunicorn(Managed):
    """One Gunicorn instance serving tests/live/load_app.py on 127.0.0.1:``port``.

    ``graceful=True`` runs it as ``gunicorn -c graceful/conf.py``; False, plain.
    ``env`` adds to a copy of this process's environment without ``GRACEFUL_*``.
    """

    def __init__(
        self,
        starter: Starter,
        port: int,
        worker_class: str,
        *,
        graceful: bool,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        name: str = "gunicorn",
    ) -> None:
        self.starter = starter
        self.port = port
        self.worker_class = worker_class
        self.graceful = graceful
        self.env = dict(env or {})
        self.args = list(args)
        self.name = name
        super().__init__()
        self.sigterm_at: float | None = None
        self.exited_at: float | None = None

    @property
    def url(self) -> str:
        """Base URL, no trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The master's pid (the ``X-Master-Pid`` it serves)."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    def argv(self) -> list[str]:
        """The command line."""
        argv = [sys.executable, "-m", "gunicorn"]
        if self.graceful:
            argv += ["-c", str(GRACEFUL_CONF)]
        argv += ["--pythonpath", str(LIVE), "-b", f"127.0.0.1:{self.port}", *WORKERS[self.worker_class]]
        if _gunicorn_supports("control_socket_disable"):  # 25+: one per instance would share a path
            argv.append("--no-control-socket")
        return [*argv, *self.args, "load_app:app"]

    def start(self) -> Gunicorn:
        """Start the master; returns at once (see :meth:`wait_ready`)."""
        self.proc = self.starter.start(self.argv(), env=clean_env(self.env), cwd=ROOT)
        self.output = OutputTail(self.proc, f"{self.name}:{self.port}")
        return self

    def wait_ready(self, timeout: float = 20.0) -> float:
        """Poll ``/readyz`` until 200 (bounded); return when. Raises with the log if it exits or times out."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} at start-up:\n{self.log()}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if http_get(self.port, "/readyz", timeout=1.0)[0] == 200:
                    return time.monotonic()
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready within {timeout}s:\n{self.log()}")

    def terminate(self) -> float:
        """Send SIGTERM to the master only (as the kubelet does to PID 1); return when."""
        assert self.proc is not None
        self.sigterm_at = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        return self.sigterm_at

    def wait_exit(self, timeout: float) -> int:
        """Wait (bounded) for the master to exit; record when; return its exit status."""
        assert self.proc is not None
        self.exited_at = wait_exit(self.proc, timeout)
        if self.output is not None:
            self.output.join()
        assert self.proc.returncode is not None
        return self.proc.returncode


def find_haproxy() -> str | None:
    """The haproxy binary (``/usr/sbin`` is often not on a non-root PATH)."""
    return shutil.which("haproxy") or next(
        (path for path in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if os.access(path, os.X_OK)), None
    )


HAPROXY_CONFIG = """\
# Written by tests/e2e_harness.py. Like kube-proxy: no retries, no redispatch.
global
    maxconn 4096

defaults
    mode http
    option http-keep-alive
    retries 0
    timeout connect 2s
    timeout client 30s
    timeout server 30s

frontend fe
    bind 127.0.0.1:{port}
    default_backend be

backend be
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
{servers}
"""


class HAProxy(Managed):
    """HAProxy in the foreground, round-robin over ``backends``, health-checking ``/readyz``."""

    log_lines = 40

    def __init__(self, starter: Starter, directory: Path, backends: Iterable[int], port: int | None = None) -> None:
        self.starter = starter
        self.directory = directory
        self.backends = list(backends)
        self.port = port or free_port()
        super().__init__()

    @property
    def url(self) -> str:
        """Base URL of the frontend."""
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def server_name(index: int) -> str:
        """Backend server names: a, b, c..."""
        return "abcdefghij"[index]

    def config(self) -> str:
        """The configuration text."""
        servers = "\n".join(
            f"    server {self.server_name(i)} 127.0.0.1:{port} check inter 1s fall 2 rise 1"
            for i, port in enumerate(self.backends)
        )
        return HAPROXY_CONFIG.format(port=self.port, servers=servers)

    def start(self) -> HAProxy:
        """Write the config and start ``haproxy -db -f cfg``."""
        binary = find_haproxy()
        if binary is None:
            raise RuntimeError("haproxy not found: apt-get install haproxy (.ci/run and scripts/run-tests do)")
        path = self.directory / "haproxy.cfg"
        path.write_text(self.config())
        self.proc = self.starter.start([binary, "-db", "-f", str(path)], env=clean_env(), cwd=self.directory)
        self.output = OutputTail(self.proc, "haproxy")
        return self

    def wait_routing(self, pids: Iterable[int], timeout: float = 15.0) -> None:
        """Send requests through HAProxy (bounded) until each master pid has answered one."""
        assert self.proc is not None
        missing = {str(pid) for pid in pids}
        deadline = time.monotonic() + timeout
        for _ in range(20_000):
            if not missing or time.monotonic() > deadline:
                break
            if self.proc.poll() is not None:
                break
            try:
                status, headers, _ = http_get(self.port, "/fast", timeout=2.0)
            except (OSError, http.client.HTTPException):
                time.sleep(0.05)
                continue
            if status == 200:
                missing.discard(headers.get("X-Master-Pid", ""))
            else:
                time.sleep(0.05)
        if missing:
            raise RuntimeError(
                f"HAProxy (exit status {self.proc.poll()}) does not route to {sorted(missing)}:\n{self.log()}"
            )

    def marked(self, index: int, state: str, after: float = 0.0) -> float | None:
        """When HAProxy logged server ``index`` as ``state`` (UP/DOWN) after ``after``, or None."""
        if self.output is None:
            return None
        return self.output.first(rf"Server be/{self.server_name(index)} is {state}", after)


# -- scenarios ----------------------------------------------------------------------------


@dataclasses.dataclass
class Termination:
    """One SIGTERM of a Gunicorn master during a run (monotonic times)."""

    name: str
    pid: int
    sigterm_at: float
    exited_at: float
    returncode: int
    replacement_ready_at: float | None = None
    replacement_routed_at: float | None = None
    marked_down_at: float | None = None


@dataclasses.dataclass(frozen=True)
class Probe:
    """One health probe on a new connection: when it was sent, the path, the status (-1: no answer)."""

    sent_at: float
    path: str
    status: int


def probe_health(port: int, start: float, end: float) -> list[Probe]:
    """Ask ``/readyz`` and ``/livez`` on new connections every 50 ms from ``start`` to ``end`` (monotonic)."""
    probes: list[Probe] = []
    time.sleep(max(0.0, start - time.monotonic()))
    for _ in range(10_000):
        if time.monotonic() >= end:
            break
        for path in ("/readyz", "/livez"):
            sent_at = time.monotonic()
            try:
                status = http_get(port, path, timeout=2.0)[0]
            except (OSError, http.client.HTTPException):
                status = -1
            probes.append(Probe(sent_at, path, status))
        time.sleep(0.05)
    return probes


@dataclasses.dataclass
class Run:
    """Everything one scenario measured."""

    scenario: str
    worker_class: str
    graceful: bool
    records: list[Record]
    terminations: list[Termination]
    started_at: float
    ended_at: float
    logs: list[str] = dataclasses.field(default_factory=list)
    #: graceful's shutdown delay (s); for plain Gunicorn the same span after SIGTERM, for comparison.
    delay_window: float = 0.0
    #: Health probes from the SIGTERM to the delay's end (direct SIGTERM only).
    probes: list[Probe] = dataclasses.field(default_factory=list)
    #: Log lines that must not appear (tracebacks, gevent's listener errors), from every instance.
    log_problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def mode(self) -> str:
        """``graceful`` or ``plain``."""
        return "graceful" if self.graceful else "plain"

    @property
    def failures(self) -> list[Record]:
        """Every record that is not ``ok``."""
        return [record for record in self.records if not record.ok]

    def by_class(self, records: Iterable[Record] | None = None) -> collections.Counter[str]:
        """Outcome class -> count (of ``records``, default all)."""
        return collections.Counter(record.outcome for record in (self.records if records is None else records))

    def in_flight_at_sigterm(self) -> list[Record]:
        """Requests started before some SIGTERM and not finished by it."""
        return [r for r in self.records if any(r.in_flight_at(t.sigterm_at) for t in self.terminations)]

    def sent_during_delay(self, edge: float) -> list[Record]:
        """Requests started after a SIGTERM and more than ``edge`` s before its delay ended."""
        return [
            r
            for r in self.records
            if any(t.sigterm_at <= r.started < t.sigterm_at + self.delay_window - edge for t in self.terminations)
        ]

    def describe(self, records: Iterable[Record] | None = None, limit: int = 12) -> str:
        """Failures by class, with examples (time relative to the first SIGTERM), for assertion messages."""
        failed = [r for r in (self.records if records is None else records) if not r.ok]
        t0 = self.terminations[0].sigterm_at if self.terminations else self.started_at
        title = f"{self.mode} {self.worker_class} {self.scenario}: {len(failed)} failed: {dict(self.by_class(failed))}"
        lines = [title]
        for term in self.terminations:
            lines.append(
                f"  SIGTERM {term.name} pid {term.pid} at {term.sigterm_at - t0:+.3f}s,"
                f" exit {term.returncode} at {term.exited_at - t0:+.3f}s"
                + (f", HAProxy DOWN at {term.marked_down_at - t0:+.3f}s" if term.marked_down_at else "")
            )
        for record in failed[:limit]:
            lines.append(
                f"  {record.outcome:<16} {record.path:<28} started {record.started - t0:+.3f}s"
                f" ended {record.ended - t0:+.3f}s served_by={record.served_by or '-'} {record.detail}"
            )
        if len(failed) > limit:
            lines.append(f"  ... and {len(failed) - limit} more")
        if failed:
            lines.extend(self.logs)
        return "\n".join(lines)

    def row(self) -> list[str]:
        """This run's row of :func:`table`."""
        in_flight = self.in_flight_at_sigterm()
        lost = sum(1 for r in in_flight if not r.ok)
        if self.scenario == DIRECT:
            window = self.sent_during_delay(DELAY_EDGE)
            during = f"{sum(1 for r in window if not r.ok)} / {len(window)}"
            end = self.terminations[0].sigterm_at + self.delay_window - DELAY_EDGE
            early = [r for r in self.failures if r.started < end]
            late = [r for r in self.failures if r.started >= end]
            classes = f"until the delay's end: {_classes(early)}; later: {_classes(late)}"
        else:
            during = "-"
            classes = _classes(self.failures)
        return [
            self.mode,
            self.worker_class,
            self.scenario,
            str(len(self.records)),
            f"{lost} / {len(in_flight)}",
            during,
            str(len(self.failures)),
            classes,
            f"{self.ended_at - self.started_at:.1f}",
        ]


def _classes(records: Iterable[Record]) -> str:
    counts = collections.Counter(record.outcome for record in records)
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "none"


TABLE_HEADER = [
    "server",
    "workers",
    "scenario",
    "requests",
    "in flight at SIGTERM: lost / all",
    "sent during delay: failed / all",
    "errors",
    "errors by class",
    "load s",
]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Lines of a Markdown table, columns padded to line up in a terminal too."""
    table_rows = [list(header), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in table_rows) for i in range(len(header))]
    lines = [
        "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |"
        for row in table_rows
    ]
    lines.insert(1, "|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return lines


def graceful_env(shutdown_delay: float, drain_timeout: float = 10.0) -> dict[str, str]:
    """GRACEFUL_* settings for the instances under test."""
    return {"GRACEFUL_SHUTDOWN_DELAY": f"{shutdown_delay:g}", "GRACEFUL_DRAIN_TIMEOUT": f"{drain_timeout:g}"}


def served_by(pid: int) -> Callable[[Record], bool]:
    """A predicate: the record was answered by the Gunicorn master ``pid``."""
    return lambda record: record.served_by == str(pid)


#: Makes one unstarted instance of the server under test: (port, name, its GRACEFUL_* settings) -> instance.
MakeInstance = Callable[[int, str, dict[str, str]], Gunicorn]


def rolling_restart(
    starter: Starter,
    directory: Path,
    worker_class: str,
    *,
    graceful: bool,
    shutdown_delay: float = 4.0,
    warm_up: float = 1.0,
    cool_down: float = 1.0,
    make: MakeInstance | None = None,
) -> Run:
    """Two instances behind HAProxy under load; SIGTERM each in turn, replacement after exit (maxSurge 0).

    ``make`` builds each instance (default: a :class:`Gunicorn` of ``worker_class``; tests/asgi_harness.py
    makes Uvicorn ones, ``worker_class`` then only names the run).
    """
    env = graceful_env(shutdown_delay) if graceful else {}

    def gunicorn(port: int, name: str, env: dict[str, str]) -> Gunicorn:
        return Gunicorn(starter, port, worker_class, graceful=graceful, env=env, name=name)

    make = make or gunicorn
    ports = [free_port(), free_port()]
    instances = [make(port, HAProxy.server_name(i), env) for i, port in enumerate(ports)]
    everything: list[Gunicorn] = list(instances)
    haproxy = HAProxy(starter, directory, ports)
    try:
        for instance in instances:
            instance.start()
        for instance in instances:
            instance.wait_ready()
        haproxy.start()
        haproxy.wait_routing(instance.pid for instance in instances)
        load = LoadGenerator(haproxy.url, duration=60.0).start()
        started_at = time.monotonic()
        terminations: list[Termination] = []
        try:
            time.sleep(warm_up)
            for index, old in enumerate(instances):
                sigterm_at = old.terminate()
                returncode = old.wait_exit(timeout=shutdown_delay + 30)
                assert old.exited_at is not None
                term = Termination(old.name, old.pid, sigterm_at, old.exited_at, returncode)
                term.marked_down_at = haproxy.marked(index, "DOWN", after=sigterm_at)
                terminations.append(term)
                new = make(old.port, old.name + "'", env)
                everything.append(new)
                new.start()
                term.replacement_ready_at = new.wait_ready()
                routed = load.wait_for(served_by(new.pid), timeout=15.0)
                if routed is None:
                    raise RuntimeError(f"HAProxy never routed to {new.name} (pid {new.pid}):\n{haproxy.log()}")
                term.replacement_routed_at = routed.ended
            time.sleep(cool_down)
        finally:
            records = load.stop()
        ended_at = time.monotonic()
        logs = [haproxy.log(), *(instance.log(30) for instance in everything)]
        problems = [line for instance in everything for line in instance.problems()]
        return Run(
            ROLLING,
            worker_class,
            graceful,
            records,
            terminations,
            started_at,
            ended_at,
            logs,
            shutdown_delay,
            log_problems=problems,
        )
    finally:
        haproxy.kill()
        for instance in everything:
            instance.kill()


def direct_sigterm(
    starter: Starter,
    worker_class: str,
    *,
    graceful: bool,
    shutdown_delay: float = 3.0,
) -> Run:
    """One instance of tests/live/load_app.py under load, no load balancer: :func:`sigterm_under_load`."""
    env = graceful_env(shutdown_delay) if graceful else {}
    instance = Gunicorn(starter, free_port(), worker_class, graceful=graceful, env=env, name="direct")
    try:
        instance.start()
        instance.wait_ready()
        return sigterm_under_load(instance, shutdown_delay=shutdown_delay)
    finally:
        instance.kill()


def sigterm_under_load(
    instance: Gunicorn,
    *,
    shutdown_delay: float,
    clients: int = 24,
    warm_up: float = 1.5,
    long_ms: int = 1500,
) -> Run:
    """``instance`` (started and ready) under load; SIGTERM; the load goes on until it exits.

    Half a second before a graceful instance's delay ends (at once for plain
    Gunicorn), two ``/slow`` requests of ``long_ms`` start: they are still
    running when the listeners close and the workers are told to stop, so
    the drain has real work. ``/readyz`` and ``/livez`` are probed through
    the delay. Bounded by the load generator's own bounds and the exit wait.
    """
    load = LoadGenerator(instance.url, clients=clients, duration=shutdown_delay + 60.0).start()
    started_at = time.monotonic()
    probes: list[Probe] = []
    try:
        time.sleep(warm_up)
        sigterm_at = instance.terminate()
        prober = threading.Thread(
            target=lambda: probes.extend(probe_health(instance.port, sigterm_at, sigterm_at + shutdown_delay)),
            name="probe-health",
            daemon=True,
        )
        prober.start()
        if instance.graceful:
            time.sleep(max(0.0, shutdown_delay - 0.5))
        for _ in range(2):
            load.one_off(f"/slow?ms={long_ms}&bytes={load.slow_bytes}", load.slow_bytes)
        returncode = instance.wait_exit(timeout=shutdown_delay + 30)
        prober.join(shutdown_delay + 5)
    finally:
        records = load.stop()
    assert instance.exited_at is not None
    term = Termination(instance.name, instance.pid, sigterm_at, instance.exited_at, returncode)
    return Run(
        DIRECT,
        instance.worker_class,
        instance.graceful,
        records,
        [term],
        started_at,
        time.monotonic(),
        [instance.log(40)],
        shutdown_delay,
        probes,
        instance.problems(),
    )


def assert_nothing_lost(run: Run, delay_edge: float) -> None:
    """Exit 0; every request in flight at SIGTERM, sent during the delay, or long past it, succeeded."""
    assert run.terminations[0].returncode == 0, run.describe()
    in_flight = run.in_flight_at_sigterm()
    assert in_flight, "no request was in flight at SIGTERM"
    assert all(r.ok for r in in_flight), run.describe(in_flight)
    during = run.sent_during_delay(delay_edge)
    assert len(during) > 20, "too few requests sent during the delay to tell"
    assert all(r.ok for r in during), run.describe(during)
    # The two long requests outlive the delay: the listeners close and the workers stop under them.
    long = [r for r in run.records if r.client == -1]
    assert len(long) == 2 and all(r.ok for r in long), run.describe(long)
    assert all(r.ended > run.terminations[0].sigterm_at + run.delay_window for r in long)
