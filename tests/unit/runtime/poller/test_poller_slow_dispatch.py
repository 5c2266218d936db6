"""Issue 26, 2.5 (and 2.4's remaining case): an unfinished batch recorded as ``activated`` is not proof
that its jobs were never queued. A live poller's dispatch can outlast the stale window (claim-check
uploads one after another, SQS calls retried by botocore: 4 attempts of a 10 s read timeout), and a
poller can queue a batch and fail to record it (DynamoDB failing until its lock expires). The
invocation that finishes such a batch hands a job back only after fencing its job record (LOST under
its lease, written only if no delivery has touched it): the queued message of a fenced job is then
acknowledged without running, so the job runs once (as the engine's new lease), never twice.

The real Poller, PollerLock and IntentLog over an in-memory shared state, the real DynamoDB
JobStore on moto (its conditional writes are what fences), a FakeEngine whose activations carry a
lease token (as Sheptra's and node-flow's do), and a fake SQS whose SendMessageBatch is slow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from workerless._core.model import ActivatedJob, Demand, JobRef
from workerless._core.record import Decision, decide
from workerless._core.settings import Settings
from workerless._poller.intent import IntentLog, stale_after
from workerless._poller.poller import Poller
from workerless._poller.poller_lock import PollerLock
from workerless.aws.dynamo import JobStore
from workerless.engines.base import MemoryState
from workerless.testing import FakeEngine

from tests.fakes import Clock

ROUTES = json.dumps([{"type": "charge-payment", "queue": "q-charge", "max": 5}])
STALE = stale_after(60)


class TokenEngine(FakeEngine):
    """FakeEngine whose every activation carries its own lease token (fingerprinted leases)."""

    activations = 0

    def activate(self, demands: Any, lease_seconds: int) -> list[ActivatedJob]:
        jobs = []
        for job in super().activate(demands, lease_seconds):
            TokenEngine.activations += 1
            ref = job.ref
            token = {"leaseToken": f"lt-{TokenEngine.activations}"}
            jobs.append(
                ActivatedJob(
                    ref=JobRef(ref.engine, ref.job_id, ref.job_type, ref.attempt, handle=token),
                    variables=job.variables,
                    lease_expires_at=job.lease_expires_at,
                    activated_at=job.activated_at,
                    retries=job.retries,
                )
            )
        return jobs


class Queues:
    def __init__(self, during_send: Any = None) -> None:
        self.during_send = during_send
        self.messages: list[dict[str, Any]] = []
        self.tickets: list[str] = []

    def in_flight(self, url: str) -> int:
        return 0

    def send_batch(self, url: str, bodies: list[str]) -> list[Any]:
        if self.during_send is not None:
            hook, self.during_send = self.during_send, None
            hook()  # the call is slow: other invocations run meanwhile; then it succeeds
        self.messages.extend(json.loads(body) for body in bodies)
        return []

    def send(self, url: str, body: Any, *, delay_seconds: int = 0) -> None:
        self.tickets.append(body)


@pytest.fixture
def store() -> Iterator[JobStore]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="jobs",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield JobStore("jobs", ttl_seconds=86_400, client=client)


def settings() -> Settings:
    return Settings.from_env(
        {
            "WORKERLESS_ROUTES": ROUTES,
            "WORKERLESS_HEARTBEAT_QUEUE_URL": "q-heartbeat",
            "WORKERLESS_POLL_BUDGET_SECONDS": "0",
            "WORKERLESS_LEASE_SECONDS": "60",
        }
    )


def poller(engine: FakeEngine, queues: Queues, lock: PollerLock, clock: Clock, store: JobStore | None) -> Poller:
    log = IntentLog(lock, lease_seconds=60, clock=clock)
    return Poller(settings(), engine, queues, sleep=lambda s: None, intents=log, lock=lock, wall=clock, store=store)


def runs_twice(engine: FakeEngine, queued: list[dict[str, Any]], store: JobStore) -> list[str]:
    """The queued jobs that were also handed back to the engine and whose queued message a handler
    would still run (its claim is granted, or the record it meets says run): run twice."""
    twice = []
    for message in queued:
        ref = JobRef.from_dict(message["ref"])
        if ref.job_id not in engine.releases:
            continue
        lease = engine.lease.fingerprint(ref)
        claimed, found = store.claim(
            ref.record_key, owner="handler", claim_seconds=150, job_type=ref.job_type, lease=lease
        )
        if claimed or decide(found, now=0.0, lease=lease) in (Decision.RUN, Decision.REREPORT):
            twice.append(ref.job_id)
    return twice


@pytest.mark.parametrize("fenced", [True, False], ids=["store", "no-store"])
def test_a_slow_dispatch_past_the_stale_window_never_runs_a_job_twice(store: JobStore, fenced: bool) -> None:
    """GIVEN a live poller whose SendMessageBatch takes longer than the stale window (10 s) and an
    invocation that finds the lock held meanwhile and finishes the batch as abandoned WHEN the send
    then succeeds THEN no job is both handed back and runnable from its queued message (with the job
    store given; without it, the pre-fix behaviour: every job runs twice)."""
    clock = Clock()
    engine = TokenEngine(clock=clock)
    for n in range(3):
        engine.add_job("charge-payment", {"n": n})
    state = MemoryState()
    holder = PollerLock(state, seconds=30, window=2, clock=clock)
    assert holder.acquire()

    def meanwhile() -> None:
        clock.now += STALE + 1  # the send is slow (botocore retrying a read timeout)
        other = PollerLock(state, seconds=30, window=2, clock=clock)
        assert not other.acquire(), "the holder is alive: its lock is held"
        poller(engine, Queues(), other, clock, store if fenced else None).recover(deadline=1e12)

    queues = Queues(during_send=meanwhile)
    poller(engine, queues, holder, clock, store if fenced else None).run(deadline=1e12)
    holder.release()

    assert len(queues.messages) == 3 and engine.releases, "the recoverer handed the batch back while it was sent"
    twice = runs_twice(engine, queues.messages, store)
    if fenced:
        assert twice == []
        # The engine's next lease of each handed-back job (a new token) claims the fenced record: it runs once.
        again = engine.activate([Demand("charge-payment", 5)], 60)
        assert sorted(j.ref.job_id for j in again) == sorted(engine.releases)
        for job in again:
            claimed, _ = store.claim(
                job.record_key,
                owner="h2",
                claim_seconds=150,
                job_type=job.ref.job_type,
                lease=engine.lease.fingerprint(job.ref),
            )
            assert claimed
    else:
        assert sorted(twice) == sorted(engine.jobs), "without the fence the queued jobs run twice"


def test_a_fenced_job_runs_under_its_next_lease(store: JobStore) -> None:
    """The fence must not stop the job: the engine's new lease of it (another token) claims the LOST
    record and runs; a record a handler already holds is not fenced (the job is ticketed instead)."""
    ref = JobRef("fake", "job-1", "charge-payment", "r3", handle={"leaseToken": "lt-1"})
    lease = FakeEngine.lease.fingerprint(ref)
    assert store.fence(ref.record_key, reason="handed back", job_type=ref.job_type, lease=lease)
    claimed, found = store.claim(ref.record_key, owner="old", claim_seconds=150, job_type=ref.job_type, lease=lease)
    assert not claimed and decide(found, now=0.0, lease=lease) is Decision.SKIP
    new = JobRef("fake", "job-1", "charge-payment", "r3", handle={"leaseToken": "lt-2"})
    claimed, _ = store.claim(
        new.record_key, owner="new", claim_seconds=150, job_type=new.job_type, lease=FakeEngine.lease.fingerprint(new)
    )
    assert claimed
    assert not store.fence(new.record_key, reason="handed back", job_type=new.job_type, lease=lease), (
        "claimed: not fenced"
    )
