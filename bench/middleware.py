"""What GracefulMiddleware adds to one request: bare app vs wrapped, in one run; and what metrics add.

    python bench/middleware.py [--rounds 9] [--number 200000] [--no-metrics]

Each call does what a WSGI server does per request: a fresh environ (a copy),
call the app, iterate the response, ``close()`` it. The plain WSGI function is
compared with it wrapped in ``GracefulMiddleware``; a Flask hello-world app
without and with ``graceful.flask.Graceful`` (one app, switched between the
two; called as a server calls it, through ``Flask.__call__``). Bare and wrapped runs
alternate, round by round, and each keeps its best round (timeit's advice:
the minimum is the run least disturbed by the rest of the machine); the
median is printed too, as a check on a noisy machine. Each round averages
the two sides over sixteen Python stack depths (see ``STACK_DEPTHS``): any
extra layer moves where a deep app's frames sit in memory, which alone
moved the Flask ratio between 1.02 and 1.05 from one process to the next.
Prints nanoseconds per request, the ratio and the nanoseconds added, for a
plain WSGI function and a Flask hello-world app, and the paired ratio: the
median over rounds of wrapped / bare within one round, the steadiest of the
three (bench/run.py reports it for Flask).

Then, unless ``--no-metrics``, the same comparison between two wrapped apps:
metrics off (the default config) and metrics on (``metrics_on_app_port`` and a
``GracefulCollector`` registered in a registry); and, for what the shutdown
statistics cost, a request before ShutdownInitiated vs one during the
shutdown delay (the checked path, which counts it as an arrival).

Targets (the README's benchmark table): at most 1 us added on the plain app, Flask slowed <= 3%;
metrics on at most 50 ns more than off.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import timeit
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.wsgi.middleware import GracefulMiddleware

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment


def plain_app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """The smallest useful WSGI app."""
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


def flask_app() -> tuple[WSGIApplication, Callable[[str], None]]:
    """One Flask hello-world app, and a switch that puts ``Graceful`` on ("wrapped") and off ("bare").

    One app object for both sides: the comparison then differs by the
    middleware alone, not by where two separate apps happen to sit in memory
    (which moves a 60 us request by a few percent either way).
    """
    from flask import Flask

    from graceful.flask import Graceful

    app = Flask("bench")

    @app.route("/")
    def hello() -> str:
        return "hello"

    flask_own = app.wsgi_app
    Graceful(app, lifecycle=Lifecycle(Config()))  # the two lines of adoption
    installed = {"bare": flask_own, "wrapped": app.wsgi_app}

    def switch(side: str) -> None:
        app.wsgi_app = installed[side]  # type: ignore[method-assign]

    return app, switch


def environ_for(path: str) -> dict[str, Any]:
    """A complete GET environ, as a server would build it."""
    from werkzeug.test import EnvironBuilder

    return dict(EnvironBuilder(path=path).get_environ())


def _start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
    return len


def serve_once(app: WSGIApplication, environ: dict[str, Any]) -> None:
    """One request as a server runs it: fresh environ, call, iterate, close."""
    result = app(environ.copy(), _start_response)
    try:
        for _chunk in result:
            pass
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()


#: A round times each side at this many Python stack depths (0 to 15 frames deeper) and
#: averages them: where the app's frames fall in memory moves a Flask request by
#: up to 1 us either way, and one fixed depth would be a lucky or unlucky draw.
STACK_DEPTHS = 16


def _at_depth(depth: int, timeit_number: Callable[[int], float], number: int) -> float:
    """``timeit_number(number)``, called ``depth`` Python frames deeper than here."""
    if depth == 0:
        return timeit_number(number)
    return _at_depth(depth - 1, timeit_number, number)


def compare(
    name: str,
    bare: WSGIApplication,
    wrapped: WSGIApplication,
    environ: dict[str, Any],
    rounds: int,
    number: int,
    switch: Callable[[str], None] | None = None,
    sides: tuple[str, str] = ("bare", "wrapped"),
) -> None:
    """Time ``bare`` and ``wrapped``, alternating; print the best and the median round of each.

    ``switch(side)``, if given, is called before each timing ("bare" or "wrapped"); ``sides``
    names the two in the output (and in the calls to ``switch``).
    """
    first, second = sides
    timers = {
        first: timeit.Timer(lambda: serve_once(bare, environ)),
        second: timeit.Timer(lambda: serve_once(wrapped, environ)),
    }
    per_depth = max(1, number // STACK_DEPTHS)
    samples: dict[str, list[float]] = {key: [] for key in timers}
    for key, timer in timers.items():  # warm up
        if switch is not None:
            switch(key)
        timer.timeit(number // 10 or 1)
    for _ in range(rounds):
        total = dict.fromkeys(timers, 0.0)
        for depth in range(STACK_DEPTHS):
            for key in (first, second) if depth % 2 == 0 else (second, first):
                if switch is not None:
                    switch(key)
                total[key] += _at_depth(depth, timers[key].timeit, per_depth)
        for key in timers:
            samples[key].append(total[key] / (per_depth * STACK_DEPTHS) * 1e9)
    for label, pick in (("best", min), ("median", statistics.median)):
        bare_ns, wrapped_ns = pick(samples[first]), pick(samples[second])
        print(
            f"{name:<6} {label:<6} {first} {bare_ns:8.0f} ns   {second} {wrapped_ns:8.0f} ns"
            f"   ratio {wrapped_ns / bare_ns:.3f}   added {wrapped_ns - bare_ns:+6.0f} ns"
        )
    paired = statistics.median(w / b for b, w in zip(samples[first], samples[second], strict=True))
    added = statistics.median(w - b for b, w in zip(samples[first], samples[second], strict=True))
    print(
        f"{name:<6} paired ratio {paired:.3f}, added {added:+.0f} ns"
        f" (median over rounds of {second} / {first} and {second} - {first} in the same round)"
    )


def main(argv: list[str] | None = None) -> None:
    """Run both comparisons and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds; the best is kept")
    parser.add_argument("--number", type=int, default=200_000, help="requests per round (plain app)")
    parser.add_argument("--no-metrics", dest="metrics", action="store_false", help="skip metrics off vs on")
    args = parser.parse_args(argv)
    print(f"CPython {platform.python_version()} on {platform.machine()}; best of {args.rounds} rounds")
    compare_both(args.rounds, args.number)
    if args.metrics:
        compare_metrics(args.rounds, args.number)


def compare_both(rounds: int, number: int) -> None:
    """The plain WSGI function bare vs in GracefulMiddleware; Flask bare vs with Graceful."""
    environ = environ_for("/")
    compare("plain", plain_app, GracefulMiddleware(plain_app, Lifecycle(Config())), environ, rounds, number)
    app, switch = flask_app()
    compare("flask", app, app, environ, rounds, max(1, number // 20), switch)


def with_metrics(app: WSGIApplication, on: bool) -> GracefulMiddleware:
    """``app`` in a GracefulMiddleware with metrics off, or on (app-port /metrics, a registered collector)."""
    lifecycle = Lifecycle(Config(metrics_on_app_port=on))
    if on:
        from prometheus_client import CollectorRegistry

        from graceful.metrics import GracefulCollector

        CollectorRegistry().register(GracefulCollector(lifecycle))
    return GracefulMiddleware(app, lifecycle)


def in_the_delay(app: WSGIApplication) -> GracefulMiddleware:
    """``app`` in a GracefulMiddleware whose lifecycle is in its shutdown delay (every request counted)."""
    lifecycle = Lifecycle(Config(shutdown_delay=3600, grace_period=7200))
    lifecycle.serves_requests = False  # no sampler thread competing for the CPU
    lifecycle.initiate_shutdown()
    return GracefulMiddleware(app, lifecycle)


def compare_metrics(rounds: int, number: int) -> None:
    """Wrapped with metrics off vs on, plain and Flask; then before vs during the shutdown delay (plain)."""
    environ = environ_for("/")
    compare(
        "plain",
        with_metrics(plain_app, False),
        with_metrics(plain_app, True),
        environ,
        rounds,
        number,
        sides=("off", "on"),
    )
    app, _ = flask_app()
    flask_own = app.wsgi_app.__self__.app  # type: ignore[attr-defined]  # Graceful's middleware's app
    installed = {side: with_metrics(flask_own, side == "on").__call__ for side in ("off", "on")}

    def switch(side: str) -> None:
        app.wsgi_app = installed[side]  # type: ignore[method-assign]

    compare("flask", app, app, environ, rounds, max(1, number // 20), switch, sides=("off", "on"))
    compare(
        "plain",
        with_metrics(plain_app, False),
        in_the_delay(plain_app),
        environ,
        rounds,
        number,
        sides=("before", "delay"),
    )


if __name__ == "__main__":
    main()
