"""The dead-letter function: a job whose handler kept failing at the AWS level (crashes, timeouts,
throttles past maxReceiveCount) ends in its route's DLQ; this fails it at the engine with the
reason rather than letting its lease lapse in silence — or reports the stored result if the
handler did finish and only the report kept failing.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from workerless import observability
from workerless.errors import LeaseLostError, MessageFormatError, PipelineError
from workerless.model import ActivatedJob, Outcome
from workerless.observability import logger
from workerless.record import DONE, Status
from workerless.retry import CALLS


class ClaimStillLiveError(PipelineError):
    """The dead-lettered job's handler still holds a live claim: try again later."""


def process_dead_letter(
    body: str,
    *,
    message_id: str,
    receive_count: int,
    engine: Any,
    store: Any,
    fail_backoff_seconds: int,
    deadline: float,
) -> None:
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
    record = store.get(job.key)
    if record is not None and record.claim_live(time.time()):
        # A delivery is still running the handler (its redeliveries piled up while it ran): do
        # not fail a job that may yet finish. The DLQ redelivers this message later.
        raise ClaimStillLiveError(f"job {ref.job_id} is still being handled; settling it later")
    if record is not None and record.status in DONE:
        logger.info(
            "dead-lettered job was already settled", extra={"job_id": ref.job_id, "status": record.status.value}
        )
        return
    if record is not None and record.status is Status.STORED and record.outcome is not None:
        outcome = record.outcome
        note = "stored result reported from the dead-letter queue"
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
        CALLS.call(lambda: engine.report(ref, outcome), deadline=deadline)
    except LeaseLostError:
        note = "lease already gone when dead-lettered"
    store.mark_reported(job.key, note=note)
    observability.record(ref.job_type, "dead_lettered", job_id=ref.job_id)
    logger.warning("dead-lettered job settled at the engine", extra={"job_id": ref.job_id, "note": note})
