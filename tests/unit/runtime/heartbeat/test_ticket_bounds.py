"""Heartbeat tickets are bounded (issue 10, item 2): at most 100 jobs and 256 KiB of JSON each, so
a big batch never makes a ticket SQS refuses — in the poller and in the intent log's recovery.

Before, ~3,000 node-flow jobs made one ~1 MB ticket (the emulator's handles are a little smaller:
4,000 here): its SendMessage failed, which failed the
poller invocation, and the recovery repeated the same failing send. Pure: the real Poller and
IntentLog, an in-memory engine and an SQS fake that enforces SQS's 1 MiB message limit.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from workerless._core.lease import ACTIVATION_LEASE
from workerless._core.model import ActivatedJob, Demand, JobRef
from workerless._core.settings import Settings
from workerless._heartbeat.ticket import MAX_TICKET_BYTES, MAX_TICKET_ENTRIES, Ticket, TicketEntry, backoff_seconds
from workerless._poller.intent import IntentLog, encode_batch
from workerless._poller.poller import Poller, PollReport
from workerless._poller.poller_lock import LOCK_KEY, PollerLock
from workerless.aws.sqs import QueueError
from workerless.engines.base import MemoryState

#: SQS's message limit (MaximumMessageSize at its maximum, the default since 2025).
SQS_LIMIT = 1_048_576
JOBS = 4_000


def nodeflow_job(n: int, now: float) -> ActivatedJob:
    """A job shaped as the node-flow adapter makes it: its handle carries the queue, a lease token
    and the workflow id, so a ticket entry is about 330 bytes."""
    ref = JobRef(
        "nodeflow",
        str(uuid.uuid4()),
        "charge-payment",
        handle={"queueName": "charge-payment", "leaseToken": f"lt_{uuid.uuid4().hex}", "workflowId": str(uuid.uuid4())},
    )
    return ActivatedJob(ref=ref, variables={"n": n}, lease_expires_at=now + 60, activated_at=now)


class BigEngine:
    """Hands out ``count`` node-flow-shaped jobs on the first activation, none after."""

    name = "nodeflow"
    lease = ACTIVATION_LEASE
    lease_acquire = task_logs = liveness = None

    def __init__(self, count: int) -> None:
        self.count = count
        self.handed: list[str] = []
        self.released: list[str] = []

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        count, self.count = self.count, 0
        jobs = [nodeflow_job(n, time.time()) for n in range(count)]
        self.handed.extend(j.ref.job_id for j in jobs)
        return jobs

    def release(self, job: ActivatedJob, reason: str) -> None:
        self.released.append(job.ref.job_id)


class Sqs:
    """SQS as the poller sees it, with the 1 MiB message limit; ``refuse`` fails that many sends."""

    def __init__(self, refuse: int = 0) -> None:
        self.refuse = refuse
        self.jobs = 0
        self.tickets: list[tuple[Ticket, int, int]] = []  # (ticket, bytes, delay)

    def in_flight(self, url: str) -> int:
        return 0

    def send_batch(self, url: str, bodies: list[str]) -> list[Any]:
        self.jobs += len(bodies)
        return []

    def send(self, url: str, body: Any, *, delay_seconds: int = 0) -> None:
        size = len(body.encode())
        if size > SQS_LIMIT:
            raise QueueError("SQS send_message failed: InvalidParameterValue (message over MaximumMessageSize)")
        if self.refuse:
            self.refuse -= 1
            raise QueueError("SQS send_message failed: InternalError")
        self.tickets.append((Ticket.from_json(body), size, delay_seconds))


def settings() -> Settings:
    routes = json.dumps([{"type": "charge-payment", "queue": "q-charge", "max": 10_000}])
    return Settings.from_env(
        {
            "WORKERLESS_ROUTES": routes,
            "WORKERLESS_HEARTBEAT_QUEUE_URL": "q-heartbeat",
            "WORKERLESS_POLL_BUDGET_SECONDS": "0",
            "WORKERLESS_LEASE_SECONDS": "60",
        }
    )


def assert_bounded(tickets: list[tuple[Ticket, int, int]], job_ids: list[str]) -> None:
    assert len(tickets) >= len(job_ids) // MAX_TICKET_ENTRIES
    for ticket, size, delay in tickets:
        assert len(ticket.entries) <= MAX_TICKET_ENTRIES
        assert size <= MAX_TICKET_BYTES
        assert 1 <= delay <= 20
    sent = [e.ref.job_id for ticket, _, _ in tickets for e in ticket.entries]
    assert sorted(sent) == sorted(job_ids), "every job in exactly one ticket"


def test_a_ticket_splits_by_entries_and_by_bytes_in_order() -> None:
    now = 1_000.0
    entries = tuple(TicketEntry(nodeflow_job(n, now).ref, now + 60) for n in range(250))
    ticket = Ticket("nodeflow", entries, first_seen=now, retry=2)
    parts = ticket.split()
    assert [len(p.entries) for p in parts] == [100, 100, 50]
    assert [e for p in parts for e in p.entries] == list(entries)
    assert all(p.retry == 2 and p.first_seen == now for p in parts)
    by_bytes = ticket.split(max_bytes=10_000)
    assert all(len(p.to_json().encode()) <= 10_000 for p in by_bytes)
    assert [e for p in by_bytes for e in p.entries] == list(entries)
    assert Ticket("nodeflow", (), first_seen=now).split() == []
    assert Ticket.from_json(parts[0].to_json()) == parts[0]


def test_backoff_doubles_from_a_second_up_to_its_cap() -> None:
    assert [backoff_seconds(n, 20.0) for n in range(8)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0]


def test_the_poller_sends_a_big_batch_as_tickets_within_the_message_limit() -> None:
    """GIVEN an activation of 4,000 node-flow jobs (one ticket of them would be over 1 MiB)
    THEN the poller queues them all and sends their heartbeat in tickets of at most 100 jobs and
    256 KiB, every job in exactly one ticket, and its invocation does not fail."""
    now = time.time()
    entries = tuple(TicketEntry(nodeflow_job(n, now).ref, now + 60) for n in range(JOBS))
    one = Ticket("nodeflow", entries, first_seen=now)
    assert len(one.to_json().encode()) > SQS_LIMIT, "the batch is big enough to matter"
    engine, sqs = BigEngine(JOBS), Sqs()
    poller = Poller(settings(), engine, sqs, sleep=lambda s: None)
    report = PollReport()

    dispatched, _ = poller.cycle(report, deadline=1e12)

    assert dispatched == JOBS and sqs.jobs == JOBS and not engine.released
    assert_bounded(sqs.tickets, engine.handed)


def taken_lock(state: MemoryState, dead_batches: list[dict[str, Any]] | None = None) -> PollerLock:
    """The poller lock, taken; ``dead_batches`` are left in its item by a holder whose lock expired."""
    if dead_batches is not None:
        left = {"holder": "dead", "until": time.time() - 1, "sent": {}, "batches": dead_batches}
        assert state.put(LOCK_KEY, left, expected_version=None)
    lock = PollerLock(state, seconds=30, window=2)
    assert lock.acquire()
    return lock


def _ids(sqs: Sqs) -> list[str]:
    return [e.ref.job_id for ticket, _, _ in sqs.tickets for e in ticket.entries]


def test_recovery_sends_a_dead_pollers_big_batch_as_bounded_tickets() -> None:
    """GIVEN a poller that died after queuing 4,000 node-flow jobs, before their ticket
    THEN the next invocation's recovery sends their heartbeat as bounded tickets (the same split
    as the poller's), instead of repeating one send SQS refuses."""
    now = time.time()
    jobs = [nodeflow_job(n, now) for n in range(JOBS)]
    state = MemoryState()
    batch = encode_batch("dead", now - 60, "dispatched", jobs)
    lock = taken_lock(state, [batch])
    sqs = Sqs()
    log = IntentLog(lock, lease_seconds=60, max_bytes=5_000_000)

    Poller(settings(), BigEngine(0), sqs, sleep=lambda s: None, intents=log, lock=lock).run(deadline=1e12)
    lock.release()

    assert_bounded(sqs.tickets, [j.ref.job_id for j in jobs])
    assert not state.get(LOCK_KEY).get("batches"), "nothing left to recover"


@pytest.mark.parametrize("where", ["poller", "recovery"])
def test_a_ticket_sqs_refuses_stays_in_the_intent_log_for_the_next_invocation(where: str) -> None:
    """GIVEN one ticket of a batch that SQS refuses (a throttle), the others sent
    THEN only that ticket's jobs stay in the intent log, as dispatched: the next invocation's
    recovery sends theirs."""
    now = time.time()
    state = MemoryState()
    sqs = Sqs(refuse=1)
    if where == "poller":
        lock = taken_lock(state)
        log = IntentLog(lock, lease_seconds=60, max_bytes=5_000_000)
        poller = Poller(settings(), BigEngine(250), sqs, sleep=lambda s: None, intents=log, lock=lock)
        poller.cycle(PollReport(), deadline=1e12)
    else:
        jobs = [nodeflow_job(n, now) for n in range(250)]
        batch = encode_batch("dead", now - 60, "dispatched", jobs)
        lock = taken_lock(state, [batch])
        log = IntentLog(lock, lease_seconds=60, max_bytes=5_000_000)
        Poller(settings(), BigEngine(0), sqs, sleep=lambda s: None, intents=log, lock=lock).run(deadline=1e12)
    lock.release()

    assert [len(t.entries) for t, _, _ in sqs.tickets] == [100, 50]
    [left] = state.get(LOCK_KEY)["batches"]
    assert left["phase"] == "dispatched"
    assert len(left["jobs"]) == 100
    sent = set(_ids(sqs))
    assert not sent & {row[0] for row in left["jobs"]}
