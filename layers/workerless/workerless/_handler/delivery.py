"""One SQS delivery of one job, through the delivery protocol: claim → decide → begin → run → store →
report. :meth:`Delivery.deliver` runs it and returns the :data:`~workerless._handler.verdict.Verdict`:
:class:`~workerless._handler.verdict.Ack` (nothing more is owed for the SQS record: delete it) or
:class:`~workerless._handler.verdict.Redeliver` (a batch item failure, with why)::

    claim in DynamoDB ──refused──► decide(): stored result? re-report it │ reported? ack │ lost? ack, don't run
        │                                    live claim elsewhere? leave it for redelivery
        ▼                                    (the lease model says who has the last word: the record,
        │                                     or the engine's lease acquire)
    begin (the lease model: nothing, or lease acquire under the claim; refused → ack without running)
        ▼
    run the user function once → Outcome (:func:`workerless._handler.execution.run_job`)
        ▼
    store the outcome (only while our claim stands; LOST meanwhile → hand the delivery back)
        ▼
    report it (retry policy inside the invocation) → mark reported
        └── still failing (the engine is down) → mark the report owed in the record, with this
            message's receipt handle, and redeliver: the message stays in flight (still counted
            against MaxInFlight) while the heartbeat re-reports the stored outcome every few seconds,
            marks it reported and deletes the message. Should that not happen within the queue's
            visibility timeout, SQS redelivers it and the next delivery re-reports the stored
            outcome; the handler never runs twice.

Every AWS call a delivery makes (claim, store, marks; botocore's retries included) starts before the
Lambda's timeout (:func:`workerless.aws.clients.call_deadline`), and the result store is tried again
until then rather than a fixed number of times. Errors nobody can act on here (the job table down,
a malformed payload) propagate: the record is then a batch item failure too, and after
maxReceiveCount the dead-letter function settles the job.

The steps are public so that the job record's state machine test drives them one at a time,
interleaved with other deliveries of the same job; :meth:`Delivery.deliver` is their only sequence.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, assert_never

from workerless import observability
from workerless._core.claimcheck import too_large_reason
from workerless._core.job import Job
from workerless._core.model import ActivatedJob, Outcome
from workerless._core.record import Decision, JobRecord, Status, decide
from workerless._core.report import report_stored
from workerless._core.retry import STORE_WRITES, retryable_store_error
from workerless._core.settings import DEFAULT_FAIL_BACKOFF_SECONDS, DEFAULT_MAX_PAYLOAD_BYTES
from workerless._core.settlement import acknowledge, acquire_or_leave, begin, hand_back, leave_to_the_engine
from workerless._handler.execution import HandlerFunction, run_job
from workerless._handler.typed import HandlerSpec
from workerless._handler.verdict import Ack, Claimed, ClaimHeldError, Redeliver, Refused, ReportOwedError, Verdict
from workerless.errors import MessageFormatError, RetryableEngineError, StoreError
from workerless.observability import Lifecycle, logger

if TYPE_CHECKING:
    from workerless._core.ports import JobStore, LambdaContext, PayloadStore
    from workerless.engines.base import Engine

T = TypeVar("T")

#: Time kept back from the Lambda's remaining time for storing and reporting after the run.
REPORT_MARGIN_SECONDS = 5.0
#: No AWS call (nor a botocore retry of one) starts later than this before the Lambda's timeout:
#: what the guard prevents is a retry loop or botocore's backoff carrying the invocation past its
#: timeout, where Lambda kills it before it returns its partial batch response. A quarter second is
#: time enough to return; a longer margin refuses the one write that matters most, the store of a
#: run that finished late (a DynamoDB write takes milliseconds), and its job is then run again.
AWS_MARGIN_SECONDS = 0.25
#: Added to the claim beyond the Lambda's remaining time: a claim must not expire while the
#: invocation that holds it can still be running.
CLAIM_MARGIN_SECONDS = 30.0


def remaining_seconds(context: LambdaContext | None, default: float = 900.0) -> float:
    """The Lambda's remaining time in seconds (``default`` without a Lambda context)."""
    getter = getattr(context, "get_remaining_time_in_millis", None)
    if getter is None:
        return default
    return max(0.0, float(getter()) / 1000.0)


def retrying_store(call: Callable[[], T], what: str, *, deadline: float) -> T:
    """``call`` a job-record write under :data:`workerless._core.retry.STORE_WRITES` (on top of botocore's
    own retries) until ``deadline`` (a ``time.monotonic()`` value: the invocation's AWS deadline).
    An outcome too large to store, a refusal that will not change (access denied, a malformed
    request) and the last StoreError when time runs out propagate."""

    def note(attempt: int, error: Exception) -> None:
        # One message for every such retry (a query finds them all); what failed is a field.
        logger.warning(
            "job record write failed; trying again", extra={"write": what, "error": str(error), "attempt": attempt}
        )

    return STORE_WRITES.call(call, deadline=deadline, retryable=retryable_store_error, on_retry=note)


def _other_message(found: JobRecord | None, message_id: str) -> bool:
    """Whether the claim in ``found`` was taken by another SQS message (owner ``request:message:nonce``),
    rather than by an earlier receipt of this same message."""
    return found is not None and found.owner is not None and f":{message_id}:" not in found.owner


class Delivery:
    """One SQS delivery of ``job`` to the handler function ``fn``.

    ``engine`` and ``store`` are the engine adapter and the job table; ``payloads`` the claim check's
    bucket (read only for a job whose variables are there); ``backoff_seconds`` and
    ``max_payload_bytes`` the wiring's settings' (the handler's backoff first). ``clock`` is the
    wall clock the claim is judged by. ``queue_url`` is the queue the message came from, noted with
    the receipt handle when a report is left owed, so the heartbeat can delete it.
    """

    def __init__(
        self,
        job: ActivatedJob,
        fn: HandlerFunction,
        *,
        engine: Engine,
        store: JobStore,
        message_id: str,
        receive_count: int = 1,
        context: LambdaContext | None = None,
        receipt: str | None = None,
        queue_url: str | None = None,
        backoff_seconds: int = DEFAULT_FAIL_BACKOFF_SECONDS,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        payloads: PayloadStore | None = None,
        clock: Callable[[], float] = time.time,
        spec: HandlerSpec | None = None,
        xray: bool = False,
    ) -> None:
        self.job = job
        self.xray = xray  # an X-Ray subsegment around the run (the wiring's WORKERLESS_XRAY_TRACING)
        self.fn = fn
        self.spec = spec
        self.engine = engine
        self.store = store
        self.message_id = message_id
        self.receive_count = receive_count
        self.context = context
        self.receipt = receipt
        self.queue_url = queue_url
        self.backoff_seconds = backoff_seconds
        self.max_payload_bytes = max_payload_bytes
        self.payloads = payloads
        self.clock = clock
        #: The engine's lease policy (workerless._core.lease): called where lease models differ.
        self.lease_model = engine.lease
        self.remaining = remaining_seconds(context)
        started = time.monotonic()
        #: Engine calls (the retry policy) stop here, leaving time to store and report.
        self.deadline = started + max(1.0, self.remaining - REPORT_MARGIN_SECONDS)
        #: botocore's retries and ours stop here, before Lambda would kill a call mid-way.
        self.aws_deadline = started + max(1.0, self.remaining - AWS_MARGIN_SECONDS)
        request_id = getattr(context, "aws_request_id", None) or "local"
        # Unique to this processing of this message: only a retry of our own claim call can match it
        # (32 random bits, as uuid4's first 8 hex digits were, without building a UUID).
        self.owner = f"{request_id}:{message_id}:{os.urandom(4).hex()}"
        # Which lease this delivery holds: a later lease of the same job id (node-flow re-leases a
        # lapsed task under its old id) may claim a record the lost lease left behind.
        self.lease = self.lease_model.fingerprint(job.ref)
        #: Set when the job's input is over this function's WORKERLESS_MAX_PAYLOAD_BYTES: failed, not run.
        self.too_large: str | None = None

    # -- the protocol -------------------------------------------------------------------------------
    def deliver(self) -> Verdict:
        """Run the whole protocol for this delivery; its verdict. Errors no step can act on propagate
        (the SQS record then fails, as a redelivery)."""
        from workerless.aws.clients import call_deadline

        with call_deadline(self.aws_deadline):
            if self.job.payload is not None:
                # Before the claim: a read that fails costs a redelivery, not a claim held until it expires.
                self.read_payload()
            claim = self.claim()
            match claim:
                case Refused():
                    return self.settle_refused(claim)
                case Claimed():
                    pass
                case _:
                    assert_never(claim)
            verdict = self.begin()
            if verdict is not None:
                return verdict
            observability.emit(
                self.job.ref.job_type, Lifecycle.STARTED, job_id=self.job.ref.job_id, receive_count=self.receive_count
            )
            outcome = self.run() if self.too_large is None else Outcome.fail(self.too_large, retries=0, terminal=True)
            return self.settle(self.store_outcome(outcome))

    def read_payload(self) -> None:
        """Read the job's variables from the claim check's bucket (the poller put them there: the
        message would have been over its queue's limit). A failed read fails the delivery (SQS
        redelivers it; a job whose object is gone ends in the dead-letter queue, which fails it at
        the engine)."""
        assert self.job.payload is not None
        limit = self.max_payload_bytes
        if self.job.payload.size > limit:
            # Not read: this function's memory cannot hold it (its MemorySize is below the poller's).
            self.too_large = too_large_reason("the job's input", self.job.payload.size, limit)
            return
        payloads = self.payloads
        if payloads is None:  # a delivery built without the claim check cannot read this job: redelivered
            raise StoreError("the job's variables are in the claim check and this delivery was given no payload store")
        try:
            variables = json.loads(payloads.get(self.job.payload))
        except StoreError as exc:
            logger.error("could not read the job's variables from the claim check", extra={"error": str(exc)})
            raise
        except ValueError as exc:
            raise MessageFormatError(f"the job's variables in S3 are not JSON: {exc}", field="payload") from exc
        if not isinstance(variables, dict):
            raise MessageFormatError("the job's variables in S3 are not a JSON object", field="payload")
        self.job = self.job.with_variables(variables)

    def claim(self) -> Claimed | Refused:
        """Claim the job record for this delivery, for the Lambda's remaining time plus a margin."""
        claimed, found = self.store.claim(
            self.job.record_key,
            owner=self.owner,
            claim_seconds=self.remaining + CLAIM_MARGIN_SECONDS,
            job_type=self.job.ref.job_type,
            lease=self.lease,
        )
        if claimed:
            return Claimed()
        return Refused(found, decide(found, self.clock(), self.lease))

    def settle_refused(self, refused: Refused) -> Verdict:
        """What a delivery whose claim was refused does, by :func:`~workerless._core.record.decide`."""
        job, found = self.job, refused.found
        match refused.decision:
            case Decision.REREPORT:
                if found is None or not found.has_outcome:
                    return self._held_elsewhere(found)  # nothing to re-report (yet): as for a claim
                logger.info("result already stored: re-reporting it, not running the handler again")
                stored = self.store.load_outcome(found)
                assert stored is not None  # has_outcome: the record holds the outcome or its reference
                observability.emit(job.ref.job_type, Lifecycle.REREPORTED, job_id=job.ref.job_id)
                return self.report(stored)
            case Decision.DONE:
                logger.info("job already reported: acknowledging the redelivery")
                # Begin leases: this can be another delivery of the finished job, with its own ack
                # token; unacknowledged, the engine would hand it out again every visibility timeout.
                return self._settle_unrun(found)
            case Decision.SKIP:
                logger.info("job no longer ours (%s): not running it", found.status.value if found else "?")
                verdict = self._settle_unrun(found)
                if isinstance(verdict, Ack):
                    observability.emit(job.ref.job_type, Lifecycle.SKIPPED, job_id=job.ref.job_id)
                return verdict
            case Decision.RETRY_LATER | Decision.RUN:
                # RUN: the claim expired between our conditional write and decide(): another
                # delivery is claiming it, as for a live claim.
                return self._held_elsewhere(found)
            case _:
                assert_never(refused.decision)

    def begin(self) -> Verdict | None:
        """What the lease policy asks before the run; None: go on and run the handler."""
        return self.lease_model.before_run(self)

    def run(self) -> Outcome:
        """Run the handler function once (:func:`~workerless._handler.execution.run_job`), with a lease check
        on the job record and the engine's task log (where it keeps one) as the job's log sink."""
        activated, store, lease = self.job, self.store, self.lease

        def lease_check() -> bool:
            try:
                record = store.get(activated.record_key)
            except StoreError as exc:
                # Unknown is not lost: a DynamoDB blip must not fail a healthy run (and spend a retry);
                # the next check asks again, and a lost lease still fences the report at the engine.
                logger.warning("could not read the job record to check the lease", extra={"error": str(exc)})
                return False
            # LOST, or already claimed again by a later lease of the same job id: stop either way.
            return record is not None and (record.status is Status.LOST or record.other_lease(lease))

        task_logs = self.engine.task_logs  # None: the engine keeps no task log (CloudWatch only)
        job = Job(
            activated,
            lambda_context=self.context,
            lease_check=lease_check,
            log_sink=None if task_logs is None else functools.partial(task_logs.send_logs, activated.ref),
            logger=logger,
        )
        return run_job(self.fn, job, backoff_seconds=self.backoff_seconds, spec=self.spec, xray=self.xray)

    def store_outcome(self, outcome: Outcome) -> Outcome | None:
        """Store before reporting, so a lost report is re-sent, never re-computed. The outcome to
        report (ours, or one an earlier receipt of ours stored first); None: the claim is lost.

        Until it is stored, the result exists only in this process: a store given up on means the
        attempt runs again once its claim expires (its side effects repeat under the same key). So a
        failed store is tried again until the invocation's AWS deadline, on top of botocore's own
        retries. A retry after a write that landed but whose answer was lost finds our own STORED
        record: the same result.
        """
        return retrying_store(lambda: self._store_once(outcome), "storing the result", deadline=self.aws_deadline)

    def settle(self, stored: Outcome | None) -> Verdict:
        """Report what :meth:`store_outcome` kept; hand the delivery back when nothing was kept."""
        if stored is not None:
            return self.report(stored)
        job = self.job
        logger.warning("lease lost while the handler ran: its result is discarded")
        # Begin leases: handed back, not acknowledged (no result goes with it): its next delivery is
        # refused at acquire and acknowledged then. Activation leases: the engine has the job.
        hand_back(job, engine=self.engine, deadline=self.deadline, reason="lease lost while the handler ran")
        observability.emit(job.ref.job_type, Lifecycle.LEASE_LOST, job_id=job.ref.job_id)
        return Ack("lease lost while the handler ran")

    def report(self, outcome: Outcome) -> Verdict:
        """Report a stored outcome. Still refused past the quick retries (an engine outage): the
        report is noted owed for the heartbeat, and the message stays in flight (:class:`Redeliver`)."""
        job, store = self.job, self.store
        if report_stored(job.ref, outcome, engine=self.engine, store=store, deadline=self.deadline, lease=self.lease):
            return Ack("reported")
        # The heartbeat re-reports it on a backoff of seconds and deletes this message once it lands.
        # Until then the message stays in flight (a batch item failure), so the route keeps counting
        # the job against MaxInFlight.
        try:
            receipt = self.receipt
            noted = store.mark_owed(job.record_key, receipt=receipt, queue_url=self.queue_url if receipt else None)
        except StoreError as exc:
            noted = False
            logger.warning("could not note the owed report", extra={"error": str(exc)})
        if noted:
            logger.info("report owed: the heartbeat re-sends it on a backoff of seconds")
        else:
            logger.warning(
                "report owed and not noted for the heartbeat: SQS redelivers it after its visibility timeout"
            )
        observability.emit(job.ref.job_type, Lifecycle.REPORT_OWED, job_id=job.ref.job_id)
        return Redeliver(ReportOwedError(f"report of job {job.ref.job_id} still owed"))

    # -- the steps the lease policy chooses among (workerless._core.lease.DeliverySteps) ----------------
    def _held_elsewhere(self, found: JobRecord | None) -> Verdict:
        """Another delivery claimed the job and may still be running it."""
        verdict = self.lease_model.held_elsewhere(self, other_message=_other_message(found, self.message_id))
        if verdict is not None:
            return verdict
        return Redeliver(ClaimHeldError(f"job {self.job.ref.job_id} is being handled by another delivery"))

    def contest(self) -> Verdict:
        """The engine handed out an unacknowledged delivery again (its visibility timeout passed
        while the claim holder runs) and the poller pulled it as a new message. Lease acquire
        decides, as the engine intends: refused → acknowledge it without running, or the engine
        keeps handing it out."""
        job, engine, deadline = self.job, self.engine, self.deadline
        begun = acquire_or_leave(job, engine=engine, deadline=deadline)
        if begun is None:
            return Ack("lease acquire kept failing: left to the engine")
        if not begun:
            logger.info("another delivery of this execution holds the lease: acknowledging this one")
            acknowledge(job, engine=engine, deadline=deadline)
            observability.emit(job.ref.job_type, Lifecycle.SKIPPED, job_id=job.ref.job_id)
            return Ack("another delivery holds the lease")
        # The claim holder has not acquired yet (or died before it could): this delivery now holds
        # the lease but not the claim, so it must not run. It is handed back (not acknowledged: no
        # result goes with it); its next delivery is refused at acquire and acknowledged, the
        # holder's acquire is refused and it stands down, and the unrenewed lease lapses: the engine
        # dispatches a new execution.
        logger.warning("lease acquired by a delivery that does not hold the claim; handing it back")
        hand_back(job, engine=engine, deadline=deadline, reason="the lease holder does not hold the claim")
        return Ack("the lease holder does not hold the claim")

    def _settle_unrun(self, found: JobRecord | None) -> Verdict:
        """Settle a delivery its job record says must not run (reported, lost or skipped), as the
        lease policy says: acknowledged at once where the record has the last word, after lease
        acquire where the engine's acquire has it."""
        return self.lease_model.settle_unrun(self, found)

    def acknowledge_unrun(self, found: JobRecord | None) -> Verdict:
        """Acknowledge (a no-op where the engine has nothing to acknowledge) at once."""
        acknowledge(self.job, engine=self.engine, deadline=self.deadline)
        return Ack("the job record says this delivery must not run")

    def acquire_unrun(self, found: JobRecord | None) -> Verdict:
        """A delivery is acknowledged without a result only once lease acquire has refused it
        (stale, duplicate, finished or held elsewhere): so acquire first. Acquired means the engine
        never applied what the record says happened: a stored outcome is reported under this lease;
        without one the delivery is handed back (its next delivery is refused and acknowledged, the
        lease lapses and the engine dispatches a new execution)."""
        job, engine, deadline = self.job, self.engine, self.deadline
        begun = acquire_or_leave(job, engine=engine, deadline=deadline)
        if begun is None:
            return Ack("lease acquire kept failing: left to the engine")
        if not begun:
            acknowledge(job, engine=engine, deadline=deadline)
            return Ack("the engine refused the lease")
        if found is not None and found.has_outcome:
            logger.warning("engine granted the lease of a job recorded as settled: reporting its stored outcome")
            stored = self.store.load_outcome(found)
            assert stored is not None  # has_outcome: the record holds the outcome or its reference
            return self.report(stored)
        logger.warning("engine granted the lease of a job recorded as not ours: handing the delivery back")
        hand_back(job, engine=engine, deadline=deadline, reason="the job record says this delivery must not run")
        return Ack("the job record says this delivery must not run")

    def acquire(self) -> Verdict | None:
        """Lease acquire under our claim, then the claim stamped so the heartbeat renews it."""
        job, engine, store = self.job, self.engine, self.store
        try:
            begun = self._begin()
        except RetryableEngineError as exc:
            leave_to_the_engine(job, exc, engine=engine, deadline=self.deadline)  # the claim was given back
            return Ack("lease acquire kept failing: left to the engine")
        if not begun:
            # Another delivery holds the engine's lease (a redelivery of a job already running).
            store.mark(job.record_key, Status.SKIPPED, reason="engine refused the lease", job_type=job.ref.job_type)
            acknowledge(job, engine=engine, deadline=self.deadline)
            observability.emit(job.ref.job_type, Lifecycle.SKIPPED, job_id=job.ref.job_id)
            return Ack("the engine refused the lease")
        if not self._mark_begun():
            # Our claim expired and was taken while we acquired: our result could not be stored, so
            # running would be wasted. The delivery is handed back (no result goes with it); the lease
            # we hold lapses unrenewed and the engine runs the job again as a new execution.
            hand_back(job, engine=engine, deadline=self.deadline, reason="the claim changed hands during lease acquire")
            observability.emit(job.ref.job_type, Lifecycle.SKIPPED, job_id=job.ref.job_id)
            return Ack("the claim changed hands during lease acquire")
        return None

    def _begin(self) -> bool:
        """Lease acquire under our claim. If it fails, the claim is given back before the error fails
        the message: the redelivery can then claim at once instead of waiting out a claim of the
        whole Lambda timeout. (An acquire that landed unanswered is harmless: the redelivery's
        acquire is refused, it is acknowledged, and the unrenewed lease lapses.)"""
        job, engine = self.job, self.engine
        try:
            # Through an outage, while the engine leaves the delivery with us (workerless._core.settlement).
            begun = begin(job, engine=engine, deadline=self.deadline)
        except Exception:
            try:
                self.store.release(job.record_key, owner=self.owner)
            except StoreError as exc:
                logger.warning("could not give back the claim; it expires on its own", extra={"error": str(exc)})
            raise
        return begun

    def _mark_begun(self) -> bool:
        """Tell the heartbeat the engine lease has begun, so it starts renewing it. False only when
        the claim is no longer ours.

        Tried like the store; if it never lands, the job still runs: a job longer than one lease
        then has its execution lapse, its report is discarded as stale and the engine runs the stage
        again — wasted work, nothing lost. Failing the delivery instead would be worse: we hold the
        lease, so every redelivery's acquire would be refused until it lapsed anyway.
        """
        key, owner = self.job.record_key, self.owner
        try:
            marked: bool = retrying_store(
                lambda: self.store.mark_begun(key, owner=owner), "noting the lease", deadline=self.aws_deadline
            )
        except StoreError as exc:
            logger.warning(
                "could not note the lease in the job record: the heartbeat will not renew it",
                extra={"error": str(exc)},
            )
            return True
        if not marked:
            logger.warning("the claim changed hands while the lease was acquired: not running the job")
        return marked

    def _store_once(self, outcome: Outcome) -> Outcome | None:
        from workerless.errors import OutcomeTooLargeError

        job, store, owner = self.job, self.store, self.owner
        job_type = job.ref.job_type
        try:
            found = store.store_outcome(job.record_key, owner=owner, outcome=outcome, job_type=job_type)
        except OutcomeTooLargeError as exc:
            outcome = Outcome.fail(f"result too large: {exc}", retries=0, terminal=True)
            found = store.store_outcome(job.record_key, owner=owner, outcome=outcome, job_type=job_type)
        if found is None:
            return outcome
        if found.status is Status.STORED and found.has_outcome:
            earlier: Outcome | None = store.load_outcome(found)
            return earlier  # an earlier delivery of ours stored first: report that one
        return None
