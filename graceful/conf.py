"""Gunicorn config that gives any WSGI app graceful's whole shutdown timeline.

Use it as it is::

    gunicorn -c graceful/conf.py app:app        # a path (re-executed on HUP)
    gunicorn -c python:graceful.conf app:app    # an installed module

or compose it with your own config file::

    from graceful.conf import *          # the server hooks, graceful_timeout, dirty_graceful_timeout
    import graceful

    @graceful.pre_shutdown_hook("deregister", timeout=3)
    def deregister(): ...                # runs once, in the master, at SIGTERM

This file is the public path only: the hooks live in
:mod:`graceful.gunicorn.hooks`, beside the master's part
(:mod:`graceful.gunicorn.master`), each worker's part
(:mod:`graceful.gunicorn.worker`) and the channel between them
(:mod:`graceful.gunicorn.channel`).
"""

from __future__ import annotations

from graceful.gunicorn import hooks as _hooks
from graceful.gunicorn.hooks import *  # noqa: F403 -- Gunicorn looks the hooks up by name in this module

__all__ = _hooks.__all__
