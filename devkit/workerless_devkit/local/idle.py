"""Idle tracking: when a local run has nothing left to do.

Idle means: no message visible or in flight in any consumed queue (an event source's, or one a
function has received from itself, like the scheduled dead-letter drain's; ignoring the queues a
function feeds itself with a delay, like a poller's tick or a heartbeat's ticket), no invocation
running that was triggered by another queue, and no summary event recorded. Invocations of
scheduled or self-timed functions that do nothing else (an idle poller tick) do not count as work,
unless they take jobs from the engine (:meth:`IdleTracker.promote`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from workerless_devkit.local.polls import PollWatch
from workerless_devkit.local.summary import Summary
from workerless_devkit.local.template import QueueSpec


class IdleTimeout(TimeoutError):
    """The topology did not go idle within ``max_seconds``; ``summary`` holds what happened."""

    def __init__(self, message: str, summary: Summary) -> None:
        super().__init__(message)
        self.summary = summary


class IdleTracker:
    """What the running invocations and the functions' own sends say about work in progress."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.work_running = 0
        #: Scheduled invocations that became work (see :meth:`promote`), by id of their scope.
        self._promoted: set[int] = set()
        self._waiting: set[int] = set()
        self.last_activity = time.monotonic()
        #: Queues a function drains itself (its own ReceiveMessage, e.g. on a schedule): like a
        #: consumed queue, a message waiting or in flight there is work still to do.
        self._drained: set[str] = set()
        # Queues a function feeds itself with a delay: a timer (poller tick, heartbeat ticket), not work.
        self._timer_queues: set[str] = set()
        self._chain_queues: set[str] = set()  # ... and without one: a chain doing work

    def touch(self) -> None:
        with self._lock:
            self.last_activity = time.monotonic()

    def is_timer(self, queue_name: str) -> bool:
        with self._lock:
            return queue_name in self._timer_queues

    def drained(self) -> set[str]:
        with self._lock:
            return set(self._drained)

    # -- invocations ---------------------------------------------------------------------------

    def begin(self, scope_id: int, *, work: bool) -> None:
        """An invocation starts; ``work``: it counts as work from the start (not a timer's)."""
        with self._lock:
            if work:
                self.work_running += 1
                self.last_activity = time.monotonic()
            self._waiting.add(scope_id)

    def end(self, scope_id: int, *, work: bool) -> None:
        """An invocation is over for Lambda (returned, failed, or abandoned at its Timeout)."""
        with self._lock:
            self._waiting.discard(scope_id)
            promoted = scope_id in self._promoted
            self._promoted.discard(scope_id)
            if work or promoted:
                self.work_running -= 1
                self.last_activity = time.monotonic()

    def promote(self, scope_id: int) -> None:
        """A scheduled invocation that took jobs from the engine is work from then on, until it
        ends: its jobs are leased but in no queue yet, so idle detection must not end the run
        between the activation and the send (on a busy machine that gap can be seconds)."""
        with self._lock:
            # Only while its invocation waits for it (an abandoned invocation is over for Lambda).
            if scope_id in self._waiting and scope_id not in self._promoted:
                self._promoted.add(scope_id)
                self.work_running += 1
                self.last_activity = time.monotonic()

    # -- the functions' own calls --------------------------------------------------------------

    def note_receive(self, queue_name: str) -> None:
        with self._lock:
            self._drained.add(queue_name)

    def note_send(self, queue_name: str, self_send: bool, delay_seconds: int) -> None:
        with self._lock:
            if self_send and delay_seconds >= 1:
                # A function re-arming itself for later (a tick, a heartbeat ticket): its queue is a
                # timer, and runs that do nothing else are not work for idle detection.
                if queue_name not in self._chain_queues:
                    self._timer_queues.add(queue_name)
                return
            if self_send and queue_name not in self._timer_queues:
                # Re-sending to itself for immediate delivery: a chain doing work. A timer's
                # immediate send (a poller relaying at once, its budget spent while jobs flowed) is
                # work now, not from now on: turned into a chain, every later tick of a busy poller
                # was work, and a run against a slow engine never went idle.
                self._chain_queues.add(queue_name)
            # A message for someone else, or for itself at once, is work (a job fanned out, a ticket started).
            self.last_activity = time.monotonic()

    # -- the verdict ---------------------------------------------------------------------------

    def busy(
        self, sqs: Any, queue_urls: Mapping[str, str], queue_by_name: Mapping[str, QueueSpec], consumed: set[str]
    ) -> bool:
        """Work running, or a message visible or in flight in a consumed (or drained) queue."""
        with self._lock:
            if self.work_running:
                return True
            background = set(self._timer_queues)
            drained = set(self._drained)
        # A drained queue outside the template (the function's own business) is not the topology's.
        drained &= set(queue_by_name)
        names = [name for name in sorted({*consumed, *drained}) if name not in background]
        for name in names:
            spec = queue_by_name[name]
            attributes = sqs.get_queue_attributes(
                QueueUrl=queue_urls[spec.logical_id],
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            if int(attributes.get("ApproximateNumberOfMessages", 0)) or int(
                attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
            ):
                return True
        return False

    def run_until_idle(
        self,
        summary: Callable[[], Summary],
        busy: Callable[[], bool],
        polls: PollWatch,
        idle_seconds: float,
        max_seconds: float,
        *,
        poll_seconds: float,
        stop: threading.Event | None,
    ) -> Summary:
        """Wait until nothing has happened for ``idle_seconds`` in a row (see the module);
        :class:`IdleTimeout` after ``max_seconds``; early when ``stop`` is set."""
        start = time.monotonic()
        version = summary().version
        idle_since = time.monotonic()
        while True:
            now = time.monotonic()
            if stop is not None and stop.is_set():
                return summary()
            if now - start > max_seconds:
                raise IdleTimeout(f"not idle after {max_seconds:g} s", summary())
            current = summary().version
            if current != version or busy():
                version = current
                idle_since = now
            else:
                with self._lock:
                    idle_since = max(idle_since, self.last_activity)
                # A poll in progress (or failed) is work not known yet: never end a run there.
                if now - idle_since >= idle_seconds and polls.settled_since(idle_since):
                    return summary()
            time.sleep(poll_seconds)


@dataclass(frozen=True, slots=True)
class QueueDepth:
    visible: int
    in_flight: int
    delayed: int

    @property
    def busy(self) -> bool:
        return self.visible + self.in_flight > 0


def queue_depths(sqs: Any, queues: Iterable[QueueSpec], queue_urls: Mapping[str, str]) -> dict[str, QueueDepth]:
    """Every queue's approximate depth, by logical id."""
    depths: dict[str, QueueDepth] = {}
    for spec in queues:
        attributes = sqs.get_queue_attributes(
            QueueUrl=queue_urls[spec.logical_id],
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        depths[spec.logical_id] = QueueDepth(
            visible=int(attributes.get("ApproximateNumberOfMessages", 0)),
            in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
            delayed=int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
        )
    return depths


def run_until(done: Callable[[], bool], max_seconds: float, *, poll_seconds: float, stopping: threading.Event) -> bool:
    """Until ``done()`` is true (True) or ``max_seconds`` pass (False); checked at once when ``stopping`` is set."""
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        if done():
            return True
        if stopping.wait(poll_seconds):
            return done()
    return done()


def wait_for(stop: threading.Event, max_seconds: float | None) -> bool:
    """Until ``stop`` is set (a signal handler sets it): True; or ``max_seconds`` pass: False."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    while not stop.is_set():
        timeout = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
        if timeout <= 0:
            return False
        stop.wait(timeout)
    return True
