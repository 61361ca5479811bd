"""Django system checks (``manage.py check``, and every command that runs them).

Each message is graceful.Config's own, the one a server stops with at
start-up; the check names where the setting was read
(``settings.GRACEFUL['SHUTDOWN_DELY']: (graceful.E003) ...``):

``graceful.E001``
    the shutdown budget does not fit ``GRACEFUL_GRACE_PERIOD``: the settings'
    own, or with every pre-shutdown hook and cleanup task the apps registered
    (``Lifecycle.check_budget``: known only once every app's ``ready()`` ran).
``graceful.E002``
    ``settings.GRACEFUL`` is not a dict.
``graceful.E003``
    an unknown ``settings.GRACEFUL`` key or ``GRACEFUL_*`` environment variable.
``graceful.E004``
    a value graceful refuses (the message says what is allowed).

Every refused setting is listed, not only the first; the budget is checked
once every value passed. Runs in the process that runs the checks, on its
main thread (``runserver``: its main thread, in the autoreloader's child).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks

from graceful.core import default as _default
from graceful.core.config import ConfigError
from graceful.core.lifecycle import Lifecycle
from graceful.django import settings
from graceful.django.settings import Problem, ProblemKind

__all__ = [
    "BAD_VALUE",
    "BUDGET",
    "NOT_A_DICT",
    "TAG",
    "UNKNOWN_SETTING",
    "budget_messages",
    "check_graceful",
    "register",
    "settings_messages",
]

#: The tag of graceful's checks: ``manage.py check --tag graceful``.
TAG = "graceful"
#: The id of the budget check.
BUDGET = "graceful.E001"
#: settings.GRACEFUL is not a dict.
NOT_A_DICT = "graceful.E002"
#: An unknown settings.GRACEFUL key or GRACEFUL_* variable.
UNKNOWN_SETTING = "graceful.E003"
#: A value graceful refuses.
BAD_VALUE = "graceful.E004"

_IDS = {
    ProblemKind.BUDGET: BUDGET,
    ProblemKind.NOT_A_DICT: NOT_A_DICT,
    ProblemKind.UNKNOWN: UNKNOWN_SETTING,
    ProblemKind.VALUE: BAD_VALUE,
}

_HINT = (
    "Shorten the hook or task timeouts (timeout=...), or raise GRACEFUL['GRACE_PERIOD'] together with the"
    " pod's terminationGracePeriodSeconds."
)
_KEYS_HINT = "settings.GRACEFUL's keys are the GRACEFUL_* names without the prefix, upper-case: {'SHUTDOWN_DELAY': 5}."
_ENVIRONMENT_HINT = "Set in the environment, which overrides settings.GRACEFUL."


def _hint(problem: Problem) -> str | None:
    if problem.in_environment:
        return _ENVIRONMENT_HINT
    if problem.kind is ProblemKind.UNKNOWN:
        return _KEYS_HINT
    if problem.kind is ProblemKind.BUDGET:
        return _HINT
    return None


def settings_messages(environ: Mapping[str, str] | None = None) -> list[checks.CheckMessage]:
    """One error per refused graceful setting (:func:`graceful.django.settings.problems`); else nothing."""
    return [
        checks.Error(problem.message, hint=_hint(problem), obj=problem.source, id=_IDS[problem.kind])
        for problem in settings.problems(environ)
    ]


def budget_messages(lifecycle: Lifecycle) -> list[checks.CheckMessage]:
    """``graceful.E001`` when ``lifecycle``'s budget with its registered hooks cannot fit; else nothing."""
    try:
        lifecycle.check_budget()
    except ConfigError as exc:
        return [checks.Error(str(exc), hint=_HINT, id=BUDGET)]
    return []


def check_graceful(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The registered check: :func:`settings_messages`, then, if none, the budget of ``graceful.default_lifecycle``.

    ``graceful.django``'s ``ready()`` configured that lifecycle from the
    settings when they passed; when they did not, it is left alone and only
    the settings are reported.
    """
    return settings_messages() or budget_messages(_default.default_lifecycle)


def register() -> None:
    """Register the checks under the ``graceful`` tag (once however often called)."""
    checks.register(check_graceful, TAG)
