"""The dead-letter function: a job whose handler kept failing at the AWS level (crashes, timeouts,
throttles past maxReceiveCount) ends in the job DLQ every route shares; this fails it at the engine
with the reason rather than letting its lease lapse in silence — or reports the stored result if
the handler did finish and only the report kept failing. The job (its type, its engine's handle)
is the message body's, never read from the queue a message came through.

Every dead letter is settled once, one way or the other::

    engine accepts the report (or says the lease is gone) ─► record REPORTED, JobsDeadLettered
    engine refuses it for good (404, 400, a malformed job) ─► ERROR line with the reason, record
                                                              REPORTED, DeadLettersRejected; deleted
    engine unavailable (5xx, 429, timeout) / claim still live ─► batch item failure: the DLQ hands the
                                                              message back after its visibility
                                                              timeout (360 s), until it settles or
                                                              the DLQ's 14-day retention ends

A refusal for good is final because the same request would meet the same refusal: retried, it would
cost an engine call every 360 s for 14 days (about 3,300) and settle nothing.

A begin-leased engine applies a report only under the execution's lease: a result for an
execution that is not running is discarded, and its delivery would never come back. A job whose
lease is held (:meth:`~workerless._core.lease.LeasePolicy.held`: the handler acquired it, the record says so)
is reported under it; otherwise the lease is acquired here first, and a refusal means the engine has
moved on (the execution finished, is stale, or another delivery holds it): nothing of ours is left
to report.

The queue has no event source (Lambda's would long-poll it all month, about $0.26 idle): the
function runs on a one-minute schedule and drains it itself (:func:`drain`): short polls of up to
10 letters (one billed request each, empty or not), each letter settled and then deleted, until the
queue answers empty, :data:`MAX_RECEIVES` receives, or too little of the invocation is left. A letter
that could not be settled is not deleted: the queue hands it back after its visibility timeout.
docs/assumptions.md ("The job dead-letter queue is drained on a schedule") has the costs and the
time a letter waits.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workerless import observability
from workerless._core import settlement
from workerless._core.model import ActivatedJob, Outcome
from workerless._core.record import DONE, JobRecord, Status
from workerless.errors import (
    ClaimStillLiveError,
    FinalEngineError,
    LeaseLostError,
    MessageFormatError,
    PayloadError,
    PayloadGoneError,
    PayloadTooLargeError,
    QueueError,
    StoreError,
)
from workerless.observability import Lifecycle, logger

if TYPE_CHECKING:
    from workerless._core.batch import SqsRecord
    from workerless._core.ports import Clock, JobStore, Queues
    from workerless.engines.base import Engine

#: Receives one scheduled drain makes at most (10 letters each): a larger backlog is left for the
#: next schedule, a minute later, rather than looping on.
MAX_RECEIVES = 20


@dataclass(slots=True)
class DrainReport:
    """What one drain did: letters received, settled (and deleted), and left for the queue to hand
    back after its visibility timeout (not settled yet, or not reached before the deadline)."""

    receives: int = 0
    received: int = 0
    settled: int = 0
    left: int = 0

    def counts(self) -> dict[str, int]:
        """The counts by name (the entry point's answer, the drain's log line)."""
        return {"receives": self.receives, "received": self.received, "settled": self.settled, "left": self.left}


def drain(
    queue_url: str,
    *,
    queues: Queues,
    settle: Callable[[SqsRecord], None],
    deadline: float,
    reserve_seconds: float,
    clock: Clock = time.monotonic,
) -> DrainReport:
    """Receive the letters waiting in ``queue_url`` and ``settle`` each; delete the settled ones.

    ``settle`` returns when nothing more is owed for a letter and raises when it must be tried
    again later: that letter stays in flight and the queue hands it back after its visibility
    timeout. No receive and no letter is started with less than ``reserve_seconds`` left before
    ``deadline`` (on ``clock``); a letter received but not reached is left the same way.
    """
    report = DrainReport()
    while report.receives < MAX_RECEIVES and clock() + reserve_seconds < deadline:
        report.receives += 1
        letters = queues.receive(queue_url)
        if not letters:
            break  # a short poll of an empty queue (or of a sample of its servers): the next schedule looks again
        report.received += len(letters)
        for message in letters:
            if clock() + reserve_seconds >= deadline:
                report.left += 1
                continue
            try:
                settle(message)
            except Exception as exc:  # noqa: BLE001 - a letter not settled comes back; the others go on
                report.left += 1
                logger.warning(
                    "dead letter not settled yet; the queue hands it back after its visibility timeout",
                    extra={"message_id": message.message_id, "error": type(exc).__name__, "reason": str(exc)},
                )
                continue
            try:
                queues.delete(queue_url, message.receipt_handle)
            except QueueError as exc:
                # Settled all the same: when it comes back, its record says so and it is deleted then.
                logger.warning(
                    "could not delete a settled dead letter",
                    extra={"message_id": message.message_id, "error": str(exc)},
                )
            report.settled += 1
    return report


def process_dead_letter(
    body: str,
    *,
    message_id: str,
    receive_count: int,
    engine: Engine,
    store: JobStore,
    fail_backoff_seconds: int,
    deadline: float,
) -> None:
    """Settle one dead letter at the engine. Returns when nothing more is owed for it (delete it);
    raises when it must be tried again later (a retryable engine error, a live claim)."""
    try:
        job = ActivatedJob.from_message(body)
    except MessageFormatError as exc:
        # Not a job: nothing at an engine to fail. Logged (without the body, which may carry
        # credentials) so an operator can find it; the DLQ alarm has already fired.
        digest = hashlib.sha256(body.encode()).hexdigest()[:16]
        logger.error(
            "dead letter is not a workerless job",
            extra={"message_id": message_id, "sha256": digest, "problem": str(exc)},
        )
        return
    ref = job.ref
    record = store.get(job.record_key)
    if record is not None and record.claim_live(time.time()):
        # A delivery is still running the handler (its redeliveries piled up while it ran): do
        # not fail a job that may yet finish. The DLQ redelivers this message later.
        raise ClaimStillLiveError(f"job {ref.job_id} is still being handled; settling it later")
    if record is not None and record.status in DONE:
        logger.info(
            "dead-lettered job was already settled", extra={"job_id": ref.job_id, "status": record.status.value}
        )
        return
    if record is not None and record.status is Status.STORED and record.has_outcome:
        # Read from the claim check's bucket when it was too large for the record; a read that may
        # succeed later propagates (the DLQ hands the message back later).
        try:
            stored = store.load_outcome(record)
        except StoreError as exc:
            if exc.retryable:
                raise
            if isinstance(exc, PayloadError) and not isinstance(exc, PayloadGoneError):
                # S3 refused the read (AccessDenied): a permission to fix, not a lost result. The
                # letter comes back in 360 s and reports the result once the read is allowed.
                logger.error(
                    "dead-lettered job's stored result cannot be read: a configuration fault, not a lost "
                    "result; the letter is kept",
                    extra={"job_id": ref.job_id, "job_type": ref.job_type, "error": str(exc), "code": exc.code},
                )
                raise
            stored, lost = None, exc
        if stored is not None:
            outcome = stored
            note = "stored result reported from the dead-letter queue"
        else:
            outcome, note = _result_lost(job, record, lost, fail_backoff_seconds=fail_backoff_seconds)
    else:
        state = record.status.value if record is not None else "never claimed"
        outcome = Outcome.fail(
            f"the {ref.job_type} handler Lambda did not finish this job (delivery failed at the AWS level; "
            f"last state: {state}); see the function's logs",
            retries=None if job.retries is None else max(0, job.retries - 1),
            backoff_seconds=fail_backoff_seconds,
        )
        note = "failed from the dead-letter queue"
    try:
        note = _settle(job, record, outcome, note, engine=engine, deadline=deadline)
    except (FinalEngineError, MessageFormatError) as exc:
        _rejected(job, exc, store=store)
        return
    store.mark_reported(job.record_key, note=note)
    observability.emit(ref.job_type, Lifecycle.DEAD_LETTERED, job_id=ref.job_id)
    logger.warning("dead-lettered job settled at the engine", extra={"job_id": ref.job_id, "note": note})


def _result_lost(
    job: ActivatedJob, record: JobRecord, exc: StoreError, *, fail_backoff_seconds: int
) -> tuple[Outcome, str]:
    """The stored result can never be read (its claim check object expired with the bucket's 7-day
    lifecycle, was deleted, or does not match its pointer): retried, the letter would come back every
    360 s for the queue's 14 days. The job is failed at the engine instead, naming why; a refusal
    of that is final like any other (:func:`_rejected`)."""
    ref = job.ref
    where = record.outcome_ref.key if record.outcome_ref is not None else "the job record"
    reason = (
        f"the {ref.job_type} handler stored its result in the claim check ({where}) but it can no longer be "
        f"read ({exc.code or 'unreadable'}: expired with the bucket's lifecycle, deleted, or not what the record "
        "points at); job failed instead"
    )
    logger.error(
        "dead-lettered job's stored result is gone: failing the job at the engine instead of retrying",
        extra={"job_id": ref.job_id, "job_type": ref.job_type, "error": str(exc), "code": exc.code},
    )
    outcome = Outcome.fail(
        reason,
        retries=None if job.retries is None else max(0, job.retries - 1),
        backoff_seconds=fail_backoff_seconds,
    )
    return outcome, "stored result unreadable when dead-lettered: job failed instead"


def _settle(
    job: ActivatedJob, record: JobRecord | None, outcome: Outcome, note: str, *, engine: Engine, deadline: float
) -> str:
    """Report ``outcome`` (under the lease, acquired first where it is not held yet); the note to
    keep in the record. Retryable errors propagate (the DLQ tries again later)."""
    ref = job.ref
    if not engine.lease.held(record) and not settlement.begin(job, engine=engine, deadline=deadline, hold=False):
        # Refused: the execution finished, is stale, or another delivery holds it. The seed lets a
        # refused delivery be acknowledged without a result (its token has most likely expired: a
        # 404, which the engine's acknowledge takes as done).
        settlement.acknowledge(job, engine=engine, deadline=deadline, hold=False)
        return "lease refused when dead-lettered: the engine has settled or re-dispatched it"
    try:
        settlement.report(ref, outcome, engine=engine, deadline=deadline)
    except LeaseLostError:
        return "lease already gone when dead-lettered"
    except PayloadTooLargeError as exc:
        # A stored result over the engine's cap: fail the job with the cap, as the handler does.
        replacement = Outcome.fail(
            f"result is over the engine's cap of {exc.cap} bytes; job failed instead", retries=0, terminal=True
        )
        settlement.report(ref, replacement, engine=engine, deadline=deadline)
        return f"{note}: result over the engine's cap of {exc.cap} bytes, job failed instead"
    return note


def _rejected(job: ActivatedJob, exc: Exception, *, store: JobStore) -> None:
    """A refusal for good: an ERROR line with the reason, the DeadLettersRejected metric, the record
    marked settled; the message is deleted (the caller returns)."""
    ref = job.ref
    status = getattr(exc, "status", None)
    logger.error(
        "engine refused to settle the dead-lettered job; not retrying: the same request would be refused again",
        extra={
            "job_id": ref.job_id,
            "job_type": ref.job_type,
            "reason": str(exc),
            "error": type(exc).__name__,
            "status": status,
        },
    )
    observability.emit(ref.job_type, Lifecycle.DEAD_LETTER_REJECTED, job_id=ref.job_id, status=status)
    try:
        store.mark_reported(
            job.record_key, note=f"engine refused the dead-letter settlement: {type(exc).__name__} {status}"
        )
    except StoreError as error:
        # The message is deleted either way: a redelivery of the job would meet the same refusal.
        logger.warning("could not mark the rejected dead letter settled", extra={"error": str(error)})
