"""A real Django project under real Gunicorn (and graceful serve): probes, database, settings, SIGTERM, cleanup.

The project is tests/live/django_project: DEBUG off, ALLOWED_HOSTS 127.0.0.1
and localhost, sqlite with persistent connections, ``graceful.django`` in
INSTALLED_APPS and a ``probe`` app whose ``ready()`` registers a cleanup task
that writes one marker file per process. Its wsgi.py is Django's own.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

import graceful
from tests.app_harness import AppGunicorn
from tests.conftest import Processes
from tests.django.project import DJANGO_CONF, GUNICORN, PROJECT, hidden_settings_app, project_env
from tests.e2e_harness import DELAY_EDGE, assert_nothing_lost, free_port, sigterm_under_load
from tests.gunicorn.test_gunicorn import WORKERS, Server, _has_control_socket
from tests.serve.test_server import Served

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn]

#: Host headers a probe may carry that Django's ALLOWED_HOSTS refuses: a pod IP, IPv6, junk.
ODD_HOSTS = ["10.244.3.17:8000", "[fd00::17]:8000", "probe..invalid"]

Start = Callable[..., Server]
#: One worker: with two that fail to load at once, Gunicorn 27's halt reaps the second inside its
#: own stop and dies on that HaltServer (a traceback, exit 1) -- Gunicorn's race, not the app's.
ONE_WORKER = ("-w", "1")


@pytest.fixture
def django_gunicorn(processes: Processes, tmp_path: Path) -> Start:
    """Start the project under Gunicorn: django_gunicorn(graceful={...}, worker=..., config=..., options=...)."""

    def start(
        graceful: dict[str, Any] | None = None,
        worker: str = "sync",
        config: str = DJANGO_CONF,
        env: dict[str, str] | None = None,
        ready: bool = True,
        options: tuple[str, ...] = (),
        app: str = "testsite.wsgi",
        settings_in_environment: bool = True,
    ) -> Server:
        port = free_port()
        argv = [GUNICORN, "-c", config, "-b", f"127.0.0.1:{port}", *WORKERS[worker], *options, app]
        if _has_control_socket():  # tests must not share ~/.gunicorn/gunicorn.ctl
            argv[1:1] = ["--no-control-socket"]
        full_env = project_env(tmp_path, graceful, **(env or {}))
        full_env["PYTHONPATH"] += f":{tmp_path}"  # hidden_settings_app's module
        if not settings_in_environment:  # as Gunicorn users run it: wsgi.py sets it
            del full_env["DJANGO_SETTINGS_MODULE"]
        server = Server(processes.start(argv, env=full_env, cwd=PROJECT), port)
        if ready:
            server.wait_ready()
        return server

    return start


def start_hidden(django_gunicorn: Start, tmp_path: Path, graceful: dict[str, Any]) -> Server:
    """One worker serving hidden_settings_app (its settings module named at run time only), not awaited."""
    return django_gunicorn(
        graceful, app=hidden_settings_app(tmp_path), settings_in_environment=False, ready=False, options=ONE_WORKER
    )


def get(server: Server | Served, path: str, **kwargs: Any) -> requests.Response:
    return requests.get(server.url + path, timeout=15, **kwargs)


def booted_workers(server: Server) -> set[int]:
    """Pids of the workers Gunicorn logged as booting."""
    return {int(m.group(1)) for line in server.matching(r"Booting worker") if (m := re.search(r"pid: (\d+)", line))}


def closed_connections(lines: list[str]) -> dict[int, list[int]]:
    """pid -> the counts its ``django-db-connections`` cleanup task logged (one entry per run)."""
    runs: dict[int, list[int]] = {}
    for line in lines:
        match = re.search(r"closed (\d+) Django database connection\(s\) in pid (\d+)", line)
        if match:
            runs.setdefault(int(match.group(2)), []).append(int(match.group(1)))
    return runs


def not_accepting_after(server: Server) -> float:
    """Seconds from ShutdownInitiated to the master's NotAcceptingNewRequests."""
    (line,) = server.matching(rf"\[{server.proc.pid}\].*NotAcceptingNewRequests \(")
    match = re.search(r"\(([\d.]+)s after ShutdownInitiated\)", line)
    assert match is not None, line
    return float(match.group(1))


class TestHealthBeforeDjango:
    @pytest.mark.parametrize("host", ODD_HOSTS)
    def test_probes_with_any_host_are_answered_and_never_reach_django(self, django_gunicorn: Start, host: str) -> None:
        """/livez, /readyz, /healthz answer 200 whatever the Host; Django itself refuses that Host (400)."""
        server = django_gunicorn()
        for path in ("/livez", "/readyz", "/healthz"):
            response = get(server, path, headers={"Host": host})
            assert (response.status_code, response.text) == (200, "ok"), path
        assert get(server, "/fast", headers={"Host": host}).status_code == 400
        assert get(server, "/fast").status_code == 200


class TestDatabaseReadiness:
    def test_passes_then_fails_when_the_database_is_unreachable(self, django_gunicorn: Start, tmp_path: Path) -> None:
        """django-db-default passes; with the sqlite folder moved away it fails, reason withheld, error logged."""
        server = django_gunicorn()
        assert "[+]django-db-default ok" in get(server, "/readyz?verbose").text
        (tmp_path / "db").rename(tmp_path / "db-gone")
        failed = get(server, "/readyz?verbose")
        assert failed.status_code == 503
        assert "[-]django-db-default failed: reason withheld\n" in failed.text
        assert "unable to open" not in failed.text
        server.wait_for(r"OperationalError: unable to open database file")
        assert get(server, "/livez").status_code == 200  # not a liveness matter
        (tmp_path / "db-gone").rename(tmp_path / "db")
        assert get(server, "/readyz").status_code == 200


class TestGracefulSettings:
    @pytest.mark.parametrize(
        ("graceful", "env", "in_environment", "low", "high"),
        [
            ({"SHUTDOWN_DELAY": 2.5, "DRAIN_TIMEOUT": 5}, {}, False, 2.5, 4.5),
            ({"SHUTDOWN_DELAY": 2.5, "DRAIN_TIMEOUT": 5}, {}, True, 2.5, 4.5),
            ({"SHUTDOWN_DELAY": 4, "DRAIN_TIMEOUT": 5}, {"GRACEFUL_SHUTDOWN_DELAY": "1"}, False, 1.0, 3.0),
        ],
        ids=["settings-named-in-wsgi-py", "settings-named-in-the-environment", "environment-beats-settings"],
    )
    def test_the_delay_comes_from_settings_unless_the_environment_says(
        self,
        django_gunicorn: Start,
        graceful: dict[str, Any],
        env: dict[str, str],
        in_environment: bool,
        low: float,
        high: float,
    ) -> None:
        """One line, -c python:graceful.conf: the master keeps serving for settings.GRACEFUL's SHUTDOWN_DELAY
        (the settings module named by wsgi.py as generated, or by DJANGO_SETTINGS_MODULE), or for
        GRACEFUL_SHUTDOWN_DELAY's when set; its workers agree and boot."""
        server = django_gunicorn(graceful, env=env, settings_in_environment=in_environment)
        server.term()
        assert server.exit_code(30) == 0
        assert low <= not_accepting_after(server) < high

    def test_the_old_django_config_is_an_alias(self, django_gunicorn: Start) -> None:
        """-c python:graceful.django.conf (graceful 0.2's line) still runs the settings' delay."""
        server = django_gunicorn(
            {"SHUTDOWN_DELAY": 2.5, "DRAIN_TIMEOUT": 5},
            config="python:graceful.django.conf",
            settings_in_environment=False,
        )
        server.term()
        assert server.exit_code(30) == 0
        assert 2.5 <= not_accepting_after(server) < 4.5

    def test_settings_the_master_cannot_find_stop_the_worker_at_boot(
        self, django_gunicorn: Start, tmp_path: Path
    ) -> None:
        """An app module that names its settings only at run time: the master runs the defaults, so a worker whose
        settings.GRACEFUL changes the delay stops with the one refusal line, then the master ("App failed to
        load", exit 4), never forking again."""
        server = start_hidden(django_gunicorn, tmp_path, {"SHUTDOWN_DELAY": 2.5})
        assert server.exit_code(30) == 4, "\n".join(server.lines)
        lines = server.matching(r"graceful: the app configures")
        assert len(lines) == len(booted_workers(server)) == 1  # no worker forked after the first failed
        assert re.fullmatch(
            r"graceful: the app configures GRACEFUL_SHUTDOWN_DELAY=2\.5, but the Gunicorn master runs with"
            r" GRACEFUL_SHUTDOWN_DELAY=5\.0: .*\(preload_app\)",
            lines[0],
        )
        assert server.matching(r"Reason: App failed to load")
        assert not server.matching("Traceback")

    def test_an_unknown_key_the_master_cannot_see_stops_a_worker_with_one_line(
        self, django_gunicorn: Start, tmp_path: Path
    ) -> None:
        """Settings the master cannot find: the worker's django.setup() meets the misspelt key: Config's message
        on a line of its own, no traceback, and the master stops (exit 4)."""
        server = start_hidden(django_gunicorn, tmp_path, {"SHUTDOWN_DELY": 1})
        assert server.exit_code(30) == 4, "\n".join(server.lines)
        with pytest.raises(graceful.ConfigError) as refused:
            graceful.Config.load(environ={"GRACEFUL_SHUTDOWN_DELY": "1"})
        assert str(refused.value) in server.lines
        assert len(booted_workers(server)) == 1
        assert not server.matching("Traceback")

    def test_the_health_port_from_settings(self, django_gunicorn: Start) -> None:
        """settings.GRACEFUL's HEALTH_BIND reaches the master: the port answers."""
        port = free_port()
        server = django_gunicorn({"HEALTH_BIND": f"127.0.0.1:{port}"})
        server.wait_for(rf"graceful: health port listening on 127\.0\.0\.1:{port}")
        deadline = time.monotonic() + 20
        status = 0
        while status != 200 and time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                status = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code
            time.sleep(0.1)
        assert status == 200

    def test_an_unknown_key_stops_the_master_with_one_line(self, django_gunicorn: Start) -> None:
        """A misspelt key: the master exits 1 at once with the config error, no traceback."""
        server = django_gunicorn({"SHUTDOWN_DELY": 1}, ready=False)
        assert server.exit_code(30) == 1
        # The message is graceful.Config's own (it lists every setting): one place says it.
        with pytest.raises(graceful.ConfigError) as refused:
            graceful.Config.load(environ={"GRACEFUL_SHUTDOWN_DELY": "1"})
        assert str(refused.value).startswith("GRACEFUL_SHUTDOWN_DELY is not a graceful setting: expected one of ")
        assert server.matching("graceful") == [f"Error: graceful: {refused.value}"]  # on_starting's refusal
        assert not server.matching("Traceback")

    def test_settings_that_fail_to_import_stop_the_master_with_one_line(self, django_gunicorn: Start) -> None:
        """A settings module the master cannot import: exit 1 with one line naming it and the error."""
        server = django_gunicorn(env={"DJANGO_SETTINGS_MODULE": "testsite.no_such_settings"}, ready=False)
        assert server.exit_code(30) == 1
        assert server.matching("graceful") == [
            "Error: graceful: cannot read settings.GRACEFUL: importing testsite.no_such_settings"
            " (DJANGO_SETTINGS_MODULE) failed: ModuleNotFoundError: No module named 'testsite.no_such_settings'"
        ]
        assert not server.matching("Traceback")


@pytest.mark.load
class TestSigtermUnderLoad:
    @pytest.mark.parametrize("worker_class", ["sync", "gthread"])
    def test_nothing_is_lost(self, processes: Processes, tmp_path: Path, worker_class: str) -> None:
        """Clients straight at the project, SIGTERM: requests in flight, sent in the delay, or long, all succeed."""
        delay = 2.5
        instance = AppGunicorn(
            processes,
            free_port(),
            worker_class,
            app="testsite.wsgi",
            config=DJANGO_CONF,
            path=[PROJECT],
            env=project_env(tmp_path, {"SHUTDOWN_DELAY": delay, "DRAIN_TIMEOUT": 10}),
            name="django",
        )
        try:
            instance.start()
            instance.wait_ready()
            run = sigterm_under_load(instance, shutdown_delay=delay, clients=12)
        finally:
            instance.kill()
        assert_nothing_lost(run, DELAY_EDGE)


class TestCleanup:
    @pytest.mark.parametrize("worker", ["sync", "gthread"])
    def test_connections_are_closed_once_per_worker(self, django_gunicorn: Start, tmp_path: Path, worker: str) -> None:
        """Each worker runs its cleanup once: the project's marker once, and graceful closes what requests kept."""
        server = django_gunicorn({"SHUTDOWN_DELAY": 0.5})
        served = {int(get(server, "/pid", headers={"Connection": "close"}).text) for _ in range(20)}
        workers = booted_workers(server)
        assert served and served <= workers
        server.term()
        assert server.exit_code(30) == 0
        markers = {int(path.name): path.read_text() for path in (tmp_path / "markers").iterdir()}
        assert markers == {pid: "cleanup\n" for pid in workers}
        runs = closed_connections(server.lines)
        assert set(runs) == workers and all(len(counts) == 1 for counts in runs.values()), runs
        assert all(runs[pid][0] >= 1 for pid in served), runs  # persistent connections (CONN_MAX_AGE 60)


class TestGracefulServe:
    def test_serves_the_project_and_cleans_up_on_sigterm(self, processes: Processes, tmp_path: Path) -> None:
        """`graceful serve testsite.wsgi`: the db check in /readyz, requests served, SIGTERM exits 0 after cleanup."""
        env = project_env(tmp_path, {"SHUTDOWN_DELAY": 0.5})
        argv = [sys.executable, "-m", "graceful", "serve", "testsite.wsgi", "--bind", "127.0.0.1:0", "--no-access-log"]
        served = Served(processes.start(argv, env=env, cwd=PROJECT))
        assert "[+]django-db-default ok" in get(served, "/readyz?verbose").text
        assert get(served, "/readyz", headers={"Host": ODD_HOSTS[0]}).status_code == 200
        pid = int(get(served, "/pid").text)
        assert pid == served.proc.pid
        served.signal(signal.SIGTERM)
        assert served.finish() == 0
        assert (tmp_path / "markers" / str(pid)).read_text() == "cleanup\n"
        assert closed_connections(served.lines) == {pid: [1]}
