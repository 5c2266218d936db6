"""The poller's linger: idle it costs one short poll; busy it keeps polling, then relays."""

from __future__ import annotations

import itertools
import json
from typing import Any

from workerless.model import Demand
from workerless.poller import Poller
from workerless.settings import Settings
from workerless.testing import FakeEngine


class Queues:
    """In-memory stand-in for workerless.aws.sqs.Queues: nothing in flight, every send accepted."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def in_flight(self, queue_url: str) -> int:
        return 0

    def send_batch(self, queue_url: str, bodies: list[str]) -> list[Any]:
        self.sent.extend(bodies)
        return []

    def send(self, queue_url: str, body: Any, *, delay_seconds: int = 0) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.on_sleep: list[Any] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for hook in self.on_sleep:
            hook()


def settings(budget: float = 20.0) -> Settings:
    routes = [{"type": "charge-payment", "queue": "q", "max": 10}]
    return Settings.from_env(
        {
            "WORKERLESS_ROUTES": json.dumps(routes),
            "WORKERLESS_POLL_BUDGET_SECONDS": str(budget),
            "WORKERLESS_HEARTBEAT_QUEUE_URL": "hb",
        }
    )


def test_idle_costs_one_short_poll() -> None:
    engine, clock = FakeEngine(), Clock()
    poller = Poller(settings(), engine, Queues(), clock=clock, sleep=clock.sleep)

    report = poller.run(deadline=100.0)

    assert report.polls == 1
    assert report.empty_polls == 1
    assert clock.now == 0.0, "no pause when nothing was dispatched"
    assert not poller.busy_at_end


def test_a_job_arriving_while_work_flows_is_picked_up_within_a_pause() -> None:
    """GIVEN a poller that just dispatched a job WHEN another job becomes activatable during its
    linger THEN the same invocation picks it up after one pause, not at the next tick."""
    engine, clock, queues = FakeEngine(), Clock(), Queues()
    engine.add_job("charge-payment", {"n": 1})
    arrivals = iter([lambda: engine.add_job("charge-payment", {"n": 2})])

    def arrive() -> None:
        for add in arrivals:
            add()
            break

    clock.on_sleep.append(arrive)
    poller = Poller(settings(), engine, queues, clock=clock, sleep=clock.sleep)

    report = poller.run(deadline=100.0)

    assert report.dispatched == 2
    assert len(queues.sent) == 2
    assert report.polls >= 3, "dispatch, empty + pause, dispatch"


def test_budget_running_out_while_busy_asks_for_a_relay() -> None:
    engine, clock = FakeEngine(), Clock()

    def keep_coming() -> None:
        engine.add_job("charge-payment", {})

    clock.on_sleep.append(keep_coming)
    engine.add_job("charge-payment", {})
    poller = Poller(settings(budget=5.0), engine, Queues(), clock=clock, sleep=clock.sleep)

    poller.run(deadline=100.0)

    assert poller.busy_at_end
    assert poller.last_dispatch is not None
    assert clock.now <= 5.0


def test_an_all_handed_back_cycle_ends_the_invocation() -> None:
    engine, clock = FakeEngine(), Clock()
    engine.add_job("charge-payment", {})

    class Refusing(Queues):
        def send_batch(self, queue_url: str, bodies: list[str]) -> list[Any]:
            from workerless.aws.sqs import SendFailure

            return [SendFailure(i, "throttled") for i in range(len(bodies))]

    poller = Poller(settings(), engine, Refusing(), clock=clock, sleep=clock.sleep)
    poller.last_dispatch = 10**12  # even mid-linger
    report = poller.run(deadline=100.0)

    assert report.released == 1
    assert report.polls == 1
    assert engine.activate([Demand("charge-payment", 1)], 60), "the job went straight back to the engine"


def test_empty_polls_back_off_and_queue_depths_are_not_reread_on_every_poll() -> None:
    """GIVEN a poller lingering after a dispatch WHEN nothing more arrives THEN the pauses double
    (0.25, 0.5, 1, 2 s) and each route's SQS depth is read at most every 2 s, not on every poll."""
    engine, clock = FakeEngine(), Clock()
    pauses: list[float] = []
    reads: list[float] = []

    class CountingQueues(Queues):
        def in_flight(self, queue_url: str) -> int:
            reads.append(clock.now)
            return 0

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        clock.sleep(seconds)

    engine.add_job("charge-payment", {})
    poller = Poller(settings(), engine, CountingQueues(), clock=clock, sleep=sleep)
    poller.run(deadline=100.0)

    assert pauses[:4] == [0.25, 0.5, 1.0, 2.0]
    assert all(p <= 2.0 for p in pauses)
    assert len(reads) < len(pauses) + 1, "depths are reused between quick polls"
    assert all(b - a >= 2.0 for a, b in itertools.pairwise(reads))
