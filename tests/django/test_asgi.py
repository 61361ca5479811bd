"""graceful.django.asgi: Django's ASGI handler behind graceful's middleware, its lifespan, its connections."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.test.utils import override_settings
from django.urls import path

from graceful.asgi import GracefulASGIMiddleware
from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.django import database
from graceful.django.database import ConnectionTracker
from graceful.django.settings import SettingsError
from tests.django.conftest import UNREACHABLE
from tests.django.project import PROJECT, project_env


def _query() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT 1")
        (one,) = cursor.fetchone()
    return int(one)


def sync_view(request: HttpRequest) -> HttpResponse:
    """A plain view: Django runs it on the request's own thread."""
    return HttpResponse(f"sync {_query()}")


async def async_view(request: HttpRequest) -> HttpResponse:
    """An async view that queries on the loop's executor (thread_sensitive=False): a thread that outlives it."""
    return HttpResponse(f"async {await sync_to_async(_query, thread_sensitive=False)()}")


urlpatterns = [path("sync", sync_view), path("async", async_view)]


@pytest.fixture
def served() -> Iterator[tuple[GracefulASGIMiddleware, Lifecycle, ConnectionTracker]]:
    """Django's ASGIHandler (this module's URLs) in the middleware, on a lifecycle of its own with the db checks."""
    lifecycle = Lifecycle(Config())
    tracker = database.install(lifecycle)
    try:
        with override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"]):
            yield GracefulASGIMiddleware(ASGIHandler(), lifecycle, check_timeout=10), lifecycle, tracker
    finally:
        database.uninstall(tracker)


def client(app: GracefulASGIMiddleware) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


async def lifespan_startup(app: GracefulASGIMiddleware) -> list[Any]:
    """Send the lifespan startup as Uvicorn's lifespan="auto" does; return what the app sent (and raised)."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    inbox.put_nowait({"type": "lifespan.startup"})
    sent: list[Any] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    try:
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, send)
    except ValueError as exc:
        sent.append(exc)
    return sent


class TestLifespan:
    def test_djangos_handler_has_none_and_readiness_does_not_wait_for_it(
        self, served: tuple[GracefulASGIMiddleware, Lifecycle, ConnectionTracker]
    ) -> None:
        """Django raises for the lifespan scope: the check passes, /readyz lists it and the db checks."""
        app, _, _ = served

        async def scenario() -> tuple[list[Any], httpx.Response]:
            sent = await lifespan_startup(app)
            async with client(app) as http:
                return sent, await http.get(f"/readyz?verbose&exclude=django-db-{UNREACHABLE}")

        sent, response = asyncio.run(scenario())
        assert len(sent) == 1 and "Django can only handle ASGI/HTTP connections" in str(sent[0])
        assert response.status_code == 200
        assert "[+]lifespan ok\n" in response.text and "[+]django-db-default ok\n" in response.text


class TestConnections:
    def test_django_closes_each_requests_connection_and_the_cleanup_has_none_left(
        self, served: tuple[GracefulASGIMiddleware, Lifecycle, ConnectionTracker]
    ) -> None:
        """Sync views on ASGI (CONN_MAX_AGE 0): Django closes each request's connection; the cleanup closes 0."""
        app, lifecycle, tracker = served

        async def scenario() -> list[str]:
            async with client(app) as http:
                return [(await http.get("/sync")).text for _ in range(3)]

        assert asyncio.run(scenario()) == ["sync 1"] * 3
        assert tracker.used_aliases() == ["default"]
        assert tracker.open_connections() == []
        assert lifecycle.drain_and_clean_up(drain_timeout=1).ok

    def test_the_cleanup_closes_a_connection_an_executor_thread_kept(
        self, served: tuple[GracefulASGIMiddleware, Lifecycle, ConnectionTracker]
    ) -> None:
        """An async view's query on the loop's executor stays open past the request; the cleanup task closes it."""
        app, lifecycle, tracker = served

        async def scenario() -> tuple[str, int, bool, int]:
            async with client(app) as http:
                text = (await http.get("/async")).text
            kept = tracker.open_connections()
            # The executor thread still runs (the loop lives): its connection is open until the cleanup.
            ok = lifecycle.drain_and_clean_up(drain_timeout=1).ok
            return text, len(kept), ok, len([wrapper for wrapper in kept if wrapper.connection is not None])

        text, kept, ok, still_open = asyncio.run(scenario())
        assert text == "async 1"
        assert kept == 1 and ok and still_open == 0


class TestGetAsgiApplication:
    def test_refuses_a_project_without_graceful_django_installed(self) -> None:
        """Without "graceful.django" in INSTALLED_APPS: SettingsError naming it, not a lifecycle without settings."""
        from graceful.django import get_asgi_application

        with pytest.raises(SettingsError, match=r"'graceful\.django' is not in settings\.INSTALLED_APPS"):
            get_asgi_application()

    def test_the_projects_asgi_py_serves_on_the_lifecycle_graceful_django_configured(self, tmp_path: Any) -> None:
        """testsite/asgi.py in a fresh process: Django's handler in the middleware, settings.GRACEFUL, the checks."""
        script = textwrap.dedent(
            """
            import asyncio, json, httpx, graceful
            from testsite.asgi import application as app

            async def main():
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                    return (await c.get("/readyz?verbose")).text, (await c.get("/fast")).status_code

            readyz, fast = asyncio.run(main())
            seen = {"handler": type(app.app).__name__, "default": app.lifecycle is graceful.default_lifecycle}
            seen.update(delay=app.lifecycle.config.shutdown_delay, readyz=readyz, fast=fast)
            print(json.dumps(seen))
            """
        )
        env = project_env(tmp_path, {"SHUTDOWN_DELAY": 0.5})
        out = subprocess.run(
            [sys.executable, "-c", script], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        assert seen["handler"] == "ASGIHandler" and seen["default"] is True
        assert seen["delay"] == 0.5 and seen["fast"] == 200
        assert "[+]django-db-default ok\n" in seen["readyz"] and "readyz check passed" in seen["readyz"]
