"""The poller's intent log: a poller that dies mid-cycle does not cost its jobs a lease, a second run
or a lost heartbeat, at whichever step it dies.

Pure: the real Poller, PollerLock and IntentLog over an in-memory shared state that counts its reads
and writes (each a DynamoDB call in AWS), the in-memory FakeEngine, a virtual wall clock, and a
fake SQS whose sends can "kill the process" (a BaseException, as the chaos suite's SimulatedCrash).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from workerless._core.model import Demand
from workerless._core.settings import Settings
from workerless._heartbeat.ticket import Ticket
from workerless._poller.intent import IntentLog, decode_batch, stale_after
from workerless._poller.poller import Poller, PollReport
from workerless._poller.poller_lock import LOCK_KEY, PollerLock
from workerless.engines.base import MemoryState
from workerless.testing import FakeEngine
from workerless_devkit.chaos.plan import SimulatedCrash

from tests.fakes import Clock
from tests.unit.counting import CountingState

ROUTES = json.dumps([{"type": "charge-payment", "queue": "q-charge", "max": 5}])
LOCK_SECONDS = 30.0
STALE = stale_after(60)


class Queues:
    """SQS as the poller sees it. ``die_on`` kills the process once: "batch" at SendMessageBatch
    (after activation, nothing queued), "ticket" at the ticket's send (queued, no ticket),
    "after-ticket" right after the ticket was sent (queued and ticketed, nothing written since)."""

    def __init__(self, die_on: str | None = None, *, refuse_tickets: bool = False) -> None:
        self.die_on = die_on
        self.refuse_tickets = refuse_tickets
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
        if self.refuse_tickets:
            raise RuntimeError("SQS throttled the ticket")
        self.tickets.append(Ticket.from_json(body))
        if self.die_on == "after-ticket":
            self.die_on = None
            raise SimulatedCrash("poller died after the ticket")

    def queued_ids(self) -> list[str]:
        return [json.loads(body)["ref"]["job_id"] for body in self.jobs]

    def ticketed_ids(self) -> list[str]:
        return [e.ref.job_id for t in self.tickets for e in t.entries]


def settings() -> Settings:
    return Settings.from_env(
        {
            "WORKERLESS_ROUTES": ROUTES,
            "WORKERLESS_HEARTBEAT_QUEUE_URL": "q-heartbeat",
            "WORKERLESS_POLL_BUDGET_SECONDS": "0",
            "WORKERLESS_LEASE_SECONDS": "60",
        }
    )


class World:
    def __init__(self, jobs: int = 3) -> None:
        self.clock = Clock()
        self.engine = FakeEngine(clock=self.clock)
        for n in range(jobs):
            self.engine.add_job("charge-payment", {"n": n})
        self.state = CountingState()

    def lock(self) -> PollerLock:
        return PollerLock(self.state, seconds=LOCK_SECONDS, window=2, clock=self.clock)

    def poller(self, queues: Queues, lock: PollerLock) -> Poller:
        log = IntentLog(lock, lease_seconds=60, clock=self.clock)
        return Poller(settings(), self.engine, queues, sleep=lambda s: None, intents=log, lock=lock, wall=self.clock)

    def invoke(self, queues: Queues, token: dict[str, Any] | None = None) -> tuple[Any, PollerLock]:
        """One poller invocation as the entry point runs it: take (or inherit) the lock, poll, and
        release it, or, when the lock is held, only finish a dead poller's batches."""
        lock = self.lock()
        if not (lock.inherit(token) if token is not None else lock.acquire()):
            return self.poller(queues, lock).recover(deadline=1e12), lock
        report = self.poller(queues, lock).run(deadline=1e12)
        lock.release()
        return report, lock

    def die(self, where: str) -> Queues:
        """A poller that takes the lock, activates the three jobs and dies at ``where``."""
        dying = Queues(die_on=where)
        with pytest.raises(SimulatedCrash):
            self.invoke(dying)
        return dying

    def item(self) -> dict[str, Any]:
        item = MemoryState.get(self.state, LOCK_KEY)
        assert item is not None
        return item


# How the next invocation comes to finish a dead poller's batch: it finds the lock still held (a
# tick after the stale window, seconds) or takes it once the dead holder's lock expired.
NEXT = {"lock held": STALE, "lock expired": LOCK_SECONDS + 0.1}


@pytest.mark.parametrize("path", NEXT)
def test_a_poller_dying_after_activation_has_its_jobs_handed_back(path: str) -> None:
    """GIVEN a poller that activated three jobs, wrote them down and died before SendMessageBatch
    WHEN the next invocation runs THEN it hands the three jobs straight back to the engine (seconds,
    not a lease) and queues none of the dead poller's; no ticket names them."""
    world = World()
    world.die("batch")
    assert {j.state for j in world.engine.jobs.values()} == {"leased"}
    assert [b["phase"] for b in world.item()["batches"]] == ["activated"]

    world.clock.now += NEXT[path]
    queues = Queues()
    report, _ = world.invoke(queues)

    assert sorted(world.engine.releases) == sorted(world.engine.jobs), "every job was handed back"
    assert report.released == 3
    assert not world.item().get("batches")
    if path == "lock held":
        assert queues.jobs == [] and queues.tickets == []
        assert world.item()["holder"] is not None, "the dead holder's lock itself waits for its expiry"
    else:
        # Handed back, then taken again (a new attempt) and queued and ticketed in the same invocation.
        assert len(queues.jobs) == 3 and len(queues.ticketed_ids()) == 3
        assert all(j.retries == 3 for j in world.engine.jobs.values()), "a hand-back spends no retry"


@pytest.mark.parametrize("path", NEXT)
def test_a_poller_dying_after_send_message_batch_has_its_ticket_sent_by_the_next(path: str) -> None:
    """GIVEN a poller that queued three jobs and died before their heartbeat ticket
    WHEN the next invocation runs THEN it sends their ticket and hands nothing back: the queued jobs
    run once, with their leases extended."""
    world = World()
    dying = world.die("ticket")
    assert len(dying.jobs) == 3 and dying.tickets == []
    assert [b["phase"] for b in world.item()["batches"]] == ["dispatched"]

    world.clock.now += NEXT[path]
    queues = Queues()
    world.invoke(queues)

    assert world.engine.releases == {}, "queued jobs are not handed back (that would run them twice)"
    assert sorted(queues.ticketed_ids()) == sorted(world.engine.jobs)
    assert queues.jobs == [], "nor queued again"
    assert not world.item().get("batches")


@pytest.mark.parametrize("path", NEXT)
def test_a_poller_dying_after_its_ticket_costs_a_second_ticket_not_a_job(path: str) -> None:
    """GIVEN a poller that queued three jobs, sent their ticket and died before writing the item
    again (the batch is finished, but only in memory) THEN the next invocation sends their ticket a
    second time (the price of not writing the close: a second heartbeat chain while they run), and
    never hands them back or queues them again."""
    world = World()
    dying = world.die("after-ticket")
    assert sorted(dying.ticketed_ids()) == sorted(world.engine.jobs)

    world.clock.now += NEXT[path]
    queues = Queues()
    world.invoke(queues)

    assert world.engine.releases == {}
    assert queues.jobs == []
    assert sorted(queues.ticketed_ids()) == sorted(world.engine.jobs)
    assert not world.item().get("batches")


@pytest.mark.parametrize("path", NEXT)
def test_a_recoverer_dying_while_it_finishes_a_batch_leaves_it_to_the_next(path: str) -> None:
    """GIVEN a poller that died before its ticket, and a recoverer that took its batch and died
    sending that ticket THEN the batch is still in the item (taken batches leave it only once
    finished), and the next invocation past the stale window sends the ticket."""
    world = World()
    world.die("ticket")
    world.clock.now += NEXT[path]
    world.die("ticket")
    assert [b["phase"] for b in world.item()["batches"]] == ["dispatched"]

    world.clock.now += NEXT[path]
    queues = Queues()
    world.invoke(queues)
    # Recovery's ticket comes first (on the lock-expired path the leases have lapsed by now, 62 s
    # in, and the engine hands the jobs out again: the same invocation queues those new attempts).
    assert sorted(e.ref.job_id for e in queues.tickets[0].entries) == sorted(world.engine.jobs)
    assert {e.ref.attempt for e in queues.tickets[0].entries} == {"r3"}
    assert world.engine.releases == {}
    assert not world.item().get("batches")


def test_a_live_pollers_batch_is_left_alone_and_a_batch_is_finished_once() -> None:
    """A batch younger than the stale window belongs to a poller that may still be working; once it
    is stale, one invocation takes it out of the item and the next finds nothing to do."""
    world = World()
    world.die("batch")
    world.clock.now += STALE / 2
    world.invoke(Queues())
    assert world.engine.releases == {}
    assert len(world.item()["batches"]) == 1

    world.clock.now += STALE / 2
    world.invoke(Queues())
    world.invoke(Queues())
    assert all(len(reasons) == 1 for reasons in world.engine.releases.values()), "each job handed back once"
    assert len(world.engine.releases) == 3


def test_a_clean_cycle_costs_two_writes_and_leaves_nothing_to_finish() -> None:
    """Take the lock (a read, a write), write the batch activated and dispatched (two writes), send
    the ticket, and release (a write that drops the finished batch): no write to clear it, no read
    of an intent item."""
    world = World()
    queues = Queues()
    world.invoke(queues)
    assert len(queues.jobs) == 3 and len(queues.ticketed_ids()) == 3
    assert (world.state.reads, world.state.writes) == (1, 4)
    assert not world.item().get("batches") and world.item()["holder"] is None


def test_a_relayed_invocation_drops_the_finished_batch_with_its_takeover_write_and_reads_nothing() -> None:
    """GIVEN a poller that dispatched and ticketed a batch (closed in memory only) and relays
    THEN the relay's token says so, and the relayed invocation takes the lock over with one write
    and no read, which drops the finished batch: nothing is handed back or ticketed again."""
    world = World(jobs=6)
    lock = world.lock()
    assert lock.acquire()
    first = world.poller(Queues(), lock)
    report = PollReport()
    first.cycle(report, deadline=1e12)
    assert report.dispatched == 5
    [batch] = world.item()["batches"]
    assert batch["phase"] == "dispatched", "finished, but only in memory: no write to clear it"
    token = lock.handover()
    assert token is not None and token["closed"] == [batch["id"]] and token["open"] == []
    lock.handed_over()

    reads, writes = world.state.reads, world.state.writes
    relayed = world.lock()
    assert relayed.inherit(token)
    assert (world.state.reads - reads, world.state.writes - writes) == (0, 1), "one write, no read"
    assert not world.item().get("batches"), "the takeover dropped the finished batch"
    assert world.poller(Queues(), relayed).run(deadline=1e12).released == 0


def test_a_relay_with_a_ticket_still_owed_has_the_next_invocation_send_it() -> None:
    """GIVEN a poller whose ticket SQS refused (the batch stays open in the item) and that relays
    THEN the relayed invocation reads the item, takes the lock with that batch and sends its ticket."""
    world = World()
    lock = world.lock()
    assert lock.acquire()
    world.poller(Queues(refuse_tickets=True), lock).run(deadline=1e12)
    token = lock.handover()
    assert token is not None and len(token["open"]) == 1
    lock.handed_over()

    queues = Queues()
    world.invoke(queues, token=token)
    assert sorted(queues.ticketed_ids()) == sorted(world.engine.jobs)
    assert world.engine.releases == {} and queues.jobs == []
    assert not world.item().get("batches")


def test_a_recoverer_writing_the_item_does_not_cost_a_live_holder_its_lock() -> None:
    """GIVEN a live holder with a batch still owed a ticket (SQS refused it) WHEN an invocation that
    finds the lock held takes that batch once it is stale (sending the ticket) THEN the holder's
    next write of the item is refused, reads it back, sees its hold as it was, and carries on."""
    world = World()
    holder = world.lock()
    assert holder.acquire()
    world.poller(Queues(refuse_tickets=True), holder).run(deadline=1e12)

    world.clock.now += STALE
    queues = Queues()
    report, other = world.invoke(queues)
    assert not other.held and report.released == 0
    assert sorted(queues.ticketed_ids()) == sorted(world.engine.jobs)
    assert world.item()["holder"] == holder.owner

    world.clock.now += LOCK_SECONDS / 2
    assert holder.keep(), "still the holder's: the recoverer left its hold as it was"
    assert world.item()["holder"] == holder.owner and not world.item().get("batches")
    holder.release()
    assert world.item()["holder"] is None


def test_a_lock_taken_over_while_the_engine_answered_has_the_jobs_handed_back() -> None:
    """The intent write is compare-and-set on the lock's item: when another invocation took the lock
    over meanwhile (a cycle slower than the lock), the write is refused and the jobs go back."""
    world = World()
    lock = world.lock()
    assert lock.acquire()

    class Slow(FakeEngine):
        def activate(self, demands: Any, lease_seconds: int) -> Any:
            jobs = world.engine.activate(demands, lease_seconds)
            world.clock.now += LOCK_SECONDS + 1
            assert world.lock().acquire(), "the lock expired while the engine answered: taken over"
            return jobs

    log = IntentLog(lock, lease_seconds=60, clock=world.clock)
    queues = Queues()
    poller = Poller(settings(), Slow(), queues, sleep=lambda s: None, intents=log, lock=lock, wall=world.clock)
    poller.engine.release = world.engine.release  # type: ignore[method-assign]
    report = poller.run(deadline=1e12)

    assert report.lock_lost == 1 and report.released == 3
    assert queues.jobs == []
    assert sorted(world.engine.releases) == sorted(world.engine.jobs)


def test_the_log_keeps_no_variables() -> None:
    """Variables can be large and are not needed to hand a job back or extend its lease."""
    world = World(jobs=0)
    world.engine.add_job("charge-payment", {"secret-ish": "x" * 1000})
    world.die("batch")
    [batch] = world.item()["batches"]
    (row,) = batch["jobs"]
    job_id, _, attempt, _, retries, lease = row
    assert (job_id, attempt, retries) == ("job-1", "r3", 3), "a reference, the retries and the lease: no variables"
    assert "x" * 100 not in json.dumps(batch)
    [job] = decode_batch(batch)
    assert job.ref.key == "fake#job-1#r3" and job.lease_expires_at == lease and job.variables == {}


@pytest.mark.parametrize(("lease", "stale"), [(5, 2.0), (60, 10.0), (3600, 10.0), (20, 5.0)])
def test_stale_window_is_short_against_the_lease(lease: int, stale: float) -> None:
    assert stale_after(lease) == stale


def test_the_owner_steps_need_no_read() -> None:
    """The holder knows the item it last wrote: record and dispatched are one compare-and-set write
    each, and clearing a dispatched batch writes nothing (the next write drops it)."""
    world = World(jobs=1)
    lock = world.lock()
    assert lock.acquire()
    [job] = world.engine.activate([Demand("charge-payment", 1)], 60)
    log = IntentLog(lock, lease_seconds=60, clock=world.clock)
    reads, writes = world.state.reads, world.state.writes
    intent = log.write([job])
    log.dispatched(intent, [job])
    log.clear(intent)
    assert (world.state.reads - reads, world.state.writes - writes) == (0, 2)
    assert len(world.item()["batches"]) == 1
    lock.release()
    assert not world.item().get("batches")


class FlakyState(CountingState):
    """A CountingState whose writes fail (DynamoDB after botocore's retries) while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def put(self, key: str, value: dict[str, Any], *, expected_version: int | None) -> bool:
        if self.down:
            from workerless.errors import StoreError

            raise StoreError("DynamoDB put_item failed: InternalServerError")
        return super().put(key, value, expected_version=expected_version)


@pytest.mark.parametrize("ticket_sent", [True, False])
def test_a_failed_dispatched_write_does_not_get_queued_jobs_handed_back(ticket_sent: bool) -> None:
    """Issue 26, 2.4. GIVEN SendMessageBatch queued three jobs and DynamoDB then failed the intent
    log's ``dispatched`` write and the clear after it, and was back for the lock's release WHEN the
    next invocation runs THEN none of the queued jobs is handed back (they would run twice): the
    release recorded what was sent. Without a ticket, the next invocation sends it instead."""
    world = World()
    world.state = state = FlakyState()

    class DownAfterSend(Queues):
        def send_batch(self, url: str, bodies: list[str]) -> list[Any]:
            failures = super().send_batch(url, bodies)
            state.down = True  # every write from here to the end of the poll fails
            return failures

    class Back:
        """The engine's liveness report, called after the poll loop."""

        def after_cycle(self, counters: Any) -> None:
            state.down = False  # DynamoDB is back for the release (after the poll loop)

    world.engine.liveness = Back()  # type: ignore[misc]
    first = DownAfterSend(refuse_tickets=not ticket_sent)
    world.invoke(first)
    assert len(first.jobs) == 3 and len(first.ticketed_ids()) == (3 if ticket_sent else 0)

    world.clock.now += STALE
    queues = Queues()
    world.invoke(queues)
    assert world.engine.releases == {}, "jobs queued (and running) were handed back: they would run twice"
    assert queues.jobs == []
    if not ticket_sent:
        assert sorted(queues.ticketed_ids()) == sorted(world.engine.jobs), "the owed ticket is sent by the next"
    assert not world.item().get("batches")


class IntentWritesFail(CountingState):
    """DynamoDB failing (after botocore's retries) every write that would record a batch, while
    ``down``; the lock's own writes (acquire, release: no batch in them) go through."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def put(self, key: str, value: dict[str, Any], *, expected_version: int | None) -> bool:
        if self.down and value.get("batches"):
            from workerless.errors import StoreError

            raise StoreError("DynamoDB put_item failed: ProvisionedThroughputExceededException")
        return super().put(key, value, expected_version=expected_version)


def test_a_batch_the_intent_log_could_not_record_goes_back_before_it_could_be_stranded() -> None:
    """Issue 26 (StageNext chaos, seed 3). GIVEN DynamoDB fails the intent write after the engine's
    answer, and the poller would die at SendMessageBatch WHEN it runs THEN the batch is handed back
    at once, before any send (before: it was sent unrecorded, and the crash left its jobs held with
    nothing to hand them back: a lease spent, 60 s of StageNext's sweep), and the next invocation,
    with DynamoDB back, queues every job once."""
    world = World()
    world.state = state = IntentWritesFail()
    dying = Queues(die_on="batch")
    report, _ = world.invoke(dying)  # before the change: SimulatedCrash out of the send
    assert dying.jobs == [] and dying.die_on == "batch", "nothing reached SendMessageBatch unrecorded"
    assert sorted(world.engine.releases) == sorted(world.engine.jobs), "every job was handed back"
    assert (report.released, report.errors) == (3, 1)
    assert not world.item().get("batches")

    state.down = False
    queues = Queues()
    world.invoke(queues)
    assert sorted(queues.queued_ids()) == sorted(world.engine.jobs), "each job queued once, from its new activation"
    assert all(len(reasons) == 1 for reasons in world.engine.releases.values())
