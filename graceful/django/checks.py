"""Django system checks (``manage.py check``, and every command that runs them).

``graceful.E001``: the shutdown budget with every pre-shutdown hook and
cleanup task the apps registered does not fit ``GRACEFUL_GRACE_PERIOD``. The
message is the one the servers print at start-up (``Lifecycle.check_budget``).
The hooks are known only once every app's ``ready()`` ran, so this is the
first place that can tell; ``django.setup()`` already refused a config that
cannot fit with the default hook timeout, an unknown ``settings.GRACEFUL``
key and a bad value (see :mod:`graceful.django.settings`).

Runs in the process that runs the checks, on its main thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from graceful.core import default as _default
from graceful.core.config import ConfigError
from graceful.core.lifecycle import Lifecycle

__all__ = ["BUDGET", "TAG", "budget_messages", "check_budget", "register"]

#: The tag of graceful's checks: ``manage.py check --tag graceful``.
TAG = "graceful"
#: The id of the budget check.
BUDGET = "graceful.E001"

_HINT = (
    "Shorten the hook or task timeouts (timeout=...), or raise GRACEFUL['GRACE_PERIOD'] together with the"
    " pod's terminationGracePeriodSeconds."
)


def budget_messages(lifecycle: Lifecycle) -> list[checks.CheckMessage]:
    """``graceful.E001`` when ``lifecycle``'s budget with its registered hooks cannot fit; else nothing."""
    try:
        lifecycle.check_budget()
    except ConfigError as exc:
        return [checks.Error(str(exc), hint=_HINT, id=BUDGET)]
    return []


def check_budget(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The registered check: :func:`budget_messages` of ``graceful.default_lifecycle``."""
    return budget_messages(_default.default_lifecycle)


def register() -> None:
    """Register the checks under the ``graceful`` tag (once however often called)."""
    checks.register(check_budget, TAG)
