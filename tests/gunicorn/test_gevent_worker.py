"""graceful.gunicorn.adapter.gevent and the lifecycle's renewal under gevent monkey-patching, in a process of its own.

tests/live/gevent_check.py does the patching and the checks.

The test process itself must not be monkey-patched, so each case runs the
script in a subprocess and reads its JSON line and its log.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import Processes

pytestmark = [pytest.mark.e2e, pytest.mark.gunicorn, pytest.mark.release]


def check(processes: Processes, mode: str) -> tuple[dict[str, object], str]:
    proc = processes.python("gevent_check.py", mode)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    result = json.loads(output.strip().splitlines()[-1])
    return result, output


class TestPrepare:
    def test_the_shutting_down_event_is_cooperative_after_prepare(self, processes: Processes) -> None:
        """After prepare(), graceful.shutting_down is gevent's Event: a request waits on it cooperatively, woken."""
        result, _ = check(processes, "renew")
        assert result["gevent_event"] is True
        assert result["woken"] is True and 0.2 < result["waited"] < 1.5  # type: ignore[operator]
        # A wait that blocked the hub would let no tick happen while it waits; a loaded machine may allow few.
        assert result["ticks_while_waiting"] >= 1  # type: ignore[operator]

    def test_a_listener_shut_down_closes_its_server_quietly(self, processes: Processes) -> None:
        """The master's shutdown of a listener: the recorded server stops accepting with one INFO line, no traceback.

        Its socket stays open for Gunicorn to close: closed now, a connection
        accepted just before would find its listener gone.
        """
        result, output = check(processes, "renew")
        assert result["recorded"] == 1 and result["stopped"] is True and result["socket_open"] is True
        assert "listener ('127.0.0.1'" in output and "shut down; stopped accepting" in output
        assert "Traceback" not in output and "failed with" not in output

    def test_without_it_gevent_prints_a_traceback(self, processes: Processes) -> None:
        """The control: gevent's own StreamServer reports the EINVAL with a traceback and 'failed with'."""
        result, output = check(processes, "stale")
        assert result["stopped"] is True and result["socket_open"] is False
        assert "Traceback" in output and "Errno 22" in output
