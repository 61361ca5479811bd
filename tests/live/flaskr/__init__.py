"""Flask's tutorial app pattern (an app factory, blueprints, sqlite) for the app-factory tests.

    flask --app flaskr init-db                                  # FLASK_DATABASE=/path/to/file.sqlite
    gunicorn -c python:graceful.conf "flaskr:create_app()"
    gunicorn -c python:graceful.conf "flaskr:create_app(with_graceful=True)"
    graceful serve "flaskr:create_app()"

``create_app()`` knows nothing of graceful: the server wraps the app.
``create_app(with_graceful=True)`` calls ``Graceful(app)`` inside, with a
readiness check of its own (``db``) and ``/uncounted/...`` as long-running
(not counted in the drain), so a test can tell whose middleware handles a
request.
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from flaskr import blog, db, load


def create_app(test_config: dict[str, Any] | None = None, with_graceful: bool = False) -> Flask:
    """Build the app; settings from ``FLASK_*`` environment variables (FLASK_DATABASE), then ``test_config``."""
    app = Flask(__name__, instance_relative_config=True)
    app.config.from_mapping(SECRET_KEY="dev", DATABASE=None)
    app.config.from_prefixed_env()
    if test_config is not None:
        app.config.update(test_config)
    db.init_app(app)
    app.register_blueprint(blog.bp)
    app.register_blueprint(load.bp)
    if with_graceful:
        from graceful.flask import Graceful
        from graceful.wsgi.middleware import path_prefixes

        graceful = Graceful(app, long_running=path_prefixes("/uncounted"))

        @graceful.readiness_check("db")
        def database_ready() -> None:
            with app.app_context():
                db.get_db().execute("SELECT 1").fetchone()

    return app
