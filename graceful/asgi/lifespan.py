"""The app's ASGI lifespan: its startup gates readiness, its shutdown is watched and logged.

The server runs the lifespan protocol (Uvicorn's ``lifespan="auto"`` or
``"on"``); graceful passes the app's lifespan through and reads what goes by:

- when the lifespan scope arrives, a readiness check ``lifespan`` is
  registered on the lifecycle; it fails (``/readyz`` 503) until the app sends
  ``lifespan.startup.complete``, like a post-start hook that has not
  returned; ``lifespan.startup.failed`` keeps it failing with the app's
  message. An app that does not speak lifespan (it raises, or returns, before
  its startup completed, as Django's ASGI handler does) passes the check:
  there is nothing to wait for, as Uvicorn's ``lifespan="auto"`` decides too;
- its shutdown is the server's to start (after graceful's drain, beside the
  cleanup tasks: the serving wing says when); graceful logs how it ended and
  how long it took, with its outcome in :attr:`Lifespan.shutdown`.

Runs on the event loop that serves the app; the check is read on a health
check's thread (a flag, no lock).
"""

from __future__ import annotations

import logging
import time
import weakref

from graceful.asgi.types import ASGIApp, Message, Receive, Scope, Send
from graceful.core.lifecycle import Lifecycle
from graceful.http.apps import LIFECYCLE_KEY

__all__ = ["LIFESPAN_CHECK", "Lifespan"]

logger = logging.getLogger(__name__)


#: The readiness check's name.
LIFESPAN_CHECK = "lifespan"
_STARTING = "the app's lifespan startup has not completed"


class Lifespan:
    """One lifecycle's view of its app's lifespan (:meth:`of`); one per lifecycle."""

    def __init__(self) -> None:
        #: Why readiness waits: None once the startup completed (or the app has no lifespan).
        self.waiting: str | None = "lifespan startup has not begun"
        #: How the app's lifespan shutdown ended: None until it did, then ``ok``, ``failed: ...``, ``raised: ...``.
        self.shutdown: str | None = None
        #: Seconds the app's lifespan shutdown took, once it ended.
        self.shutdown_seconds: float | None = None
        self._registered = False
        self._shutdown_began: float | None = None

    @classmethod
    def of(cls, lifecycle: Lifecycle) -> Lifespan:
        """The lifespan state of ``lifecycle`` (made on first use)."""
        state = _states.get(lifecycle)
        if state is None:
            state = _states.setdefault(lifecycle, cls())
        return state

    def check(self) -> bool:
        """The ``lifespan`` readiness check: passes once the startup completed (:attr:`waiting` says why not)."""
        return self.waiting is None

    async def run(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the lifespan scope to ``app``, watching its messages (on the loop)."""
        if not self._registered:
            self._registered = True
            lifecycle = scope.get(LIFECYCLE_KEY)
            if isinstance(lifecycle, Lifecycle):
                lifecycle.readiness_check(LIFESPAN_CHECK)(self.check)
        self.waiting = _STARTING

        async def watched_receive() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                self._shutdown_began = time.monotonic()
            return message

        async def watched_send(message: Message) -> None:
            self._saw(message)
            await send(message)

        try:
            await app(scope, watched_receive, watched_send)
        except BaseException as exc:
            self._ended(f"raised: {type(exc).__name__}: {exc}")
            raise
        self._ended("returned")

    def _saw(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "lifespan.startup.complete":
            self.waiting = None
        elif kind == "lifespan.startup.failed":
            self.waiting = f"the app's lifespan startup failed: {message.get('message', '')}"
        elif kind == "lifespan.shutdown.complete":
            self._shut_down("ok")
        elif kind == "lifespan.shutdown.failed":
            self._shut_down(f"failed: {message.get('message', '')}")

    def _ended(self, how: str) -> None:
        """The app's lifespan callable ended (returned or raised)."""
        if self.waiting is _STARTING:
            # Before its startup completed: an app without lifespan support, nothing to wait for.
            self.waiting = None
        elif self._shutdown_began is not None and self.shutdown is None:
            self._shut_down(how)

    def _shut_down(self, outcome: str) -> None:
        began = self._shutdown_began
        self.shutdown = outcome
        self.shutdown_seconds = None if began is None else time.monotonic() - began
        if outcome == "ok":
            logger.info(
                "graceful: the app's lifespan shutdown completed after running %.3fs", self.shutdown_seconds or 0.0
            )
        else:
            logger.warning(
                "graceful: the app's lifespan shutdown %s after running %.3fs", outcome, self.shutdown_seconds or 0.0
            )


_states: weakref.WeakKeyDictionary[Lifecycle, Lifespan] = weakref.WeakKeyDictionary()
