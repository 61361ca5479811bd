"""The ``graceful`` command: ``serve module:app``, ``probe``, ``check`` and ``timeline``.

    graceful serve myapp:app --bind 0.0.0.0:8000 --threads 8
    graceful serve myapp:app --bind 0.0.0.0:8000 --health-bind 0.0.0.0:8081
    python -m graceful serve myapp:create_app() --keep-alive 0
    graceful probe readyz --address 127.0.0.1:8081
    graceful check deployment.yaml
    graceful timeline shutdown.json -o timeline.svg

``serve`` runs the single-process server with its whole shutdown timeline: a
WSGI app on graceful.serve.server (Werkzeug's request handling), an ASGI app on
Uvicorn (graceful.uvicorn.server; ``pip install 'graceful-wsgi[asgi]'``),
decided once the app is loaded; settings come from ``GRACEFUL_*`` environment variables
(graceful.core.config). ``check`` is ``graceful.kubernetes.command``'s own command line,
``timeline`` ``graceful.timeline``'s (exit 2 and one line for a file that is
not a shutdown record, or without matplotlib).

Exit status of ``serve``: 0 after a graceful shutdown; 1 on a second signal,
a failed server loop or an overrun grace period (or when the address is in
use; an ASGI app: a failed lifespan startup); 2 for a usage error, a bad
``GRACEFUL_*`` value, a budget that cannot fit the grace period, an app that
cannot be found, or an ASGI app without a Uvicorn graceful can drive (one line
on standard error, no traceback).

``probe`` asks a health port once (graceful.healthport.probe): exit 0 on a
200, 1 on anything else, 2 for a usage error. It is dispatched before
anything else is imported, so that an exec probe starts quickly.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from graceful import __version__
from graceful._args import seconds, whole_number
from graceful.core.config import ConfigError

__all__ = ["main", "parse_bind"]

_LOG_LEVELS = ("debug", "info", "warning", "error")


def parse_bind(text: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:8000`` for IPv6; ``:8000`` means 127.0.0.1) into host and port.

    Raises ``argparse.ArgumentTypeError`` for anything else.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (such as 127.0.0.1:8000 or [::1]:8000)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"{text!r}: write an IPv6 address in brackets, as in [::1]:8000")
    return host or "127.0.0.1", int(port_text)


def _health_bind(text: str) -> str:
    """``--health-bind``: an address the health port can use (graceful.healthport.address)."""
    from graceful.healthport.address import parse_address

    try:
        address = parse_address("--health-bind", text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if address is None:
        raise argparse.ArgumentTypeError("--health-bind needs an address, such as 0.0.0.0:8081")
    return str(address)


def _probe_timeout(text: str) -> float:
    """``--timeout``: seconds > 0."""
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def _probe_parser() -> argparse.ArgumentParser:
    from graceful.healthport import probe

    parser = argparse.ArgumentParser(
        prog="graceful probe",
        description="Ask the health port once: exit 0 on 200, 1 on anything else (503, refused, timeout), 2 on"
        " bad usage; one line of output. For exec probes and Docker's HEALTHCHECK (no curl needed).",
    )
    parser.add_argument("endpoint", choices=probe.ENDPOINTS, help="the endpoint to ask")
    parser.add_argument(
        "--address",
        metavar="HOST:PORT",
        help=f"where to ask: HOST:PORT, [IPv6]:PORT or unix:PATH; 0.0.0.0 means 127.0.0.1 (default:"
        f" {probe.ENV}, else {probe.FALLBACK}, the app's port)",
    )
    parser.add_argument(
        "--timeout",
        type=_probe_timeout,
        default=probe.DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"for the whole exchange (default: {probe.DEFAULT_TIMEOUT:g})",
    )
    return parser


def _probe(argv: list[str]) -> int:
    """``graceful probe``: one line on standard output, the exit status of what it found."""
    from graceful.healthport import probe

    parser = _probe_parser()
    try:
        args = parser.parse_args(argv)
        address = probe.resolve(args.address, os.environ)
    except SystemExit as exc:  # --help and usage errors
        return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 2
    except ValueError as exc:  # a bad --address or GRACEFUL_HEALTH_BIND
        print(f"graceful probe: error: {exc}", file=sys.stderr)
        return 2
    outcome = probe.probe(args.endpoint, address, args.timeout)
    print(outcome.line)
    return outcome.exit_status


def _parser() -> argparse.ArgumentParser:
    from graceful.serve.server import DEFAULT_KEEP_ALIVE, DEFAULT_THREADS

    parser = argparse.ArgumentParser(
        prog="graceful",
        description="Kubernetes-grade graceful shutdown for threaded WSGI servers and Uvicorn.",
        epilog="Shutdown settings come from GRACEFUL_* environment variables (see the README).",
    )
    parser.add_argument("--version", action="version", version=f"graceful {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser(
        "serve",
        help="serve a WSGI or ASGI app in one process, with graceful shutdown",
        description="Serve a WSGI app with Werkzeug's request handling on a bounded thread pool, or an ASGI app"
        " on Uvicorn (pip install 'graceful-wsgi[asgi]'); SIGTERM or SIGINT runs the graceful shutdown (a second"
        " one exits 1 at once).",
    )
    serve.add_argument("app", metavar="MODULE:APP", help="the WSGI or ASGI app, as module:attr or module:factory()")
    serve.add_argument(
        "-b",
        "--bind",
        type=parse_bind,
        default=("127.0.0.1", 8000),
        metavar="HOST:PORT",
        help="address to listen on; port 0 picks a free one (default: 127.0.0.1:8000)",
    )
    serve.add_argument(
        "-t",
        "--threads",
        type=whole_number,
        default=None,
        help=f"request threads of a WSGI app (default: {DEFAULT_THREADS}); an ASGI app is served on one event"
        " loop, this does not apply",
    )
    serve.add_argument(
        "--keep-alive",
        type=seconds,
        default=DEFAULT_KEEP_ALIVE,
        metavar="SECONDS",
        help=f"seconds an idle HTTP/1.1 connection stays open; 0: no keep-alive (default: {DEFAULT_KEEP_ALIVE:g};"
        " an ASGI app: Uvicorn's timeout_keep_alive)",
    )
    serve.add_argument(
        "--health-bind",
        type=_health_bind,
        default=None,
        metavar="ADDRESS",
        help="also answer /livez, /readyz and /healthz on this address (HOST:PORT or unix:PATH), from a thread"
        " that never waits for a request thread (default: GRACEFUL_HEALTH_BIND, else off)",
    )
    serve.add_argument("--no-access-log", dest="access_log", action="store_false", help="do not log each request")
    serve.add_argument("--log-level", choices=_LOG_LEVELS, default="info", help="log level (default: info)")

    commands.add_parser(
        "probe",
        add_help=False,
        help="ask the health port once, for exec probes and HEALTHCHECK (graceful probe --help)",
    )
    commands.add_parser(
        "check",
        add_help=False,
        help="check Kubernetes manifests for settings that lose requests (graceful check --help)",
    )
    commands.add_parser(
        "timeline",
        add_help=False,
        help="draw a shutdown record (GRACEFUL_REPORT_FILE) as an SVG or PNG timeline (graceful timeline --help)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``graceful`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    ``serve`` does not return after serving: it ends the process with
    ``lifecycle.exit(status)`` (hung hook threads are not waited for).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["probe"]:
        return _probe(args_list[1:])
    if args_list[:1] == ["check"]:
        from graceful.kubernetes import command as check  # its dependencies are not needed to serve

        return check.main(args_list[1:])
    if args_list[:1] == ["timeline"]:
        from graceful import timeline  # matplotlib is imported only when drawing

        return timeline.main(args_list[1:])
    parser = _parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # --help, --version and usage errors: return the status instead
        return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 2
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    """``graceful serve``: import the app, check the settings, serve (WSGI or ASGI), exit."""
    from graceful.http.apps import is_asgi_app
    from graceful.process.termination import report_file_problem
    from graceful.serve.server import DEFAULT_THREADS, AppImportError, load_app, serve, wrap_app

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Like Gunicorn: the working directory is importable, also from the console script.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        # The app module may build a graceful.flask.Graceful: that reads GRACEFUL_* values.
        app = load_app(args.app)
        if is_asgi_app(app):  # decided once, here: an ASGI app is served on Uvicorn
            return _serve_asgi(args, app)
        app, lifecycle = wrap_app(app)
        lifecycle.check_budget()  # reads the config and checks it fits GRACEFUL_GRACE_PERIOD
    except (AppImportError, ConfigError) as exc:
        return _error(str(exc))
    problem = report_file_problem(lifecycle.config.report_file)
    if problem is not None:
        return _error(problem)
    host, port = args.bind
    status = serve(
        app,
        host,
        port,
        threads=DEFAULT_THREADS if args.threads is None else args.threads,
        lifecycle=lifecycle,
        keep_alive=args.keep_alive,
        access_log=args.access_log,
        health_bind=args.health_bind,
    )
    lifecycle.exit(status)


def _serve_asgi(args: argparse.Namespace, app: object) -> int:
    """``graceful serve`` of an ASGI app: on Uvicorn (graceful.uvicorn.server), the same settings and timeline."""
    from graceful.process.termination import report_file_problem
    from graceful.uvicorn.adapter import UvicornMissing, UvicornRefused
    from graceful.uvicorn.server import serve_asgi, wrap_asgi_app

    try:
        app, lifecycle = wrap_asgi_app(app)
        lifecycle.check_budget()
    except (ConfigError, ValueError) as exc:
        return _error(str(exc))
    problem = report_file_problem(lifecycle.config.report_file)
    if problem is not None:
        return _error(problem)
    if args.threads is not None:
        logging.getLogger(__name__).warning(
            "graceful: --threads applies to WSGI apps; this ASGI app is served on one event loop"
        )
    host, port = args.bind
    try:
        status = serve_asgi(
            app,
            host,
            port,
            lifecycle=lifecycle,
            keep_alive=args.keep_alive,
            access_log=args.access_log,
            health_bind=args.health_bind,
        )
    except (UvicornMissing, UvicornRefused) as exc:
        return _error(str(exc))
    lifecycle.exit(status)


def _error(message: str) -> int:
    """Print a one-line error for ``graceful serve`` and return its status, 2."""
    print(f"graceful serve: error: {message}", file=sys.stderr)
    return 2
