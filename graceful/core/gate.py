"""The request sides' one interface to the lifecycle: may this request come in, and how it is counted.

Both request sides (:mod:`graceful.wsgi`, :mod:`graceful.asgi`) ask the same
questions of a lifecycle and get the same answers from here; neither reads
the lifecycle's other members on a request. What one request does, in order::

    gate.unhindered                  True: nothing to check (no shutdown, no
                                     max_in_flight): count it with the wait
                                     group's unchecked enter/leave pair
    gate.check()                     otherwise (every request from
                                     ShutdownInitiated on): counted as an
                                     arrival; a Refusal refuses it (429 in
                                     retry-after mode once not accepting),
                                     None lets it on
    gate.limited                     a max_in_flight is set: gate.take_slot()
                                     gives a Release (the slot and the count)
                                     or the 429/503 Refusal
    gate.in_flight.waiting           the drain has begun: refuse_draining()'s 503
    gate.closing                     this process stops (close_connections(): a
                                     Gunicorn worker's stop, a shutdown or not):
                                     responses ask to close the connection

Thread-safe without a lock on the hot path (request threads, or an event
loop, read :attr:`Gate.unhindered` and call the wait group's C-level pair);
:meth:`Gate.refresh` documents how the flag stays right while signals fire
on other threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from graceful.core.admission import AdmissionLimit
from graceful.core.stats import REASON_DRAINING, REASON_MAX_IN_FLIGHT, REASON_SHUTTING_DOWN
from graceful.core.waitgroup import Release, WaitGroupClosed

if TYPE_CHECKING:
    from graceful.core.lifecycle import Lifecycle
    from graceful.core.signals import LifecycleSignal
    from graceful.core.waitgroup import SafeWaitGroup

__all__ = ["DRAINING", "FULL", "Gate", "Refusal"]


class Refusal(NamedTuple):
    """A request refused: its status, why (a ``lifecycle.stats`` reason) and its ``Retry-After`` seconds.

    The request sides write it with graceful's answer for that reason
    (:func:`graceful.http.replies.refusal_reply`).
    """

    status: int
    reason: str
    retry_after: str


#: Every max_in_flight slot is taken.
FULL = Refusal(429, REASON_MAX_IN_FLIGHT, "1")
#: The drain has begun: the request raced ``in_flight.wait``.
DRAINING = Refusal(503, REASON_DRAINING, "1")


class Gate:
    """What a request may do now, for one lifecycle; made by the :class:`~graceful.core.lifecycle.Lifecycle`.

    Read by every request of the process's request side (WSGI request
    threads, or the ASGI event loop); its state changes on the threads that
    fire the lifecycle's signals or configure it.
    """

    def __init__(self, lifecycle: Lifecycle) -> None:
        self._lifecycle = lifecycle
        self._admission: AdmissionLimit | None = None
        #: True while a request has nothing to check (see :meth:`refresh`). Read on every request;
        #: written only here and by :meth:`hinder`.
        self.unhindered = False
        #: True once this process stops serving (:meth:`close_connections`), with or without a shutdown.
        self.closing = False

    # -- what the request side reads --------------------------------------------------------

    @property
    def in_flight(self) -> SafeWaitGroup:
        """The in-flight count: ``enter(None)``/``leave()`` on the hot path, ``add()`` on the checked one."""
        return self._lifecycle.in_flight

    @property
    def shutdown_initiated(self) -> LifecycleSignal:
        """ShutdownInitiated: from it on, responses get ``Connection: close`` and long-lived connections leave."""
        return self._lifecycle.shutdown_initiated

    @property
    def not_accepting(self) -> LifecycleSignal:
        """NotAcceptingNewRequests (its event is the WSGI side's ``graceful.shutting_down``)."""
        return self._lifecycle.not_accepting_new_requests

    @property
    def admission(self) -> AdmissionLimit:
        """The per-process admission limit from ``config.max_in_flight``."""
        if self._admission is None:
            self._admission = AdmissionLimit(self._lifecycle.config.max_in_flight)
        return self._admission

    @property
    def limited(self) -> bool:
        """True when ``max_in_flight`` is set: counted requests take a slot (:meth:`take_slot`)."""
        return bool(self.admission.limit)

    # -- the checked path ---------------------------------------------------------------------

    def check(self) -> Refusal | None:
        """The checks a request skips while :attr:`unhindered`: a refusal, or None to let it on.

        From ShutdownInitiated on every request comes here and is counted as
        an arrival (``lifecycle.stats``); once not accepting, in retry-after
        mode, it is refused with 429 and the config's ``Retry-After``. Before
        a shutdown and without a limit, it raises the flag for the next ones.
        """
        lifecycle = self._lifecycle
        shutting_down = lifecycle.shutdown_initiated.fired_at is not None
        if shutting_down:
            stopped = lifecycle.not_accepting_new_requests.fired_at is not None
            lifecycle.stats.arrived(stopped)
            if stopped and lifecycle.config.send_retry_after:
                lifecycle.stats.rejected(REASON_SHUTTING_DOWN)
                return Refusal(429, REASON_SHUTTING_DOWN, str(lifecycle.config.retry_after))
        elif not self.admission.limit:  # nothing to check: let the next requests skip this
            self.refresh()
        return None

    def take_slot(self) -> Release | Refusal:
        """With ``max_in_flight``: a slot and the count, ended by the returned Release; or the refusal.

        429 (Retry-After: 1) when every slot is taken; 503 when the drain has
        begun (the request raced the wait). Each refusal is counted by reason.
        """
        admission = self.admission
        if not admission.try_acquire():
            self._lifecycle.stats.rejected(FULL.reason)
            return FULL
        try:
            done = self.in_flight.add()
        except WaitGroupClosed:
            admission.release()
            return self.refuse_draining()
        # End the count, then free the slot.
        return Release(admission.release, before=done)

    def refuse_draining(self) -> Refusal:
        """A request that found the drain begun (``in_flight.waiting``): counted, and its 503."""
        self._lifecycle.stats.rejected(DRAINING.reason)
        return DRAINING

    def close_connections(self) -> None:
        """This process stops (a Gunicorn worker recycled, or at its TERM; any thread): from now on every
        HTTP/1.1 response asks its client to close the connection, as from ShutdownInitiated."""
        self.closing = True
        self.hinder()

    # -- keeping the flag right --------------------------------------------------------------

    def refresh(self) -> None:
        """Let requests skip :meth:`check` while there is nothing to check.

        That is while ShutdownInitiated has not fired and ``max_in_flight`` is
        0: :attr:`unhindered` goes up. From ShutdownInitiated on every request
        takes the checked path, which counts it: nothing is counted on the hot
        path before a shutdown. Thread-safe without a lock: every signal's
        firing and :meth:`reset` change their state, then take the flag down
        (:meth:`hinder`); this sets the flag, then looks at their state again
        and takes the flag back if either changed.
        """
        admission = self.admission
        signal = self._lifecycle.shutdown_initiated
        if signal.fired_at is None and not admission.limit and not self.closing:
            self.unhindered = True
            if signal.fired_at is not None or self._admission is not admission or self.closing:
                self.unhindered = False

    def hinder(self) -> None:
        """Take the flag down: a signal fired (after its ``fired_at`` is set, never before)."""
        self.unhindered = False

    def reset(self) -> None:
        """The lifecycle's config changed: the limit is read again, and the flag taken down (in that order)."""
        self._admission = None
        self.unhindered = False
