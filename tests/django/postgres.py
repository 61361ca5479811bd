"""A private PostgreSQL cluster for one test module: initdb in a temporary folder, the server on 127.0.0.1.

Debian's ``postgresql`` package provides the server (``/usr/lib/postgresql/<version>/bin``);
psycopg[pool] talks to it. Where either is missing, :func:`need` fails the test under
``CI=true`` (CI installs them: ``.ci/run``, the tox envs' deps) and skips it elsewhere,
naming the package. The server runs as the ``postgres`` user when the tests run as root
(PostgreSQL refuses root), as the current user otherwise; it listens on 127.0.0.1 at a free
port and on a unix socket in its folder, and is stopped by PID (fast shutdown, then SIGKILL
of its process group) and its folder removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.conftest import read_until
from tests.e2e_harness import free_port

#: The Debian package with the server, as the skip and failure messages name it.
PACKAGE = "postgresql"
#: Bound on initdb and on the server's start and stop.
START_TIMEOUT = 60.0


def need(what: str, how: str) -> NoReturn:
    """Fail under CI=true (CI must have ``what``), skip elsewhere; both name ``how`` to get it."""
    message = f"{what} is not installed: {how}"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def server_bin() -> Path | None:
    """The folder with initdb and postgres: on PATH, or the newest /usr/lib/postgresql/<version>/bin."""
    on_path = shutil.which("initdb")
    if on_path is not None:
        return Path(on_path).resolve().parent
    found = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    found.sort(key=lambda folder: [int(part) for part in re.findall(r"\d+", folder.parent.name)])
    return found[-1] if found else None


class Cluster:
    """One running server: ``port`` on 127.0.0.1, superuser ``postgres``, trust authentication."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        # Not pytest's tmp_path: its parents are private to root, and the server may run as postgres.
        self.folder = Path(tempfile.mkdtemp(prefix="graceful-pg-"))
        self.port = free_port()
        self._user: dict[str, Any] = {}
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                need("the postgres user", f"apt-get install {PACKAGE} creates it")
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            self._user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """initdb, then the server; return once it accepts connections (bounded by START_TIMEOUT)."""
        data = self.folder / "data"
        subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8"],
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT,
            cwd=self.folder,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            **self._user,
        )
        argv = [str(self.bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(self.port)]
        argv += ["-k", str(self.folder), "-c", "fsync=off", "-c", "max_connections=30"]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self.folder,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            start_new_session=True,
            **self._user,
        )
        read_until(self.proc, "ready to accept connections", timeout=START_TIMEOUT)

    def stop(self) -> None:
        """Fast shutdown (SIGINT) by PID, SIGKILL of its group if it lingers; remove the folder."""
        proc = self.proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def connections(self, application_name_prefix: str) -> list[tuple[str, str]]:
        """``(application_name, state)`` of every connection whose name starts so, seen from a connection of our own."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres") as conn:
            rows = conn.execute(
                "SELECT application_name, coalesce(state, '') FROM pg_stat_activity"
                " WHERE starts_with(application_name, %s) ORDER BY 1",
                [application_name_prefix],
            ).fetchall()
        return [(str(name), str(state)) for name, state in rows]


@contextlib.contextmanager
def running_cluster() -> Iterator[Cluster]:
    """A started cluster, stopped at the end whatever happens; fails or skips (see :func:`need`) without a server."""
    bindir = server_bin()
    if bindir is None:
        need("PostgreSQL's server", f"apt-get install {PACKAGE} (the Debian package)")
    cluster = Cluster(bindir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
