"""Example apps for graceful: ``examples.flask_app:app`` and ``examples.wsgi_app:app``."""
