"""Flask app factories under real Gunicorn and `graceful serve`: Flask's tutorial pattern (tests/live/flaskr).

Two factories: ``create_app()`` knows nothing of graceful (the server wraps
the app), ``create_app(with_graceful=True)`` calls ``Graceful(app)`` inside
(its own readiness check ``db``; ``/uncounted/...`` long-running). Either way
each request is handled by one middleware: the app's own when it has one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.app_harness import AppGunicorn
from tests.conftest import LIVE, ROOT, Processes
from tests.e2e_harness import DELAY_EDGE, assert_nothing_lost, free_port, sigterm_under_load
from tests.gunicorn.test_gunicorn import WORKERS, Server, _has_control_socket
from tests.serve.test_server import Served

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
FLASK = str(Path(sys.executable).with_name("flask"))

PLAIN = "flaskr:create_app()"
WITH_GRACEFUL = "flaskr:create_app(with_graceful=True)"
FACTORIES = pytest.mark.parametrize("spec", [PLAIN, WITH_GRACEFUL], ids=["plain-factory", "factory-with-graceful"])


@pytest.fixture
def flaskr_env(tmp_path: Path) -> dict[str, str]:
    """The environment with a fresh tutorial database (made by the tutorial's own `flask init-db`)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
    env.update(
        PYTHONPATH=f"{ROOT}:{LIVE}",
        PYTHONUNBUFFERED="1",
        FLASK_DATABASE=str(tmp_path / "flaskr.sqlite"),
        GRACEFUL_SHUTDOWN_DELAY="0.5",
    )
    out = subprocess.run(
        [FLASK, "--app", "flaskr", "init-db"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.stdout.strip() == "Initialized the database.", out.stderr
    return env


def get(server: Server | Served, path: str, session: requests.Session | None = None) -> requests.Response:
    return (session or requests).get(server.url + path, timeout=15)


def exercise(server: Server | Served, spec: str) -> None:
    """The tutorial's requests work; /readyz lists the app's own check only with its Graceful; one count per request.

    One keep-alive connection: a server ends a response (close()) before it
    reads the next request of the connection, so no earlier request is still
    counted when /in-flight runs (a client may see a whole response before
    the server has closed it).
    """
    with requests.Session() as session:
        verbose = get(server, "/readyz?verbose", session).text
        assert ("[+]db ok" in verbose) is (spec == WITH_GRACEFUL), verbose
        created = session.post(server.url + "/create", data={"title": "hello", "body": "world"}, timeout=15)
        assert created.status_code == 201
        assert get(server, "/", session).text == f"{created.text}\thello\n"
        assert session.post(server.url + "/create", data={"body": "no title"}, timeout=15).status_code == 400
        # Counted once, by one middleware (two would count 2, or neither 0) ...
        assert get(server, "/in-flight", session).text == "1"
        # ... and it is the app's own when it has one: its long_running option is in force.
        assert get(server, "/uncounted/in-flight", session).text == ("0" if spec == WITH_GRACEFUL else "1")


@pytest.mark.e2e
@pytest.mark.gunicorn
class TestFactoryUnderGunicorn:
    # Each factory once, each worker class once: whose middleware handles a request does not
    # depend on the worker class.
    @pytest.mark.parametrize(("spec", "worker"), [(PLAIN, "gthread"), (WITH_GRACEFUL, "sync")])
    def test_serves_and_stops_gracefully(
        self, processes: Processes, flaskr_env: dict[str, str], spec: str, worker: str
    ) -> None:
        """`gunicorn -c python:graceful.conf "flaskr:create_app(...)"`: health, the requests, exit 0 on SIGTERM."""
        port = free_port()
        argv = [GUNICORN, "-c", "python:graceful.conf", "-b", f"127.0.0.1:{port}", *WORKERS[worker], spec]
        if _has_control_socket():
            argv[1:1] = ["--no-control-socket"]
        server = Server(processes.start(argv, env=flaskr_env), port)
        server.wait_ready()
        exercise(server, spec)
        server.term()
        assert server.exit_code(30) == 0
        server.wait_for(r"graceful: CleanupFinished", count=2)  # both workers


@pytest.mark.e2e
class TestFactoryUnderGracefulServe:
    @FACTORIES
    def test_serves_and_stops_gracefully(self, processes: Processes, flaskr_env: dict[str, str], spec: str) -> None:
        """`graceful serve "flaskr:create_app(...)"`: health, the app's requests, exit 0 on SIGTERM."""
        argv = [sys.executable, "-m", "graceful", "serve", spec, "--bind", "127.0.0.1:0", "--no-access-log"]
        served = Served(processes.start(argv, env=flaskr_env))
        exercise(served, spec)
        served.signal(signal.SIGTERM)
        assert served.finish() == 0
        served.wait_for("CleanupFinished")


@pytest.mark.e2e
@pytest.mark.gunicorn
@pytest.mark.load
@pytest.mark.xdist_group("load-recycling")  # one load at a time (tests/gunicorn/test_worker_recycling.py)
class TestTutorialUnderLoad:
    @pytest.mark.parametrize(("spec", "worker_class"), [(PLAIN, "gthread"), (WITH_GRACEFUL, "sync")])
    def test_sigterm_loses_nothing(
        self, processes: Processes, flaskr_env: dict[str, str], spec: str, worker_class: str
    ) -> None:
        """Clients straight at the tutorial app, SIGTERM: requests in flight, in the delay, or long, all succeed."""
        delay = 2.5
        env = {**flaskr_env, "GRACEFUL_SHUTDOWN_DELAY": str(delay), "GRACEFUL_DRAIN_TIMEOUT": "10"}
        instance = AppGunicorn(
            processes, free_port(), worker_class, app=spec, config="python:graceful.conf", path=[LIVE], env=env
        )
        try:
            instance.start()
            instance.wait_ready()
            run = sigterm_under_load(instance, shutdown_delay=delay, clients=12)
        finally:
            instance.kill()
        assert_nothing_lost(run, DELAY_EDGE)
