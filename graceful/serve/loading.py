"""Loading the app and wrapping it for the single-process server (``graceful serve``).

:func:`load_app` imports the WSGI app named by ``module:attr``;
:func:`wrap_app` puts it behind the :class:`~graceful.wsgi.middleware.GracefulMiddleware`
and the inner :class:`_MarkAdmitted` layer that tells the server when a
request got past the middleware's admission.

Threads: ``load_app`` and ``wrap_app`` run on the main thread at start-up;
``_MarkAdmitted`` runs on the request (``graceful-worker-N``) threads.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from graceful.core import default as _default
from graceful.core.lifecycle import Lifecycle
from graceful.wsgi.middleware import GracefulMiddleware, find_middleware

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["ADMITTED_KEY", "AppImportError", "load_app", "wrap_app"]

#: environ key: called when the request reaches the app (past the middleware's admission).
ADMITTED_KEY = "graceful.server.admitted"


class AppImportError(ValueError):
    """``module:attr`` names no importable WSGI app; the message says which part is wrong."""


def load_app(spec: str) -> WSGIApplication:
    """Import the WSGI app named by ``module:attr`` (or ``module:factory(args)``), like Gunicorn.

    ``module`` alone means ``module:application``. A call is made with literal
    arguments only. Raises :class:`AppImportError` when the module or the
    attribute does not exist or the result is not callable; exceptions raised
    while the module itself runs propagate unchanged. Main thread, at start-up.
    """
    module_name, _, expression = spec.partition(":")
    expression = expression or "application"
    if not module_name:
        raise AppImportError(f"{spec!r} names no module: expected module:attr, such as myapp:app")
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        raise AppImportError(f"{expression!r} is neither a name nor a call such as create_app()") from None
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    call = tree if isinstance(tree, ast.Call) else None
    if call is not None:
        tree = call.func
        try:
            args = [ast.literal_eval(arg) for arg in call.args]
            kwargs = {str(kw.arg): ast.literal_eval(kw.value) for kw in call.keywords}
        except ValueError:
            raise AppImportError(f"{expression!r}: factory arguments must be literals") from None
    if not isinstance(tree, ast.Name):
        raise AppImportError(f"{expression!r} is neither a name nor a call such as create_app()")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise  # the module exists but imports something missing: show the traceback
        raise AppImportError(f"no module named {exc.name!r} (while importing {spec!r})") from None
    try:
        target = getattr(module, tree.id)
    except AttributeError:
        raise AppImportError(f"module {module_name!r} has no attribute {tree.id!r}") from None
    app = target(*args, **kwargs) if call is not None else target
    if not callable(app):
        raise AppImportError(f"{spec!r} is a {type(app).__name__}, not a WSGI application")
    return app  # type: ignore[no-any-return]


class _MarkAdmitted:
    """The innermost WSGI layer: tells the server the request got past the middleware's admission.

    Request thread. Placed inside :class:`GracefulMiddleware`, so when it runs
    the request is already counted in ``lifecycle.in_flight`` (or is
    long-running and not meant to be): the server may let the drain begin.
    """

    __slots__ = ("app",)

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        admitted = environ.get(ADMITTED_KEY)
        if admitted is not None:
            admitted()
        return self.app(environ, start_response)


def wrap_app(app: WSGIApplication, lifecycle: Lifecycle | None = None) -> tuple[WSGIApplication, Lifecycle]:
    """Return ``app`` ready for :class:`GracefulServer` and the lifecycle that drives it.

    A plain WSGI app is wrapped in ``GracefulMiddleware(app, lifecycle)``
    (``lifecycle`` defaults to ``graceful.default_lifecycle``). An app that is
    a ``GracefulMiddleware`` already, or a Flask app that uses
    ``graceful.flask.Graceful``, is served as it is, with the lifecycle it
    was given; the middleware's ``app`` attribute gains a thin inner layer
    that tells the server when a request was admitted. Raises ``ValueError``
    when ``lifecycle`` differs from the one the app is already wrapped with.
    Main thread, at start-up.
    """
    found = find_middleware(app)
    if found is None:
        extensions = getattr(app, "extensions", None)
        extension = extensions.get("graceful") if isinstance(extensions, dict) else None
        lifecycle = lifecycle or getattr(extension, "lifecycle", None) or _default.default_lifecycle
        # An outer middleware of the same lifecycle makes any inner one pass requests straight on.
        return GracefulMiddleware(_MarkAdmitted(app), lifecycle), lifecycle
    if lifecycle is not None and found.lifecycle is not lifecycle:
        raise ValueError("the app is already wrapped in a GracefulMiddleware of another lifecycle")
    if not isinstance(found.app, _MarkAdmitted):
        found.app = _MarkAdmitted(found.app)
    return app, found.lifecycle
