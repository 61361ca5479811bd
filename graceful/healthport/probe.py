"""``graceful probe livez|readyz|healthz``: one GET to the health port, as an exec probe or Docker's HEALTHCHECK.

    graceful probe readyz                              # GRACEFUL_HEALTH_BIND, else 127.0.0.1:8000
    graceful probe livez --address 127.0.0.1:8081 --timeout 2
    python -m graceful probe healthz --address unix:/run/app/health.sock

Exit status 0 on a 200; 1 on anything else (a 503, another status, refused,
no answer within the timeout, not HTTP); 2 on bad usage (the command line).
One line on standard output says what happened. Standard library only and a
fresh connection each time, so a distroless image with nothing but Python
runs it; one second by default, Kubernetes' ``timeoutSeconds``.

Where it asks: ``--address``, else ``GRACEFUL_HEALTH_BIND`` (the container's
environment is the server's, so the probe finds the port the server binds),
else ``127.0.0.1:8000``, the default bind of Gunicorn and of ``graceful
serve``, whose app port answers the same paths (through a worker: busy
workers make it time out, which the health port avoids). A wildcard host
(``0.0.0.0``, ``[::]``) is asked on loopback (``127.0.0.1``, ``[::1]``).
Runs in its own short process: nothing here is shared.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable, Mapping

from graceful.healthport.address import HealthAddress, parse_address

__all__ = ["DEFAULT_TIMEOUT", "ENDPOINTS", "ENV", "FALLBACK", "Outcome", "probe", "resolve"]

ENDPOINTS = ("livez", "readyz", "healthz")
#: Seconds for the whole exchange, connect to the last byte.
DEFAULT_TIMEOUT = 1.0
#: The variable naming the health port.
ENV = "GRACEFUL_HEALTH_BIND"
#: Where to ask when neither --address nor GRACEFUL_HEALTH_BIND says: the app's port, by default.
FALLBACK = "127.0.0.1:8000"
#: The most of an answer read (a probe's answer is a few hundred bytes; a verbose 503 a few KB).
_MAX_ANSWER = 65536
_LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one probe found: the HTTP status (None: no answer) and the line to print."""

    status: int | None
    line: str

    @property
    def exit_status(self) -> int:
        """0 for a 200, else 1."""
        return 0 if self.status == 200 else 1


def resolve(address: str | None, environ: Mapping[str, str]) -> HealthAddress:
    """The address to ask: ``address`` (--address), else GRACEFUL_HEALTH_BIND, else FALLBACK; wildcards on loopback.

    Raises ``ValueError`` naming the option or the variable, its value and what is allowed.
    """
    if address is not None:
        parsed = parse_address("--address", address)
        if parsed is None:
            raise ValueError(f"--address={address!r} is not allowed: give an address, such as 127.0.0.1:8081")
    else:
        parsed = parse_address(ENV, environ.get(ENV, "")) or parse_address("fallback", FALLBACK)
        assert parsed is not None
    if parsed.path is None and parsed.host in _LOOPBACK:
        return HealthAddress(_LOOPBACK[parsed.host], parsed.port)
    return parsed


def probe(
    endpoint: str, address: HealthAddress, timeout: float, clock: Callable[[], float] = time.monotonic
) -> Outcome:
    """GET ``/endpoint`` at ``address`` on a fresh connection, all of it within ``timeout`` seconds."""
    started = clock()
    deadline = started + timeout
    try:
        answer = _exchange(endpoint, address, deadline, clock)
    except ConnectionRefusedError:
        return Outcome(None, f"{endpoint}: connection refused by {address}")
    except TimeoutError:
        return Outcome(None, f"{endpoint}: no answer from {address} within {timeout:g}s")
    except OSError as exc:
        return Outcome(None, f"{endpoint}: cannot ask {address}: {exc.strerror or exc}")
    elapsed_ms = (clock() - started) * 1000
    status = _status(answer)
    if status is None:
        return Outcome(None, f"{endpoint}: not an HTTP answer from {address}")
    where = f"from {address} in {elapsed_ms:.0f} ms"
    if status == 200:
        return Outcome(status, f"{endpoint}: 200 ok {where}")
    failing = _failing(answer)
    return Outcome(status, f"{endpoint}: {status} {where}" + (f" (failing: {', '.join(failing)})" if failing else ""))


def _exchange(endpoint: str, address: HealthAddress, deadline: float, clock: Callable[[], float]) -> bytes:
    """Connect, send the request, read until the server closes (or the answer is whole); raise on the deadline."""

    def remaining() -> float:
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError
        return left

    if address.path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(remaining())
        try:
            sock.connect(address.path)
        except BaseException:
            sock.close()
            raise
        host = "localhost"
    else:
        sock = socket.create_connection((address.host, address.port), timeout=remaining())
        host = str(address)
    with sock:
        request = f"GET /{endpoint} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: graceful-probe\r\nConnection: close\r\n\r\n"
        sock.settimeout(remaining())
        sock.sendall(request.encode("latin-1"))
        answer = bytearray()
        while len(answer) < _MAX_ANSWER and not _whole(answer):
            sock.settimeout(remaining())
            chunk = sock.recv(_MAX_ANSWER - len(answer))
            if not chunk:
                break
            answer += chunk
        return bytes(answer)


def _whole(answer: bytearray) -> bool:
    """Whether the headers and a body of their Content-Length have arrived (a keep-alive server need not close)."""
    end = answer.find(b"\r\n\r\n")
    if end < 0:
        return False
    for line in bytes(answer[:end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(answer) - end - 4 >= int(value)
    return False


def _status(answer: bytes) -> int | None:
    """The status code of ``HTTP/1.x NNN ...``, or None."""
    parts = answer.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not (len(parts[1]) == 3 and parts[1].isdigit()):
        return None
    return int(parts[1])


def _failing(answer: bytes) -> list[str]:
    """The checks a verbose listing marks ``[-]name failed``, at most five."""
    body = answer.partition(b"\r\n\r\n")[2].decode("utf-8", "replace")
    names = [line[3:].split(" ", 1)[0] for line in body.splitlines() if line.startswith("[-]")]
    return names[:5] + (["..."] if len(names) > 5 else [])
