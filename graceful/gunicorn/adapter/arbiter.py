"""The Gunicorn master (arbiter) as graceful sees it: the only code that touches the arbiter's internals.

Runs in the master. Made in ``on_starting`` (main thread, before the
listeners and the first fork), where :meth:`ArbiterAdapter.probe` looks for
every internal graceful uses, once: a release without one of them stops
Gunicorn at start-up with one line naming the release and what is missing.
The rest of graceful sees :class:`Arbiter`, a small typed interface, so a
fake arbiter can drive the master's whole shutdown in a unit test.

What differs between the supported releases (22 to 27) lives here:

* the main loop's wake-up: 24+ put Gunicorn's ``WAKEUP_REQUEST`` on the
  ``queue.SimpleQueue`` the loop blocks on (1 s at most); 22/23 write to its
  self-pipe. Both are Gunicorn's own ``wakeup()``: :meth:`ArbiterAdapter.wake`
  calls it, and the loop's next pass runs what :meth:`ArbiterAdapter.after_loop_wait`
  added, on the main thread. No signal is forged.
* the instance attributes set on the arbiter (``handle_term``,
  ``handle_hup``, ``murder_workers``, ``reap_workers``, ``reexec``,
  ``stop``, ``_start_control_server``): Gunicorn looks its handlers and periodic calls up
  by name on the instance on every release, so an instance attribute
  replaces or wraps the class's method for this arbiter only.

The master ends with Gunicorn's own ``halt()`` (:meth:`ArbiterAdapter.halt_gunicorn`):
its ``stop()``, ``on_exit``, exit 0, called on the main thread where the
loop would call it, instead of an exception raised for the loop to catch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from graceful.gunicorn.adapter.release import GunicornMissing, missing_attributes

__all__ = ["Arbiter", "ArbiterAdapter", "GunicornHandler", "OsSignalHandler"]

#: Gunicorn's own OS-level handler of a signal: ``handler(signum, frame)``.
GunicornHandler = Callable[[int, "FrameType | None"], object]
#: ``handler(signum, frame, gunicorn_handler)``: graceful's OS-level handler in front of Gunicorn's.
OsSignalHandler = Callable[[int, "FrameType | None", "GunicornHandler | None"], None]

# What graceful reads or calls on every release (probed once, in on_starting).
_NEEDED = (
    "WORKERS",
    "LISTENERS",
    "cfg",
    "log",
    "kill_workers",
    "reap_workers",
    "murder_workers",
    "reexec",
    "stop",
    "handle_term",
    "handle_hup",
    "wakeup",
    "halt",
    "reexec_pid",
    "master_pid",
    "worker_class",
)
_NEEDED_CFG = ("graceful_timeout", "timeout", "bind", "reuse_port", "env_orig")


class Arbiter(Protocol):
    """What the master's part of graceful needs from Gunicorn's arbiter (master, main thread unless said)."""

    def worker_pids(self) -> set[int]:
        """The pids of the live workers, now (any thread: one C-level copy of Gunicorn's dict)."""

    def listeners(self) -> list[socket.socket]:
        """The master's listening sockets (none with reuse_port on 24+: each worker binds its own)."""

    def graceful_timeout(self) -> float:
        """Gunicorn's ``graceful_timeout``: how long its stop waits for the workers."""

    def set_graceful_timeout(self, seconds: int) -> None:
        """Before any fork (``on_starting``, ``on_reload``): set Gunicorn's ``graceful_timeout``."""

    def app_uri(self) -> str:
        """What Gunicorn serves, as given (``mysite.wsgi:application``), or ``""``."""

    def workers_own_listeners(self) -> bool:
        """True when each worker binds its own listeners (reuse_port, Gunicorn 24+), the master none."""

    def listeners_shared_with_others(self) -> bool:
        """True when another process also serves these sockets (a USR2 peer, systemd, ``fd://``)."""

    def successor_pid(self) -> int:
        """The pid of this master's USR2 child while it lives (0: none)."""

    def predecessor_pid(self) -> int:
        """The pid of the master that re-executed this one, until it is gone (0: none)."""

    def reap(self) -> None:
        """Reap the children that exited (workers, a USR2 child) as Gunicorn does (its ``reap_workers``)."""

    def signal_workers(self, signum: int) -> None:
        """Send ``signum`` to every live worker (Gunicorn's ``kill_workers``)."""

    def wake(self) -> None:
        """Any thread: wake the main loop at once (Gunicorn's ``wakeup()``); its next pass follows."""

    def halt_gunicorn(self) -> None:
        """Main thread: Gunicorn's ``halt()``: its ``stop()``, ``on_exit``, and the process exits 0."""

    def dirty_pid(self) -> int:
        """The pid of Gunicorn 27's dirty arbiter while it lives (0: none, or a release without dirty workers)."""

    def dirty_pool_configured(self) -> bool:
        """Whether Gunicorn 27's dirty pool is configured (``dirty_workers`` and ``dirty_apps``)."""

    def dirty_graceful_timeout(self) -> float:
        """How long the dirty arbiter waits for its workers once stopped (0: no dirty pool configured)."""

    def set_dirty_graceful_timeout(self, seconds: int) -> None:
        """Before the dirty arbiter's fork (``on_starting``, ``on_reload``): set ``dirty_graceful_timeout``."""

    def signal_dirty(self, signum: int) -> None:
        """Send ``signum`` to the dirty arbiter, if there is one."""

    def reap_dirty(self) -> None:
        """Reap the dirty arbiter if it has exited."""

    def kill_dirty_tree(self) -> None:
        """SIGKILL the dirty arbiter's workers, then the dirty arbiter: no dirty process outlives this master."""

    def notify_systemd(self, message: str) -> None:
        """Any thread: tell systemd ``message`` (``STOPPING=1``, ``STATUS=...``) when it supervises the master."""

    def worker_timeout(self) -> float:
        """Gunicorn's ``timeout`` (0: off): after it, the master kills a silent worker."""

    def log_error(self, message: str) -> None:
        """One line in Gunicorn's error log."""

    def binds(self) -> list[str]:
        """Gunicorn's ``bind`` addresses, as configured."""

    def worker_class_setting(self) -> str:
        """The worker class as configured (``sync``, ``gthread``, a dotted path), or ``""``."""

    def exec_environment(self) -> dict[str, str]:
        """The environment a USR2 re-exec passes to the new master (``pre_exec``: add to it)."""

    def on_term(self, handler: Callable[[], object]) -> None:
        """The main loop's SIGTERM handling becomes ``handler()`` (main thread)."""

    def after_loop_wait(self, callback: Callable[[], object]) -> None:
        """Main thread: call ``callback()`` on every pass of the main loop, after its wait (1 s at most)."""

    def before_reload(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` on the main thread before Gunicorn's HUP handling."""

    def before_stop(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` before Gunicorn's ``stop()``."""

    def on_loop_tick(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` (signal-safe) whenever the main loop runs its periodic calls."""

    def around_reexec(self, wrapper: Callable[[Callable[[], object]], object]) -> None:
        """USR2: Gunicorn's ``reexec()`` runs as ``wrapper(reexec)``."""

    def front_os_signals(self, signums: tuple[int, ...], handler: OsSignalHandler) -> None:
        """Main thread: put ``handler`` in front of Gunicorn's OS-level handlers of ``signums``."""

    def before_control_worker_kill(self, callback: Callable[[], object]) -> None:
        """Gunicorn 25.1+'s control socket: call ``callback()`` before its ``worker kill PID`` TERMs the worker."""


class ArbiterAdapter:
    """Gunicorn's arbiter behind :class:`Arbiter`, plus the interception points the master needs.

    Made in ``on_starting`` with :meth:`probe`. Thread-safety is Gunicorn's:
    the methods that read ``WORKERS`` copy it in one C call; the others are
    called on the master's main thread, where Gunicorn calls its own.
    """

    def __init__(self, server: Any) -> None:
        self._server = server

    @classmethod
    def probe(cls, server: Any) -> ArbiterAdapter:
        """``on_starting``: the adapter, or GunicornMissing naming the release and the internals it lacks."""
        missing = missing_attributes(server, _NEEDED) or missing_attributes(server.cfg, _NEEDED_CFG, prefix="cfg.")
        if missing:
            raise GunicornMissing("arbiter", missing)
        return cls(server)

    # -- facts -------------------------------------------------------------------------------

    def worker_pids(self) -> set[int]:
        """See :meth:`Arbiter.worker_pids`."""
        return set(self._server.WORKERS)

    def listeners(self) -> list[socket.socket]:
        """See :meth:`Arbiter.listeners`."""
        return list(self._server.LISTENERS)

    def graceful_timeout(self) -> float:
        """See :meth:`Arbiter.graceful_timeout`."""
        return float(self._server.cfg.graceful_timeout)

    def set_graceful_timeout(self, seconds: int) -> None:
        """See :meth:`Arbiter.set_graceful_timeout`. Gunicorn reads it from its config at each use, never caches it."""
        self._server.cfg.set("graceful_timeout", seconds)

    def app_uri(self) -> str:
        """See :meth:`Arbiter.app_uri`."""
        uri = getattr(getattr(self._server, "app", None), "app_uri", None) or getattr(
            self._server.cfg, "wsgi_app", None
        )
        return uri if isinstance(uri, str) else ""

    def worker_timeout(self) -> float:
        """Gunicorn's ``timeout`` (0: off): after it, the master kills a silent worker."""
        return float(self._server.cfg.timeout or 0)

    def binds(self) -> list[str]:
        """Gunicorn's ``bind`` addresses, as configured."""
        return [str(address) for address in self._server.cfg.bind]

    def worker_class(self) -> Any:
        """The worker class Gunicorn loaded (``-k sync`` with ``--threads`` > 1 is already ThreadWorker)."""
        return self._server.worker_class

    def worker_class_setting(self) -> str:
        """The worker class as configured (``sync``, ``gthread``, a dotted path), or ``""``."""
        name = getattr(self._server.cfg, "worker_class_str", None)
        return name if isinstance(name, str) else ""

    def workers_own_listeners(self) -> bool:
        """See :meth:`Arbiter.workers_own_listeners`."""
        return bool(self._server.cfg.reuse_port) and not self._server.LISTENERS

    def listeners_shared_with_others(self) -> bool:
        """See :meth:`Arbiter.listeners_shared_with_others`."""
        server = self._server
        inherited = any(str(address).startswith("fd://") for address in server.cfg.bind)
        return bool(server.reexec_pid or server.master_pid or getattr(server, "systemd", False) or inherited)

    def successor_pid(self) -> int:
        """See :meth:`Arbiter.successor_pid`."""
        return int(self._server.reexec_pid or 0)

    def predecessor_pid(self) -> int:
        """See :meth:`Arbiter.predecessor_pid`."""
        return int(self._server.master_pid or 0)

    def exec_environment(self) -> dict[str, str]:
        """The environment a USR2 re-exec passes to the new master (``pre_exec``: add to it)."""
        env: dict[str, str] = self._server.cfg.env_orig
        return env

    # -- actions ---------------------------------------------------------------------------------

    def reap(self) -> None:
        """See :meth:`Arbiter.reap`."""
        self._server.reap_workers()

    def signal_workers(self, signum: int) -> None:
        """See :meth:`Arbiter.signal_workers`."""
        self._server.kill_workers(signum)

    def wake(self) -> None:
        """See :meth:`Arbiter.wake`. 24+: ``WAKEUP_REQUEST`` on the queue; 22/23: a byte on the self-pipe."""
        self._server.wakeup()

    def halt_gunicorn(self) -> None:
        """See :meth:`Arbiter.halt_gunicorn`."""
        self._server.halt()

    def dirty_pid(self) -> int:
        """See :meth:`Arbiter.dirty_pid`."""
        return int(getattr(self._server, "dirty_arbiter_pid", 0) or 0)

    def dirty_pool_configured(self) -> bool:
        """See :meth:`Arbiter.dirty_pool_configured` (Gunicorn 25+ has the settings; earlier releases: False)."""
        cfg = self._server.cfg
        return bool(getattr(cfg, "dirty_workers", 0) and getattr(cfg, "dirty_apps", None))

    def dirty_graceful_timeout(self) -> float:
        """See :meth:`Arbiter.dirty_graceful_timeout`; 0 unless a dirty pool is configured (Gunicorn 27+)."""
        if not self.dirty_pool_configured():
            return 0.0
        return float(getattr(self._server.cfg, "dirty_graceful_timeout", 0) or 0)

    def set_dirty_graceful_timeout(self, seconds: int) -> None:
        """See :meth:`Arbiter.set_dirty_graceful_timeout`. The dirty arbiter reads it from its copy of the config
        (forked after ``on_starting``) when it stops; the master, when it bounds that stop."""
        self._server.cfg.set("dirty_graceful_timeout", seconds)

    def signal_dirty(self, signum: int) -> None:
        """See :meth:`Arbiter.signal_dirty`."""
        if self.dirty_pid():
            self._server.kill_dirty_arbiter(signum)

    def reap_dirty(self) -> None:
        """See :meth:`Arbiter.reap_dirty`."""
        if self.dirty_pid():
            self._server.reap_dirty_arbiter()

    def kill_dirty_tree(self) -> None:
        """See :meth:`Arbiter.kill_dirty_tree`.

        Its workers first, found as its children in /proc (Linux): killed
        after it, they would be orphans that run on until they notice.
        """
        pid = self.dirty_pid()
        if not pid:
            return
        for child in _children(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        self.signal_dirty(signal.SIGKILL)

    def notify_systemd(self, message: str) -> None:
        """See :meth:`Arbiter.notify_systemd`."""
        from gunicorn import systemd

        systemd.sd_notify(message, self._server.log)

    def remove_pidfile(self) -> None:
        """Remove the pidfile Gunicorn wrote (refusing to start: none is left behind)."""
        if self._server.pidfile is not None:
            self._server.pidfile.unlink()

    def error_log_handlers(self) -> list[Any]:
        """The handlers of Gunicorn's error log (graceful's lines go there unless logging was configured)."""
        return list(self._server.log.error_log.handlers)

    def log_error(self, message: str) -> None:
        """One line in Gunicorn's error log."""
        self._server.log.error("%s", message)

    # -- interception: the arbiter's own methods, replaced or wrapped on this instance ------------

    def on_term(self, handler: Callable[[], object]) -> None:
        """See :meth:`Arbiter.on_term`."""
        self._server.__dict__["handle_term"] = lambda: handler()

    def after_loop_wait(self, callback: Callable[[], object]) -> None:
        """See :meth:`Arbiter.after_loop_wait`.

        Every release calls ``murder_workers()`` once per pass, on the main
        thread, right after its wait for signals (and never from a signal
        handler): ``callback`` runs before it.
        """
        self._before("murder_workers", callback)

    def before_reload(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` on the main thread before Gunicorn's HUP handling (its ``reload()``)."""
        self._before("handle_hup", callback)

    def before_stop(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` before Gunicorn's ``stop()`` (every stop: graceful, quick, on halt)."""
        self._before("stop", callback)

    def on_loop_tick(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` whenever the main loop runs its periodic calls (at least once a second).

        Gunicorn's loop calls ``murder_workers()`` after every wait and
        ``reap_workers()`` whenever a child exits (22: from its SIGCHLD
        handler too): ``callback`` must be safe in a signal handler (set a
        plain attribute).
        """
        self._before("murder_workers", callback)
        self._before("reap_workers", callback)

    def around_reexec(self, wrapper: Callable[[Callable[[], object]], object]) -> None:
        """USR2: Gunicorn's ``reexec()`` (which forks the new master) runs as ``wrapper(reexec)``."""
        original = self._server.reexec
        self._server.__dict__["reexec"] = lambda: wrapper(original)

    def front_os_signals(self, signums: tuple[int, ...], handler: OsSignalHandler) -> None:
        """Main thread: put ``handler`` in front of Gunicorn's OS-level handlers of ``signums``.

        ``handler(signum, frame, gunicorn_handler)`` runs inside the OS
        signal handler: it may only read and set plain attributes, queue,
        and call ``gunicorn_handler`` (Gunicorn's, which queues).
        """
        for signum in signums:
            previous = signal.getsignal(signum)
            gunicorn_handler = previous if callable(previous) else None

            def front(number: int, frame: FrameType | None, gunicorn: Any = gunicorn_handler) -> None:
                handler(number, frame, gunicorn)

            signal.signal(signum, front)

    def before_control_worker_kill(self, callback: Callable[[], object]) -> None:
        """See :meth:`Arbiter.before_control_worker_kill`.

        Gunicorn starts its control socket in its main loop, after
        ``when_ready``: its ``_start_control_server`` is wrapped so that the
        handlers it makes are wrapped in turn. A release without a control
        socket has neither, and nothing is wrapped.
        """
        server = self._server
        start = getattr(server, "_start_control_server", None)
        if start is None:
            return

        def start_then_wrap() -> None:
            start()
            handlers: Any = getattr(getattr(server, "_control_server", None), "handlers", None)
            kill = getattr(handlers, "worker_kill", None)
            if kill is None:
                return

            def worker_kill(*args: Any, **kwargs: Any) -> Any:
                callback()
                return kill(*args, **kwargs)

            handlers.worker_kill = worker_kill

        server.__dict__["_start_control_server"] = start_then_wrap

    def _before(self, name: str, callback: Callable[[], object]) -> None:
        original = getattr(self._server, name)

        def call_then_original(*args: Any, **kwargs: Any) -> Any:
            callback()
            return original(*args, **kwargs)

        self._server.__dict__[name] = call_then_original


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s children (Linux's /proc), or none when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            return [int(child) for child in listing.read().split()]
    except (OSError, ValueError):
        return []
