"""A poll in progress is work: local mode's idle detection must not end a run in the middle of one.

A poller invocation is not work for idle detection (an idle tick polls once and finds nothing); it
becomes work once it has taken jobs. Until then nothing showed that it was busy: against a slow
engine (every call answered a second or two late) a poll that pulled deliveries one by one for
several seconds looked idle, and ``workerless local --until-idle`` ended the run in the middle of it,
with deliveries pulled and never dispatched. :class:`PollWatch` wraps the engine the functions use
and counts the polls (``Engine.activate`` calls) in progress: the run does not end while one is
(:meth:`~workerless_devkit.local.runtime.LocalTopology.run_until_idle`), unless a poll begun since
the run went quiet has already come back empty (against a slow engine polled every second, one poll
or another is always in progress, and the engine has said it has nothing); and a poll that took jobs
makes its invocation work before it ends (``taken``), so no moment is left between the two.

A failed poll says nothing about the work waiting at the engine either: against an engine that
flaps (down and up every few seconds), the poller backing off between failed polls looked idle
while jobs waited at the engine, and the run ended with them unfinished. So once the engine has
answered a poll, the run is not idle while its latest poll failed (:meth:`PollWatch.settled_since`).
An engine that never answered is left to :mod:`~workerless_devkit.local.engine_health`, which
fails the run naming what was tried.

Nor is a poller invocation that has not reached its poll yet idle: under CPU load its cold start
(imports, the routes' read, the lock, the queues' counts) took longer than ``--until-idle``'s quiet
window, and the run ended before the first poll with every job still at the engine (issue 26: the
bad-days stall). A poller invocation in progress counts as a poll in progress
(:meth:`PollWatch.invocation`) until it ends, or a poll begun since the quiet came back empty (or
failed, against an engine that has never answered one: engine_health's case).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from workerless.engines.decorator import EngineDecorator

if TYPE_CHECKING:
    from workerless._core.model import ActivatedJob, Demand
    from workerless.engines.base import Engine


class PollWatch:
    """How many polls are in progress in the topology's functions; ``taken()`` is called, inside the
    poll, when one returns jobs."""

    def __init__(self, taken: Callable[[], None]) -> None:
        self._taken = taken
        self._lock = threading.Lock()
        self._polls = 0
        self._answered = False
        self._last_failed = False
        #: When the latest poll that came back empty began (time.monotonic()).
        self._empty_began: float | None = None
        #: When the latest poll that failed before the engine ever answered one began.
        self._unanswered_began: float | None = None

    @property
    def in_progress(self) -> bool:
        """Whether a poll (or a poller invocation) is in progress."""
        with self._lock:
            return self._polls > 0

    @contextlib.contextmanager
    def invocation(self) -> Iterator[None]:
        """A poller invocation runs within: a poll in progress from its start (its cold start and
        the reads before its poll included) to its end."""
        with self._lock:
            self._polls += 1
        try:
            yield
        finally:
            with self._lock:
                self._polls -= 1

    def settled_since(self, quiet_since: float) -> bool:
        """Whether the run may end as far as the polls know, quiet since ``quiet_since``
        (time.monotonic()): no poll in progress, or one begun since then came back empty; and the
        latest poll did not fail after the engine had answered one."""
        with self._lock:
            if self._answered and self._last_failed:
                return False
            if self._polls == 0 or (self._empty_began is not None and self._empty_began >= quiet_since):
                return True
            # An engine that has never answered (nothing listening, every token refused) keeps a
            # poller invocation in progress forever: its polls failing since the quiet say as much as
            # an empty one, and engine_health fails the run naming the engine.
            return not self._answered and self._unanswered_began is not None and self._unanswered_began >= quiet_since

    def decorate(self, engine: Engine) -> Engine:
        """``engine`` with its polls counted (a wiring's ``engine_decorator``)."""
        return _WatchedEngine(engine, self)

    def poll(self, activate: Callable[[], list[ActivatedJob]]) -> list[ActivatedJob]:
        with self._lock:
            self._polls += 1
        began, failed, empty = time.monotonic(), True, False
        try:
            jobs = activate()
            failed, empty = False, not jobs
            if jobs:
                self._taken()
            return jobs
        finally:
            with self._lock:
                self._polls -= 1
                self._last_failed = failed
                self._answered = self._answered or not failed
                if empty:
                    self._empty_began = max(began, self._empty_began or began)
                if failed and not self._answered:
                    self._unanswered_began = max(began, self._unanswered_began or began)


class _WatchedEngine(EngineDecorator):
    def __init__(self, inner: Engine, watch: PollWatch) -> None:
        super().__init__(inner)
        self._watch = watch

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        return self._watch.poll(lambda: super(_WatchedEngine, self).activate(demands, lease_seconds))
