"""The poller's linger: idle it costs one short poll; busy it keeps polling, then relays."""

from __future__ import annotations

import json
from typing import Any

from workerless._core.model import Demand
from workerless._core.settings import Settings
from workerless._poller.poller import Poller
from workerless.testing import FakeEngine

from tests.fakes import Clock


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
    engine, clock = FakeEngine(), Clock(0.0)
    poller = Poller(settings(), engine, Queues(), clock=clock, sleep=clock.sleep)

    report = poller.run(deadline=100.0)

    assert report.polls == 1
    assert report.empty_polls == 1
    assert clock.now == 0.0, "no pause when nothing was dispatched"
    assert not poller.busy_at_end


def test_an_empty_poll_while_work_flows_ends_the_invocation_with_a_relay_not_a_pause() -> None:
    """GIVEN a poller that just dispatched a job WHEN its next poll finds nothing THEN it does not
    sleep (a paused Lambda is billed): it ends and asks for a relay RELAY_DELAY_SECONDS later."""
    from workerless._poller.poller import RELAY_DELAY_SECONDS

    engine, clock, queues = FakeEngine(), Clock(0.0), Queues()
    engine.add_job("charge-payment", {"n": 1})
    slept: list[float] = []
    poller = Poller(settings(), engine, queues, clock=clock, sleep=slept.append)

    report = poller.run(deadline=100.0)

    assert report.dispatched == 1
    assert report.polls == 2, "dispatch, then one empty poll"
    assert slept == [] and clock.now == 0.0
    assert poller.relay_delay == RELAY_DELAY_SECONDS == 1
    assert not poller.busy_at_end


def test_a_relayed_invocation_carries_on_while_work_flows_and_stops_after_the_linger() -> None:
    """GIVEN an invocation relayed from one that dispatched 1 s ago WHEN it finds nothing THEN it
    relays again; once the last dispatch is LINGER_SECONDS old, it ends without a relay."""
    import time

    from workerless._poller.poller import LINGER_SECONDS

    engine, clock = FakeEngine(), Clock(0.0)
    poller = Poller(settings(), engine, Queues(), clock=clock, sleep=lambda s: None)
    poller.last_dispatch = time.time() - 1.0
    poller.run(deadline=100.0)
    assert poller.relay_delay == 1

    done = Poller(settings(), engine, Queues(), clock=clock, sleep=lambda s: None)
    done.last_dispatch = time.time() - LINGER_SECONDS - 0.1
    report = done.run(deadline=100.0)
    assert report.polls == 1 and done.relay_delay is None


def test_budget_running_out_while_busy_asks_for_an_immediate_relay() -> None:
    engine, clock = FakeEngine(), Clock(0.0)

    class Arriving(Queues):
        def send_batch(self, queue_url: str, bodies: list[str]) -> list[Any]:
            clock.now += 1.0  # each dispatch takes a second, and another job has arrived meanwhile
            engine.add_job("charge-payment", {})
            return super().send_batch(queue_url, bodies)

    engine.add_job("charge-payment", {})
    poller = Poller(settings(budget=5.0), engine, Arriving(), clock=clock, sleep=lambda s: None)

    poller.run(deadline=100.0)

    assert poller.busy_at_end
    assert poller.relay_delay == 0
    assert poller.last_dispatch is not None
    assert clock.now <= 5.0


def test_an_all_handed_back_cycle_ends_the_invocation() -> None:
    engine, clock = FakeEngine(), Clock(0.0)
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


def test_queue_depths_are_not_reread_on_every_poll_and_a_relay_hands_them_on() -> None:
    """GIVEN a poller that dispatches several cycles in a row THEN each route's SQS depth is read
    at most every DEPTH_REFRESH_SECONDS; the counts it hands to its relay spare the relayed
    invocation the read while they are fresh, and a stale one is read again."""
    from workerless._poller.poller import DEPTH_REFRESH_SECONDS

    engine, clock = FakeEngine(), Clock(0.0)
    reads: list[float] = []

    class CountingQueues(Queues):
        def in_flight(self, queue_url: str) -> int:
            reads.append(clock.now)
            return 0

        def send_batch(self, queue_url: str, bodies: list[str]) -> list[Any]:
            clock.now += 0.5
            return super().send_batch(queue_url, bodies)

    for n in range(4):
        engine.add_job("charge-payment", {"n": n})
    poller = Poller(settings(), engine, CountingQueues(), clock=clock, sleep=lambda s: None)
    poller.demands()  # one read at 0.0
    poller.cycle(poller_report(), deadline=1e12)
    poller.cycle(poller_report(), deadline=1e12)
    assert reads == [0.0], "a count younger than DEPTH_REFRESH_SECONDS is reused"
    handed = poller.depths_for_relay()

    relayed = Poller(settings(), engine, CountingQueues(), clock=clock, sleep=lambda s: None)
    relayed.inherit_depths(handed)
    relayed.demands()
    assert reads == [0.0], "the relay's fresh count is used"
    clock.now += DEPTH_REFRESH_SECONDS
    relayed.demands()
    assert len(reads) == 2, "a stale count is read again"
    relayed.inherit_depths({"charge-payment": ["x", 1.0], "no-such-route": [1, 1.0]})  # ignored


def poller_report() -> Any:
    from workerless._poller.poller import PollReport

    return PollReport()
