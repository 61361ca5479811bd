"""Tests for graceful.flask: the Graceful extension."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
from flask import Flask, Response, stream_with_context
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.test import Client

import graceful
import graceful.flask as graceful_flask
from graceful.core.config import Config, ConfigError
from graceful.core.lifecycle import Lifecycle
from graceful.core.registry import CLEANUP_TASK, LIVENESS_CHECK, POST_START_HOOK, PRE_SHUTDOWN_HOOK, READINESS_CHECK
from graceful.flask import Graceful
from graceful.wsgi.middleware import GracefulMiddleware, as_middleware, path_prefixes


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GRACEFUL_* from the outer environment; the process default lifecycle already claimed."""
    for key in list(os.environ):
        if key.startswith("GRACEFUL_"):
            monkeypatch.delenv(key)
    monkeypatch.setattr(graceful_flask, "_default_claims", itertools.count(1))


@pytest.fixture
def fresh_default(default_lifecycle: Lifecycle, monkeypatch: pytest.MonkeyPatch) -> Lifecycle:
    """This test's default lifecycle (tests/conftest.py), not yet claimed by any Graceful."""
    monkeypatch.setattr(graceful_flask, "_default_claims", itertools.count())
    return default_lifecycle


def make_app(name: str = "app", **config: object) -> Flask:
    app = Flask(name)
    app.config.update(config)

    @app.route("/")
    def index() -> str:
        return "hello"

    @app.route("/stream")
    def stream() -> Response:
        def body() -> Iterator[str]:
            yield "a"
            yield "b"

        return Response(stream_with_context(body()))

    return app


class TestGraceful:
    """Graceful(app): two lines make a Flask app graceful."""

    def test_two_lines(self) -> None:
        """Graceful(app) adds the health endpoints and leaves the app's routes alone."""
        app = make_app()
        Graceful(app)
        client = app.test_client()
        assert client.get("/readyz").get_data() == b"ok"
        assert client.get("/livez?verbose").get_data(as_text=True) == "[+]ping ok\nlivez check passed\n"
        assert client.get("/").get_data() == b"hello"

    def test_state_in_app_extensions(self) -> None:
        """The extension lives in app.extensions['graceful'] and keeps no app reference."""
        app = make_app()
        ext = Graceful(app)
        assert app.extensions["graceful"] is ext
        assert ext.middleware(app).lifecycle is ext.lifecycle
        assert not hasattr(ext, "app")

    def test_installed_as_the_middlewares_bound_call(self) -> None:
        """app.wsgi_app is the middleware's bound __call__ (a cheaper call per request), wrapping Flask's own."""
        app = make_app()
        flask_wsgi_app = app.wsgi_app
        ext = Graceful(app)
        middleware = ext.middleware(app)
        assert app.wsgi_app == middleware.__call__
        assert middleware.app == flask_wsgi_app
        assert as_middleware(app.wsgi_app) is middleware
        assert as_middleware(flask_wsgi_app) is None
        assert as_middleware(middleware.__repr__) is None  # only __call__ stands for the middleware

    def test_middleware_lookup(self) -> None:
        """Graceful.middleware(app) finds the installed middleware, also behind ProxyFix."""
        app = make_app()
        ext = Graceful(app)
        installed = app.wsgi_app
        app.wsgi_app = ProxyFix(app.wsgi_app)  # type: ignore[method-assign]
        assert ext.middleware(app) is as_middleware(installed)
        assert isinstance(ext.middleware(app), GracefulMiddleware)
        with pytest.raises(LookupError):
            ext.middleware(make_app("other"))

    def test_init_app_twice_refused(self) -> None:
        """A second Graceful on the same app is an error, not a second wrapper."""
        app = make_app()
        Graceful(app)
        with pytest.raises(RuntimeError, match="already has a Graceful"):
            Graceful(app)

    def test_readyz_fails_during_shutdown(self) -> None:
        """After ShutdownInitiated /readyz is 503 while the app still serves."""
        app = make_app()
        ext = Graceful(app)
        ext.lifecycle.initiate_shutdown()
        client = app.test_client()
        assert client.get("/readyz").status_code == 503
        assert client.get("/livez").status_code == 200
        assert client.get("/").status_code == 200

    def test_retry_after_mode(self) -> None:
        """In retry-after mode a Flask request after NotAcceptingNewRequests gets 429."""
        app = make_app(GRACEFUL_SEND_RETRY_AFTER=True, GRACEFUL_RETRY_AFTER=3)
        ext = Graceful(app)
        ext.lifecycle.initiate_shutdown()
        ext.lifecycle.stop_accepting()
        response = app.test_client().get("/")
        assert response.status_code == 429
        assert response.headers["Retry-After"] == "3"

    def test_stream_counted_until_closed(self) -> None:
        """A streamed Flask response stays in flight until the client closes it."""
        app = make_app()
        ext = Graceful(app)
        response = app.test_client().get("/stream")
        assert response.get_data() == b"ab"
        assert ext.lifecycle.in_flight.count == 1
        response.close()
        assert ext.lifecycle.in_flight.count == 0

    def test_long_running_passed_to_middleware(self) -> None:
        """long_running reaches the middleware: those requests are not counted."""
        app = make_app()
        ext = Graceful(app, long_running=path_prefixes("/stream"))
        response = app.test_client().get("/stream")
        assert ext.lifecycle.in_flight.count == 0
        response.close()

    def test_under_gunicorn_wrapper_the_extension_decides(self) -> None:
        """Wrapped again as the Gunicorn worker does (same lifecycle), the extension's options apply once."""
        app = make_app()
        ext = Graceful(app, long_running=path_prefixes("/stream"))
        outer = GracefulMiddleware(app, ext.lifecycle)
        assert outer.inner is ext.middleware(app)
        client = Client(outer)
        stream = client.get("/stream")
        assert ext.lifecycle.in_flight.count == 0
        stream.close()
        with client.get("/"):
            assert ext.lifecycle.in_flight.count == 1
        assert ext.lifecycle.in_flight.count == 0
        assert client.get("/readyz").get_data() == b"ok"

    def test_check_options_passed_to_middleware(self) -> None:
        """check_timeout and check_cache_ttl reach the health checks."""
        app = make_app()
        health = Graceful(app, check_timeout=0.5, check_cache_ttl=2).middleware(app).health
        assert (health.check_timeout, health.check_cache_ttl) == (0.5, 2)


class TestFactory:
    """Graceful() then init_app(app), for app factories."""

    def test_decorators_before_init_app(self) -> None:
        """Checks registered on the extension before init_app count in the app's probes."""
        ext = Graceful()
        ext.readiness_check("db")(lambda: False)

        def create_app() -> Flask:
            app = make_app()
            ext.init_app(app)
            return app

        response = create_app().test_client().get("/readyz?verbose")
        assert response.status_code == 503
        assert "[-]db failed: reason withheld" in response.get_data(as_text=True)

    def test_every_decorator_registers_on_its_lifecycle(self) -> None:
        """Each of the five decorators registers on the extension's lifecycle and returns the function."""
        ext = Graceful()

        def fn() -> None:
            return None

        registrations = [
            (ext.pre_shutdown_hook("p", timeout=1), PRE_SHUTDOWN_HOOK),
            (ext.cleanup_task("c", timeout=2), CLEANUP_TASK),
            (ext.post_start_hook("s"), POST_START_HOOK),
            (ext.readiness_check("r"), READINESS_CHECK),
            (ext.liveness_check("l"), LIVENESS_CHECK),
        ]
        for decorator, kind in registrations:
            assert decorator(fn) is fn
            assert [h.fn for h in ext.lifecycle.registry.hooks(kind)] == [fn]
        assert ext.lifecycle.registry.hooks(CLEANUP_TASK)[0].timeout == 2

    def test_one_extension_many_apps_share_its_lifecycle(self) -> None:
        """init_app on two apps shares the extension's one lifecycle."""
        ext = Graceful()
        first, second = make_app("a"), make_app("b")
        ext.init_app(first)
        ext.init_app(second)
        ext.lifecycle.initiate_shutdown()
        assert first.test_client().get("/readyz").status_code == 503
        assert second.test_client().get("/readyz").status_code == 503


class TestLifecycleChoice:
    """Which lifecycle an extension uses."""

    def test_first_uses_default_lifecycle(self, fresh_default: Lifecycle) -> None:
        """The first Graceful in a process uses graceful.default_lifecycle (what Gunicorn drives)."""
        assert Graceful(make_app()).lifecycle is fresh_default

    def test_second_gets_its_own(self, fresh_default: Lifecycle) -> None:
        """A second Graceful without lifecycle= gets a fresh Lifecycle."""
        Graceful(make_app("a"))
        second = Graceful(make_app("b"))
        assert second.lifecycle is not fresh_default
        assert isinstance(second.lifecycle, Lifecycle)

    def test_explicit_lifecycle(self, fresh_default: Lifecycle) -> None:
        """lifecycle= is used as given, and does not use up the default claim."""
        mine = Lifecycle()
        assert Graceful(make_app("a"), lifecycle=mine).lifecycle is mine
        assert Graceful(make_app("b")).lifecycle is fresh_default

    def test_explicit_default_lifecycle(self) -> None:
        """Passing graceful.default_lifecycle explicitly works for any app."""
        ext = Graceful(lifecycle=graceful.default_lifecycle)
        assert ext.lifecycle is graceful.default_lifecycle

    def test_two_apps_are_isolated(self) -> None:
        """Two apps with their own extensions share no checks, counts or shutdown state."""
        first, second = make_app("a"), make_app("b")
        ext_a, ext_b = Graceful(first), Graceful(second)
        assert ext_a.lifecycle is not ext_b.lifecycle
        ext_a.readiness_check("db")(lambda: False)
        ext_b.lifecycle.initiate_shutdown()
        a, b = first.test_client(), second.test_client()
        assert a.get("/readyz?verbose").get_data(as_text=True).count("[-]") == 1
        assert "db" not in b.get("/readyz?verbose").get_data(as_text=True)
        assert "[+]shutdown ok" in a.get("/readyz?verbose&exclude=db").get_data(as_text=True)
        response = a.get("/stream")
        assert (ext_a.lifecycle.in_flight.count, ext_b.lifecycle.in_flight.count) == (1, 0)
        response.close()


class TestConfig:
    """Settings: keyword arguments > environment > app.config > defaults."""

    def test_from_app_config(self) -> None:
        """GRACEFUL_* keys of app.config configure the lifecycle."""
        ext = Graceful(make_app(GRACEFUL_SHUTDOWN_DELAY=2, GRACEFUL_MAX_IN_FLIGHT=4))
        assert ext.lifecycle.config.shutdown_delay == 2.0
        assert ext.lifecycle.config.max_in_flight == 4

    def test_adaptive_delay_from_app_config(self) -> None:
        """GRACEFUL_SHUTDOWN_DELAY_MIN and GRACEFUL_QUIET_PERIOD in app.config make the delay adaptive."""
        ext = Graceful(make_app(GRACEFUL_SHUTDOWN_DELAY_MIN=1, GRACEFUL_QUIET_PERIOD=0.5))
        config = ext.lifecycle.config
        assert (config.shutdown_delay_min, config.quiet_period, config.adaptive_delay) == (1.0, 0.5, True)

    def test_defaults(self) -> None:
        """Without settings the lifecycle has the default config."""
        assert Graceful(make_app()).lifecycle.config == Config()

    def test_environment_beats_app_config(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A GRACEFUL_* environment variable wins over app.config."""
        monkeypatch.setenv("GRACEFUL_SHUTDOWN_DELAY", "3")
        ext = Graceful(make_app(GRACEFUL_SHUTDOWN_DELAY=2, GRACEFUL_RETRY_AFTER=9))
        assert ext.lifecycle.config.shutdown_delay == 3.0
        assert ext.lifecycle.config.retry_after == 9

    def test_keyword_beats_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A keyword setting wins over the environment and app.config."""
        monkeypatch.setenv("GRACEFUL_SHUTDOWN_DELAY", "3")
        ext = Graceful(make_app(GRACEFUL_SHUTDOWN_DELAY=2), shutdown_delay=1)
        assert ext.lifecycle.config.shutdown_delay == 1.0

    def test_health_bind_from_app_config_or_keyword(self) -> None:
        """GRACEFUL_HEALTH_BIND in app.config, or health_bind=, sets the health port's address; a bad one fails."""
        assert str(Graceful(make_app(GRACEFUL_HEALTH_BIND="0.0.0.0:8081")).lifecycle.config.health_address) == (
            "0.0.0.0:8081"
        )
        assert Graceful(make_app(), health_bind="127.0.0.1:9000").lifecycle.config.health_bind == "127.0.0.1:9000"
        with pytest.raises(ConfigError, match="GRACEFUL_HEALTH_BIND=':8081' is not allowed"):
            Graceful(make_app(GRACEFUL_HEALTH_BIND=":8081"))

    def test_bad_value_fails_at_init(self) -> None:
        """A bad app.config value raises ConfigError naming the key."""
        with pytest.raises(ConfigError, match="GRACEFUL_DRAIN_TIMEOUT"):
            Graceful(make_app(GRACEFUL_DRAIN_TIMEOUT="soon"))

    def test_unknown_key_fails_at_init(self) -> None:
        """A misspelt GRACEFUL_* key in app.config is refused, not ignored."""
        with pytest.raises(ConfigError, match="GRACEFUL_SHUTDOWN_DELAYY"):
            Graceful(make_app(GRACEFUL_SHUTDOWN_DELAYY=1))

    def test_unknown_keyword_fails_at_init(self) -> None:
        """An unknown keyword setting is a TypeError."""
        with pytest.raises(TypeError, match="shutdown_dely"):
            Graceful(make_app(), shutdown_dely=1)

    def test_expose_check_errors_from_app_config(self) -> None:
        """GRACEFUL_EXPOSE_CHECK_ERRORS in app.config shows failure reasons."""
        app = make_app(GRACEFUL_EXPOSE_CHECK_ERRORS=True)
        Graceful(app).readiness_check("db")(lambda: False)
        body = app.test_client().get("/readyz").get_data(as_text=True)
        assert "[-]db failed: returned False" in body
