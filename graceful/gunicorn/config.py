"""The server's settings under Gunicorn: resolved once, by the master, in ``on_starting``; its workers inherit them.

Runs in the master, main thread, in ``on_starting`` (before the listeners
and the first fork) and again in ``on_reload`` for ``graceful_timeout`` (a HUP
reads Gunicorn's config anew). Nothing reads a setting at import.

Which config, the first that applies:

1. one configured before ``on_starting``: by the config file
   (``graceful.default_lifecycle.configure(...)``), or by the app itself when
   it is loaded in the master (``preload_app``: Flask's ``app.config``,
   Django's ``settings.GRACEFUL``);
2. the ``GRACEFUL_*`` environment variables over ``settings.GRACEFUL`` of the
   Django project being served, found without setting Django up
   (:mod:`graceful.django.discover`: ``DJANGO_SETTINGS_MODULE``, or the
   literal a generated ``wsgi.py`` sets), over the defaults.

Then ``graceful_timeout`` and Gunicorn 27's ``dirty_graceful_timeout``:
graceful.conf sets both to :data:`DERIVED` (0, a value no graceful server
can run with), which stands for "derive it" from the resolved settings and
the hooks registered by then (:func:`derive_timeouts`): the HTTP workers' wait
covers a worker's drain and its longest cleanup task
(:func:`graceful.core.budget.derived_graceful_timeout`), and the dirty pool,
stopped after them, gets what the grace period has left
(:func:`graceful.core.budget.derived_dirty_graceful_timeout`). Any other value
(``--graceful-timeout``, ``--dirty-graceful-timeout``, your own config file)
is the user's and is checked, never changed. Gunicorn before 25 ignores the
``dirty_graceful_timeout`` name.

Each worker inherits the master's config at fork. An app that configures
other values for the server in a worker (Flask's ``app.config``, a Django
project the master could not find) is refused at boot with
:func:`refusal`, the one message every integration gives: the master
would run a delay, a drain bound or a health port its workers disagree
with. The fields a worker may set for itself are
:data:`graceful.core.config.PER_PROCESS`.
"""

from __future__ import annotations

import dataclasses

from graceful.core.budget import Budget, derived_dirty_graceful_timeout, derived_graceful_timeout
from graceful.core.config import Config, env_name
from graceful.core.lifecycle import Lifecycle
from graceful.django.discover import find_settings
from graceful.gunicorn.adapter.arbiter import Arbiter

__all__ = ["DERIVED", "derive_timeouts", "longest_cleanup", "refusal", "registered_budget", "resolve"]

#: graceful.conf's ``graceful_timeout`` and ``dirty_graceful_timeout``: derive them in ``on_starting``.
DERIVED = 0


def resolve(arbiter: Arbiter, lifecycle: Lifecycle) -> Config:
    """``on_starting``: the server's config (see the module docstring), given to ``lifecycle``; else ConfigError."""
    if lifecycle.configured:
        return lifecycle.config
    django = find_settings(arbiter.app_uri())
    config = Config.load(mapping=None if django is None else django.graceful())
    lifecycle.configure(config)
    return config


def longest_cleanup(lifecycle: Lifecycle) -> float:
    """The longest cleanup task a worker may run (s): those registered by now, and ``hook_timeout``, which
    a task the app registers later in a worker gets unless it says otherwise."""
    return max(lifecycle.longest_cleanup_timeout(), lifecycle.config.hook_timeout)


def registered_budget(lifecycle: Lifecycle) -> Budget:
    """The budget with the pre-shutdown hooks registered by ``on_starting``: all there will be (the config
    file's, or the app's with ``preload_app``; workers refuse them), so none counts ``hook_timeout``."""
    return dataclasses.replace(lifecycle.budget(), longest_pre_shutdown_hook=lifecycle.longest_pre_shutdown_timeout())


def derive_timeouts(arbiter: Arbiter, lifecycle: Lifecycle) -> frozenset[str]:
    """``on_starting``/``on_reload``: derive Gunicorn's waits the user left unset; the names of those derived.

    ``graceful_timeout`` first, then ``dirty_graceful_timeout`` (only with a
    dirty pool) from what the first leaves of the grace period. A dirty pool
    that gets less than :data:`~graceful.core.budget.MIN_DIRTY_GRACEFUL_TIMEOUT`
    is set to what there is (0 at least) and refused by
    :meth:`~graceful.core.budget.Budget.graceful_timeout_overrun`.
    """
    config = lifecycle.config
    derived = set()
    if arbiter.graceful_timeout() == DERIVED:
        arbiter.set_graceful_timeout(derived_graceful_timeout(config.drain_timeout, longest_cleanup(lifecycle)))
        derived.add("graceful_timeout")
    if arbiter.dirty_pool_configured() and arbiter.dirty_graceful_timeout() == DERIVED:
        room = registered_budget(lifecycle).room_after(arbiter.graceful_timeout(), config.grace_period)
        arbiter.set_dirty_graceful_timeout(derived_dirty_graceful_timeout(room))
        derived.add("dirty_graceful_timeout")
    return frozenset(derived)


def refusal(master: Config, worker: Config) -> str | None:
    """A worker's boot: the one-line refusal when its app configured other server settings than the master's."""
    differing = master.server_differences(worker)
    if not differing:
        return None
    ours = ", ".join(f"{env_name(name)}={getattr(worker, name)!r}" for name in differing)
    theirs = ", ".join(f"{env_name(name)}={getattr(master, name)!r}" for name in differing)
    return (
        f"graceful: the app configures {ours}, but the Gunicorn master runs with {theirs}: the master"
        " resolves the server's settings at start-up, before any worker loads the app, from GRACEFUL_*"
        " environment variables and the settings.GRACEFUL of the Django project it serves; set them there,"
        " or load the app in the master (preload_app)"
    )
