"""The poller lock: one poller at a time, taken over when its holder dies, and the recent dispatches
it hands from one invocation to the next so that MaxInFlight does not rest on SQS's lagging counts.

Pure: the real PollerLock and Poller over an in-memory shared state that counts its reads and
writes (each is one DynamoDB call in AWS), with injected clocks.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from workerless._core.settings import Settings
from workerless._poller.poller import Poller
from workerless._poller.poller_lock import LOCK_KEY, Dispatches, PollerLock
from workerless.engines.base import MemoryState
from workerless.testing import FakeEngine

from tests.fakes import Clock
from tests.unit.counting import CountingState

LOCK_SECONDS = 30.0
WINDOW = 2.0


def lock(state: Any, clock: Clock) -> PollerLock:
    return PollerLock(state, seconds=LOCK_SECONDS, window=WINDOW, clock=clock)


def test_one_holder_at_a_time_and_a_held_lock_costs_one_read() -> None:
    state, clock = CountingState(), Clock()
    first, second = lock(state, clock), lock(state, clock)

    assert first.acquire()
    assert (state.reads, state.writes) == (1, 1), "one read and one conditional write to take"
    before = (state.reads, state.writes)
    assert not second.acquire()
    assert (state.reads - before[0], state.writes - before[1]) == (1, 0), "held: one read, no write"
    assert second.held_by is not None and second.held_by[0] == first.owner

    first.release()
    assert state.writes == 2, "one write to release"
    assert second.acquire()


def test_a_dead_holders_lock_is_taken_over_at_its_expiry_and_the_old_holder_then_stops() -> None:
    state, clock = MemoryState(), Clock()
    dead, taker = lock(state, clock), lock(state, clock)
    assert dead.acquire()

    clock.now += LOCK_SECONDS - 0.1
    assert not taker.acquire(), "not before the expiry"
    clock.now += 0.2
    assert taker.acquire(), "the holder never released it: taken over once it expired"

    # The old holder wakes up: its renewal is refused (the version moved on), its release frees nothing.
    assert not dead.keep()
    dead.release()
    current = state.get(LOCK_KEY)
    assert current is not None and current["holder"] == taker.owner


def test_renewal_writes_only_when_half_the_lock_time_is_gone() -> None:
    state, clock = CountingState(), Clock()
    holder = lock(state, clock)
    assert holder.acquire()
    writes = state.writes

    for _ in range(14):  # a cycle a second for 14 s: no renewal due yet
        clock.now += 1.0
        assert holder.keep()
    assert state.writes == writes, "no write per cycle"

    clock.now += 1.5
    assert holder.keep()
    assert state.writes == writes + 1, "one renewal once less than half is left"
    clock.now += LOCK_SECONDS - 1.0
    other = lock(state, clock)
    assert not other.acquire(), "renewed: the lock now runs from the renewal"


def test_a_write_whose_answer_was_lost_is_recognised_as_ours() -> None:
    """botocore retries a PutItem whose answer was lost; the retry meets the version our first try
    wrote and fails the condition. The lock reads the item back and sees its own write."""

    class LostAnswers(MemoryState):
        def put(self, key: str, value: dict[str, Any], *, expected_version: int | None) -> bool:
            super().put(key, value, expected_version=expected_version)
            return False

    state, clock = LostAnswers(), Clock()
    holder = lock(state, clock)

    assert holder.acquire()
    clock.now += LOCK_SECONDS
    assert holder.keep()
    holder.release()
    current = state.get(LOCK_KEY)
    assert current is not None and current["holder"] is None


def test_a_failed_renewal_stops_polling() -> None:
    class Failing(MemoryState):
        fail = False

        def put(self, key: str, value: dict[str, Any], *, expected_version: int | None) -> bool:
            if self.fail:
                raise RuntimeError("DynamoDB unavailable")
            return super().put(key, value, expected_version=expected_version)

    state, clock = Failing(), Clock()
    holder = lock(state, clock)
    assert holder.acquire()
    state.fail = True
    clock.now += LOCK_SECONDS
    assert not holder.keep()
    holder.release()  # never raises: the lock frees itself at its expiry


def test_dispatches_count_sends_inside_the_window_and_forget_the_rest() -> None:
    sent = Dispatches(2.0)
    sent.add("charge", 3, at=100.2)
    sent.add("charge", 2, at=100.9)
    sent.add("charge", 4, at=103.5)
    sent.add("receipt", 0, at=100.0)

    assert sent.since("charge", 100.5) == 9, "a send counts from the end of its second: never shorter"
    assert sent.since("charge", 101.0) == 4
    assert sent.since("receipt", 0.0) == 0

    sent.prune(104.0)
    assert sent.to_dict() == {"charge": "104,0x4", "#since": 0.0, "#live": {}}
    again = Dispatches(2.0, json.loads(json.dumps(sent.to_dict())))
    assert again.since("charge", 103.0) == 4
    assert Dispatches(2.0, {"charge": [["x", 1], [5], "bad"], "other": "bad"}).to_dict() == {}


# -- the poller ------------------------------------------------------------------------------------


class LaggingQueues:
    """SQS whose approximate counts have not caught up with a single send (they read 0)."""

    def __init__(self) -> None:
        self.sent = 0

    def in_flight(self, queue_url: str) -> int:
        return 0

    def send_batch(self, queue_url: str, bodies: list[str]) -> list[Any]:
        self.sent += len(bodies)
        return []

    def send(self, queue_url: str, body: Any, *, delay_seconds: int = 0) -> None:
        return None


def settings() -> Settings:
    routes = [{"type": "charge-payment", "queue": "q", "max": 10}]
    return Settings.from_env(
        {
            "WORKERLESS_ROUTES": json.dumps(routes),
            "WORKERLESS_POLL_BUDGET_SECONDS": "0",
            "WORKERLESS_HEARTBEAT_QUEUE_URL": "hb",
            "WORKERLESS_SQS_LAG_SECONDS": str(WINDOW),
        }
    )


def invocation(state: Any, clock: Clock, engine: FakeEngine, queues: LaggingQueues) -> int:
    """One poller invocation as the entry point runs it: take the lock, poll, release."""
    held = lock(state, clock)
    assert held.acquire()
    try:
        report = Poller(settings(), engine, queues, clock=clock, wall=clock, sleep=lambda s: None, lock=held).run(
            deadline=clock.now + 60
        )
    finally:
        held.release()
    return report.dispatched


def test_the_next_invocation_counts_what_the_last_one_sent_while_sqs_lags() -> None:
    """GIVEN a route of MaxInFlight 10, 30 jobs waiting, and SQS counts that lag every send
    WHEN one invocation fills the route and another polls a second later
    THEN the second takes nothing (the lock handed it the first one's sends), and only once the
    sends are older than WORKERLESS_SQS_LAG_SECONDS does SQS's count alone decide."""
    engine, queues, state, clock = FakeEngine(), LaggingQueues(), MemoryState(), Clock()
    for n in range(30):
        engine.add_job("charge-payment", {"n": n})

    assert invocation(state, clock, engine, queues) == 10
    clock.now += 1.0
    assert invocation(state, clock, engine, queues) == 0, "SQS reads 0, but 10 were sent a second ago"
    clock.now += WINDOW + 1.0
    assert invocation(state, clock, engine, queues) == 10


def test_sends_after_a_cached_count_and_shortly_before_it_are_both_counted() -> None:
    """Within one invocation the SQS count is re-read at most every 2 s: jobs sent after the read,
    and jobs sent in the lag before it, are counted on top of it."""
    engine, clock = FakeEngine(), Clock()
    sent = Dispatches(WINDOW)
    sent.add("charge-payment", 4, at=clock.now - 1.0)  # SQS may not count these yet

    class Queues(LaggingQueues):
        def in_flight(self, queue_url: str) -> int:
            return 3  # older jobs SQS does count

    held = lock(MemoryState(), clock)
    assert held.acquire()
    held.dispatches = sent
    poller = Poller(settings(), engine, Queues(), clock=clock, wall=clock, sleep=lambda s: None, lock=held)

    assert [d.capacity for d in poller.demands()] == [3]
    poller.dispatches.add("charge-payment", 2, at=clock.now)
    clock.now += 1.0
    assert [d.capacity for d in poller.demands()] == [1], "the cached count plus everything sent since"


def test_a_poller_whose_lock_is_taken_over_stops_and_hands_back_what_it_activated() -> None:
    engine, clock, state = FakeEngine(), Clock(), MemoryState()
    for n in range(3):
        engine.add_job("charge-payment", {"n": n})
    held = lock(state, clock)
    assert held.acquire()

    class SlowEngine:
        """The engine answers after the lock expired, and another invocation took it meanwhile."""

        def activate(self, demands: Any, lease_seconds: int) -> Any:
            clock.now += LOCK_SECONDS + 1
            assert lock(state, clock).acquire()
            return engine.activate(demands, lease_seconds)

        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

    queues = LaggingQueues()
    report = Poller(settings(), SlowEngine(), queues, clock=clock, wall=clock, sleep=lambda s: None, lock=held).run(
        deadline=clock.now + 60
    )

    assert report.lock_lost == 1
    assert report.released == 3 and queues.sent == 0
    assert sum(1 for job in engine.jobs.values() if job.state == "leased") == 0


@pytest.mark.parametrize("seconds", ["12", "19"])
def test_a_lock_shorter_than_two_engine_timeouts_is_refused(seconds: str) -> None:
    from workerless.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="WORKERLESS_POLLER_LOCK_SECONDS"):
        Settings.from_env({"WORKERLESS_POLLER_LOCK_SECONDS": seconds})


def test_a_relay_hands_the_lock_on_with_one_write_and_no_read() -> None:
    """GIVEN a holder that relays to a fresh invocation WHEN the relayed invocation inherits the
    lock THEN it costs one conditional write (no read, no release write), it is the only holder, and
    it counts what the relaying one sent."""
    state, clock = CountingState(), Clock()
    first = lock(state, clock)
    assert first.acquire()
    first.dispatches.add("charge-payment", 3, at=clock.now)
    token = first.handover()
    assert token is not None
    first.handed_over()
    assert not first.held
    before = (state.reads, state.writes)

    clock.now += 1.0
    second = lock(state, clock)
    assert second.inherit(json.loads(json.dumps(token)))  # through an SQS message body
    assert (state.reads - before[0], state.writes - before[1]) == (0, 1)
    assert second.dispatches.since("charge-payment", clock.now - 5) == 3
    assert not lock(state, clock).acquire(), "held by the relayed invocation"


def test_a_duplicate_relay_or_a_late_one_does_not_make_a_second_holder() -> None:
    """GIVEN a relay delivered twice (SQS is at-least-once), or arriving after the lock expired and
    was taken THEN the version it carries is stale: the second inheritor falls back to taking the
    lock, finds it held, and does not poll."""
    state, clock = CountingState(), Clock()
    first = lock(state, clock)
    assert first.acquire()
    token = first.handover()
    assert token is not None
    first.handed_over()
    winner, duplicate = lock(state, clock), lock(state, clock)
    assert winner.inherit(token)
    assert not duplicate.inherit(token)
    assert winner.keep()

    late_token = winner.handover()
    assert late_token is not None
    winner.handed_over()
    clock.now += LOCK_SECONDS + 1  # the relay never arrived in time; another invocation takes the lock
    taker = lock(state, clock)
    assert taker.acquire()
    assert not lock(state, clock).inherit(late_token)


def test_a_relay_from_a_poller_before_the_intent_batches_is_taken_over_the_same_way() -> None:
    """A relay sent by a poller of the previous release (its token has only the version and the
    sends; its lock item holds no batch) is taken over with one write and no read, as before, not
    left to wait out the lock (a deploy while work flows)."""
    state, clock = CountingState(), Clock()
    first = lock(state, clock)
    assert first.acquire()
    token = first.handover()
    assert token is not None
    first.handed_over()
    old_token = {"version": token["version"], "sent": token["sent"]}
    before = (state.reads, state.writes)

    second = lock(state, clock)
    assert second.inherit(old_token)
    assert (state.reads - before[0], state.writes - before[1]) == (0, 1)
    assert not lock(state, clock).inherit(old_token), "a duplicate of it still finds the version moved"


class RecovererWritesAfterRead(MemoryState):
    """A shared state where, right after each of the next ``armed`` reads, an invocation that found
    the lock held writes the item (a stale batch taken or finished: holder, expiry and sends left
    as they were), as it can between a relayed invocation's read and its write."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = 0

    def get(self, key: str) -> dict[str, Any] | None:
        item = super().get(key)
        if self.armed and item is not None:
            self.armed -= 1
            value = {k: v for k, v in item.items() if k != "version"}
            assert self.put(key, value, expected_version=int(item["version"]))
        return item


def test_a_relay_whose_takeover_meets_a_recoverers_write_still_takes_the_lock() -> None:
    """GIVEN a holder that relays with a batch still open in the item WHEN an invocation that found
    the lock held writes the item between the relayed invocation's read and its write (it took the
    stale batch) THEN the relayed invocation reads again and takes the lock over: it does not end
    with the lock held by nobody, which stopped every poll until the lock's expiry (seen under CPU
    load: 18 jobs left at 'ready' while the run went idle)."""
    state, clock = RecovererWritesAfterRead(), Clock()
    first = lock(state, clock)
    assert first.acquire()
    assert first.update_batches(lambda batches: [{"id": "b1", "phase": "dispatched", "at": clock.now, "jobs": []}])
    token = first.handover()
    assert token is not None and token["open"] == ["b1"]
    first.handed_over()

    state.armed = 1
    relayed = lock(state, clock)
    assert relayed.inherit(json.loads(json.dumps(token))), "the relay lost the lock to a recoverer's write"
    assert relayed.held
    assert [b["id"] for b in relayed.orphans] == ["b1"], "the open batch is the relayed invocation's to finish"
    assert not lock(state, clock).acquire(), "held by the relayed invocation"
    relayed.release()
    assert lock(state, clock).acquire(), "and released by it"
