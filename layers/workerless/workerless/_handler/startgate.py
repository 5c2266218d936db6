"""Start a handler batch's jobs only while they can finish; hand the rest back at once.

A handler batch (up to 10 jobs) runs in one Lambda timeout. A job started with seconds left is killed
by the timeout, and a timeout fails the whole batch: the jobs never started come back only after
their queue's visibility timeout (720 s by default), each having spent a receive, and a job that
keeps meeting that fate reaches the dead-letter queue without ever running. So:

- before each job, :meth:`StartGate.admit` asks whether the invocation has time for it: the longest
  run this container has seen for the route (nothing before its first) plus
  :data:`FINISH_MARGIN_SECONDS` (storing and reporting). A job it refuses is handed back;
- a watchdog fires :data:`WATCHDOG_MARGIN_SECONDS` before the timeout: if a job is still running
  then, every job not started yet is handed back before Lambda ends the invocation. One
  :class:`Watchdog` thread per route per container serves every batch of two messages or more
  (started at the first such batch, a daemon), not a timer thread per batch: starting a thread cost
  a batch about as much CPU as the rest of its start gate (issue 29).

Handing back is ChangeMessageVisibility to :data:`HAND_BACK_VISIBILITY_SECONDS`: the message is
received again at once (by this function's next invocation), and it is a batch item failure of
this one. A hand-back that SQS refuses leaves the message to its visibility timeout, as before.
"""

from __future__ import annotations

import contextvars
import threading
import time
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
#: A watchdog thread's rounds (each fires what is due, or waits for the next deadline or a change)
#: before it ends; the next batch that needs it starts another. A bound, not a schedule.
WATCHDOG_MAX_ROUNDS = 10_000


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


class Watchdog:
    """Fires each registered batch's watchdog at its deadline, on one daemon thread shared by the
    batches of a route in this container (local mode runs several at once).

    ``clock`` gives monotonic seconds and ``wait(condition, timeout)`` waits on the held condition
    until notified or ``timeout`` seconds have passed: both injectable, so a test can move time on without sleeping. A
    deadline is absolute on ``clock``: the Lambda's remaining time, read when the batch starts,
    less :data:`WATCHDOG_MARGIN_SECONDS`."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Condition, float], object] | None = None,
    ) -> None:
        self._clock = clock
        self._wait = wait or (lambda condition, timeout: condition.wait(timeout))
        self._changed = threading.Condition()
        #: The registered batches: id -> (deadline, the call to fire in the batch's context).
        self._due: dict[int, tuple[float, Callable[[], None]]] = {}
        self._thread: threading.Thread | None = None
        self._next_id = 0
        #: The deadline the thread sleeps until (inf: until notified): a later one needs no wake-up.
        self._sleeps_until = float("inf")
        self._closed = False

    def register(self, deadline: float, fire: Callable[[], None]) -> int:
        """Call ``fire`` once at ``deadline`` (on ``clock``) unless :meth:`cancel` comes first."""
        with self._changed:
            self._next_id += 1
            self._due[self._next_id] = (deadline, fire)
            if self._thread is None or not self._thread.is_alive():
                self._start()
            elif deadline < self._sleeps_until:
                self._changed.notify()
            return self._next_id

    def cancel(self, key: int) -> None:
        with self._changed:
            self._due.pop(key, None)
            # Not notified: the thread wakes at the deadline it waits for, finds nothing due, waits on.

    def now(self) -> float:
        return self._clock()

    def close(self) -> None:
        """End the thread (at once if it waits; a container never needs to: it is a daemon)."""
        with self._changed:
            self._closed = True
            self._changed.notify()

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def _start(self) -> None:  # the lock held
        self._sleeps_until = float("-inf")
        self._thread = threading.Thread(target=self._serve, name="workerless-watchdog", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        for _ in range(WATCHDOG_MAX_ROUNDS):
            with self._changed:
                if self._closed:
                    self._thread = None
                    return
                now = self._clock()
                fired = [k for k, (deadline, _fire) in self._due.items() if deadline <= now]
                calls = [self._due.pop(k)[1] for k in fired]
                if not calls:
                    if not self._due:
                        # Nothing to watch: the thread ends (the next batch of two or more starts one).
                        # A cancelled deadline still wakes it first, so batches that follow each other
                        # within a timeout share one thread, and none lingers past the last.
                        self._thread = None
                        return
                    self._sleeps_until = min(d for d, _f in self._due.values())
                    self._wait(self._changed, self._sleeps_until - now)
                    # Awake: it reads the deadlines again before it next waits; no register need wake it.
                    self._sleeps_until = float("-inf")
                    continue
            for call in calls:  # outside the lock: a hand-back calls SQS
                try:
                    call()
                except Exception:
                    logger.warning("the start gate's watchdog failed", exc_info=True)
        with self._changed:  # the bound reached: a fresh thread for what is still registered
            self._thread = None
            if self._due and not self._closed:
                self._start()


class StartGate:
    """One batch's gate. ``remaining`` gives the Lambda's remaining time in seconds (None: no
    context, no gating); ``hand_back(message_id)`` makes a message visible again at once;
    ``watchdog``: the route's (a batch of its own when None)."""

    def __init__(
        self,
        remaining: Callable[[], float] | None,
        *,
        runs: RunTimes,
        hand_back: Callable[[str], None],
        message_ids: list[str],
        watchdog: Watchdog | None = None,
    ) -> None:
        self._remaining = remaining
        self._runs = runs
        self._watcher = watchdog
        self._hand_back = hand_back
        self._waiting = list(message_ids)  # not started yet, in the batch's order
        self._closed = False
        self._started = False
        self._lock = threading.Lock()
        self._watch: int | None = None

    @classmethod
    def of_context(
        cls,
        context: LambdaContext | None,
        *,
        runs: RunTimes,
        hand_back: Callable[[str], None],
        message_ids: list[str],
        watchdog: Watchdog | None = None,
    ) -> StartGate:
        getter = getattr(context, "get_remaining_time_in_millis", None)
        remaining = (lambda: float(getter()) / 1000.0) if callable(getter) else None
        return cls(remaining, runs=runs, hand_back=hand_back, message_ids=message_ids, watchdog=watchdog)

    def __enter__(self) -> StartGate:
        # A batch of one message has nothing the watchdog could hand back (its only job always
        # starts): no watch, no context copy, for most invocations below a few jobs a second.
        if self._remaining is not None and len(self._waiting) > 1:
            if self._watcher is None:
                self._watcher = Watchdog()
            # In the invocation's context (its clients, deadline and, in local mode, its IAM scope).
            context = contextvars.copy_context()
            deadline = self._watcher.now() + self._remaining() - WATCHDOG_MARGIN_SECONDS
            self._watch = self._watcher.register(deadline, lambda: context.run(self._watchdog))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watch is not None and self._watcher is not None:
            self._watcher.cancel(self._watch)

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
