"""Issue 26, 2.7: MaxInFlight is a bound when SQS's approximate counts lag as AWS documents them.

GetQueueAttributes' ApproximateNumberOfMessages / …NotVisible / …Delayed "might not achieve
consistency until at least 1 minute after the producers stop sending messages" (AWS, Amazon SQS
API Reference, GetQueueAttributes). Here every count the poller reads is the queue's exact count
as it was ``lag`` seconds before (a replica a minute behind: the documented worst case), while
the job records the handlers write are exact (DynamoDB, strongly consistent reads).

The real Poller and PollerLock over an in-memory shared state, the in-memory FakeEngine, a virtual
clock, and a route of MaxInFlight 5 whose jobs take 3 s each: the jobs leased and not final are
counted at every step (one a second), across invocations (each takes the lock, polls, releases).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from workerless._core.model import Outcome
from workerless._core.record import JobRecord, Status
from workerless._core.settings import Settings
from workerless._poller.poller import Poller
from workerless._poller.poller_lock import PollerLock
from workerless.engines.base import MemoryState
from workerless.testing import FakeEngine

from tests.fakes import Clock

MAX = 5
JOB_SECONDS = 3
LAG = 60.0


class World:
    """The route's queue (exact), its lagging counts, the records, and the handlers."""

    def __init__(self, clock: Clock, engine: FakeEngine) -> None:
        self.clock, self.engine = clock, engine
        self.queued: dict[str, tuple[float, Any]] = {}  # record key -> (sent at, job ref)
        self.history: list[tuple[float, int]] = [(clock.now, 0)]  # exact count over time
        self.records: dict[str, JobRecord] = {}

    # SQS, as the poller sees it
    def in_flight(self, queue_url: str) -> int:
        then = self.clock.now - LAG
        return next((n for at, n in reversed(self.history) if at <= then), self.history[0][1])

    def send_batch(self, queue_url: str, bodies: list[str]) -> list[Any]:
        from workerless._core.model import JobRef

        for body in bodies:
            ref = JobRef.from_dict(json.loads(body)["ref"])
            self.queued[ref.record_key] = (self.clock.now, ref)
        self.history.append((self.clock.now, len(self.queued)))
        return []

    def send(self, queue_url: str, body: Any, *, delay_seconds: int = 0) -> None:
        return None

    def max_message_bytes(self, queue_url: str) -> int | None:
        return 262_144

    # the job store (only what the poller reads)
    def get_many(self, keys: list[str]) -> dict[str, JobRecord]:
        return {k: self.records[k] for k in keys if k in self.records}

    # the handlers: a job is reported, its record marked, its message deleted JOB_SECONDS after its send
    def run_handlers(self) -> None:
        for key, (sent, ref) in list(self.queued.items()):
            if self.clock.now - sent >= JOB_SECONDS:
                self.engine.report(ref, Outcome.complete({}))
                self.records[key] = JobRecord(key, Status.REPORTED)
                del self.queued[key]
        self.history.append((self.clock.now, len(self.queued)))

    def leased(self) -> int:
        return sum(1 for job in self.engine.jobs.values() if job.state == "leased")


def settings() -> Settings:
    return Settings.from_env(
        {
            "WORKERLESS_ROUTES": json.dumps([{"type": "charge-payment", "queue": "q", "max": MAX}]),
            "WORKERLESS_POLL_BUDGET_SECONDS": "0",
            "WORKERLESS_HEARTBEAT_QUEUE_URL": "hb",
        }
    )


@pytest.mark.parametrize(
    ("store", "relay"), [(True, False), (True, True), (False, False)], ids=["records", "records-relayed", "sqs-only"]
)
def test_max_in_flight_holds_at_every_moment_with_counts_a_minute_behind(store: bool, relay: bool) -> None:
    """GIVEN 60 jobs, MaxInFlight 5 and SQS counts a minute behind WHEN the poller runs every second
    for 240 s THEN at no moment are more than 5 jobs leased and not final; with the job records
    (exact) the route still runs at its rate (every job done); with SQS's count alone (no store)
    the bound holds only by counting each send for the whole lag, so fewer jobs finish. Relayed:
    each invocation is handed the last one's counts, as a relay does, so the count is read again
    only when the tracked jobs leave no room (bookkeeping.depth_due): the bound holds all the same."""
    clock = Clock()
    engine = FakeEngine(clock=clock)
    for n in range(60):
        engine.add_job("charge-payment", {"n": n})
    world = World(clock, engine)
    state = MemoryState()
    worst = 0
    depths: object = None
    reads = 0
    counted = world.in_flight

    def in_flight(queue_url: str) -> int:
        nonlocal reads
        reads += 1
        return counted(queue_url)

    world.in_flight = in_flight  # type: ignore[method-assign]
    for _ in range(240):
        lock = PollerLock(state, seconds=30, window=settings().sqs_lag_seconds, clock=clock)
        assert lock.acquire()
        poller = Poller(
            settings(),
            engine,
            world,
            clock=clock,
            wall=clock,
            sleep=lambda s: None,
            lock=lock,
            store=world if store else None,  # type: ignore[arg-type]
        )
        if relay:
            poller.inherit_depths(depths)
        poller.run(deadline=clock.now + 10)
        depths = poller.depths_for_relay()
        lock.release()
        worst = max(worst, world.leased())
        clock.now += 1.0
        world.run_handlers()
        worst = max(worst, world.leased())
    assert worst <= MAX, f"{worst} jobs leased at once against MaxInFlight {MAX}"
    done = sum(1 for job in engine.jobs.values() if job.state == "completed")
    if store:
        assert done == 60, "the exact records keep the route at its rate: every job done"
    else:
        assert done < 60, "SQS's count alone (a minute behind) holds each job's slot for the lag"
    if relay:
        # 25 here, against 97 when each invocation starts without counts (the "records" case).
        assert reads <= done / 2, f"{reads} depth reads for {done} jobs: read only when the tracked jobs leave no room"


def test_a_job_whose_record_never_turns_final_stops_holding_a_slot_after_the_lag_window() -> None:
    """A delivery given back without a record (a claim released, left to the engine) leaves a
    tracked job whose record never turns final: it bounds the route only through the lag window,
    after which SQS's settled count (its message gone: 0) decides, not for the whole tracking horizon."""
    from workerless._poller import bookkeeping
    from workerless._poller.poller_lock import Dispatches

    class NoRecords:
        def get_many(self, keys: list[str]) -> dict[str, JobRecord]:
            return {}

    dispatches = Dispatches(LAG)
    now = 1_000_000.0
    dispatches.track("charge-payment", "fake#job-1#r3", at=now - 120)
    dispatches.track("charge-payment", "fake#job-2#r3", at=now - 10)
    bound = bookkeeping.tracked(NoRecords(), dispatches, "charge-payment", now, 3660.0, 0, now, refresh=True)  # type: ignore[arg-type]
    assert bound == 1, "the job sent 10 s ago still counts; the one sent 120 s ago is SQS's to count"
    assert dispatches.live("charge-payment") == ["fake#job-1#r3", "fake#job-2#r3"], "both still tracked"
