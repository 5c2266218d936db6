"""A stateful property test of the job record's state machine (hypothesis RuleBasedStateMachine).

Backend: the real :class:`~workerless.aws.dynamo.JobStore` — its conditional writes are the thing
under test — on moto's in-process DynamoDB (no network), with a controlled clock. The model drives
deliveries of ONE engine attempt through the handler wrapper's protocol (claim → decide → run →
store → report → mark reported), interleaved at random with redeliveries, crashes, heartbeat "lease
lost" verdicts and the clock running past claims, and checks after every step:

- at most one delivery's result is ever stored, and every report the engine accepts carries it;
- once a result is stored, no delivery starts the handler again;
- once the heartbeat marked the attempt LOST, no result is stored;
- a refused claim never tells a delivery to run (claim condition and ``decide`` agree);
- a record never moves backwards (STORED/REPORTED never become CLAIMED or LOST);
- progress: a record whose claim expired can always be claimed by the next delivery;
- a claim is given back (a failed lease acquire) only by its holder, only before its lease began.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from moto import mock_aws
from workerless.aws.dynamo import JobStore
from workerless.model import Outcome
from workerless.record import Decision, Status, decide

#: Seconds per test (real commands, topologies or many generated cases): `make test` runs it,
#: `make test-fast` does not.
pytestmark = pytest.mark.slow

TABLE = "jobs"
#: A delivery's claim: the Lambda's remaining time plus the margin. The Lambda is dead by then.
CLAIM = 30.0
ORDER = {Status.CLAIMED: 0, Status.LOST: 1, Status.SKIPPED: 1, Status.STORED: 1, Status.REPORTED: 2}


@dataclass
class Delivery:
    owner: str
    phase: str = "new"  # new | claimed | ran | stored | done | dead
    claim_until: float = 0.0
    outcome: Outcome | None = None
    begun: bool = False


_CLIENT: list[Any] = []


@pytest.fixture(autouse=True, scope="module")
def _dynamodb() -> Iterator[None]:
    """One in-process DynamoDB for the module; every example works on its own key."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        _CLIENT.append(client)
        yield
        _CLIENT.clear()


class JobRecordMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.key = f"sheptra#{uuid.uuid4().hex}#r3"
        self.now = 1_000_000.0
        self.store = JobStore(TABLE, ttl_seconds=3600, client=_CLIENT[0], clock=lambda: self.now)
        self.deliveries: list[Delivery] = []
        self.stored: list[Outcome] = []  # results stored by their own delivery
        self.accepted: list[Outcome] = []  # reports the engine accepted
        self.lost = False  # the engine took the lease back (heartbeat 409)
        self.runs_started_after_store = 0
        self.last_status: Status | None = None

    @initialize()
    def first_delivery(self) -> None:
        self.deliveries.append(Delivery("d0"))

    # -- the world ------------------------------------------------------------------------------
    @rule()
    def redeliver(self) -> None:
        """SQS delivers the message again (duplicate, or after the visibility timeout)."""
        if len(self.deliveries) < 8:
            self.deliveries.append(Delivery(f"d{len(self.deliveries)}"))

    @rule(seconds=st.sampled_from([1.0, 10.0, CLAIM + 1.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for d in self.deliveries:
            # The Lambda is killed at its timeout, which comes before its claim expires.
            if d.phase in ("claimed", "ran") and self.now >= d.claim_until:
                d.phase = "dead"

    @rule(data=st.data())
    def crash(self, data: Any) -> None:
        live = [d for d in self.deliveries if d.phase in ("claimed", "ran", "stored")]
        if live:
            data.draw(st.sampled_from(live)).phase = "dead"

    @rule()
    def heartbeat_says_lease_lost(self) -> None:
        if self.store.mark(self.key, Status.LOST, reason="409 on extend", job_type="t"):
            self.lost = True
        else:
            # Refused only when a result is stored or reported: those are never made LOST.
            record = self.store.get(self.key)
            assert record is not None and record.status in (Status.STORED, Status.REPORTED, Status.LOST)
            self.lost = True  # the engine took the lease back all the same

    # -- one delivery's next step ---------------------------------------------------------------
    def _pick(self, data: Any, phase: str) -> Delivery | None:
        ready = [d for d in self.deliveries if d.phase == phase]
        return data.draw(st.sampled_from(ready)) if ready else None

    @rule(data=st.data())
    def claim(self, data: Any) -> None:
        d = self._pick(data, "new")
        if d is None:
            return
        before = self.store.get(self.key)
        claimed, found = self.store.claim(self.key, owner=d.owner, claim_seconds=CLAIM, job_type="t")
        if claimed:
            assert not self.stored, "a delivery was allowed to run after a result was stored"
            d.phase, d.claim_until = "claimed", self.now + CLAIM
            return
        if before is not None and before.status is Status.CLAIMED and not before.claim_live(self.now):
            raise AssertionError("an expired claim could not be taken over: the job would be stuck")
        decision = decide(found, self.now)
        assert decision is not Decision.RUN, f"refused claim but decide() says run: {found}"
        if decision is Decision.REREPORT:
            assert found is not None and found.outcome is not None
            d.phase, d.outcome = "stored", found.outcome
        elif decision in (Decision.DONE, Decision.SKIP):
            d.phase = "done"
        # RETRY_LATER: the message waits for a later redelivery (stays "new").

    @rule(data=st.data())
    def lease_begins(self, data: Any) -> None:
        """StageNext: lease acquire answered; the claim is stamped so the heartbeat renews it."""
        d = self._pick(data, "claimed")
        if d is None or d.begun:
            return
        before = self.store.get(self.key)
        stamped = self.store.mark_begun(self.key, owner=d.owner)
        ours = before is not None and before.status is Status.CLAIMED and before.owner == d.owner
        assert stamped == ours, f"mark_begun wrote {stamped} on {before}"
        d.begun = stamped
        if stamped:
            record = self.store.get(self.key)
            assert record is not None and record.begun_at == self.now

    @rule(data=st.data())
    def lease_acquire_fails(self, data: Any) -> None:
        """StageNext: lease acquire failed; the delivery gives its claim back and its message fails."""
        d = self._pick(data, "claimed")
        if d is None:
            return
        before = self.store.get(self.key)
        released = self.store.release(self.key, owner=d.owner)
        ours = before is not None and before.status is Status.CLAIMED and before.owner == d.owner
        assert released == (ours and not d.begun), f"release answered {released} for {d} on {before}"
        if released:
            record = self.store.get(self.key)
            assert record is not None and record.status is Status.CLAIMED and not record.claim_live(self.now), (
                f"a released claim must be expired, so the redelivery claims at once: {record}"
            )
        d.phase = "dead"

    @rule(data=st.data())
    def run_handler(self, data: Any) -> None:
        d = self._pick(data, "claimed")
        if d is None:
            return
        if self.stored:
            self.runs_started_after_store += 1
        d.outcome = Outcome.complete({"by": d.owner})
        d.phase = "ran"

    @rule(data=st.data())
    def store_result(self, data: Any) -> None:
        d = self._pick(data, "ran")
        if d is None or d.outcome is None:
            return
        found = self.store.store_outcome(self.key, owner=d.owner, outcome=d.outcome)
        if found is None:
            assert not self.lost, "a result was stored after the heartbeat marked the attempt lost"
            self.stored.append(d.outcome)
            d.phase = "stored"
        elif found.status is Status.STORED and found.outcome is not None:
            d.phase, d.outcome = "stored", found.outcome  # report the one already stored
        else:
            d.phase = "done"  # LOST (or another claim): the result is discarded

    @rule(data=st.data())
    def report(self, data: Any) -> None:
        d = self._pick(data, "stored")
        if d is None or d.outcome is None:
            return
        if self.lost:
            self.store.mark_reported(self.key, note="lease lost at report")  # 409: someone else has it
        else:
            self.accepted.append(d.outcome)
            self.store.mark_reported(self.key)
        d.phase = "done"

    # -- invariants -----------------------------------------------------------------------------
    @invariant()
    def at_most_one_result_is_stored(self) -> None:
        assert len(self.stored) <= 1

    @invariant()
    def every_accepted_report_is_the_stored_result(self) -> None:
        assert all(outcome in self.stored for outcome in self.accepted)
        assert len({repr(o) for o in self.accepted}) <= 1

    @invariant()
    def nothing_runs_after_a_result_is_stored(self) -> None:
        assert self.runs_started_after_store == 0

    @invariant()
    def the_record_never_moves_backwards(self) -> None:
        record = self.store.get(self.key)
        status = record.status if record is not None else None
        if self.last_status is not None and status is not None:
            assert ORDER[status] >= ORDER[self.last_status], f"{self.last_status} -> {status}"
            if self.last_status in (Status.STORED, Status.REPORTED):
                assert status in (Status.STORED, Status.REPORTED)
        self.last_status = status


JobRecordMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_job_record_state_machine = JobRecordMachine.TestCase
