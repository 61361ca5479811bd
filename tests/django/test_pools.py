"""Django's connection pools under real Gunicorn and a real PostgreSQL: closed by each worker's cleanup.

The test project with ``GT_PG_PORT`` uses PostgreSQL through Django's pool
(OPTIONS ``{"pool": {...}}``, Django 5.1+, psycopg[pool]) on a private
cluster (tests/django/postgres.py). Each worker names its connections
``graceful-test-<pid>``; at its very end (atexit, after graceful's cleanup
tasks) the probe app counts them in ``pg_stat_activity`` from a connection
of its own. The tox envs django52 and django61 run this module.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import django
import pytest
import requests

from tests.conftest import Processes
from tests.django.postgres import Cluster, need, running_cluster
from tests.django.project import DJANGO_CONF, GUNICORN, PROJECT, project_env
from tests.e2e_harness import free_port
from tests.gunicorn.test_gunicorn import WORKERS, Server, _has_control_socket

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn]

#: Generous on a loaded 2-core machine (0.4-1.4 s seen), and still below the 5 s psycopg_pool's
#: close (or its __del__, for a pool left open) may wait for each pool's threads.
PROMPT_EXIT = 4.0
#: A pool's log line in a worker's cleanup.
POOL_CLOSED = r"graceful: closed Django's connection pool 'default' in pid (\d+)"


@pytest.fixture(scope="module")
def postgres() -> Iterator[Cluster]:
    """One private cluster for the module; a Django without pools, or no psycopg[pool], skips or fails (CI)."""
    if django.VERSION < (5, 1):
        pytest.skip(f"Django {django.get_version()} has no connection pools (5.1+)")
    try:
        import psycopg_pool  # noqa: F401 -- the pool Django uses
    except ImportError:
        need("psycopg[pool]", "pip install 'psycopg[pool]' (the django52 and django61 tox envs have it)")
    with running_cluster() as cluster:
        yield cluster


def test_each_worker_closes_its_pool_and_exits_promptly(
    postgres: Cluster, processes: Processes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two gthread workers serve through their pools; on SIGTERM each closes its pool in its cleanup: at its exit
    the server sees none of its connections, and the master is gone soon after the last pool closed."""
    port = free_port()
    argv = [GUNICORN, "-c", DJANGO_CONF, "-b", f"127.0.0.1:{port}", *WORKERS["gthread"], "testsite.wsgi"]
    if _has_control_socket():  # tests must not share ~/.gunicorn/gunicorn.ctl
        argv[1:1] = ["--no-control-socket"]
    env = project_env(tmp_path, {"SHUTDOWN_DELAY": 0.5}, GT_PG_PORT=str(postgres.port))
    server = Server(processes.start(argv, env=env, cwd=PROJECT), port)
    server.wait_ready()
    served = {int(requests.get(server.url + "/pid", timeout=15).text) for _ in range(20)}
    workers = {int(m.group(1)) for line in server.matching("Booting worker") if (m := re.search(r"pid: (\d+)", line))}
    assert served and served <= workers
    # Both workers' pools hold connections now (min_size 2 each, opened by a request or /readyz's check).
    open_before = {name for name, _ in postgres.connections("graceful-test-")}
    assert {f"graceful-test-{pid}" for pid in served} <= open_before

    server.term()
    server.wait_for(POOL_CLOSED, timeout=30, count=len(workers))
    last_pool_closed = time.monotonic()
    assert server.exit_code(30) == 0
    after_last_pool = time.monotonic() - last_pool_closed

    closed_in = {int(m.group(1)) for line in server.matching(POOL_CLOSED) if (m := re.search(POOL_CLOSED, line))}
    assert closed_in == workers
    at_exit = {pid: json.loads((tmp_path / "markers" / f"pg-{pid}").read_text()) for pid in workers}
    assert all(seen["connections"] == 0 for seen in at_exit.values()), at_exit
    with capsys.disabled():  # shown without -s, as a benchmark's figures
        print(
            f"\npool: master gone {after_last_pool:.3f}s after the last worker closed its pool;"
            f" at exit the server saw each worker's connections gone within"
            f" {max(seen['waited'] for seen in at_exit.values()):.3f}s"
        )
    assert after_last_pool < PROMPT_EXIT
    assert postgres.connections("graceful-test-") == []
