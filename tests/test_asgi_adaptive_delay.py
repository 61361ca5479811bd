"""The adaptive delay on Uvicorn in the kube-proxy model: graceful serve's pods leave when the traffic does.

tests/test_adaptive_delay.py's model (tests/live/kubeproxy_model.py in a network
namespace of the test's own: DNAT rules and conntrack, a rolling update of three
pods with maxSurge 1, no retries), with ``--server uvicorn``: each pod is one
``graceful serve`` process serving the Starlette app tests/live/asgi_load_app.py,
with the adaptive delay (floor 1 s, the derived quiet period, a 30 s maximum).
Each old pod's endpoint is removed 3-4 s after its SIGTERM: later than the
floor, so a pod that left on the floor would refuse what the rules still send
it. The arrivals the ASGI middleware counts on the event loop must hold the
delay until the endpoint is gone, then end it on the quiet.

Root, ``ip`` and ``iptables-restore`` only, as the model's other tests (skipped
elsewhere with the reason, failed under ``CI=true``). Plain Uvicorn in the same
model is docs/benchmarks.md's figure, not a test here (CI time).
"""

from __future__ import annotations

import pytest

from tests.conftest import Processes, add_figures
from tests.test_adaptive_delay import FLOOR, MAXIMUM, STOP_SLACK, model
from tests.test_adaptive_delay import netns as netns  # the fixture: a namespace of this test's own

pytestmark = [pytest.mark.e2e, pytest.mark.load, pytest.mark.asgi, pytest.mark.xdist_group("load-kube-proxy")]

ADAPTIVE = ["--server", "uvicorn", "--mode", "adaptive", "--delay", f"{MAXIMUM:g}", "--floor", f"{FLOOR:g}"]
#: Endpoint removal 3-4 s after each SIGTERM: past the 1 s floor, the cheapest lag that says so.
LAG = ["--lag", "3:4"]


def test_adaptive_delay_on_uvicorn_lasts_until_the_endpoint_is_removed(
    processes: Processes, netns: str, request: pytest.FixtureRequest
) -> None:
    """Requests keep arriving past the floor until the endpoint is removed; the delay ends on quiet; 0 failed."""
    run = model(processes, netns, *ADAPTIVE, *LAG)
    add_figures(
        request.config,
        "kube-proxy model on Uvicorn: graceful serve, adaptive delay (tests/test_asgi_adaptive_delay.py)",
        ["pod", "endpoint removed s", "last request s", "delay", "exit s", "exit status", "requests", "errors"],
        [
            [
                pod["pod"],
                str(pod["removed_s"]),
                str(pod["last_request_s"]),
                (pod["delay"] or {}).get("text", "-"),
                str(pod["exit_s"]),
                str(pod["exit_code"]),
                str(run["requests"]),
                str(sum(run["errors"].values())),
            ]
            for pod in run["pods"]
        ],
    )
    assert run["errors"] == {}, run
    assert [p["exit_code"] for p in run["pods"]] == [0, 0, 0], run
    for pod in run["pods"]:
        assert pod["last_request_s"] is not None and pod["last_request_s"] > FLOOR, run
        assert pod["delay"] is not None and pod["delay"]["end"] == "quiet", run
        assert pod["removed_s"] is not None and pod["exit_s"] > pod["removed_s"], run
        assert pod["exit_s"] <= MAXIMUM + STOP_SLACK, run
