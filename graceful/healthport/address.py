"""The health port's address (``GRACEFUL_HEALTH_BIND``, ``--health-bind``): parsing it and binding it.

Accepted forms::

    0.0.0.0:8081        every IPv4 interface: what a kubelet's httpGet probe needs (it probes the pod IP)
    127.0.0.1:8081      loopback only (a sidecar, an exec probe)
    [::]:8081           every IPv6 interface (and IPv4 too, where the kernel maps it)
    [::1]:8081          IPv6 loopback
    localhost:8081      a host name, resolved when binding
    unix:/run/app.sock  a Unix socket (curl --unix-socket; a kubelet's httpGet cannot reach it)
    (empty)             off: the default

``:8081`` is refused: Gunicorn reads ``--bind :8000`` as every interface and
``graceful serve`` as 127.0.0.1, where a kubelet's probe never arrives, so
the health port does not guess: the host must be written out. Port 0 picks a
free port (tests; the port chosen is logged).

Parsing runs wherever a config is built (:mod:`graceful.core.config`
validates the setting with :func:`parse_address`); binding runs in the
process that serves the port (the Gunicorn master, ``graceful serve``), on
its main thread at start-up, or on the port's thread when it retries an
address in use.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
import stat

__all__ = ["ALLOWED", "BACKLOG", "HealthAddress", "parse_address"]

#: What an error message says is allowed.
ALLOWED = "HOST:PORT (such as 0.0.0.0:8081, 127.0.0.1:8081 or [::1]:8081), unix:PATH, or empty (off)"

#: The listen backlog: room for a burst (1,000 connections opened at once by other pods) while the port's
#: thread takes them, so that no SYN, a probe's included, is dropped and retried a second later. The kernel
#: caps it at net.core.somaxconn (4096 since Linux 5.4, 128 before).
BACKLOG = 4096

#: The longest Unix socket path Linux takes (sun_path is 108 bytes with its NUL).
_MAX_UNIX_PATH = 107

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_PORT = re.compile(r"[0-9]{1,5}")

#: Gunicorn's own default port, for a ``bind`` entry that names no port.
_GUNICORN_DEFAULT_PORT = 8000


@dataclasses.dataclass(frozen=True)
class HealthAddress:
    """A parsed health address: ``host`` and ``port``, or ``path`` for a Unix socket."""

    host: str = ""
    port: int = 0
    path: str | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def conflicts_with(self, bind: str) -> bool:
        """True when Gunicorn's ``bind`` entry uses this port (TCP) or this path (unix): a start-up error.

        TCP ports are compared whatever the hosts, as binding ``127.0.0.1:8000``
        fails while Gunicorn listens on ``0.0.0.0:8000``. Port 0 conflicts with
        nothing; ``fd://`` entries are not known here.
        """
        text = bind.strip()
        if text.startswith("unix:"):
            other = text.removeprefix("unix:").removeprefix("//")
            return self.path is not None and os.path.abspath(other) == os.path.abspath(self.path)
        if self.path is not None or self.port == 0 or text.startswith("fd://"):
            return False
        text = text.removeprefix("tcp://").removeprefix("http://")
        host, sep, port_text = text.rpartition(":")
        if not sep or host.endswith(":") or (host.startswith("[") is not host.endswith("]")):
            return self.port == _GUNICORN_DEFAULT_PORT  # a bare host: Gunicorn's default port
        return port_text.isdigit() and int(port_text) == self.port

    def bind(self) -> socket.socket:
        """Create, bind and listen: non-blocking, close-on-exec. Raises OSError (EADDRINUSE: taken)."""
        if self.path is not None:
            self._remove_stale_unix_socket()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: str | tuple[object, ...] = self.path
        else:
            family, _, _, _, target = socket.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            # A restarted server may bind while old connections sit in TIME_WAIT. Never SO_REUSEPORT:
            # one process answers on the port (two would split the probes and reset each other's queue).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(target)
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    def _remove_stale_unix_socket(self) -> None:
        """Unlink a Unix socket file nobody listens on (left by a killed server); keep a live one."""
        assert self.path is not None
        try:
            if not stat.S_ISSOCK(os.stat(self.path).st_mode):
                return  # not a socket: bind() fails with EADDRINUSE, which says so
        except FileNotFoundError:
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.path)
        except ConnectionRefusedError:
            os.unlink(self.path)
        except OSError:
            return  # gone meanwhile, or not ours to judge: bind() says what is wrong
        finally:
            probe.close()


def parse_address(source: str, raw: object) -> HealthAddress | None:
    """Parse ``raw`` (a setting named ``source`` in the message); None when empty (off).

    Raises ``ValueError`` naming ``source``, the value and what is allowed.
    """
    if not isinstance(raw, str):
        raise ValueError(f"{source}={raw!r} is not allowed: expected {ALLOWED}")
    text = raw.strip()
    if not text:
        return None
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not _unix_path_fits(path):
            raise ValueError(
                f"{source}={raw!r} is not allowed: a Unix socket path of 1-{_MAX_UNIX_PATH} bytes; expected {ALLOWED}"
            )
        return HealthAddress(path=path)
    host, sep, port_text = text.rpartition(":")
    if not sep or not _PORT.fullmatch(port_text) or int(port_text) > 65535:
        raise ValueError(f"{source}={raw!r} is not allowed: expected {ALLOWED}")
    port = int(port_text)
    if not host:
        raise ValueError(
            f"{source}={raw!r} is not allowed: write the host (Gunicorn reads :PORT as every interface, graceful"
            f" serve as 127.0.0.1, so the health port does not guess): 0.0.0.0:{port} (every interface, where a"
            f" kubelet's probe arrives) or 127.0.0.1:{port} (this machine only)"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not _is_ip(host, 6):
            raise ValueError(f"{source}={raw!r} is not allowed: {host!r} is no IPv6 address; expected {ALLOWED}")
    elif ":" in host:
        raise ValueError(f"{source}={raw!r} is not allowed: write an IPv6 address in brackets, as in [::1]:{port}")
    elif not _HOST_NAME.fullmatch(host) or (host.replace(".", "").isdigit() and not _is_ip(host, 4)):
        raise ValueError(f"{source}={raw!r} is not allowed: {host!r} is no host name or address; expected {ALLOWED}")
    return HealthAddress(host=host, port=port)


def _unix_path_fits(path: str) -> bool:
    """1-107 bytes as the kernel sees them and no NUL; a path that cannot be encoded does not fit."""
    try:
        encoded = os.fsencode(path)
    except UnicodeError:
        return False
    return 0 < len(encoded) <= _MAX_UNIX_PATH and b"\0" not in encoded


def _is_ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False
