"""Giving a job the poller could not queue back to the engine: released for another worker, or
failed for good when it can never be queued. Every engine call runs under the retry policy with
the invocation's deadline; giving up is logged, and the engine's lease is the backstop."""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from workerless import observability
from workerless.errors import EngineError, FinalEngineError, RetryableEngineError
from workerless.lease import HandBack
from workerless.model import ActivatedJob, Outcome
from workerless.observability import logger
from workerless.retry import CALLS

if TYPE_CHECKING:
    from workerless.engines.base import Engine


def release(engine: Engine, job: ActivatedJob, reason: str, *, deadline: float) -> None:
    """``Engine.release`` under the retry policy; giving up is logged: the job then returns when
    its lease lapses (a begin lease: when the engine's visibility timeout requeues the delivery)."""
    try:
        CALLS.call(lambda: engine.release(job, reason), deadline=deadline)
    except EngineError as exc:
        logger.error(
            "could not hand the job back; it returns when its lease (or the gateway's visibility) lapses",
            extra={"job_id": job.ref.job_id, "error": str(exc)},
        )


def requeue(engine: Engine, job: ActivatedJob, reason: str, *, deadline: float) -> None:
    """Hand a delivery back to the engine at once (a begin-leased engine requeues it)."""
    logger.error("handing the delivery back", extra={"job_id": job.ref.job_id, "reason": reason})
    release(engine, job, reason, deadline=deadline)


def fail_for_good(engine: Engine, job: ActivatedJob, reason: str, *, deadline: float) -> None:
    """Fail a job that can never be queued, with the reason (no retries: it would only come back
    as large). A lease not held until acquired (a begin lease) is acquired here first: a result
    for an execution that is not running is discarded, and the acknowledgement after it would
    drop the job for good. Refused: acknowledged without a result (the seeds allow that); not
    settled (acquire or report kept failing): handed back as the lease model says."""
    logger.error("failing a job that cannot be queued", extra={"job_id": job.ref.job_id, "reason": reason})
    model = engine.lease
    if not model.held(None):
        try:
            begun = CALLS.call(lambda: engine.begin(job), deadline=deadline)
        except EngineError as exc:
            requeue(engine, job, f"could not acquire its lease to fail it: {exc}", deadline=deadline)
            return
        if not begun:
            logger.info("lease refused: acknowledging the delivery", extra={"job_id": job.ref.job_id})
            try:
                CALLS.call(lambda: engine.skip(job.ref), deadline=deadline)
            except EngineError as exc:
                logger.warning("could not acknowledge; the gateway requeues it", extra={"error": str(exc)})
            return
    try:
        CALLS.call(
            lambda: engine.report(job.ref, Outcome.fail(reason, retries=0, terminal=True)),
            deadline=deadline,
        )
    except (FinalEngineError, RetryableEngineError) as exc:
        match model.hand_back:
            case HandBack.RELEASE:
                requeue(engine, job, f"could not report its failure: {exc}", deadline=deadline)
            case HandBack.ACKNOWLEDGE:
                logger.error("could not fail the job; it returns when its lease lapses", extra={"error": str(exc)})
            case never:
                assert_never(never)
        return
    observability.emit(job.ref.job_type, "failed", **observability.correlation_keys(job), reason=reason)
