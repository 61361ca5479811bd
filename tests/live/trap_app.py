"""A process with a lifecycle and the signal trap, driven by tests/process/test_trap.py.

Usage: python trap_app.py MODE    (MODE: ok | hung-cleanup | slow-pre)
Prints "ready" when the trap is installed and each signal name as it fires;
exits the way a graceful server does.
"""

from __future__ import annotations

import logging
import sys
import threading

from graceful.core.config import Config
from graceful.core.lifecycle import Lifecycle
from graceful.process.trap import SignalTrap

logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(message)s")
mode = sys.argv[1]
lifecycle = Lifecycle(Config(shutdown_delay=0.2, drain_timeout=1, hook_timeout=1, grace_period=10))


def say(line: str) -> None:
    """Print one line with a single write, so a log line from another thread cannot
    land between the text and its newline (print() writes them separately)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


lifecycle.subscribe(lambda name, _t: say(name))
forever = threading.Event()

if mode == "hung-cleanup":
    # Never returns: the process must still exit soon after the task's timeout.
    lifecycle.cleanup_task("hang", timeout=1)(lambda: forever.wait(3600))
if mode == "slow-pre":
    # Holds the shutdown long enough for a second signal to arrive during it.
    lifecycle.pre_shutdown_hook("slow", timeout=5)(lambda: forever.wait(5))
    lifecycle.configure(Config(shutdown_delay=5, drain_timeout=1, hook_timeout=1, grace_period=15))

trap = SignalTrap(lambda _signum: lifecycle.request_shutdown()).install()
say("ready")
while not lifecycle.cleanup_finished.event.wait(1.0):
    pass
trap.uninstall()
say("exiting")
lifecycle.exit(0)
