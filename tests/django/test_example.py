"""examples/django runs as documented: its Gunicorn config, its settings and its Kubernetes manifest."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import requests
import yaml

from tests.conftest import ROOT, Processes
from tests.django.project import GRACEFUL, GUNICORN
from tests.e2e_harness import free_port
from tests.gunicorn.test_gunicorn import Server, _has_control_socket

EXAMPLE = ROOT / "examples" / "django"
MANIFEST = EXAMPLE / "kubernetes.yaml"


def manifest_env() -> dict[str, str]:
    """The web container's GRACEFUL_* variables in kubernetes.yaml."""
    deployment = next(doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"] if item["name"].startswith("GRACEFUL_")}


@pytest.mark.e2e
@pytest.mark.gunicorn
class TestExampleUnderGunicorn:
    def test_serves_probes_the_database_and_stops_gracefully(self, processes: Processes, tmp_path: Path) -> None:
        """`gunicorn -c gunicorn_conf.py mysite.wsgi`: /, the db and app checks, SIGTERM exits 0 after cleanup."""
        port = free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
        env.update(
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            BIND=f"127.0.0.1:{port}",
            DJANGO_DB=str(tmp_path / "db.sqlite3"),
            GRACEFUL_SHUTDOWN_DELAY="1",  # beats settings.GRACEFUL's 5, to keep the test short
        )
        argv = [GUNICORN, "-c", "gunicorn_conf.py", "mysite.wsgi"]
        if _has_control_socket():
            argv[1:1] = ["--no-control-socket"]
        server = Server(processes.start(argv, env=env, cwd=EXAMPLE), port)
        server.wait_ready()
        assert requests.get(server.url + "/", timeout=15).text.startswith("hello from Django, sqlite ")
        verbose = requests.get(server.url + "/readyz?verbose", headers={"Host": "10.1.2.3"}, timeout=15).text
        assert "[+]django-db-default ok\n" in verbose and "[+]counters ok\n" in verbose
        server.term()
        assert server.exit_code(30) == 0
        assert len(server.matching(r"cleanup task 'flush-counters' ok")) == 2  # once per worker


@pytest.mark.e2e
class TestExampleUnderUvicorn:
    def test_serves_django_asgi_with_the_health_paths_and_passes_the_system_checks(
        self, processes: Processes, tmp_path: Path
    ) -> None:
        """`uvicorn mysite.asgi:application`: the db and app checks, no lifespan awaited; `manage.py check` passes."""
        port = free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
        env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", DJANGO_DB=str(tmp_path / "db.sqlite3"))
        checked = subprocess.run(
            [sys.executable, "manage.py", "check"],
            cwd=EXAMPLE,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        argv = [sys.executable, "-m", "uvicorn", "mysite.asgi:application", "--port", str(port), "--lifespan", "auto"]
        server = Server(processes.start(argv, env=env, cwd=EXAMPLE), port)
        server.wait_ready()
        assert requests.get(server.url + "/", timeout=15).text.startswith("hello from Django, sqlite ")
        verbose = requests.get(server.url + "/readyz?verbose", headers={"Host": "10.1.2.3"}, timeout=15).text
        assert "[+]django-db-default ok\n" in verbose and "[+]counters ok\n" in verbose
        assert "[+]lifespan ok\n" in verbose  # Django's handler has none: Uvicorn and graceful serve on
        assert server.matching(r"ASGI 'lifespan' protocol appears unsupported")
        server.term()
        server.exit_code(30)  # plain Uvicorn's own SIGTERM (no graceful timeline here): it ends


class TestExampleManifest:
    def test_passes_graceful_check(self) -> None:
        """`graceful check examples/django/kubernetes.yaml`: one container checked, no finding at all."""
        out = subprocess.run([GRACEFUL, "check", str(MANIFEST)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout
        assert out.stderr.strip() == "graceful check: 1 container(s) checked: 0 error(s), 0 warning(s), 0 info"
        assert out.stdout == ""

    def test_is_valid_kubernetes(self) -> None:
        """Every object passes kubernetes-validate's strict schemas."""
        for resource in yaml.safe_load_all(MANIFEST.read_text()):
            kubernetes_validate.validate(resource, "1.30", strict=True)

    def test_sets_what_the_settings_say(self) -> None:
        """The manifest's GRACEFUL_* values are settings.GRACEFUL's: graceful check sees what the pods run."""
        graceful = runpy.run_path(str(EXAMPLE / "mysite" / "settings.py"))["GRACEFUL"]
        assert manifest_env() == {f"GRACEFUL_{key}": str(value) for key, value in graceful.items()}
