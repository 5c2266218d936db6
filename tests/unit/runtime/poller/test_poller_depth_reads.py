"""Issue 29: a route's SQS count (GetQueueAttributes) is read only when the jobs the poller itself
tracks leave no room under its MaxInFlight, and at least every 5 minutes otherwise
(workerless._poller.bookkeeping.depth_due). The tracked jobs are an upper bound on what the route
holds once every job of the tracking horizon is in them; their records are re-read (a
BatchGetItem, cheaper than the SQS call, and what keeps the lock's item small) every
DEPTH_REFRESH_SECONDS as before. Without a store, or before tracking is complete, the count is read
every DEPTH_REFRESH_SECONDS as before. One Poller (a relay chain's counts are its own), a virtual
clock."""

from __future__ import annotations

import json
from collections import Counter

from workerless._core.record import JobRecord, Status
from workerless._core.settings import Settings
from workerless._poller.bookkeeping import DEPTH_MAX_AGE_SECONDS
from workerless._poller.poller import DEPTH_REFRESH_SECONDS, Poller
from workerless.testing import FakeEngine

from tests.fakes import Clock

MAX = 3
ROUTE = "charge-payment"


class Queues:
    """SQS as the poller reads it: a count set by the test; every read counted."""

    def __init__(self) -> None:
        self.holding = 0
        self.reads: Counter[str] = Counter()

    def in_flight(self, queue_url: str) -> int:
        self.reads[queue_url] += 1
        return self.holding


class Records:
    """The job records: final once the test says so; every BatchGetItem counted."""

    def __init__(self) -> None:
        self.final: set[str] = set()
        self.reads = 0

    def get_many(self, keys: list[str]) -> dict[str, JobRecord]:
        self.reads += 1
        return {k: JobRecord(k, Status.REPORTED if k in self.final else Status.CLAIMED) for k in keys}


def poller(clock: Clock, queues: Queues, records: Records | None) -> Poller:
    settings = Settings.from_env(
        {
            "WORKERLESS_ROUTES": json.dumps([{"type": ROUTE, "queue": "q", "max": MAX}]),
            "WORKERLESS_HEARTBEAT_QUEUE_URL": "hb",
        }
    )
    return Poller(settings, FakeEngine(), queues, clock=clock, wall=clock, store=records)  # type: ignore[arg-type]


def room(p: Poller) -> int:
    (demand,) = p.demands()
    return demand.capacity


def dispatch(p: Poller, clock: Clock, queues: Queues, keys: list[str]) -> None:
    """What a dispatching cycle records: each job tracked, the send logged, the queue holding it."""
    for key in keys:
        p.dispatches.track(ROUTE, key, at=clock.now)
    p.dispatches.add(ROUTE, len(keys), at=clock.now)
    queues.holding += len(keys)


def test_while_the_tracked_jobs_leave_room_the_count_is_read_only_every_five_minutes() -> None:
    """GIVEN one read, then two jobs dispatched (one slot left) WHEN the poller asks for room every
    5 s for just under 5 minutes THEN SQS is not read again and the room is MaxInFlight less the two
    tracked jobs (their records re-read each time, still running); once one is final its slot comes
    back without an SQS read; at 5 minutes SQS is read again."""
    clock, queues, records = Clock(), Queues(), Records()
    p = poller(clock, queues, records)
    start = clock.now
    assert room(p) == MAX and queues.reads["q"] == 1
    dispatch(p, clock, queues, ["fake#a#1", "fake#b#1"])
    asked = 0
    while clock.now + 5 < start + DEPTH_MAX_AGE_SECONDS - 60:
        clock.now += 5
        asked += 1
        assert room(p) == MAX - 2, "the two tracked jobs hold their slots (their records still running)"
    assert records.reads == asked, "the records are re-read each time (every DEPTH_REFRESH_SECONDS at most)"
    records.final.add("fake#a#1")
    while clock.now + 5 < start + DEPTH_MAX_AGE_SECONDS:
        clock.now += 5
        assert room(p) == MAX - 1, "one record final: its slot back, and it leaves the lock's item"
    assert p.dispatches.live(ROUTE) == ["fake#b#1"]
    assert queues.reads["q"] == 1, "no GetQueueAttributes while the tracked jobs leave room"
    clock.now = start + DEPTH_MAX_AGE_SECONDS
    assert room(p) == MAX - 1
    assert queues.reads["q"] == 2, "read again at 5 minutes all the same"


def test_when_the_tracked_jobs_leave_no_room_the_count_and_records_are_read() -> None:
    """GIVEN MaxInFlight jobs dispatched WHEN the poller asks again within DEPTH_REFRESH_SECONDS THEN
    nothing is read (no room); once older, the records are re-read and a job whose record turned
    final gives its slot back without an SQS read; when the tracked jobs fill the route again, SQS
    is read."""
    clock, queues, records = Clock(), Queues(), Records()
    p = poller(clock, queues, records)
    assert room(p) == MAX
    dispatch(p, clock, queues, ["fake#a#1", "fake#b#1", "fake#c#1"])
    clock.now += DEPTH_REFRESH_SECONDS / 2
    assert room(p) == 0 and queues.reads["q"] == 1
    records.final.add("fake#a#1")
    queues.holding = 2
    clock.now += DEPTH_REFRESH_SECONDS
    assert room(p) == 1, "one record final: one slot back"
    assert queues.reads["q"] == 1, "the records re-read gave room: SQS not read"
    records.reads = 0
    clock.now += DEPTH_REFRESH_SECONDS
    assert room(p) == 1 and queues.reads["q"] == 1
    dispatch(p, clock, queues, ["fake#d#1"])
    clock.now += DEPTH_REFRESH_SECONDS
    assert room(p) == 0
    assert queues.reads["q"] == 2, "the tracked jobs leave no room: SQS read"
    assert sorted(p.dispatches.live(ROUTE)) == ["fake#b#1", "fake#c#1", "fake#d#1"]


def test_a_count_not_read_again_is_not_added_to_sends_the_log_no_longer_holds() -> None:
    """GIVEN a count of 1 read 4 minutes ago (the lock keeps sends only for the lag window plus
    DEPTH_REFRESH_SECONDS) and two jobs tracked since WHEN the room is asked THEN it is MaxInFlight
    less the two tracked jobs: the stale count plus the sends still logged (none) would under-count
    the jobs sent in between, so only the tracked bounds are used."""
    clock, queues, records = Clock(), Queues(), Records()
    p = poller(clock, queues, records)
    queues.holding = 1  # not known empty: its count is not skipped for that reason
    assert room(p) == MAX
    clock.now += 10
    dispatch(p, clock, queues, ["fake#a#1", "fake#b#1"])
    clock.now += 230
    p.dispatches.prune(clock.now)  # what the lock's writes do: the sends of 230 s ago are gone
    assert p.dispatches.since(ROUTE, clock.now - 300) == 0
    assert room(p) == MAX - 2, "the two tracked jobs hold their slots (the stale count + logged sends: 1)"
    assert queues.reads["q"] == 1


def test_without_job_records_the_count_is_read_whenever_it_is_older_than_the_refresh() -> None:
    """GIVEN no job store (nothing tracked can be trusted) WHEN the poller asks every
    DEPTH_REFRESH_SECONDS THEN SQS is read every time, as before."""
    clock, queues = Clock(), Queues()
    queues.holding = 1  # not known empty (a queue read empty is not read again: test_poller_empty_routes)
    p = poller(clock, queues, None)
    for _ in range(5):
        room(p)
        clock.now += DEPTH_REFRESH_SECONDS
    assert queues.reads["q"] == 5


def test_until_tracking_is_complete_the_count_is_read_whenever_it_is_older_than_the_refresh() -> None:
    """GIVEN a lock item written by a poller that predates the tracking (since when every job is
    tracked: unknown) WHEN the poller asks every DEPTH_REFRESH_SECONDS THEN SQS is read every time:
    jobs it activated are in no list."""
    clock, queues, records = Clock(), Queues(), Records()
    queues.holding = 1
    p = poller(clock, queues, records)
    p.dispatches.tracking_since = None
    for _ in range(3):
        room(p)
        clock.now += DEPTH_REFRESH_SECONDS
    assert queues.reads["q"] == 3


def test_a_relayed_invocation_keeps_the_count_it_was_handed() -> None:
    """GIVEN an invocation that read the count and relayed WHEN the next one (handed the counts)
    asks for room with tracked jobs leaving room THEN it reads nothing."""
    clock, queues, records = Clock(), Queues(), Records()
    first = poller(clock, queues, records)
    assert room(first) == MAX
    clock.now += 30
    second = poller(clock, queues, records)
    second.inherit_depths(first.depths_for_relay())
    assert room(second) == MAX
    assert queues.reads["q"] == 1
