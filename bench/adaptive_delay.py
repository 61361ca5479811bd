"""Rollout and exit times of the fixed and the adaptive shutdown delay, side by side, in the kube-proxy model.

    python bench/adaptive_delay.py [--trials 3]        # as root, with iptables and iproute2

Runs tests/live/kubeproxy_model.py (a rolling update of three Gunicorn pods
behind kube-proxy's iptables DNAT rules and conntrack, in a network namespace
of its own, on 127.x addresses) for plain Gunicorn, graceful's fixed 5 s delay
and the adaptive delay (GRACEFUL_SHUTDOWN_DELAY_MIN=1, the derived quiet period,
a 30 s maximum; and with the floor graceful check advises in-cluster, 2 s), in three settings:

fast
    each old pod's endpoint removed 0.5-2 s after its SIGTERM (kube-proxy on a
    healthy cluster), steady traffic (6 clients);
slow
    removed 8-10 s after SIGTERM (a balancer that deregisters slowly);
light
    removed 0.5-2 s after SIGTERM, 2 clients with a new connection every 1.5-3 s
    each: the quiet gaps the adaptive delay cannot tell from a removal.

For each: errors (requests refused or cut: kube-proxy does not retry), the old
pods' SIGTERM-to-exit median and worst, how many exited before their endpoint
was removed, the rollout's length (first new pod started to last old pod gone),
and the ratios against plain Gunicorn and the fixed delay measured in the same
run. ``--trials`` repeats each (with another seed) and pools the pods.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.conftest import Processes
from tests.netns import missing, network_namespace, run_model

SETTINGS: dict[str, list[str]] = {
    "fast": ["--lag", "0.5:2"],
    "slow": ["--lag", "8:10"],
    "light": ["--lag", "0.5:2", "--clients", "2", "--pause", "1.5:3", "--reuse", "1:1"],
}
MODES: dict[str, list[str]] = {
    "plain": ["--mode", "plain"],
    "fixed 5 s": ["--mode", "fixed", "--delay", "5"],
    "adaptive": ["--mode", "adaptive", "--delay", "30", "--floor", "1"],
    # graceful check's advice in-cluster (GC017): the floor covers kube-proxy's 2 s.
    "adaptive, floor 2 s": ["--mode", "adaptive", "--delay", "30", "--floor", "2"],
}


def measure(setting: str, mode: str, trials: int) -> dict[str, Any]:
    """Pool ``trials`` runs of one mode in one setting."""
    runs = []
    for trial in range(trials):
        processes = Processes()
        try:
            with network_namespace("graceful-bench") as netns:
                args = [*MODES[mode], *SETTINGS[setting], "--seed", str(trial + 1)]
                runs.append(run_model(processes.start, netns, args))
        finally:
            processes.cleanup()
    pods = [p for run in runs for p in run["pods"] if p["exit_s"] is not None]
    exits = [p["exit_s"] for p in pods]
    return {
        "requests": sum(run["requests"] for run in runs),
        "errors": sum(sum(run["errors"].values()) for run in runs),
        "exit_median": statistics.median(exits),
        "exit_worst": max(exits),
        "early": sum(1 for p in pods if p["removed_s"] is not None and p["exit_s"] < p["removed_s"]),
        "pods": len(pods),
        "rollout": statistics.median(run["rollout_s"] for run in runs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1, help="runs per mode and setting (default: 1)")
    parser.add_argument("--settings", default="fast,slow,light", help="comma-separated: fast, slow, light")
    args = parser.parse_args()
    reason = missing()
    if reason is not None:
        print(f"adaptive_delay: cannot run the kube-proxy model here: {reason}", file=sys.stderr)
        return 2
    header = "| setting | mode | requests | errors | exit median s | exit worst s | exited before removal | rollout s |"
    print(header)
    print("|" + "---|" * 8)
    for setting in args.settings.split(","):
        results = {mode: measure(setting, mode, args.trials) for mode in MODES}
        for mode, r in results.items():
            print(
                f"| {setting} | {mode} | {r['requests']} | {r['errors']} | {r['exit_median']:.2f} |"
                f" {r['exit_worst']:.2f} | {r['early']}/{r['pods']} | {r['rollout']:.2f} |"
            )
        adaptive, fixed, plain = results["adaptive"], results["fixed 5 s"], results["plain"]
        print(
            f"| {setting} | adaptive / fixed | | | {adaptive['exit_median'] / fixed['exit_median']:.2f} |"
            f" {adaptive['exit_worst'] / fixed['exit_worst']:.2f} | | {adaptive['rollout'] / fixed['rollout']:.2f} |"
        )
        print(
            f"| {setting} | adaptive / plain | | | {adaptive['exit_median'] / plain['exit_median']:.2f} |"
            f" {adaptive['exit_worst'] / plain['exit_worst']:.2f} | | {adaptive['rollout'] / plain['rollout']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
