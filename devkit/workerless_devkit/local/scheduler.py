"""Schedule events, fired as EventBridge fires them, and Lambda's asynchronous retry of a throttled one.

Each Schedule event fires once at start, then at its rate (or ``schedule_seconds``, a departure
for tests: EventBridge's finest rate is a minute); a cron schedule without ``schedule_seconds``
does not fire locally. With ``schedule_drift`` each firing comes at a seeded moment within its
minute, as EventBridge's do. A throttled scheduled event is kept and retried with Lambda's backoff
until its MaximumEventAgeInSeconds (:func:`~workerless_devkit.local.concurrency.run_async`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from workerless_devkit.local.concurrency import AsyncOutcome, Throttled, run_async
from workerless_devkit.local.host import ThreadSet
from workerless_devkit.local.template import FunctionSpec, ScheduleEventSpec

log = logging.getLogger("workerless_devkit.local")

#: Runs one invocation: (function, event, depth in its chain, counts as work) -> (ok, result).
Invoke = Callable[..., tuple[bool, Any]]
#: How late after its nominal moment a firing comes: (function, schedule, interval, rng) -> seconds.
Delay = Callable[[FunctionSpec, ScheduleEventSpec, float, random.Random], float]


def schedule_interval(schedule: ScheduleEventSpec, override: float | None) -> float | None:
    """Seconds between a schedule's local firings: ``override`` (``schedule_seconds``) when given,
    else the template's rate; None for a cron schedule without an override (not emulated)."""
    if override is not None:
        return override
    return schedule.seconds


def drift(interval: float, rng: random.Random) -> float:
    """EventBridge runs a scheduled rule within its minute, not on the second."""
    return rng.uniform(0.0, min(60.0, interval))


class Scheduler:
    """The topology's Schedule events, each firing on a thread of its own (:meth:`start`)."""

    def __init__(
        self, invoke: Invoke, delay: Delay, stopping: threading.Event, threads: ThreadSet, *, seed: int
    ) -> None:
        self._invoke = invoke
        self._delay = delay
        self._stopping = stopping
        self._threads = threads
        self._seed = seed
        self._lock = threading.Lock()
        self._outcomes: list[tuple[str, AsyncOutcome]] = []

    @property
    def async_outcomes(self) -> list[tuple[str, AsyncOutcome]]:
        """Every throttled scheduled event and what became of it (retried until it ran, or dropped)."""
        with self._lock:
            return list(self._outcomes)

    def start_function(self, spec: FunctionSpec, schedule_seconds: float | None) -> None:
        """Start the function's enabled schedules; a cron one only with ``schedule_seconds``."""
        for schedule in spec.schedule_events:
            if not schedule.enabled:
                continue
            interval = schedule_interval(schedule, schedule_seconds)
            if interval is None:
                log.info(
                    "%s: schedule %s (%s) is not emulated locally without schedule_seconds",
                    spec.logical_id,
                    schedule.name,
                    schedule.expression,
                )
                continue
            self.start(spec, schedule, interval)

    def start(self, spec: FunctionSpec, schedule: ScheduleEventSpec, interval: float) -> None:
        self._threads.spawn(f"schedule:{spec.logical_id}:{schedule.name}", self._run, spec, schedule, interval)

    def _run(self, spec: FunctionSpec, schedule: ScheduleEventSpec, interval: float) -> None:
        rng = random.Random(f"{self._seed}:{spec.logical_id}:{schedule.name}")
        next_run = time.monotonic()  # fire at start: a local run should not wait a minute for the first tick
        while True:
            fire_at = next_run + self._delay(spec, schedule, interval, rng)
            if self._stopping.wait(max(0.0, fire_at - time.monotonic())):
                return
            event = schedule.input if schedule.input is not None else scheduled_event(spec, schedule)
            self.deliver_async(spec, event)
            # The next nominal moment (drift delays a firing, not the ones after it); never in the
            # past, so a long invocation does not make the schedule fire twice in a row.
            next_run = max(next_run + interval, time.monotonic())

    def deliver_async(self, spec: FunctionSpec, event: Any) -> None:
        """An asynchronous (EventBridge) invocation: run now; if throttled, Lambda keeps the event
        and retries it in the background (:func:`~workerless_devkit.local.concurrency.run_async`)."""
        ok, result = self._invoke(spec, event, depth=0, work=False)
        if ok or not isinstance(result, Throttled):
            # It ran. A function error is not retried locally (Lambda retries it MaximumRetryAttempts
            # times, 2 by default; template.yaml's scheduled functions set 0).
            return
        first = [True]

        def attempt() -> bool:
            if first[0]:  # the throttled attempt above
                first[0] = False
                return False
            _, again = self._invoke(spec, event, depth=0, work=False)
            return not isinstance(again, Throttled)

        def retry() -> None:
            try:
                outcome = run_async(attempt, spec.maximum_event_age, clock=time.monotonic, sleep=self._stopping.wait)
                with self._lock:
                    self._outcomes.append((spec.logical_id, outcome))
                if not outcome.ran and not outcome.stopped:
                    log.warning(
                        "%s: a scheduled event throttled %d time(s) dropped, %.0f s old (MaximumEventAgeInSeconds %d)",
                        spec.logical_id,
                        outcome.throttles,
                        outcome.age,
                        spec.maximum_event_age,
                    )
            finally:
                self._threads.batch_done()

        thread = threading.Thread(target=retry, name=f"{spec.logical_id}#async-retry", daemon=True)
        self._threads.start_batch(thread)


def scheduled_event(spec: FunctionSpec, schedule: ScheduleEventSpec) -> dict[str, Any]:
    """An EventBridge scheduled event, as a Schedule event source delivers it."""
    place = spec.place
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": place.account_id,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": place.region,
        "resources": [place.rule_arn(f"{spec.function_name}-{schedule.name}")],
        "detail": {},
    }
