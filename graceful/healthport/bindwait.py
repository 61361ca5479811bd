"""How long the health port waits for an address another process holds at start-up, and what it says.

Under Gunicorn the master binds ``GRACEFUL_HEALTH_BIND`` in ``on_starting``.
When the address is in use, the server starts anyway (its app's port is
Gunicorn's, bound apart) and the port's thread tries again, with a bound::

    start-up     bind: EADDRINUSE   WARNING  "health port ... is in use; trying again every 0.5s for up to 30s"
    every 0.5 s  bind again (the port's thread)
    bound        INFO     "health port listening on ... after waiting 2.1s for the address"
    the bound    ERROR    "health port ... still in use after 30.0s: giving up"; then ``on_give_up``
                 (the Gunicorn master stops the server, as a SIGTERM would)

The bound is ``patience`` seconds (the Gunicorn master gives its grace
period: a predecessor on the same address, shutting down under the same
budget, lets go within it) counted from the start, and counted again from
zero for as long as ``predecessor()`` names a live process (a USR2 old
master, which lets go when it is stopped: the operator decides when). Any
other error binding counts as "in use": it is logged once, with the first
line, and retried within the same bound.

Pure: the times are the caller's (``time.monotonic()`` on the port's thread;
a fake clock in tests). One instance per port, used by the port's thread
after the main thread's first try.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["RETRY_BIND", "BindWait"]

#: Seconds between tries to bind an address in use.
RETRY_BIND = 0.5


def _nothing() -> None:
    """The default callback: nothing to do."""


class BindWait:
    """The wait for one address; see the module docstring.

    ``on_bound`` and ``on_give_up`` are called once, on the port's thread,
    when it binds and when it gives up; neither may block.
    """

    def __init__(
        self,
        address: str,
        patience: float,
        now: float,
        *,
        predecessor: Callable[[], int] = lambda: 0,
        on_bound: Callable[[], None] = _nothing,
        on_give_up: Callable[[], None] = _nothing,
    ) -> None:
        self.address = address
        self.patience = patience
        self.started = now
        self.predecessor = predecessor
        self.on_bound = on_bound
        self.on_give_up = on_give_up
        self._counting_from = now
        #: When to try next (monotonic).
        self.next_try = now + RETRY_BIND

    def waiting(self, error: OSError) -> str:
        """The one line logged when the wait begins: the address, the error, the bound, what happens meanwhile."""
        pid = self.predecessor()
        how_long = (
            f"while the old master (pid {pid}) holds it, then up to {self.patience:g}s"
            if pid
            else (f"for up to {self.patience:g}s")
        )
        return (
            f"graceful: health port {self.address} is in use ({error.strerror or error}); trying again every"
            f" {RETRY_BIND:g}s {how_long}, then stopping the server; until then probes reach whatever holds it,"
            " and /readyz on the app's port fails its check healthport"
        )

    def failed(self, now: float) -> bool:
        """Another try failed at ``now``: whether to give up (else the next try is at :attr:`next_try`)."""
        if self.predecessor():
            self._counting_from = now  # a USR2 old master holds it until it is stopped: the bound starts after
        if now - self._counting_from >= self.patience:
            return True
        self.next_try = now + RETRY_BIND
        return False

    def bound(self, now: float) -> str:
        """The line logged once the address is bound (after :meth:`failed` said go on)."""
        return f"after waiting {now - self.started:.1f}s for the address"

    def giving_up(self, now: float) -> str:
        """The line logged when the bound is reached."""
        return (
            f"graceful: health port {self.address} still in use after {now - self.started:.1f}s: giving up;"
            " stopping the server (free the address, or give GRACEFUL_HEALTH_BIND another)"
        )
