"""The examples run as documented: the composed Gunicorn config and the systemd unit."""

from __future__ import annotations

import configparser
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, Processes, read_until
from tests.gunicorn.test_gunicorn import _has_control_socket, free_port

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))


@pytest.mark.e2e
@pytest.mark.gunicorn
class TestGunicornConfigExample:
    def test_registers_when_ready_and_deregisters_before_the_listeners_close(self, processes: Processes) -> None:
        """The example config registers in the registry and deregisters at SIGTERM, before NotAccepting."""
        port, registry = free_port(), free_port()
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            BIND=f"127.0.0.1:{port}",
            EXAMPLE_REGISTRY=f"http://127.0.0.1:{registry}",
            GRACEFUL_SHUTDOWN_DELAY="1",
        )
        argv = [GUNICORN, "-c", "examples/gunicorn_conf.py", "examples.flask_app:app"]
        if _has_control_socket():  # tests must not share ~/.gunicorn/gunicorn.ctl
            argv.insert(1, "--no-control-socket")
        proc = processes.start(argv, env=env)
        read_until(proc, f"registry: registered web-127.0.0.1-{port}")
        proc.send_signal(signal.SIGTERM)
        lines = read_until(proc, "graceful: NotAcceptingNewRequests")
        assert any(f"registry: deregistered web-127.0.0.1-{port}" in line for line in lines)
        assert proc.wait(30) == 0


class TestSystemdUnit:
    def test_unit_matches_the_budget(self) -> None:
        """The unit notifies, sends SIGTERM to the master only, and allows GRACEFUL_GRACE_PERIOD to stop."""
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read(ROOT / "examples" / "systemd" / "graceful-example.service")
        service = parser["Service"]
        assert service["Type"] == "notify" and service["KillMode"] == "mixed"
        grace = re.search(r"GRACEFUL_GRACE_PERIOD=(\d+)", "\n".join(service.values()))
        assert grace is not None and service["TimeoutStopSec"] == grace.group(1)
