"""A rolling update behind a model of kube-proxy, run inside a network namespace of its own.

    ip netns exec NS python tests/live/kubeproxy_model.py --mode adaptive --lag 0.5:2

Run by tests/test_adaptive_delay.py and bench/adaptive_delay.py, which make the
namespace (``ip netns add``, loopback up) and remove it; everything here stays
inside it, on 127.x addresses:

* the Service is 127.0.2.1:80; each pod is a Gunicorn on 127.0.1.N:8000
  (tests/live/load_app.py; ``--mode plain`` without graceful, ``fixed`` with
  the fixed delay, ``adaptive`` with the floor), or with ``--server uvicorn``
  one Uvicorn process serving tests/live/asgi_load_app.py (``graceful serve``,
  or plain ``uvicorn`` in ``--mode plain``);
* kube-proxy is the nat table's OUTPUT chain: the Service DNAT'd to its ready
  endpoints with ``statistic --mode random`` (iptables-restore rewrites it
  atomically, as kube-proxy does); conntrack keeps an established connection
  on its pod after the pod's endpoint is removed, so keep-alive clients go on
  reaching a terminating pod until it answers ``Connection: close``;
* a rolling update of three pods with maxSurge 1: a new pod starts, becomes
  ready and is added; an old pod gets SIGTERM and its endpoint is removed a
  lag later (``--lag MIN:MAX`` seconds, drawn per pod: watch latency plus
  kube-proxy's sync, or a slow balancer);
* clients (``--clients``) send GET /fast through the Service for the whole
  rollout, each at most ``--max-requests`` requests, with a pause drawn from
  ``--pause MIN:MAX`` seconds between two, over keep-alive connections each
  used for ``--reuse MIN:MAX`` requests (many clients behind few threads: new
  connections keep coming, as they do from real users; a thread that kept one
  connection for ever would stay on a new pod once there and starve the old
  ones before their endpoints are removed), and no retries (kube-proxy does
  not retry).

Prints one JSON object: per old pod its SIGTERM, endpoint removal and exit
times and the last request it served (seconds since its SIGTERM), how its
delay ended (the shutdown record's ``delay``, graceful's modes only), and the
clients' results (ok, errors by kind). Every wait is bounded; every process
started here is in this process's group and is stopped before it exits.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from tests.asgi_harness import ASGI_APP, GRACEFUL_SERVE  # noqa: E402
from tests.e2e_harness import GRACEFUL_CONF, LIVE, _gunicorn_supports, clean_env  # noqa: E402

SERVICE = ("127.0.2.1", 80)
POD_PORT = 8000
#: Upper bound (s) on the whole run: a bug must not hold the caller's CI.
RUN_LIMIT = 120.0


def span(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    return float(low), float(high or low)


def gunicorn_argv(host: str, mode: str) -> list[str]:
    """A Gunicorn pod's command line (gthread, one worker), graceful's config unless ``plain``."""
    argv = [sys.executable, "-m", "gunicorn"]
    if mode != "plain":
        argv += ["-c", str(GRACEFUL_CONF)]
    argv += ["--pythonpath", str(LIVE), "-b", f"{host}:{POD_PORT}", "-k", "gthread", "-w", "1"]
    argv += ["--threads", "8", "--log-level", "warning"]
    if _gunicorn_supports("control_socket_disable"):
        argv.append("--no-control-socket")
    return [*argv, "load_app:app"]


def uvicorn_argv(host: str, mode: str, serve_command: list[str]) -> list[str]:
    """A Uvicorn pod's command line (one process): ``serve_command`` unless ``plain``, then plain Uvicorn."""
    if mode != "plain":
        return [*serve_command, "-b", f"{host}:{POD_PORT}", "--no-access-log", "--log-level", "warning", ASGI_APP]
    argv = [sys.executable, "-m", "uvicorn", "--host", host, "--port", str(POD_PORT)]
    return [*argv, "--no-access-log", "--log-level", "warning", ASGI_APP]


class Pod:
    """One "pod" on 127.0.1.``index``:8000: a Gunicorn (``argv`` says) or a Uvicorn process."""

    def __init__(
        self, index: int, argv: list[str], env: dict[str, str], records: Path | None, quit: signal.Signals
    ) -> None:
        self.index = index
        #: What stops it at once at the run's end (a Gunicorn master: SIGQUIT, its workers too).
        self.quit = quit
        self.host = f"127.0.1.{index}"
        env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(LIVE)])}
        #: Its shutdown record (GRACEFUL_REPORT_FILE), under graceful.
        self.record = None if records is None else records / f"pod-{index}.json"
        if self.record is not None:
            env["GRACEFUL_REPORT_FILE"] = str(self.record)
        # Its log goes to a file, not a pipe nobody reads while it serves (a full pipe would stop it).
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the process, at exit)
        self.proc = subprocess.Popen(argv, env=clean_env(env), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log)
        self.sigterm_at: float | None = None
        self.removed_at: float | None = None
        self.exited_at: float | None = None

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pod {self.host} exited at start: {self.log_tail()}")
            try:
                conn = http.client.HTTPConnection(self.host, POD_PORT, timeout=1)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            except OSError:
                pass
            threading.Event().wait(0.05)
        raise RuntimeError(f"pod {self.host} not ready within {timeout:g}s")

    def delay(self) -> dict[str, object] | None:
        """How its shutdown delay ended (its record's ``delay``), or None (plain, or no record)."""
        if self.record is None or not self.record.exists():
            return None
        delay: dict[str, object] | None = json.loads(self.record.read_text()).get("delay")
        return delay

    def log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-1500:]

    def terminate(self) -> None:
        self.sigterm_at = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        threading.Thread(target=self._wait_exit, daemon=True).start()

    def _wait_exit(self) -> None:
        try:
            self.proc.wait(timeout=RUN_LIMIT)
        except subprocess.TimeoutExpired:
            return
        self.exited_at = time.monotonic()


class Service:
    """The Service's DNAT rules over its ready endpoints (kube-proxy's iptables mode, in miniature)."""

    def __init__(self) -> None:
        self.endpoints: list[Pod] = []
        self.lock = threading.Lock()

    def add(self, pod: Pod) -> None:
        with self.lock:
            self.endpoints.append(pod)
            self._apply()

    def remove(self, pod: Pod) -> None:
        with self.lock:
            self.endpoints.remove(pod)
            pod.removed_at = time.monotonic()
            self._apply()

    def _apply(self) -> None:
        lines = ["*nat", ":OUTPUT ACCEPT [0:0]", ":KUBE-SVC - [0:0]"]
        lines += [f":KUBE-SEP-{p.index} - [0:0]" for p in self.endpoints]
        ip, port = SERVICE
        lines.append(f"-A OUTPUT -d {ip}/32 -p tcp --dport {port} -j KUBE-SVC")
        count = len(self.endpoints)
        for n, pod in enumerate(self.endpoints):
            left = count - n
            chance = "" if left == 1 else f"-m statistic --mode random --probability {1 / left:.5f} "
            lines.append(f"-A KUBE-SVC {chance}-j KUBE-SEP-{pod.index}")
            lines.append(f"-A KUBE-SEP-{pod.index} -p tcp -j DNAT --to-destination {pod.host}:{POD_PORT}")
        if not count:  # no endpoint: kube-proxy rejects
            lines.append("-A KUBE-SVC -j DROP")
        lines.append("COMMIT")
        subprocess.run(["iptables-restore"], input="\n".join(lines) + "\n", text=True, check=True, timeout=10)


class Client(threading.Thread):
    """One client: requests through the Service until stopped or at its bound; no retries."""

    def __init__(self, seed: int, pause: tuple[float, float], reuse: tuple[float, float], max_requests: int) -> None:
        super().__init__(daemon=True)
        self.rng = random.Random(seed)
        self.pause = pause
        self.reuse = reuse
        self.max_requests = max_requests
        self.stop = threading.Event()
        #: (monotonic time sent, master pid that answered or 0, error kind or "")
        self.results: list[tuple[float, int, str]] = []

    def run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        uses = 0
        for _ in range(self.max_requests):
            if self.stop.is_set():
                break
            if conn is None:
                conn = http.client.HTTPConnection(*SERVICE, timeout=10)
                uses = round(self.rng.uniform(*self.reuse))
            uses -= 1
            sent = time.monotonic()
            try:
                conn.request("GET", "/fast", headers={} if uses > 0 else {"Connection": "close"})
                response = conn.getresponse()
                body = response.read()
                pid = int(response.getheader("X-Master-Pid", "0"))
                ok = response.status == 200 and len(body) == 256
                self.results.append((sent, pid, "" if ok else f"status {response.status}"))
                if response.will_close or uses <= 0:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as exc:
                self.results.append((sent, 0, type(exc).__name__))
                conn.close()
                conn = None
            low, high = self.pause
            self.stop.wait(self.rng.uniform(low, high))
        if conn is not None:
            conn.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("plain", "fixed", "adaptive"), required=True)
    parser.add_argument("--server", choices=("gunicorn", "uvicorn"), default="gunicorn")
    parser.add_argument(
        "--serve-command",
        type=shlex.split,
        default=list(GRACEFUL_SERVE),
        help="graceful's Uvicorn side (--server uvicorn, not plain): the command the bind address and app follow",
    )
    parser.add_argument("--lag", type=span, default=(0.5, 2.0))
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--pause", type=span, default=(0.005, 0.02))
    parser.add_argument("--reuse", type=span, default=(1, 20), help="requests per connection")
    parser.add_argument("--max-requests", type=int, default=20_000)
    parser.add_argument("--delay", type=float, default=5.0, help="GRACEFUL_SHUTDOWN_DELAY (the maximum if adaptive)")
    parser.add_argument("--floor", type=float, default=1.0, help="GRACEFUL_SHUTDOWN_DELAY_MIN (adaptive only)")
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    # The pods' shutdown records, removed with the folder whatever happens.
    with tempfile.TemporaryDirectory(prefix="kubeproxy-model-") as folder:
        return rollout(args, None if args.mode == "plain" else Path(folder))


def rollout(args: argparse.Namespace, records: Path | None) -> int:
    """The rolling update, its figures printed as JSON; ``records``: the folder of the pods' shutdown records."""
    started = time.monotonic()
    rng = random.Random(args.seed)
    env = {
        "GRACEFUL_SHUTDOWN_DELAY": f"{args.delay:g}",
        "GRACEFUL_DRAIN_TIMEOUT": "5",
        "GRACEFUL_HOOK_TIMEOUT": "2",
        "GRACEFUL_GRACE_PERIOD": f"{args.delay + 10:g}",
        "GRACEFUL_TERMINATION_LOG": "",
    }
    if args.mode == "adaptive":
        env["GRACEFUL_SHUTDOWN_DELAY_MIN"] = f"{args.floor:g}"

    def make_pod(index: int) -> Pod:
        host = f"127.0.1.{index}"
        if args.server == "uvicorn":
            return Pod(index, uvicorn_argv(host, args.mode, args.serve_command), env, records, signal.SIGKILL)
        return Pod(index, gunicorn_argv(host, args.mode), env, records, signal.SIGQUIT)

    service = Service()
    old = [make_pod(i + 1) for i in range(args.pods)]
    new: list[Pod] = []
    clients: list[Client] = []
    timers: list[threading.Timer] = []
    try:
        for pod in old:
            pod.wait_ready(30)
            service.add(pod)
        clients = [Client(args.seed * 100 + i, args.pause, args.reuse, args.max_requests) for i in range(args.clients)]
        for client in clients:
            client.start()
        threading.Event().wait(1.0)  # steady traffic before the rollout
        rollout_began = time.monotonic()
        for i, pod in enumerate(old):
            surge = make_pod(args.pods + i + 1)
            new.append(surge)
            surge.wait_ready(30)
            service.add(surge)
            pod.terminate()
            timer = threading.Timer(rng.uniform(*args.lag), service.remove, (pod,))
            timers.append(timer)
            timer.start()
        limit = started + RUN_LIMIT
        pause = threading.Event()
        while any(p.exited_at is None for p in old) and time.monotonic() < limit:
            pause.wait(0.05)
        for timer in timers:  # each removal fires even when its pod exited first
            timer.join(max(0.0, limit - time.monotonic()))
        rollout_ended = max((p.exited_at or time.monotonic()) for p in old)
        pause.wait(0.5)  # traffic on the new pods after the last old one left
    finally:
        for client in clients:
            client.stop.set()
        for client in clients:
            client.join(15)
        for timer in timers:
            timer.cancel()
        for pod in old + new:
            if pod.proc.poll() is None:
                pod.proc.send_signal(signal.SIGKILL if pod in old else pod.quit)
        for pod in old + new:
            try:
                pod.proc.wait(10)
            except subprocess.TimeoutExpired:
                pod.proc.kill()
    results = [r for c in clients for r in c.results]
    errors: dict[str, int] = {}
    for _, _, error in results:
        if error:
            errors[error] = errors.get(error, 0) + 1
    pods = []
    for pod in old:
        assert pod.sigterm_at is not None
        served = [sent for sent, pid, error in results if pid == pod.proc.pid and not error]

        def since(moment: float | None, pod: Pod = pod) -> float | None:
            return None if moment is None or pod.sigterm_at is None else round(moment - pod.sigterm_at, 3)

        pods.append(
            {
                "pod": pod.host,
                "removed_s": since(pod.removed_at),
                "exit_s": since(pod.exited_at),
                "last_request_s": since(max(served, default=None)),
                "exit_code": pod.proc.returncode,
                "delay": pod.delay(),
                "log_tail": pod.log_tail() if pod.exited_at is None or pod.proc.returncode else "",
            }
        )
    exits = [p["exit_s"] for p in pods if p["exit_s"] is not None]
    print(
        json.dumps(
            {
                "mode": args.mode,
                "lag": args.lag,
                "requests": len(results),
                "ok": sum(1 for r in results if not r[2]),
                "errors": errors,
                "pods": pods,
                "exit_median_s": statistics.median(exits) if exits else None,
                "rollout_s": round(rollout_ended - rollout_began, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
