"""An idle tick reads no queue depth: a route whose queue was read empty, with nothing sent to it
since, is known empty (workerless._poller.poller.Poller._depth, the mark in the lock's dispatch record,
workerless._poller.poller_lock.Dispatches). It is read again after EMPTY_RECHECK_SECONDS, after any send to
it, and whenever the engine hands out one of its jobs; a 0 read within the lag window of a send marks
nothing. Every tick here is a fresh invocation: a fresh Poller taking the lock from the shared state."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from workerless._core.settings import Settings
from workerless._poller import sendlog
from workerless._poller.intent import IntentLog
from workerless._poller.poller import EMPTY_RECHECK_SECONDS, Poller
from workerless._poller.poller_lock import Dispatches, PollerLock
from workerless.engines.base import MemoryState
from workerless.testing import FakeEngine

ROUTES = [
    {"type": "charge-payment", "queue": "q-charge", "max": 10},
    {"type": "send-receipt", "queue": "q-receipt", "max": 10},
]


class Queues:
    """SQS with what each queue holds set by the test; counts the depth reads per queue."""

    def __init__(self) -> None:
        self.holding: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()

    def in_flight(self, queue_url: str) -> int:
        self.reads[queue_url] += 1
        return self.holding[queue_url]

    def send_batch(self, queue_url: str, bodies: list[str]) -> list[Any]:
        self.holding[queue_url] += len(bodies)
        return []

    def send(self, queue_url: str, body: Any, *, delay_seconds: int = 0) -> None:
        return None


class World:
    """One deployment: the shared lock state, the queues, the engine, a wall clock the test moves."""

    def __init__(self) -> None:
        self.state, self.queues, self.engine = MemoryState(), Queues(), FakeEngine()
        self.now = 1_000_000.0
        self.settings = Settings.from_env(
            {"WORKERLESS_ROUTES": json.dumps(ROUTES), "WORKERLESS_HEARTBEAT_QUEUE_URL": "hb"}
        )

    def tick(self, after: float = 20.0) -> Any:
        """``after`` seconds later, one poller invocation: take the lock, run, release."""
        self.now += after
        lock = PollerLock(self.state, seconds=30, window=2, keep_seconds=2, clock=lambda: self.now)
        assert lock.acquire()
        poller = Poller(
            self.settings,
            self.engine,
            self.queues,
            clock=lambda: self.now,
            wall=lambda: self.now,
            lock=lock,
            intents=IntentLog(lock, lease_seconds=60),
        )
        poller.sleep = lambda seconds: None
        report = poller.run(deadline=self.now + 60)
        lock.release()
        return report

    def reads(self) -> dict[str, int]:
        reads = dict(self.queues.reads)
        self.queues.reads.clear()
        return reads


def test_after_one_empty_read_an_idle_tick_reads_no_queue_until_the_recheck() -> None:
    world = World()
    world.tick()
    assert world.reads() == {"q-charge": 1, "q-receipt": 1}
    ticks = int(EMPTY_RECHECK_SECONDS // 20) - 1
    for _ in range(ticks):
        report = world.tick()
        assert report.polls == 1, "the engine is still polled every tick"
    assert world.reads() == {}, "an idle tick read a queue known empty"
    world.tick(after=EMPTY_RECHECK_SECONDS)
    assert world.reads() == {"q-charge": 1, "q-receipt": 1}, "read again after the recheck"


def test_a_route_that_got_jobs_is_read_again_and_its_holding_counted() -> None:
    """GIVEN both routes known empty WHEN the engine hands out 10 charge-payment jobs (the route's
    MaxInFlight) and they sit in its queue THEN the next tick reads that route (its count is 10:
    nothing more is leased for it), and not the other."""
    world = World()
    world.tick()
    world.reads()
    for n in range(25):
        world.engine.add_job("charge-payment", {"n": n})
    report = world.tick()
    assert report.dispatched == 10
    assert world.reads() == {}, "the dispatching tick read nothing: both were known empty"
    report = world.tick()
    assert world.reads() == {"q-charge": 1}
    assert report.activated == 0, "the route was full: nothing more leased"
    world.queues.holding["q-charge"] = 0  # the handlers finished them
    report = world.tick()
    assert report.dispatched == 10 and world.reads() == {"q-charge": 1}


def test_a_zero_read_within_the_lag_window_of_a_send_marks_nothing() -> None:
    """SQS's count can lag a send: a 0 read then says nothing (the poller counts the send itself)."""
    dispatches = Dispatches(2.0)
    dispatches.add("charge-payment", 1, at=100.0)
    assert dispatches.empty_since("charge-payment") is None
    world = World()
    world.tick()
    lock = PollerLock(world.state, seconds=30, window=2, clock=lambda: world.now)
    assert lock.acquire()
    lock.dispatches.add("charge-payment", 1, at=world.now)  # sent just now: SQS may not count it yet
    poller = Poller(
        world.settings, world.engine, world.queues, clock=lambda: world.now, wall=lambda: world.now, lock=lock
    )
    world.reads()
    poller.demands()
    assert world.reads() == {"q-charge": 1}, "a route with a send since its mark is read"
    assert lock.dispatches.empty_since("charge-payment") is None, "a 0 read just after a send marked it empty"
    assert lock.dispatches.empty_since("send-receipt") is not None


def test_the_mark_travels_in_the_record_and_a_later_send_in_it_drops_it() -> None:
    """The mark is a 0-job bucket in the lock item's record: read back, it holds; a record with a
    send in or after the mark's second (written by a poller that sent after reading) drops it."""
    dispatches = Dispatches(2.0)
    dispatches.note_empty("charge-payment", at=100.7)
    assert Dispatches(2.0, dispatches.to_dict()).empty_since("charge-payment") == 100
    assert Dispatches(2.0, {"charge-payment": [[100, 0], [101, 3]]}).empty_since("charge-payment") is None
    dispatches.add("charge-payment", 2, at=150.0)
    assert dispatches.empty_since("charge-payment") is None
    assert [n for _, n in sendlog.entries(dispatches.to_dict()["charge-payment"])] == [2]


def test_jobs_handed_out_drop_the_mark_before_the_intent_write() -> None:
    """GIVEN a route known empty WHEN the engine hands out one of its jobs THEN the lock item written
    with the intent batch (before the send) no longer marks it empty: a poller that dies before the
    send leaves no mark on a queue that may hold the job."""
    world = World()
    world.tick()
    world.engine.add_job("charge-payment", {"n": 1})
    written: list[dict[str, Any]] = []
    put = world.state.put

    def spy(key: str, value: dict[str, Any], *, expected_version: int | None) -> bool:
        written.append(json.loads(json.dumps(value)))
        return put(key, value, expected_version=expected_version)

    world.state.put = spy  # type: ignore[method-assign]
    world.tick()
    with_batch = [v for v in written if v.get("batches")]
    assert with_batch, "no intent write"
    assert 0 not in [n for _, n in sendlog.entries(with_batch[0]["sent"].get("charge-payment"))]
