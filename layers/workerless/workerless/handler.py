"""The handler wrapper: an SQS batch of jobs in, a partial batch response out.

For every job in the batch (one record at a time, in order: :mod:`workerless.batch`)::

    claim in DynamoDB ──refused──► stored result? re-report it  │ reported? ack  │ lost? ack, don't run
        │                                                        │ live claim elsewhere? leave for redelivery
        ▼
    begin (StageNext lease acquire; False → ack without running)
        ▼
    run the user function once → Outcome (complete / fail / throw)
        ▼
    store the outcome (only while our claim stands; LOST meanwhile → drop it)
        ▼
    report it (retry policy inside the invocation) → mark reported
        └── still failing (the engine is down) → mark the report owed in the record, with this
            message's receipt handle, and make the record a batch item failure: the message stays
            in flight (still counted against MaxInFlight) while the heartbeat re-reports the stored
            outcome every few seconds, marks it reported and deletes the message. Should that not
            happen within the queue's visibility timeout, SQS redelivers it and the next delivery
            re-reports the stored outcome; the handler never runs twice.

Every AWS call the wrapper makes for a record (claim, store, marks; botocore's retries included)
starts before the Lambda's timeout (:func:`workerless.aws.clients.call_deadline`), and the result
store is tried again until then rather than a fixed number of times.

A record that keeps failing at the AWS level (crash, timeout, bad message) goes to the job DLQ
(every route's) after maxReceiveCount, where the dead-letter function fails the job at the engine with the reason.
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from workerless import observability
from workerless.errors import (
    ClaimHeldError,
    EngineError,
    MessageFormatError,
    ReportOwedError,
    RetryableEngineError,
    StoreError,
    TerminalError,
    ThrowError,
)
from workerless.job import Job
from workerless.model import ActivatedJob, JobRef, Outcome
from workerless.observability import logger
from workerless.record import Decision, JobRecord, Status, decide, lease_of
from workerless.report import report_stored
from workerless.retry import CALLS, STORE_WRITES, retryable_store_error

if TYPE_CHECKING:
    from workerless.engines.base import Engine
    from workerless.ports import JobStore, PayloadStore
    from workerless.wiring import Wiring

T = TypeVar("T")


class _LogSink(Protocol):
    """What a run needs of the engine: where ``job.log`` lines go."""

    def send_logs(self, ref: JobRef, lines: Sequence[Mapping[str, Any]]) -> None: ...


class _RecordReader(Protocol):
    """What a run needs of the job store: the record its lease check reads."""

    def get(self, key: str) -> JobRecord | None: ...


#: The URL of the queue the record being handled came from (its eventSourceARN), stored with the
#: receipt handle when a report is left owed: the heartbeat deletes the message there without
#: knowing the routes. A context variable: local mode runs a function's batches on several threads.
_record_queue_url: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "workerless_record_queue_url", default=None
)
HandlerFunction = Callable[[Job], Any]
LambdaHandler = Callable[[dict[str, Any], Any], dict[str, Any]]

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


def _other_message(found: JobRecord | None, message_id: str) -> bool:
    """Whether the claim in ``found`` was taken by another SQS message (owner ``request:message:nonce``),
    rather than by an earlier receipt of this same message."""
    return found is not None and found.owner is not None and f":{message_id}:" not in found.owner


def _remaining_seconds(context: Any, default: float = 900.0) -> float:
    getter = getattr(context, "get_remaining_time_in_millis", None)
    if getter is None:
        return default
    return max(0.0, float(getter()) / 1000.0)


def _retrying_store(call: Callable[[], T], what: str, *, deadline: float) -> T:
    """``call`` a job-record write under :data:`workerless.retry.STORE_WRITES` (on top of botocore's
    own retries) until ``deadline`` (a ``time.monotonic()`` value: the invocation's AWS deadline).
    An outcome too large to store, a refusal that will not change (access denied, a malformed
    request) and the last StoreError when time runs out propagate."""

    def note(attempt: int, error: Exception) -> None:
        logger.warning(f"{what} failed; trying again", extra={"error": str(error), "attempt": attempt})

    return STORE_WRITES.call(call, deadline=deadline, retryable=retryable_store_error, on_retry=note)


class JobProcessor:
    """Runs one job type's handler over SQS records. Built once per container by :func:`job_handler`."""

    def __init__(self, job_type: str, fn: HandlerFunction, *, backoff_seconds: int | None = None) -> None:
        self.job_type = job_type
        self.fn = fn
        self.backoff_seconds = backoff_seconds

    # -- the Lambda entry point ---------------------------------------------------------------------
    def handle_batch(self, event: dict[str, Any], context: Any, wiring: Wiring | None = None) -> dict[str, Any]:
        """Process one SQS batch of this job type; ``wiring``: the container's when None."""
        from workerless.aws.sqs import queue_url_of_arn
        from workerless.batch import SqsRecord, process_batch
        from workerless.runtime import current

        wired = wiring or current()

        # Every record of one batch comes from the function's one event source: its queue.
        sources = {
            r.get("messageId"): r.get("eventSourceARN") for r in event.get("Records") or [] if isinstance(r, dict)
        }

        def record_handler(record: SqsRecord) -> None:
            token = _record_queue_url.set(queue_url_of_arn(sources.get(record.message_id)))
            try:
                self.process(
                    record.body,
                    message_id=record.message_id,
                    receive_count=record.receive_count,
                    context=context,
                    receipt_handle=record.receipt_handle,
                    wiring=wired,
                )
            finally:
                _record_queue_url.reset(token)

        try:
            observability.configure_from_settings(wired.settings)  # X-Ray on or off (cached settings)
        except Exception:  # noqa: BLE001 - a settings error surfaces below, where the store is built
            logger.debug("settings not readable for observability", exc_info=True)
        # One invocation's metrics, written as EMF lines when the batch is done.
        with wired.observer.invocation():
            return dict(process_batch(event, record_handler))

    # -- one record ---------------------------------------------------------------------------------
    def process(
        self,
        body: str,
        *,
        message_id: str,
        receive_count: int,
        context: Any,
        receipt_handle: str | None = None,
        wiring: Wiring | None = None,
    ) -> None:
        """Handle one SQS record. Returns normally when nothing more is owed for it (delete it);
        raises when it must be redelivered, or kept in flight while its report is owed
        (``receipt_handle`` lets the heartbeat delete it then). ``wiring``: the container's when None."""
        from workerless.runtime import current

        wired = wiring or current()

        try:
            job = ActivatedJob.from_message(body)
        except MessageFormatError as exc:
            # Not ours to interpret: redelivery then the DLQ keeps it visible; never dropped.
            logger.error("message is not a workerless job", extra={"message_id": message_id, "problem": str(exc)})
            raise
        if job.ref.job_type != self.job_type:
            logger.error(
                "job delivered to the wrong handler",
                extra={"job_id": job.ref.job_id, "job_type": job.ref.job_type, "handler_type": self.job_type},
            )
            raise MessageFormatError(
                f"job of type {job.ref.job_type!r} reached the {self.job_type!r} handler", field="ref.job_type"
            )

        keys = {
            "job_id": job.ref.job_id,
            "job_type": job.ref.job_type,
            "engine": job.ref.engine,
            "instance_id": job.instance_id,
            "traceparent": job.traceparent,
            "trace_id": observability.trace_id_of(job.traceparent),
        }
        logger.thread_safe_append_keys(**keys)
        try:
            self._process(
                job,
                message_id=message_id,
                receive_count=receive_count,
                context=context,
                engine=wired.observed_engine,
                store=wired.store,
                receipt=receipt_handle,
                payloads=wired.payloads,
            )
        finally:
            logger.thread_safe_remove_keys(list(keys))

    def _process(
        self,
        job: ActivatedJob,
        *,
        message_id: str,
        receive_count: int,
        context: Any,
        engine: Engine,
        store: JobStore,
        receipt: str | None = None,
        payloads: PayloadStore | None = None,
    ) -> None:
        from workerless.aws.clients import call_deadline

        remaining = _remaining_seconds(context)
        started = time.monotonic()
        deadline = started + max(1.0, remaining - REPORT_MARGIN_SECONDS)
        # botocore's retries and ours stop here, before Lambda would kill a call mid-way.
        aws_deadline = started + max(1.0, remaining - AWS_MARGIN_SECONDS)
        with call_deadline(aws_deadline):
            self._process_within(
                job,
                message_id=message_id,
                receive_count=receive_count,
                context=context,
                engine=engine,
                store=store,
                receipt=receipt,
                payloads=payloads,
                remaining=remaining,
                deadline=deadline,
                aws_deadline=aws_deadline,
            )

    def _process_within(
        self,
        job: ActivatedJob,
        *,
        message_id: str,
        receive_count: int,
        context: Any,
        engine: Engine,
        store: JobStore,
        receipt: str | None,
        payloads: PayloadStore | None,
        remaining: float,
        deadline: float,
        aws_deadline: float,
    ) -> None:
        if job.payload is not None:
            # Before the claim: a read that fails costs a redelivery, not a claim held until it expires.
            job = _read_payload(job, payloads)
        request_id = getattr(context, "aws_request_id", None) or "local"
        # Unique to this processing of this message: only a retry of our own claim call can match it
        # (32 random bits, as uuid4's first 8 hex digits were, without building a UUID).
        owner = f"{request_id}:{message_id}:{os.urandom(4).hex()}"

        # Which lease this delivery holds: a later lease of the same job id (node-flow re-leases a
        # lapsed task under its old id) may claim a record the lost lease left behind.
        lease = lease_of(job.ref, engine.lease_from)
        claimed, found = store.claim(
            job.key,
            owner=owner,
            claim_seconds=remaining + CLAIM_MARGIN_SECONDS,
            job_type=job.ref.job_type,
            lease=lease,
        )
        if not claimed:
            decision = decide(found, time.time(), lease)
            if decision is Decision.REREPORT and found is not None and found.has_outcome:
                logger.info("result already stored: re-reporting it, not running the handler again")
                stored = store.load_outcome(found)
                assert stored is not None  # has_outcome: the record holds the outcome or its reference
                observability.record(job.ref.job_type, "rereported", job_id=job.ref.job_id)
                self._report(job, stored, engine=engine, store=store, deadline=deadline, receipt=receipt, lease=lease)
                return
            if decision is Decision.DONE:
                logger.info("job already reported: acknowledging the redelivery")
                # StageNext: this can be another gateway delivery of the finished execution, with its
                # own ack token; unacknowledged, the gateway would requeue it every visibility timeout.
                self._settle_unrun(job, found, engine=engine, store=store, deadline=deadline, receipt=receipt)
                return
            if decision is Decision.SKIP:
                logger.info("job no longer ours (%s): not running it", found.status.value if found else "?")
                self._settle_unrun(job, found, engine=engine, store=store, deadline=deadline, receipt=receipt)
                observability.record(job.ref.job_type, "skipped", job_id=job.ref.job_id)
                return
            if engine.lease_from == "begin" and _other_message(found, message_id):
                # StageNext: the gateway requeued an unacknowledged delivery (its visibility timeout
                # passed while the claim holder runs) and the poller pulled it again as a new
                # message. Lease acquire decides, as the engine intends: refused → acknowledge it
                # without running, or the gateway keeps requeuing it.
                begun = self._acquire_or_leave(job, engine=engine, deadline=deadline)
                if begun is None:
                    return
                if not begun:
                    logger.info("another delivery of this execution holds the lease: acknowledging this one")
                    _acknowledge(job, engine=engine, deadline=deadline)
                    observability.record(job.ref.job_type, "skipped", job_id=job.ref.job_id)
                    return
                # The claim holder has not acquired yet (or died before it could): this delivery now
                # holds the lease but not the claim, so it must not run. It is handed back to the
                # gateway (not acknowledged: no result goes with it); its next delivery is refused at
                # acquire and acknowledged, the holder's acquire is refused and it stands down, and the
                # unrenewed lease lapses: StageNext dispatches a new execution.
                logger.warning("lease acquired by a delivery that does not hold the claim; handing it back")
                _hand_back(job, engine=engine, deadline=deadline, reason="the lease holder does not hold the claim")
                return
            raise ClaimHeldError(f"job {job.ref.job_id} is being handled by another delivery")

        if engine.lease_from == "begin":
            try:
                begun = self._begin(job, owner=owner, engine=engine, store=store, deadline=deadline)
            except RetryableEngineError as exc:
                _leave_to_the_gateway(exc)  # the claim was given back
                return
            if not begun:
                # Another delivery holds the engine's lease (a redelivery of a job already running).
                store.mark(job.key, Status.SKIPPED, reason="engine refused the lease", job_type=job.ref.job_type)
                _acknowledge(job, engine=engine, deadline=deadline)
                observability.record(job.ref.job_type, "skipped", job_id=job.ref.job_id)
                return
        if engine.lease_from == "begin" and not self._mark_begun(job, owner=owner, store=store, deadline=aws_deadline):
            # Our claim expired and was taken while we acquired: our result could not be stored, so
            # running would be wasted. The delivery is handed back (no result goes with it); the lease
            # we hold lapses unrenewed and StageNext runs the stage again as a new execution.
            _hand_back(job, engine=engine, deadline=deadline, reason="the claim changed hands during lease acquire")
            observability.record(job.ref.job_type, "skipped", job_id=job.ref.job_id)
            return

        observability.record(job.ref.job_type, "started", job_id=job.ref.job_id, receive_count=receive_count)
        outcome = self._run(job, context=context, engine=engine, store=store, lease=lease)
        stored = self._store(job, outcome, owner=owner, store=store, deadline=aws_deadline)
        if stored is None:
            logger.warning("lease lost while the handler ran: its result is discarded")
            # StageNext: handed back, not acknowledged (no result goes with it): its next delivery is
            # refused at acquire and acknowledged then. Elsewhere a no-op: the engine has the job.
            _hand_back(job, engine=engine, deadline=deadline, reason="lease lost while the handler ran")
            observability.record(job.ref.job_type, "lease_lost", job_id=job.ref.job_id)
            return
        self._report(job, stored, engine=engine, store=store, deadline=deadline, receipt=receipt, lease=lease)

    def _acquire_or_leave(self, job: ActivatedJob, *, engine: Engine, deadline: float) -> bool | None:
        """Lease acquire for a delivery that does not hold the claim; None when acquire kept failing
        retryably and the delivery is left to the gateway (the caller returns)."""
        try:
            begun: bool = CALLS.call(lambda: engine.begin(job), deadline=deadline)
        except RetryableEngineError as exc:
            _leave_to_the_gateway(exc)
            return None
        return begun

    def _settle_unrun(
        self,
        job: ActivatedJob,
        found: JobRecord | None,
        *,
        engine: Engine,
        store: JobStore,
        deadline: float,
        receipt: str | None = None,
    ) -> None:
        """Acknowledge a delivery its job record says must not run (reported, lost or skipped).

        StageNext acknowledges a delivery without a result only once lease acquire has refused it
        (stale, duplicate, finished or held elsewhere): so acquire first. Acquired means StageNext
        never applied what the record says happened: a stored outcome is reported under this lease;
        without one the delivery is handed back (its next delivery is refused and acknowledged, the
        lease lapses and StageNext dispatches a new execution). Engines without lease acquire
        acknowledge (a no-op) at once.
        """
        if engine.lease_from != "begin":
            _acknowledge(job, engine=engine, deadline=deadline)
            return
        begun = self._acquire_or_leave(job, engine=engine, deadline=deadline)
        if begun is None:
            return
        if not begun:
            _acknowledge(job, engine=engine, deadline=deadline)
            return
        if found is not None and found.has_outcome:
            logger.warning("engine granted the lease of a job recorded as settled: reporting its stored outcome")
            stored = store.load_outcome(found)
            assert stored is not None  # has_outcome: the record holds the outcome or its reference
            self._report(job, stored, engine=engine, store=store, deadline=deadline, receipt=receipt)
            return
        logger.warning("engine granted the lease of a job recorded as not ours: handing the delivery back")
        _hand_back(job, engine=engine, deadline=deadline, reason="the job record says this delivery must not run")

    # engine, store: workerless.testing.run_handler passes the two stubs of what a run uses (its log
    # sink and the lease check's read), not a whole Engine and JobStore.
    def _run(
        self, activated: ActivatedJob, *, context: Any, engine: _LogSink, store: _RecordReader, lease: str = ""
    ) -> Outcome:
        def lease_check() -> bool:
            try:
                record = store.get(activated.key)
            except StoreError as exc:
                # Unknown is not lost: a DynamoDB blip must not fail a healthy run (and spend a retry);
                # the next check asks again, and a lost lease still fences the report at the engine.
                logger.warning("could not read the job record to check the lease", extra={"error": str(exc)})
                return False
            # LOST, or already claimed again by a later lease of the same job id: stop either way.
            return record is not None and (record.status is Status.LOST or record.other_lease(lease))

        job = Job(
            activated,
            lambda_context=context,
            lease_check=lease_check,
            log_sink=functools.partial(engine.send_logs, activated.ref),
            logger=logger,
        )
        retries_after_failure = None if activated.retries is None else max(0, activated.retries - 1)
        try:
            # A span whose parent is the engine's traceparent; pickup latency and run time metrics.
            with observability.job_span(activated):
                result = self.fn(job)
        except TerminalError as exc:
            # As for any other exception: the stack goes to the function's log here and, where the
            # engine keeps task logs (node-flow), to the task's log before the failure is reported,
            # so the lines explaining the failure are there when someone opens the failed task.
            stack = traceback.format_exc()
            logger.exception("handler raised TerminalError", extra={"error": f"{type(exc).__name__}: {exc}"})
            outcome = Outcome.fail(str(exc) or "terminal error", retries=0, terminal=True, stack=stack)
        except ThrowError as exc:
            outcome = Outcome.throw(exc.error_code, exc.error_message, exc.variables)
        except Exception as exc:  # noqa: BLE001 - any other exception fails the job, with the stack
            stack = traceback.format_exc()
            # The function's log gets it here; engines that keep task logs get it with the report
            # (the adapter writes outcome.stack before reporting, re-reports included).
            logger.exception("handler raised", extra={"error": f"{type(exc).__name__}: {exc}"})
            outcome = Outcome.fail(
                f"{type(exc).__name__}: {exc}",
                retries=retries_after_failure,
                backoff_seconds=self._backoff(),
                stack=stack,
            )
        else:
            outcome = self._completion(result, retries_after_failure)
        finally:
            job.flush_logs()
        return outcome

    def _completion(self, result: Any, retries_after_failure: int | None) -> Outcome:
        if result is None:
            return Outcome.complete({})
        if not isinstance(result, dict):
            return Outcome.fail(
                f"handler returned {type(result).__name__}, not a JSON object (dict) of variables",
                retries=retries_after_failure,
                backoff_seconds=self._backoff(),
            )
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return Outcome.fail(
                f"handler returned variables that are not JSON-serialisable: {exc}",
                retries=retries_after_failure,
                backoff_seconds=self._backoff(),
            )
        return Outcome.complete(result)

    def _backoff(self) -> int:
        if self.backoff_seconds is not None:
            return self.backoff_seconds
        from workerless.settings import get_settings

        return get_settings().fail_backoff_seconds

    def _begin(self, job: ActivatedJob, *, owner: str, engine: Engine, store: JobStore, deadline: float) -> bool:
        """Lease acquire (StageNext) under our claim. If it fails, the claim is given back before the
        error fails the message: the redelivery can then claim at once instead of waiting out a
        claim of the whole Lambda timeout. (An acquire that landed unanswered is harmless: the
        redelivery's acquire is refused, it is acknowledged, and the unrenewed lease lapses.)"""
        try:
            begun: bool = CALLS.call(lambda: engine.begin(job), deadline=deadline)
        except Exception:
            try:
                store.release(job.key, owner=owner)
            except StoreError as exc:
                logger.warning("could not give back the claim; it expires on its own", extra={"error": str(exc)})
            raise
        return begun

    def _mark_begun(self, job: ActivatedJob, *, owner: str, store: JobStore, deadline: float) -> bool:
        """Tell the heartbeat the engine lease has begun (StageNext), so it starts renewing it.
        False only when the claim is no longer ours.

        Tried like the store; if it never lands, the job still runs: a job longer than one lease
        then has its execution lapse, its report is discarded as stale and StageNext runs the stage
        again — wasted work, nothing lost. Failing the delivery instead would be worse: we hold the
        lease, so every redelivery's acquire would be refused until it lapsed anyway.
        """
        try:
            marked: bool = _retrying_store(
                lambda: store.mark_begun(job.key, owner=owner), "noting the lease", deadline=deadline
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

    def _store(
        self, job: ActivatedJob, outcome: Outcome, *, owner: str, store: JobStore, deadline: float
    ) -> Outcome | None:
        """Store before reporting, so a lost report is re-sent, never re-computed. None: lost.

        Until it is stored, the result exists only in this process: a store given up on means the
        attempt runs again once its claim expires (its side effects repeat under the same key). So a
        failed store is tried again until the invocation's AWS deadline, on top of botocore's own
        retries. A retry after a write that landed but whose answer was lost finds our own STORED
        record: the same result.
        """
        return _retrying_store(
            lambda: self._store_once(job, outcome, owner=owner, store=store), "storing the result", deadline=deadline
        )

    def _store_once(self, job: ActivatedJob, outcome: Outcome, *, owner: str, store: JobStore) -> Outcome | None:
        from workerless.errors import OutcomeTooLargeError

        job_type = job.ref.job_type
        try:
            found = store.store_outcome(job.key, owner=owner, outcome=outcome, job_type=job_type)
        except OutcomeTooLargeError as exc:
            outcome = Outcome.fail(f"result too large: {exc}", retries=0, terminal=True)
            found = store.store_outcome(job.key, owner=owner, outcome=outcome, job_type=job_type)
        if found is None:
            return outcome
        if found.status is Status.STORED and found.has_outcome:
            earlier: Outcome | None = store.load_outcome(found)
            return earlier  # an earlier delivery of ours stored first: report that one
        return None

    def _report(
        self,
        job: ActivatedJob,
        outcome: Outcome,
        *,
        engine: Engine,
        store: JobStore,
        deadline: float,
        receipt: str | None = None,
        lease: str | None = None,
    ) -> None:
        if report_stored(job.ref, outcome, engine=engine, store=store, deadline=deadline, lease=lease):
            return
        # Still refused past the quick retries (an engine outage): the heartbeat re-reports it on a
        # backoff of seconds and deletes this message once it lands. Until then the message stays in
        # flight (a batch item failure), so the route keeps counting the job against MaxInFlight.
        try:
            noted = store.mark_owed(job.key, receipt=receipt, queue_url=_record_queue_url.get() if receipt else None)
        except StoreError as exc:
            noted = False
            logger.warning("could not note the owed report", extra={"error": str(exc)})
        if noted:
            logger.info("report owed: the heartbeat re-sends it on a backoff of seconds")
        else:
            logger.warning(
                "report owed and not noted for the heartbeat: SQS redelivers it after its visibility timeout"
            )
        observability.record(job.ref.job_type, "report_owed", job_id=job.ref.job_id)
        raise ReportOwedError(f"report of job {job.ref.job_id} still owed")


def _read_payload(job: ActivatedJob, payloads: PayloadStore | None) -> ActivatedJob:
    """The job with its variables read from the claim check's bucket (the poller put them there: the
    message would have been over its queue's limit). A failed read fails the delivery (SQS redelivers
    it; a job whose object is gone ends in the dead-letter queue, which fails it at the engine).
    ``payloads``: the bucket to read (None: the container's)."""
    if payloads is None:
        from workerless.runtime import get_payloads

        payloads = get_payloads()
    assert job.payload is not None
    try:
        data = payloads.get(job.payload)
        variables = json.loads(data)
    except StoreError as exc:
        logger.error("could not read the job's variables from the claim check", extra={"error": str(exc)})
        raise
    except ValueError as exc:
        raise MessageFormatError(f"the job's variables in S3 are not JSON: {exc}", field="payload") from exc
    if not isinstance(variables, dict):
        raise MessageFormatError("the job's variables in S3 are not a JSON object", field="payload")
    return job.with_variables(variables)


def _leave_to_the_gateway(exc: RetryableEngineError) -> None:
    """StageNext lease acquire kept failing: the delivery is left unacknowledged and its SQS message
    completes. The gateway requeues an unacknowledged delivery after its visibility timeout (60 s),
    and the poller pulls it again then.

    Why not fail the message: SQS would hold it for the job queue's visibility timeout (720 s) to no
    purpose — its ack token expires with the gateway's 60 s, and the gateway hands the delivery out
    again meanwhile — while it counts against the route's capacity and keeps a run of local mode
    from ever going idle. Why not requeue it (ack requeue:true): the next pull would take it straight
    back, and while acquire keeps failing (the engine's lease service down, its gateway up) that is
    a loop of pulls, SQS messages and invocations every few seconds per stage that keeps the poller
    lingering, relaying, never resting. Left to the gateway it costs one delivery a minute."""
    logger.warning(
        "lease acquire kept failing: the engine's gateway hands the delivery out again after its visibility timeout",
        extra={"error": str(exc), "status": exc.status},
    )


def _acknowledge(job: ActivatedJob, *, engine: Engine, deadline: float) -> None:
    """``engine.skip`` with the retry policy. Giving up is logged, not raised: the delivery is then
    unacknowledged, and StageNext's gateway requeues it after its visibility timeout (60 s); its next
    delivery is refused at acquire and acknowledged. Failing the SQS message instead would only hold
    it for the queue's visibility timeout, to redeliver a token that has expired by then."""
    try:
        CALLS.call(lambda: engine.skip(job.ref), deadline=deadline)
    except EngineError as exc:
        logger.warning("could not acknowledge the delivery; the engine hands it out again", extra={"error": str(exc)})


def _hand_back(job: ActivatedJob, *, engine: Engine, deadline: float, reason: str) -> None:
    """Give a delivery the handler will not run back to the engine without a result: StageNext
    requeues it (ack requeue:true) — never an acknowledgement, which would drop a stage whose lease
    no result settles. Engines whose lease starts at activation own the job already: nothing to do
    (``skip`` is a no-op there; their lease lapses or was lost). Giving up is logged: StageNext's
    gateway requeues an unacknowledged delivery after its visibility timeout anyway."""
    if engine.lease_from != "begin":
        _acknowledge(job, engine=engine, deadline=deadline)
        return
    try:
        CALLS.call(lambda: engine.release(job, reason), deadline=deadline)
    except EngineError as exc:
        logger.warning("could not hand the delivery back; the gateway requeues it", extra={"error": str(exc)})


def job_handler(job_type: str, *, backoff_seconds: int | None = None) -> Callable[[HandlerFunction], LambdaHandler]:
    """Turn ``fn(job) -> dict`` into the Lambda entry point for one job type.

    Returning a dict completes the job with those variables; raising :class:`TerminalError` fails
    it with no retries left; raising :class:`ThrowError` throws a business error; any other
    exception fails it with ``retries - 1`` and a backoff (``backoff_seconds``, default
    WORKERLESS_FAIL_BACKOFF_SECONDS). The Lambda entry point takes an optional ``wiring``
    (:class:`~workerless.wiring.Wiring`; the container's when None), as the library's own do.

    Example:
        >>> from workerless import Job, TerminalError, job_handler
        >>> @job_handler("charge-payment")
        ... def handler(job: Job) -> dict:
        ...     return {"paymentOk": True}
    """

    def decorate(fn: HandlerFunction) -> LambdaHandler:
        processor = JobProcessor(job_type, fn, backoff_seconds=backoff_seconds)

        @functools.wraps(fn)
        def lambda_handler(event: dict[str, Any], context: Any, wiring: Wiring | None = None) -> dict[str, Any]:
            return processor.handle_batch(event, context, wiring)

        lambda_handler.processor = processor  # type: ignore[attr-defined]
        lambda_handler.job_type = job_type  # type: ignore[attr-defined]
        return lambda_handler

    return decorate
