"""A Django project's ``settings.GRACEFUL``, found from what a server serves, without setting Django up.

A Gunicorn master resolves the server's settings once, in ``on_starting``,
before any worker loads the app (:mod:`graceful.gunicorn.config`). For a
Django project it needs ``settings.GRACEFUL`` then, without loading the app:
the app's ``django.setup()`` belongs to each worker, after the fork (database
connections, threads). So this module only *finds* the settings module and
imports it, as Django's own ``settings`` object would (no ``django.setup()``,
no app, no database, nothing imported from Django here):

1. ``DJANGO_SETTINGS_MODULE`` in the environment, when set;
2. else the app's module (``mysite.wsgi`` of ``mysite.wsgi:application``), read
   as text and never executed: ``django-admin startproject`` writes
   ``os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")``
   there, and a literal of that form (or ``os.environ[...] = "..."``) names it;
3. else the app is not a Django project graceful can see from here: no
   ``settings.GRACEFUL`` (its workers refuse one that differs from the
   master's, saying how to fix it).

The settings module is imported in the master, once; the workers it forks
inherit it (a change to it needs a restart, as for any module the master
imported). Runs in the Gunicorn master, main thread, in ``on_starting``.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from graceful.core.config import ConfigError, env_name

__all__ = ["ENVIRONMENT_VARIABLE", "SETTING", "DjangoSettings", "find_settings", "mapping"]

#: The Django setting graceful reads.
SETTING = "GRACEFUL"
#: Django's variable naming the settings module.
ENVIRONMENT_VARIABLE = "DJANGO_SETTINGS_MODULE"
#: An app module bigger than this is not a ``wsgi.py``: not read.
_MAX_SOURCE_BYTES = 1 << 20


def mapping(value: object) -> dict[str, Any]:
    """``settings.GRACEFUL``'s items under their ``GRACEFUL_*`` names; raise ConfigError if it is no dict."""
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"settings.{SETTING}={value!r} is not allowed: expected a dict of graceful settings,"
            " such as {'SHUTDOWN_DELAY': 5}"
        )
    return {env_name("") + str(key): item for key, item in value.items()}


class DjangoSettings:
    """The settings module of the project a server serves, and where its name came from."""

    def __init__(self, module: str, found_in: str) -> None:
        #: The dotted name, ``mysite.settings``.
        self.module = module
        #: ``DJANGO_SETTINGS_MODULE`` or the app module's file, for messages.
        self.found_in = found_in

    def graceful(self) -> dict[str, Any]:
        """``settings.GRACEFUL`` under ``GRACEFUL_*`` names (empty when unset); ConfigError in one line.

        Imports the settings module (once per process: Python keeps it).
        """
        try:
            settings = importlib.import_module(self.module)
        except Exception as exc:  # noqa: BLE001 -- any error of the user's module is reported in one line
            raise ConfigError(
                f"cannot read settings.{SETTING}: importing {self.module} ({self.found_in}) failed:"
                f" {type(exc).__name__}: {exc}"
            ) from None
        return mapping(getattr(settings, SETTING, {}))


def find_settings(app_uri: str, environ: Mapping[str, str] | None = None) -> DjangoSettings | None:
    """The settings module of the Django project serving ``app_uri``, or None (see the module docstring)."""
    environ = os.environ if environ is None else environ
    named = environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if named:
        return DjangoSettings(named, ENVIRONMENT_VARIABLE)
    path = _module_file(app_uri.partition(":")[0].strip())
    if path is None:
        return None
    module = _settings_named_in(path)
    return None if module is None else DjangoSettings(module, f"{ENVIRONMENT_VARIABLE} in {path}")


def _module_file(dotted: str) -> str | None:
    """The source file of module ``dotted`` on ``sys.path``, found without importing it or its packages."""
    parts = dotted.split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    for entry in sys.path:
        base = os.path.join(entry or os.getcwd(), *parts)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def _settings_named_in(path: str) -> str | None:
    """The literal ``DJANGO_SETTINGS_MODULE`` that the module at ``path`` sets, if any."""
    try:
        with open(path, "rb") as source:
            text = source.read(_MAX_SOURCE_BYTES + 1)
        if len(text) > _MAX_SOURCE_BYTES:
            return None
        tree = ast.parse(text, filename=path)
    except (OSError, SyntaxError, ValueError):
        return None  # not ours to report: the worker's import of the app says what is wrong
    for node in ast.walk(tree):
        value = _setdefault_value(node) if isinstance(node, ast.Call) else None
        if value is None and isinstance(node, ast.Assign):
            value = _assigned_value(node)
        if value:
            return value
    return None


def _is_environ(node: ast.expr) -> bool:
    """``os.environ`` (or a bare ``environ``)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ"
    return isinstance(node, ast.Name) and node.id == "environ"


def _text(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _setdefault_value(call: ast.Call) -> str | None:
    """``os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")``'s value."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "setdefault" and _is_environ(func.value)):
        return None
    if len(call.args) != 2 or _text(call.args[0]) != ENVIRONMENT_VARIABLE:
        return None
    return _text(call.args[1])


def _assigned_value(assign: ast.Assign) -> str | None:
    """``os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"``'s value."""
    for target in assign.targets:
        if (
            isinstance(target, ast.Subscript)
            and _is_environ(target.value)
            and _text(target.slice) == ENVIRONMENT_VARIABLE
        ):
            return _text(assign.value)
    return None
