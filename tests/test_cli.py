"""Tests for graceful.cli: arguments, `graceful check` delegation, `graceful probe`, `graceful serve` start errors."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from graceful import __version__
from graceful.cli import main, parse_bind
from graceful.healthport.address import HealthAddress
from graceful.healthport.server import HealthPort
from graceful.http.health import HealthResponse
from graceful.kubernetes import command as check
from tests.conftest import ROOT, Processes


class TestParseBind:
    def test_host_and_port(self) -> None:
        """HOST:PORT splits into both parts."""
        assert parse_bind("0.0.0.0:8000") == ("0.0.0.0", 8000)

    def test_ipv6_in_brackets(self) -> None:
        """An IPv6 host is written in brackets and returned without them."""
        assert parse_bind("[::1]:9000") == ("::1", 9000)

    def test_missing_host_means_loopback(self) -> None:
        """:PORT binds 127.0.0.1."""
        assert parse_bind(":8080") == ("127.0.0.1", 8080)

    @pytest.mark.parametrize("text", ["8000", "host:", "host:http", "host:70000", "::1:80"])
    def test_bad_values_are_refused(self, text: str) -> None:
        """Anything but HOST:PORT with a port up to 65535 is a usage error naming the value."""
        with pytest.raises(argparse.ArgumentTypeError, match=repr(text).replace("[", r"\[")):
            parse_bind(text)


class TestMain:
    def test_version(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--version prints the version and succeeds."""
        assert main(["--version"]) == 0
        assert capsys.readouterr().out.strip() == f"graceful {__version__}"

    def test_help_lists_every_command(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--help succeeds and names serve, probe, check and timeline."""
        assert main(["--help"]) == 0
        out = capsys.readouterr().out
        assert "serve" in out and "probe" in out and "check" in out and "timeline" in out

    def test_timeline_help(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`graceful timeline --help` is the timeline's own help, and succeeds."""
        assert main(["timeline", "--help"]) == 0
        assert "usage: graceful timeline" in capsys.readouterr().out

    def test_timeline_usage_error(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`graceful timeline` without -o is a usage error: exit 2."""
        assert main(["timeline", "record.json"]) == 2
        assert "the following arguments are required: -o/--output" in capsys.readouterr().err

    def test_serve_help_lists_its_options(self, capsys: pytest.CaptureFixture[str]) -> None:
        """serve --help documents bind, threads and keep-alive."""
        assert main(["serve", "--help"]) == 0
        out = capsys.readouterr().out
        assert "--bind" in out and "--threads" in out and "--keep-alive" in out and "--health-bind" in out

    def test_no_command_is_a_usage_error(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Without a command the exit status is 2 with a usage message."""
        assert main([]) == 2
        assert "usage: graceful" in capsys.readouterr().err

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["serve", "app:app", "--threads", "0"], "'0' is not a whole number >= 1"),
            (["serve", "app:app", "--keep-alive", "-1"], "'-1' is not a finite number of seconds >= 0"),
            (["serve", "app:app", "--bind", "nowhere"], "'nowhere' is not HOST:PORT"),
            (["serve", "app:app", "--health-bind", ":8081"], "--health-bind=':8081' is not allowed: write the host"),
            (["serve", "app:app", "--health-bind", "8081"], "--health-bind='8081' is not allowed: expected HOST:PORT"),
            (["serve", "app:app", "--health-bind", ""], "--health-bind needs an address, such as 0.0.0.0:8081"),
            (["serve"], "the following arguments are required: MODULE:APP"),
        ],
    )
    def test_bad_serve_arguments(self, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
        """Bad serve arguments exit 2 with a message naming the value."""
        assert main(argv) == 2
        assert message in capsys.readouterr().err

    def test_check_is_delegated(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """`graceful check ARGS` hands ARGS, options included, to the checker's main and returns its status."""
        calls: list[list[str]] = []

        def fake(argv: list[str]) -> int:
            calls.append(argv)
            return 7

        monkeypatch.setattr(check, "main", fake)
        assert main(["check", "--format", "json", "a.yaml"]) == 7
        assert calls == [["--format", "json", "a.yaml"]]

    def test_check_runs_for_real(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`graceful check` on a clean manifest exits 0."""
        assert main(["check", str(ROOT / "tests" / "kubernetes" / "manifests" / "clean.yaml")]) == 0


class Answers:
    """A health port's responder: /livez passes, /readyz fails its shutdown check."""

    def respond(self, endpoint: str, check: str | None, query_string: str) -> HealthResponse:
        if endpoint == "readyz":
            return HealthResponse(503, "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n")
        return HealthResponse(200, "ok")

    def metrics(self) -> tuple[int, bytes, str]:
        return 404, b"", "text/plain"


@pytest.fixture
def health_port() -> Iterator[HealthPort]:
    port = HealthPort(HealthAddress("127.0.0.1", 0), Answers())
    port.bind()
    port.start()
    try:
        yield port
    finally:
        port.close()


class TestProbe:
    """`graceful probe`: exit 0 on 200, 1 on anything else, 2 on bad usage; one line."""

    def test_200_exits_0(self, health_port: HealthPort, capsys: pytest.CaptureFixture[str]) -> None:
        """A passing endpoint exits 0 with one line on standard output."""
        assert main(["probe", "livez", "--address", health_port.bound_address]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and out.startswith(f"livez: 200 ok from {health_port.bound_address} in ")

    def test_503_exits_1(self, health_port: HealthPort, capsys: pytest.CaptureFixture[str]) -> None:
        """A failing endpoint exits 1, naming the failing check."""
        assert main(["probe", "readyz", "--address", health_port.bound_address]) == 1
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and "503" in out and out.endswith("(failing: shutdown)\n")

    def test_address_from_the_environment(
        self, health_port: HealthPort, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --address, GRACEFUL_HEALTH_BIND says where (0.0.0.0 asked on 127.0.0.1)."""
        port = health_port.bound_address.rpartition(":")[2]
        monkeypatch.setenv("GRACEFUL_HEALTH_BIND", f"0.0.0.0:{port}")
        assert main(["probe", "healthz"]) == 0
        assert f"from 127.0.0.1:{port} " in capsys.readouterr().out

    def test_refused_exits_1(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Nobody listening: exit 1, one line."""
        holder = socket.create_server(("127.0.0.1", 0))
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        holder.close()
        assert main(["probe", "livez", "--address", address]) == 1
        assert capsys.readouterr().out == f"livez: connection refused by {address}\n"

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["probe"], "the following arguments are required: endpoint"),
            (["probe", "metrics"], "invalid choice: 'metrics'"),
            (["probe", "livez", "--timeout", "0"], "'0' is not a number of seconds > 0"),
            (["probe", "livez", "--timeout", "soon"], "'soon' is not a number of seconds"),
            (["probe", "livez", "--address", ":8081"], "--address=':8081' is not allowed: write the host"),
            (["probe", "livez", "--port", "1"], "unrecognized arguments: --port 1"),
        ],
    )
    def test_bad_usage_exits_2(self, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
        """Bad arguments exit 2 with a message naming the value; nothing on standard output."""
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert message in captured.err and captured.out == "" and "Traceback" not in captured.err

    def test_bad_environment_exits_2(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad GRACEFUL_HEALTH_BIND exits 2 with one line naming it."""
        monkeypatch.setenv("GRACEFUL_HEALTH_BIND", "junk")
        assert main(["probe", "livez"]) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith("graceful probe: error: GRACEFUL_HEALTH_BIND='junk' is not allowed") and err.count("\n") == 1
        )

    def test_help(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`graceful probe --help` succeeds and documents the fallback."""
        assert main(["probe", "--help"]) == 0
        assert "GRACEFUL_HEALTH_BIND, else 127.0.0.1:8000" in " ".join(capsys.readouterr().out.split())


def run_serve(processes: Processes, *args: str, **env: str) -> tuple[int, str]:
    """Run `python -m graceful serve ARGS` with only the given GRACEFUL_* variables; return status and output."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("GRACEFUL_")}
    full_env = {**base, "PYTHONPATH": str(ROOT), **env}
    proc = processes.start([sys.executable, "-m", "graceful", "serve", *args], env=full_env)
    output, _ = proc.communicate(timeout=30)
    return proc.returncode, output


class TestServeStartUpErrors:
    @pytest.mark.parametrize(
        ("env", "named"),
        [
            ({"GRACEFUL_SHUTDOWN_DELAY": "soon"}, "GRACEFUL_SHUTDOWN_DELAY='soon'"),
            ({"GRACEFUL_DRAIN_TIMEOUT": "-1"}, "GRACEFUL_DRAIN_TIMEOUT='-1'"),
            ({"GRACEFUL_SEND_RETRY_AFTER": "maybe"}, "GRACEFUL_SEND_RETRY_AFTER='maybe'"),
            ({"GRACEFUL_SHUTDOWN_DELAYY": "1"}, "GRACEFUL_SHUTDOWN_DELAYY is not a graceful setting"),
            ({"GRACEFUL_GRACE_PERIOD": "5"}, "does not fit GRACEFUL_GRACE_PERIOD"),
        ],
    )
    def test_bad_setting_exits_2_naming_it(self, processes: Processes, env: dict[str, str], named: str) -> None:
        """A bad GRACEFUL_* value or budget exits 2 with one line naming the variable, no traceback."""
        status, output = run_serve(processes, "examples.wsgi_app:app", "--bind", "127.0.0.1:0", **env)
        assert status == 2
        assert output.startswith("graceful serve: error: ") and named in output
        assert output.count("\n") == 1 and "Traceback" not in output

    def test_bad_setting_read_by_a_flask_app_exits_2(self, processes: Processes) -> None:
        """A bad value met while the app module builds graceful.flask.Graceful also exits 2, one line."""
        status, output = run_serve(processes, "examples.flask_app:app", GRACEFUL_HOOK_TIMEOUT="0")
        assert status == 2 and "GRACEFUL_HOOK_TIMEOUT='0'" in output and "Traceback" not in output

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("no_such_module:app", "no module named 'no_such_module'"),
            ("examples.wsgi_app:missing", "module 'examples.wsgi_app' has no attribute 'missing'"),
        ],
    )
    def test_unknown_app_exits_2(self, processes: Processes, spec: str, message: str) -> None:
        """An app that cannot be found exits 2 with one line saying what is missing."""
        status, output = run_serve(processes, spec)
        assert status == 2 and message in output and "Traceback" not in output

    def test_address_in_use_exits_1(self, processes: Processes) -> None:
        """A port another socket holds makes serve exit 1 with Werkzeug's message."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            status, output = run_serve(processes, "examples.wsgi_app:app", "--bind", f"127.0.0.1:{port}")
        assert status == 1 and "in use" in output and "Traceback" not in output

    def test_health_port_in_use_exits_1(self, processes: Processes) -> None:
        """A health port another socket holds makes serve exit 1 with one line naming it, no traceback."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            status, output = run_serve(
                processes, "examples.wsgi_app:app", "--bind", "127.0.0.1:0", "--health-bind", f"127.0.0.1:{port}"
            )
        assert status == 1 and "Traceback" not in output
        assert f"cannot listen on the health port 127.0.0.1:{port}: [Errno 98] Address already in use" in output

    def test_bad_health_bind_variable_exits_2(self, processes: Processes) -> None:
        """GRACEFUL_HEALTH_BIND=:8081 exits 2 naming it, before anything listens."""
        status, output = run_serve(processes, "examples.wsgi_app:app", GRACEFUL_HEALTH_BIND=":8081")
        assert status == 2 and "GRACEFUL_HEALTH_BIND=':8081' is not allowed" in output and "Traceback" not in output


class TestServeAsgi:
    def test_an_asgi_app_without_uvicorn_exits_2_saying_what_to_install(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """serve decides the app is ASGI once loaded; without Uvicorn: exit 2, one line naming the extra."""
        module = tmp_path / "bare_asgi_app.py"
        module.write_text("async def app(scope, receive, send):\n    pass\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setitem(sys.modules, "uvicorn", None)
        assert main(["serve", "bare_asgi_app:app", "--bind", "127.0.0.1:0"]) == 2
        err = capsys.readouterr().err
        assert err == (
            "graceful serve: error: serving an ASGI app needs Uvicorn, which is not installed:"
            " pip install 'graceful-wsgi[asgi]'\n"
        )
