"""A stateful property test of the intent log and the poller lock (hypothesis RuleBasedStateMachine).

Backend: the real Poller, PollerLock and IntentLog over an in-memory shared state, the in-memory
FakeEngine (each activation tagged with its own lease serial in the job's handle, so that a job
handed back and leased again is told apart from the lease before; leases of an hour), a virtual wall clock, and a fake
SQS whose sends can kill the poller or refuse its tickets. The model runs poller invocations — from
a tick, or from a relay's token (delivered once or twice) — that die at random steps (at
SendMessageBatch, at the ticket, right after the ticket) or finish (with every ticket refused, or
not) and release or relay, interleaved with new jobs and the
clock running on. After a final drain (the lock expired, invocations until nothing is left in its
item) it checks, for every lease the engine granted:

- it was queued at most once, and never both queued and handed back (no second run);
- once queued, it had a heartbeat ticket (no lease left to lapse under a queued job);
- it was queued or handed back (no job lost to a dead poller). Leases are far longer than a run of
  the model, so none lapses at the engine (a lapsed lease is the documented fallback, not this).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule
from workerless._core.settings import Settings
from workerless._heartbeat.ticket import Ticket
from workerless._poller.intent import IntentLog
from workerless._poller.poller import Poller
from workerless._poller.poller_lock import LOCK_KEY, PollerLock
from workerless.engines.base import MemoryState
from workerless.errors import LeaseLostError
from workerless.testing import FakeEngine
from workerless_devkit.chaos.plan import SimulatedCrash

from tests.fakes import Clock

LOCK_SECONDS = 30.0
#: Leases far longer than any run of the model (30 steps of at most 31 s, and the drain): no lease
#: lapses at the engine, so every lease must be accounted for by the pipeline itself.
LEASE_SECONDS = 3600
SETTINGS = Settings.from_env(
    {
        "WORKERLESS_ROUTES": json.dumps([{"type": "charge-payment", "queue": "q-charge", "max": 4}]),
        "WORKERLESS_HEARTBEAT_QUEUE_URL": "q-heartbeat",
        "WORKERLESS_POLL_BUDGET_SECONDS": "0",
        "WORKERLESS_LEASE_SECONDS": str(LEASE_SECONDS),
    }
)


class Engine(FakeEngine):
    """FakeEngine whose every lease carries a serial in its handle; records what was handed back,
    and what could not be because the lease had already lapsed at the engine."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.granted: set[int] = set()
        self.handed_back: list[int] = []
        self.lapsed: set[int] = set()

    def activate(self, demands: Any, lease_seconds: int) -> Any:
        jobs = []
        for job in super().activate(demands, lease_seconds):
            serial = len(self.granted)
            self.granted.add(serial)
            jobs.append(replace(job, ref=replace(job.ref, handle={"lease": serial})))
        return jobs

    def release(self, job: Any, reason: str) -> None:
        try:
            super().release(job, reason)
        except LeaseLostError:
            self.lapsed.add(int(job.ref.handle["lease"]))
            raise
        self.handed_back.append(int(job.ref.handle["lease"]))


class Queues:
    def __init__(self) -> None:
        self.die_on: str | None = None
        self.queued: list[int] = []
        self.ticketed: set[int] = set()

    def in_flight(self, url: str) -> int:
        return 0  # room is not under test here

    def send_batch(self, url: str, bodies: list[str]) -> list[Any]:
        if self.die_on == "batch":
            raise SimulatedCrash("died at SendMessageBatch")
        self.queued.extend(int(json.loads(b)["ref"]["handle"]["lease"]) for b in bodies)
        return []

    def send(self, url: str, body: Any, *, delay_seconds: int = 0) -> None:
        if self.die_on == "refuse tickets":
            raise RuntimeError("SQS throttled the ticket")  # not a crash: the poller goes on
        if self.die_on == "ticket":
            raise SimulatedCrash("died at the ticket")
        self.ticketed.update(int(e.ref.handle["lease"]) for e in Ticket.from_json(body).entries)
        if self.die_on == "after-ticket":
            raise SimulatedCrash("died right after the ticket")


class IntentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.engine = Engine(clock=self.clock)
        self.state = MemoryState()
        self.queues = Queues()
        self.tokens: list[dict[str, Any]] = []

    def invoke(self, *, die: str | None = None, token: dict[str, Any] | None = None, relay: bool = False) -> None:
        lock = PollerLock(self.state, seconds=LOCK_SECONDS, window=2, clock=self.clock)
        log = IntentLog(lock, lease_seconds=LEASE_SECONDS, clock=self.clock)
        poller = Poller(
            SETTINGS, self.engine, self.queues, sleep=lambda s: None, intents=log, lock=lock, wall=self.clock
        )
        self.queues.die_on = die
        try:
            if not (lock.inherit(token) if token is not None else lock.acquire()):
                poller.recover(deadline=1e12)
                return
            poller.run(deadline=1e12)
        except SimulatedCrash:
            return  # the process died: nothing released, nothing handed on
        finally:
            self.queues.die_on = None
        handed = lock.handover() if relay else None
        if handed is not None:
            self.tokens.append(handed)
            lock.handed_over()
        else:
            lock.release()

    @rule(n=st.integers(1, 6))
    def jobs_arrive(self, n: int) -> None:
        for i in range(n):
            self.engine.add_job("charge-payment", {"i": i})

    @rule(
        die=st.sampled_from([None, None, "batch", "ticket", "after-ticket", "refuse tickets"]),
        relay=st.booleans(),
        via=st.sampled_from(["tick", "relay", "duplicate relay"]),
    )
    def a_poller_invocation(self, die: str | None, relay: bool, via: str) -> None:
        token = None
        if via != "tick" and self.tokens:
            token = self.tokens[-1] if via == "duplicate relay" else self.tokens.pop()
        self.invoke(die=die, token=token, relay=relay)

    @rule(seconds=st.sampled_from([0.5, 2.0, 5.0, 10.0, 15.0, 31.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds

    def teardown(self) -> None:
        # Drain: every lock expired, invocations until the item holds nothing left to finish.
        for _ in range(4):
            self.clock.now += LOCK_SECONDS + 1
            self.invoke()
        item = self.state.get(LOCK_KEY)
        assert not (item or {}).get("batches"), f"left unfinished: {item}"
        queued, handed_back = self.queues.queued, set(self.engine.handed_back)
        assert len(queued) == len(set(queued)), "a lease queued twice"
        assert not set(queued) & handed_back, "a lease both queued and handed back: a second run"
        assert set(queued) <= self.queues.ticketed, "a queued lease never got its heartbeat ticket"
        assert not self.engine.lapsed, "no lease lapses in this model"
        unaccounted = self.engine.granted - set(queued) - handed_back
        assert not unaccounted, f"leases neither queued nor handed back: {sorted(unaccounted)}"


TestIntentMachine = IntentMachine.TestCase
TestIntentMachine.settings = settings(
    max_examples=250, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
