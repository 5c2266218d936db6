"""The poller's intent log: a poller that dies mid-cycle does not cost its jobs a lease.

Pure: the real Poller and IntentLog over an in-memory shared state, the in-memory FakeEngine and a
fake SQS whose sends can "kill the process" (a BaseException, as the chaos suite's SimulatedCrash).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from workerless.chaos.plan import SimulatedCrash
from workerless.engines.base import MemoryState
from workerless.intent import INTENT_KEY, IntentLog, stale_after
from workerless.model import Demand
from workerless.poller import Poller
from workerless.settings import Settings
from workerless.testing import FakeEngine
from workerless.ticket import Ticket

ROUTES = json.dumps([{"type": "charge-payment", "queue": "q-charge", "max": 5}])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Queues:
    """SQS as the poller sees it; ``die_on`` = "batch" or "ticket" kills the process there once."""

    def __init__(self, die_on: str | None = None) -> None:
        self.die_on = die_on
        self.jobs: list[str] = []
        self.tickets: list[Ticket] = []

    def in_flight(self, url: str) -> int:
        return 0

    def send_batch(self, url: str, bodies: list[str]) -> list[Any]:
        if self.die_on == "batch":
            self.die_on = None
            raise SimulatedCrash("poller died before dispatch")
        self.jobs.extend(bodies)
        return []

    def send(self, url: str, body: Any, *, delay_seconds: int = 0) -> None:
        if self.die_on == "ticket":
            self.die_on = None
            raise SimulatedCrash("poller died before the ticket")
        self.tickets.append(Ticket.from_json(body))


def settings() -> Settings:
    return Settings.from_env(
        {
            "WORKERLESS_ROUTES": ROUTES,
            "WORKERLESS_HEARTBEAT_QUEUE_URL": "q-heartbeat",
            "WORKERLESS_POLL_BUDGET_SECONDS": "0",
            "WORKERLESS_LEASE_SECONDS": "60",
        }
    )


def poll(engine: FakeEngine, queues: Queues, log: IntentLog) -> Any:
    return Poller(settings(), engine, queues, sleep=lambda s: None, intents=log).run(deadline=1e12)


@pytest.fixture
def world() -> tuple[FakeEngine, MemoryState, Clock]:
    engine = FakeEngine()
    for n in range(3):
        engine.add_job("charge-payment", {"n": n})
    return engine, MemoryState(), Clock()


def test_a_poller_dying_before_dispatch_has_its_jobs_handed_back_by_the_next(world: Any) -> None:
    """GIVEN a poller that activated three jobs and died before queuing them
    WHEN the next poller runs after the stale window (seconds, not a lease)
    THEN it hands the three jobs straight back to the engine, which hands them out again."""
    engine, state, clock = world
    log = IntentLog(state, lease_seconds=60, clock=clock)
    with pytest.raises(SimulatedCrash):
        poll(engine, Queues(die_on="batch"), log)
    assert {j.state for j in engine.jobs.values()} == {"leased"}
    assert len(state.get(INTENT_KEY)["batches"]) == 1

    clock.now += stale_after(60)
    queues = Queues()
    report = poll(engine, queues, log)

    assert sorted(engine.releases) == sorted(engine.jobs), "every job was handed back"
    assert report.released == 3
    assert len(queues.jobs) == 3, "and taken again and queued in the same invocation"
    assert state.get(INTENT_KEY)["batches"] == []


def test_a_poller_dying_before_the_ticket_has_its_ticket_sent_by_the_next(world: Any) -> None:
    engine, state, clock = world
    log = IntentLog(state, lease_seconds=60, clock=clock)
    dying = Queues(die_on="ticket")
    with pytest.raises(SimulatedCrash):
        poll(engine, dying, log)
    assert len(dying.jobs) == 3 and dying.tickets == []

    clock.now += stale_after(60)
    queues = Queues()
    poll(engine, queues, log)

    assert engine.releases == {}, "queued jobs are not handed back"
    (ticket,) = queues.tickets
    assert sorted(e.ref.job_id for e in ticket.entries) == sorted(engine.jobs)


def test_a_live_pollers_batch_is_left_alone(world: Any) -> None:
    """A batch younger than the stale window belongs to a poller that may still be working."""
    engine, state, clock = world
    log = IntentLog(state, lease_seconds=60, clock=clock)
    with pytest.raises(SimulatedCrash):
        poll(engine, Queues(die_on="batch"), log)
    clock.now += stale_after(60) / 2
    poll(engine, Queues(), log)
    assert engine.releases == {}
    assert len(state.get(INTENT_KEY)["batches"]) == 1


def test_a_clean_cycle_leaves_the_log_empty(world: Any) -> None:
    engine, state, clock = world
    log = IntentLog(state, lease_seconds=60, clock=clock)
    poll(engine, Queues(), log)
    assert state.get(INTENT_KEY)["batches"] == []


def test_the_log_keeps_no_variables() -> None:
    """Variables can be large and are not needed to hand a job back or extend its lease."""
    engine = FakeEngine()
    engine.add_job("charge-payment", {"secret-ish": "x" * 1000})
    state, clock = MemoryState(), Clock()
    with pytest.raises(SimulatedCrash):
        poll(engine, Queues(die_on="batch"), IntentLog(state, lease_seconds=60, clock=clock))
    (entry,) = state.get(INTENT_KEY)["batches"][0]["jobs"]
    assert set(entry) == {"ref", "retries", "lease"}, "a reference, the retries and the lease: no variables"
    assert "x" * 100 not in json.dumps(entry)


@pytest.mark.parametrize(("lease", "stale"), [(5, 2.0), (60, 10.0), (3600, 10.0), (20, 5.0)])
def test_stale_window_is_short_against_the_lease(lease: int, stale: float) -> None:
    assert stale_after(lease) == stale


def test_the_owner_steps_need_no_read_after_the_first() -> None:
    """Each step rewrites the record; the owner reuses what it last wrote (still compare-and-set)."""

    class Counting(MemoryState):
        gets = 0

        def get(self, key: str) -> dict[str, Any] | None:
            Counting.gets += 1
            return super().get(key)

    engine = FakeEngine()
    engine.add_job("charge-payment", {})
    [job] = engine.activate([Demand("charge-payment", 1)], 60)
    log = IntentLog(Counting(), lease_seconds=60)
    intent = log.record([job])
    log.dispatched(intent, [job])
    log.clear(intent)
    assert Counting.gets == 1
    assert log.state.get(INTENT_KEY)["batches"] == []
