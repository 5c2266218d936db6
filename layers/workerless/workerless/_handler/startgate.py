"""Start a handler batch's jobs only while they can finish; hand the rest back at once.

A handler batch (up to 10 jobs) runs in one Lambda timeout. A job started with seconds left is killed
by the timeout, and a timeout fails the whole batch: the jobs never started come back only after
their queue's visibility timeout (720 s by default), each having spent a receive, and a job that
keeps meeting that fate reaches the dead-letter queue without ever running. So:

- before each job, :meth:`StartGate.admit` asks whether the invocation has time for it: the longest
  run this container has seen for the route (nothing before its first) plus
  :data:`FINISH_MARGIN_SECONDS` (storing and reporting). A job it refuses is handed back;
- a watchdog fires :data:`WATCHDOG_MARGIN_SECONDS` before the timeout: if a job is still running
  then, every job not started yet is handed back before Lambda ends the invocation.

Handing back is ChangeMessageVisibility to :data:`HAND_BACK_VISIBILITY_SECONDS`: the message is
received again at once (by this function's next invocation), and it is a batch item failure of
this one. A hand-back that SQS refuses leaves the message to its visibility timeout, as before.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from workerless.observability import logger

if TYPE_CHECKING:
    from workerless._core.ports import LambdaContext

#: Time kept for storing and reporting a job's result once its run ends.
FINISH_MARGIN_SECONDS = 5.0
#: The watchdog fires this long before the Lambda's timeout: time for up to 10 ChangeMessageVisibility calls.
WATCHDOG_MARGIN_SECONDS = 3.0
#: Visibility given to a job handed back: received again at once.
HAND_BACK_VISIBILITY_SECONDS = 0


class HandedBackError(Exception):
    """A job of the batch not started: handed back to its queue for another invocation."""

    def __init__(self, message: str, *, message_id: str) -> None:
        super().__init__(message)
        self.message_id = message_id


class RunTimes:
    """The longest run of a route's jobs this container has seen (thread-safe), in seconds."""

    def __init__(self) -> None:
        self._longest = 0.0
        self._lock = threading.Lock()

    @property
    def longest(self) -> float:
        return self._longest

    def note(self, seconds: float) -> None:
        with self._lock:
            self._longest = max(self._longest, seconds)


class StartGate:
    """One batch's gate. ``remaining`` gives the Lambda's remaining time in seconds (None: no
    context, no gating); ``hand_back(message_id)`` makes a message visible again at once."""

    def __init__(
        self,
        remaining: Callable[[], float] | None,
        *,
        runs: RunTimes,
        hand_back: Callable[[str], None],
        message_ids: list[str],
    ) -> None:
        self._remaining = remaining
        self._runs = runs
        self._hand_back = hand_back
        self._waiting = list(message_ids)  # not started yet, in the batch's order
        self._closed = False
        self._started = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    @classmethod
    def of_context(
        cls, context: LambdaContext | None, *, runs: RunTimes, hand_back: Callable[[str], None], message_ids: list[str]
    ) -> StartGate:
        getter = getattr(context, "get_remaining_time_in_millis", None)
        remaining = (lambda: float(getter()) / 1000.0) if callable(getter) else None
        return cls(remaining, runs=runs, hand_back=hand_back, message_ids=message_ids)

    def __enter__(self) -> StartGate:
        # A batch of one message has nothing the watchdog could hand back (its only job always
        # starts): no timer thread, no context copy, for most invocations below a few jobs a second.
        if self._remaining is not None and len(self._waiting) > 1:
            # In the invocation's context (its clients, deadline and, in local mode, its IAM scope).
            context = contextvars.copy_context()
            delay = max(0.0, self._remaining() - WATCHDOG_MARGIN_SECONDS)
            self._timer = threading.Timer(delay, context.run, args=(self._watchdog,))
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def admit(self, message_id: str) -> None:
        """Return when the job of ``message_id`` may start; raise :class:`HandedBackError` (after
        handing it back) when it could not finish in the time left."""
        with self._lock:
            if self._closed:
                # The watchdog has handed it back already.
                raise HandedBackError("the invocation ran out of time: handed back", message_id=message_id)
            needed = self._runs.longest + FINISH_MARGIN_SECONDS
            left = self._remaining() if self._remaining is not None else None
            if message_id in self._waiting:
                self._waiting.remove(message_id)
            # The batch's first job always starts: it has the whole timeout.
            if left is None or not self._started or left >= needed:
                self._started = True
                return
        logger.info(
            "not starting a job the invocation has no time to finish: handed back",
            extra={"message_id": message_id, "seconds_left": round(left, 1), "seconds_needed": round(needed, 1)},
        )
        self._give_back(message_id)
        raise HandedBackError("not enough time left to run it: handed back", message_id=message_id)

    def run(self, call: Callable[[], None]) -> None:
        """Run ``call`` (one admitted job's delivery) and note how long it took, on the Lambda's own
        clock (its remaining time before and after)."""
        if self._remaining is None:
            call()
            return
        before = self._remaining()
        try:
            call()
        finally:
            self._runs.note(before - self._remaining())

    def _watchdog(self) -> None:
        with self._lock:
            if not self._started:
                return  # the batch's first job always starts (an invocation begun with under 3 s left)
            self._closed = True
            waiting, self._waiting = self._waiting, []
        if waiting:
            logger.warning(
                "the batch's time is nearly up with a job still running: handing back the jobs not started",
                extra={"jobs": len(waiting)},
            )
        for message_id in waiting:
            self._give_back(message_id)

    def _give_back(self, message_id: str) -> None:
        try:
            self._hand_back(message_id)
        except Exception as exc:  # noqa: BLE001 - it then returns after its visibility timeout, as before
            logger.warning(
                "could not hand the job back; it returns after its queue's visibility timeout",
                extra={"message_id": message_id, "error": str(exc)},
            )
