"""Reporting a stored outcome to the engine: one path for the handler wrapper (first report, and the
re-report of a redelivery) and for the heartbeat (the re-report of a report left owed).

::

    report (settlement.report: the retry policy, inside the caller's deadline)
      accepted ─────────────► mark REPORTED                                   → settled
      409 / lease lost ─────► mark REPORTED ("lease lost at report"): someone
                              else has or finished the job                    → settled
      over the engine's cap ► store a terminal failure naming the cap, report that instead
      retryable, still ─────► nothing written                                 → still owed
      any other final error ► propagates
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workerless import observability
from workerless._core import settlement
from workerless._core.model import JobRef, Outcome
from workerless.errors import LeaseLostError, PayloadTooLargeError, RetryableEngineError
from workerless.observability import Lifecycle, logger

if TYPE_CHECKING:
    from workerless._core.ports import JobStore
    from workerless.engines.base import Engine

#: The lifecycle event of an accepted outcome, by kind.
EVENTS: dict[str, Lifecycle] = {"complete": Lifecycle.COMPLETED, "fail": Lifecycle.FAILED, "throw": Lifecycle.THROWN}


#: A reason longer than this is cut in the log line (the engine gets it whole).
REASON_LOG_CHARS = 1000


def outcome_fields(outcome: Outcome) -> dict[str, object]:
    """The log fields that say why a job failed or threw (none for a completed job): the line of
    the outcome is where a reader of the function's log looks for the reason. A failure the engine
    will retry also says after how long (``retry_in_seconds``, the backoff asked of the engine).

    Example:
        >>> outcome_fields(Outcome.fail("amount must be positive", retries=0, terminal=True))
        {'reason': 'amount must be positive', 'terminal': True, 'retries': 0}
        >>> outcome_fields(Outcome.fail("card declined", retries=2, backoff_seconds=5))
        {'reason': 'card declined', 'terminal': False, 'retries': 2, 'retry_in_seconds': 5}
    """
    if outcome.kind == "complete":
        return {}
    fields: dict[str, object] = {"reason": (outcome.message or "")[:REASON_LOG_CHARS]}
    if outcome.kind == "throw":
        fields["error_code"] = outcome.error_code
    else:
        fields["terminal"] = outcome.terminal
        fields["retries"] = outcome.retries
        if not outcome.terminal and (outcome.retries or 0) > 0:
            fields["retry_in_seconds"] = outcome.backoff_seconds
    return fields


def report_stored(
    ref: JobRef, outcome: Outcome, *, engine: Engine, store: JobStore, deadline: float, lease: str | None = None
) -> bool:
    """Report the stored ``outcome`` of ``ref`` and record that it landed. True when nothing more is
    owed for it (accepted, or refused with "someone else has it"), False when the engine refused it
    with a retryable error past the retry policy (the caller decides who tries again, and when).
    A StoreError (recording the report) and any other final engine error propagate. ``lease``: the
    delivery's lease fingerprint (:meth:`~workerless._core.lease.LeasePolicy.fingerprint`), when the caller
    has it already."""
    if lease is None:
        lease = engine.lease.fingerprint(ref)
    try:
        settlement.report(ref, outcome, engine=engine, deadline=deadline)
    except LeaseLostError:
        # 409: the lease lapsed and someone else has (or finished) the job. Not a failure.
        logger.info("engine says someone else finished this job: result not applied", extra={"job_id": ref.job_id})
        store.mark_reported(ref.record_key, note="lease lost at report", lease=lease)
        observability.emit(ref.job_type, Lifecycle.LEASE_LOST, job_id=ref.job_id)
        return True
    except PayloadTooLargeError as exc:
        replacement = Outcome.fail(
            f"result is over the engine's cap of {exc.cap} bytes; job failed instead", retries=0, terminal=True
        )
        logger.error("result over the engine's cap: failing the job", extra={"job_id": ref.job_id, "cap": exc.cap})
        store.replace_outcome(ref.record_key, replacement, job_type=ref.job_type)
        return report_stored(ref, replacement, engine=engine, store=store, deadline=deadline, lease=lease)
    except RetryableEngineError as exc:
        logger.warning("report not accepted yet", extra={"job_id": ref.job_id, "error": str(exc)})
        return False
    store.mark_reported(ref.record_key, lease=lease)
    observability.emit(ref.job_type, EVENTS[outcome.kind], job_id=ref.job_id, **outcome_fields(outcome))
    logger.debug("job reported", extra={"job_id": ref.job_id, "outcome": outcome.kind})
    return True
