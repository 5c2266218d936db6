"""A stateful property test of the delivery protocol and the job record it runs on (hypothesis
RuleBasedStateMachine).

Backend: the real :class:`~workerless.aws.dynamo.JobStore` — its conditional writes are the thing
under test — on moto's in-process DynamoDB (no network), with a controlled clock. Each delivery of
ONE engine attempt is a real :class:`~workerless._handler.delivery.Delivery` (the code the Lambda wrapper
runs), driven one protocol step at a time (claim → settle a refusal / begin → run → store → report)
and interleaved at random with redeliveries, crashes, heartbeat "lease lost" verdicts, an engine
that refuses reports for a while and the clock running past claims. The engine is an in-memory one
whose answers the machine draws; the machine runs once per lease model (activation, begin). After
every step it checks:

- at most one delivery's result is ever stored, and every report the engine accepts carries it;
- once a result is stored, no delivery starts the handler again;
- once the heartbeat marked the attempt LOST, no result is stored;
- a refused claim never tells a delivery to run (claim condition and ``decide`` agree);
- a record never moves backwards (STORED/REPORTED never become CLAIMED or LOST);
- progress: a record whose claim expired can always be claimed by the next delivery;
- a begin lease's claim is stamped only by its holder, and given back (a failed lease acquire) only
  by its holder, before its lease began;
- a report the engine keeps refusing is noted owed on the STORED record, for the heartbeat.
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
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from moto import mock_aws
from workerless._core.job import Job
from workerless._core.lease import ACTIVATION_LEASE, BEGIN_LEASE, LeasePolicy
from workerless._core.model import ActivatedJob, JobRef, Outcome
from workerless._core.record import Decision, Status
from workerless._handler.delivery import CLAIM_MARGIN_SECONDS, Delivery
from workerless._handler.verdict import Ack, Claimed, Redeliver, ReportOwedError
from workerless.aws.dynamo import JobStore
from workerless.errors import EngineUnavailableError, LeaseLostError

#: Seconds per test (real commands, topologies or many generated cases): `make test` runs it,
#: `make test-fast` does not.
pytestmark = pytest.mark.slow

TABLE = "jobs"
#: The Lambda's remaining time when a delivery starts (its claim is that plus the margin).
REMAINING = 600.0
#: A delivery's claim: the Lambda's remaining time plus the margin. The Lambda is dead by then.
CLAIM = REMAINING + CLAIM_MARGIN_SECONDS
ORDER = {Status.CLAIMED: 0, Status.LOST: 1, Status.SKIPPED: 1, Status.STORED: 1, Status.REPORTED: 2}


class _Context:
    """A Lambda context with plenty of (real) time left: the machine's clock is its own."""

    def __init__(self, request_id: str) -> None:
        self.aws_request_id = request_id

    def get_remaining_time_in_millis(self) -> int:
        return int(REMAINING * 1000)


class ModelEngine:
    """An engine whose answers the machine draws: lease acquire, and whether reports land."""

    name = "model"
    task_logs = liveness = None

    def __init__(self, lease: LeasePolicy) -> None:
        self.lease = lease
        self.acquire: bool | None = True  # the next lease acquire: granted, refused, None: unavailable
        self.down = False  # reports refused with a retryable error
        self.lost = False  # the engine took the lease back: reports answer 409
        self.accepted: list[Outcome] = []
        self.acquires = 0

    @property
    def lease_acquire(self) -> ModelEngine | None:
        """Lease acquire where the lease is not held until acquired (the begin lease's machine)."""
        return None if self.lease.held(None) else self

    def begin(self, job: ActivatedJob) -> bool:
        self.acquires += 1
        if self.acquire is None:
            raise EngineUnavailableError("lease service down", engine=self.name, retry_after=0.0)
        return self.acquire

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        if self.down:
            raise EngineUnavailableError("engine down", engine=self.name, retry_after=0.0)
        if self.lost:
            raise LeaseLostError("someone else has the job", engine=self.name, status=409)
        self.accepted.append(outcome)

    def skip(self, ref: JobRef) -> None:
        return None

    def release(self, job: ActivatedJob, reason: str) -> None:
        return None


@dataclass
class Model:
    """The machine's view of one delivery: which step it is at, and its real Delivery."""

    message_id: str
    phase: str = "new"  # new | claimed | begun | ran | stored | done | dead
    real: Delivery | None = None
    claim_until: float = 0.0
    outcome: Outcome | None = None


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


class DeliveryMachine(RuleBasedStateMachine):
    lease_model: LeasePolicy = ACTIVATION_LEASE

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000.0
        self.store = JobStore(TABLE, ttl_seconds=3600, client=_CLIENT[0], clock=lambda: self.now)
        self.engine = ModelEngine(self.lease_model)
        self.job = ActivatedJob(
            ref=JobRef("model", uuid.uuid4().hex, "t", attempt="r3", handle={"token": uuid.uuid4().hex}),
            variables={},
            lease_expires_at=self.now + 60,
            activated_at=self.now,
            retries=3,
        )
        self.key = self.job.record_key
        self.deliveries: list[Model] = []
        self.requests: list[str] = []  # the message of each Lambda invocation so far
        self.stored: list[Outcome] = []  # results stored by their own delivery
        self.lost = False  # the engine took the lease back (heartbeat 409)
        self.runs_started_after_store = 0
        self.last_status: Status | None = None

    @initialize()
    def first_delivery(self) -> None:
        self.deliveries.append(Model("m0"))

    def _function(self, job: Job) -> dict[str, Any]:
        if self.stored:
            self.runs_started_after_store += 1
        return {"by": job.lambda_context.aws_request_id}

    def _delivery(self, d: Model) -> Delivery:
        self.requests.append(d.message_id)
        return Delivery(
            self.job,
            self._function,
            engine=self.engine,
            store=self.store,
            message_id=d.message_id,
            # Deterministic names, so that hypothesis replays a failing example exactly.
            context=_Context(f"req{len(self.requests)}"),
            receipt=f"receipt-{d.message_id}",
            queue_url="https://sqs.example/jobs",
            clock=lambda: self.now,
        )

    def _record(self) -> Any:
        return self.store.get(self.key)

    def _ours(self, d: Model, record: Any) -> bool:
        assert d.real is not None
        return record is not None and record.status is Status.CLAIMED and record.owner == d.real.owner

    def _settled(self, d: Model, verdict: Ack | Redeliver) -> None:
        if isinstance(verdict, Redeliver) and isinstance(verdict.error, ReportOwedError):
            # Noted on a STORED record (a REPORTED one whose lease the engine granted again is left
            # to SQS's redelivery: the heartbeat re-reports only what is STORED).
            record = self._record()
            assert record is not None
            assert record.report_owed or record.status is not Status.STORED, f"an owed report was not noted: {record}"
        d.phase = "done"

    # -- the world ------------------------------------------------------------------------------
    @precondition(lambda self: len(self.deliveries) < 8)
    @rule(same_message=st.booleans())
    def redeliver(self, same_message: bool) -> None:
        """SQS delivers the message again (a duplicate, or after the visibility timeout), or the
        engine hands the job out again as a new message (a begin lease's gateway requeue)."""
        message_id = "m0" if same_message else f"m{len(self.deliveries)}"
        self.deliveries.append(Model(message_id))

    @rule(seconds=st.sampled_from([1.0, 10.0, CLAIM + 1.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for d in self.deliveries:
            # The Lambda is killed at its timeout, which comes before its claim expires.
            if d.phase in ("claimed", "begun", "ran") and self.now >= d.claim_until:
                d.phase = "dead"

    @precondition(lambda self: self._any("claimed", "begun", "ran", "stored"))
    @rule(data=st.data())
    def crash(self, data: Any) -> None:
        live = [d for d in self.deliveries if d.phase in ("claimed", "begun", "ran", "stored")]
        if live:
            data.draw(st.sampled_from(live)).phase = "dead"

    @precondition(lambda self: not self.engine.lost and self.lease_model.held(self._record()))
    @rule()
    def heartbeat_says_lease_lost(self) -> None:
        """The heartbeat's extension is refused (409): the engine took the lease back. Only a lease
        the heartbeat renews can be refused (a begin lease: once acquired)."""
        if self.store.mark(self.key, Status.LOST, reason="409 on extend", job_type="t"):
            self.lost = True
        else:
            # Refused only when a result is stored or reported (those are never made LOST), or the
            # attempt is over already (lost, or skipped: the engine refused a begin lease).
            record = self._record()
            assert record is not None and record.status is not Status.CLAIMED, record
        self.engine.lost = True  # the engine took the lease back all the same

    # Mostly a healthy engine: every refusal ends a job's chances of being stored in this run.
    @rule(down=st.sampled_from([False, False, True]), acquire=st.sampled_from([True, True, False, None]))
    def engine_changes(self, down: bool, acquire: bool | None) -> None:
        """Whether the engine refuses reports with a retryable error (an outage), and what its next
        lease acquires answer: granted, refused, or unavailable."""
        self.engine.down, self.engine.acquire = down, acquire

    # -- one delivery's next step ---------------------------------------------------------------
    def _any(self, *phases: str) -> bool:
        return any(d.phase in phases for d in self.deliveries)

    def _advance(self, data: Any) -> None:
        d = data.draw(st.sampled_from([d for d in self.deliveries if d.phase in STEPS]))
        STEPS[d.phase](self, d)

    # Three rules for one move: hypothesis picks among rules evenly, and a job needs four steps of
    # one delivery (claim, begin, run, store) before anything is stored.
    @precondition(lambda self: self._any(*STEPS))
    @rule(data=st.data())
    def advance(self, data: Any) -> None:
        """One delivery (any that is not done or dead) takes its next step of the protocol."""
        self._advance(data)

    @precondition(lambda self: self._any(*STEPS))
    @rule(data=st.data())
    def advance_again(self, data: Any) -> None:
        self._advance(data)

    @precondition(lambda self: self._any(*STEPS))
    @rule(data=st.data())
    def advance_once_more(self, data: Any) -> None:
        self._advance(data)

    def _claim(self, d: Model) -> None:
        d.real = self._delivery(d)
        before = self._record()
        claim = d.real.claim()
        if isinstance(claim, Claimed):
            assert not self.stored, "a delivery was allowed to run after a result was stored"
            d.phase, d.claim_until = "claimed", self.now + CLAIM
            return
        if before is not None and before.status is Status.CLAIMED and not before.claim_live(self.now):
            raise AssertionError("an expired claim could not be taken over: the job would be stuck")
        assert claim.decision is not Decision.RUN, f"refused claim but decide() says run: {claim.found}"
        verdict = d.real.settle_refused(claim)
        if isinstance(verdict, Redeliver) and not isinstance(verdict.error, ReportOwedError):
            d.phase = "new"  # another delivery holds the claim: this message comes back later
            return
        self._settled(d, verdict)

    def _begin(self, d: Model) -> None:
        assert d.real is not None
        before = self._record()
        acquires, answer = self.engine.acquires, self.engine.acquire
        verdict = d.real.begin()
        record = self._record()
        if self.lease_model.held(None):
            assert verdict is None and self.engine.acquires == acquires, "an activation lease needs no acquire"
            d.phase = "begun"
            return
        ours = self._ours(d, before)
        if answer is True:
            # Stamped only by the claim's holder; a claim taken over meanwhile is handed back.
            assert (verdict is None) == ours, f"begin answered {verdict} on {before}"
            if ours:
                assert record is not None and record.begun_at == self.now
        elif answer is None:
            # Acquire failed: the claim is given back by its holder, expired, so the redelivery
            # claims at once.
            assert verdict is not None
            if ours:
                assert record is not None and record.status is Status.CLAIMED and not record.claim_live(self.now), (
                    f"a released claim must be expired, so the redelivery claims at once: {record}"
                )
        else:
            assert verdict is not None, "a delivery refused at lease acquire must not run"
        if verdict is None:
            d.phase = "begun"
        else:
            self._settled(d, verdict)

    def _run_handler(self, d: Model) -> None:
        assert d.real is not None
        d.outcome = d.real.run()
        assert d.outcome.kind == "complete", d.outcome
        d.phase = "ran"

    def _store_result(self, d: Model) -> None:
        assert d.real is not None and d.outcome is not None
        stored = d.real.store_outcome(d.outcome)
        if stored is None:
            # LOST (or another claim): the result is discarded and the delivery handed back.
            self._settled(d, d.real.settle(None))
            return
        if stored == d.outcome:
            assert not self.lost, "a result was stored after the heartbeat marked the attempt lost"
            self.stored.append(stored)
        d.phase, d.outcome = "stored", stored  # ours, or the one already stored: report that

    def _report(self, d: Model) -> None:
        assert d.real is not None and d.outcome is not None
        self._settled(d, d.real.settle(d.outcome))

    @precondition(lambda self: self._any("new"))
    @rule(data=st.data())
    def deliver(self, data: Any) -> None:
        """A delivery runs the whole protocol at once (:meth:`Delivery.deliver`, the wrapper's call),
        with no other step in between."""
        d = data.draw(st.sampled_from([d for d in self.deliveries if d.phase == "new"]))
        d.real = self._delivery(d)
        lost_before, had = self.lost, self._record()
        verdict = d.real.deliver()
        record = self._record()
        ours = Outcome.complete({"by": d.real.context.aws_request_id})
        if record is not None and record.outcome == ours and not (had is not None and had.outcome == ours):
            assert not lost_before, "a result was stored after the heartbeat marked the attempt lost"
            self.stored.append(ours)
        if isinstance(verdict, Redeliver) and not isinstance(verdict.error, ReportOwedError):
            d.phase = "new"  # another delivery holds the claim: this message comes back later
            return
        self._settled(d, verdict)

    # -- invariants -----------------------------------------------------------------------------
    @invariant()
    def at_most_one_result_is_stored(self) -> None:
        assert len(self.stored) <= 1

    @invariant()
    def every_accepted_report_is_the_stored_result(self) -> None:
        assert all(outcome in self.stored for outcome in self.engine.accepted)
        assert len({repr(o) for o in self.engine.accepted}) <= 1

    @invariant()
    def nothing_runs_after_a_result_is_stored(self) -> None:
        assert self.runs_started_after_store == 0

    @invariant()
    def the_record_never_moves_backwards(self) -> None:
        record = self._record()
        status = record.status if record is not None else None
        if self.last_status is not None and status is not None:
            assert ORDER[status] >= ORDER[self.last_status], f"{self.last_status} -> {status}"
            if self.last_status in (Status.STORED, Status.REPORTED):
                assert status in (Status.STORED, Status.REPORTED)
        self.last_status = status


#: The step each phase of a delivery takes next.
STEPS = {
    "new": DeliveryMachine._claim,
    "claimed": DeliveryMachine._begin,
    "begun": DeliveryMachine._run_handler,
    "ran": DeliveryMachine._store_result,
    "stored": DeliveryMachine._report,
}


class BeginLeaseMachine(DeliveryMachine):
    lease_model = BEGIN_LEASE


SETTINGS = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
DeliveryMachine.TestCase.settings = SETTINGS
BeginLeaseMachine.TestCase.settings = SETTINGS
test_delivery_with_an_activation_lease = DeliveryMachine.TestCase
test_delivery_with_a_begin_lease = BeginLeaseMachine.TestCase
