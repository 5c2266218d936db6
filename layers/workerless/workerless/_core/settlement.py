"""Settling a job with its engine outside the report of a handler's result: every engine call that
acquires a lease to settle a job, acknowledges a delivery, hands a job back or fails it for good —
for the handler wrapper (a delivery it will not run), the poller (a job it could not queue) and the
dead-letter function. Each engine call is made here once, in one shape: under a retry policy within
the caller's deadline (:func:`settling`); where the engine's lease or its visibility timeout is the
backstop, giving up is logged, not raised (:func:`_attempt`).

Which retry policy (``hold``): a delivery the engine hands out again on its own unless it is settled
(a begin lease with :attr:`~workerless._core.lease.LeasePolicy.returns_after`: StageNext's gateway
requeues an unacknowledged delivery after its visibility timeout) is, in a handler, ours until it is
acknowledged or requeued: its calls are tried through an outage (:data:`~workerless._core.retry.HELD`)
until the engine has taken it back, within the invocation's deadline — meanwhile its SQS message
stays in flight, so the route counts it against MaxInFlight and a local run is not idle. Dropped
after a few quick tries, it was held at the gateway for a minute, uncounted, its stage unfinished,
while the poller pulled others. The poller and the dead-letter function make a few quick tries
(:data:`~workerless._core.retry.CALLS`, ``hold=False``): a poll cycle must not stall on one job, and
the dead-letter queue hands a letter back later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from workerless import observability
from workerless._core.model import ActivatedJob, JobRef, Outcome
from workerless._core.retry import CALLS, HELD
from workerless.engines.base import require_lease_acquire
from workerless.errors import EngineError, FinalEngineError, RetryableEngineError
from workerless.observability import Lifecycle, logger

if TYPE_CHECKING:
    from workerless.engines.base import Engine

T = TypeVar("T")


def returned(job: ActivatedJob, engine: Engine) -> bool:
    """Whether the engine has taken ``job``'s delivery back on its own by now (never, where its lease
    model says it does not)."""
    at = engine.lease.returned_at(job.activated_at)
    return at is not None and time.time() >= at


def _returned_by(job: ActivatedJob, engine: Engine) -> float | None:
    """When (``time.monotonic()``) the engine takes ``job``'s delivery back on its own, if it does."""
    at = engine.lease.returned_at(job.activated_at)
    return None if at is None else time.monotonic() + (at - time.time())


def settling(job: ActivatedJob, engine: Engine, call: Callable[[], T], *, deadline: float, hold: bool = True) -> T:
    """``call`` (an engine call settling ``job``) under the retry policy: with ``hold``, :data:`HELD`
    until the engine takes the delivery back or ``deadline`` (``time.monotonic()``), whichever is
    first, for a delivery the engine takes back on its own; :data:`CALLS` otherwise. The last error
    propagates."""
    returned_by = _returned_by(job, engine) if hold else None
    if returned_by is None:
        return CALLS.call(call, deadline=deadline)
    return HELD.call(call, deadline=min(deadline, returned_by))


def _attempt(
    job: ActivatedJob,
    engine: Engine,
    call: Callable[[], object],
    *,
    deadline: float,
    hold: bool,
    giving_up: str,
    severe: bool = False,
) -> bool:
    """:func:`settling`, logging ``giving_up`` (a warning; an error when ``severe``) instead of raising
    when the engine keeps refusing: whether the call landed."""
    try:
        settling(job, engine, call, deadline=deadline, hold=hold)
    except EngineError as exc:
        log = logger.error if severe else logger.warning
        log(giving_up, extra={"job_id": job.ref.job_id, "error": str(exc), "returned": returned(job, engine)})
        return False
    return True


def begin(job: ActivatedJob, *, engine: Engine, deadline: float, hold: bool = True) -> bool:
    """Lease acquire (the engine's ``lease_acquire.begin``, see :func:`settling`): whether it was
    granted. The last error propagates when it keeps failing."""
    acquire = require_lease_acquire(engine)
    granted: bool = settling(job, engine, lambda: acquire.begin(job), deadline=deadline, hold=hold)
    return granted


def acknowledge(job: ActivatedJob, *, engine: Engine, deadline: float, hold: bool = True) -> None:
    """Acknowledge the delivery without a result (the engine's lease acquire ``skip``); nothing where
    the engine has no lease acquire (its lease started at activation: nothing to acknowledge).
    Giving up is logged, not raised: the delivery is then unacknowledged, and a begin-leased engine
    (StageNext's gateway) hands it out again after its visibility timeout (60 s); its next delivery
    is refused at acquire and acknowledged. Failing the SQS message instead would only hold it for
    the queue's visibility timeout, to redeliver a token that has expired by then."""
    acquire = engine.lease_acquire
    if acquire is None:
        return
    _attempt(
        job,
        engine,
        lambda: acquire.skip(job.ref),
        deadline=deadline,
        hold=hold,
        giving_up="could not acknowledge the delivery; the engine hands it out again",
    )


def release(job: ActivatedJob, reason: str, *, engine: Engine, deadline: float, hold: bool = True) -> None:
    """``Engine.release``: the job back to the engine without a result, for another worker. Giving
    up is logged: the job then returns when its lease lapses — a warning where the engine takes a
    delivery back on its own soon (a begin lease: the gateway's visibility timeout), an error where
    it waits out a whole lease."""
    _attempt(
        job,
        engine,
        lambda: engine.release(job, reason),
        deadline=deadline,
        hold=hold,
        giving_up="could not hand the job back; it returns when its lease (or the gateway's visibility) lapses",
        severe=engine.lease.returns_after is None,
    )


def report(ref: JobRef, outcome: Outcome, *, engine: Engine, deadline: float) -> None:
    """``Engine.report`` under :data:`CALLS`: a few quick tries (a report left owed is re-sent by the
    heartbeat, a dead letter comes back from its queue). The last error propagates."""
    CALLS.call(lambda: engine.report(ref, outcome), deadline=deadline)


def hand_back(job: ActivatedJob, *, engine: Engine, deadline: float, reason: str, hold: bool = True) -> None:
    """Give a delivery that will not run back to the engine without a result, as its lease policy
    says (:meth:`~workerless._core.lease.LeasePolicy.hand_back`): released (StageNext requeues it) —
    never an acknowledgement, which would drop a stage whose lease no result settles — or
    acknowledged where the engine owns the job from activation (nothing to acknowledge there; the
    lease lapses or was lost). Giving up is logged."""
    engine.lease.hand_back(
        acknowledge=lambda: acknowledge(job, engine=engine, deadline=deadline, hold=hold),
        release=lambda: release(job, reason, engine=engine, deadline=deadline, hold=hold),
    )


def requeue(job: ActivatedJob, reason: str, *, engine: Engine, deadline: float) -> None:
    """Hand a job the poller could not queue back to the engine at once, a few quick tries (a
    begin-leased engine requeues the delivery)."""
    logger.error("handing the delivery back", extra={"job_id": job.ref.job_id, "reason": reason})
    release(job, reason, engine=engine, deadline=deadline, hold=False)


def acquire_or_leave(job: ActivatedJob, *, engine: Engine, deadline: float) -> bool | None:
    """Lease acquire for a delivery that does not hold the claim: whether it was granted; None when
    acquire kept failing retryably (:func:`leave_to_the_engine`; the caller returns)."""
    try:
        return begin(job, engine=engine, deadline=deadline)
    except RetryableEngineError as exc:
        leave_to_the_engine(job, exc, engine=engine, deadline=deadline)
        return None


def leave_to_the_engine(job: ActivatedJob, exc: RetryableEngineError, *, engine: Engine, deadline: float) -> None:
    """Lease acquire kept failing until the engine takes the delivery back or the invocation's
    deadline: its SQS message then completes. Taken back (StageNext's gateway requeues it after its
    visibility timeout), the poller pulls it again: nothing is owed. Otherwise it is handed back
    (one more try: the deadline has passed) and, should that fail too, left to the gateway's
    requeue.

    Why not fail the message: SQS would hold it for the job queue's visibility timeout (720 s) to no
    purpose — its ack token expires with the gateway's 60 s, and the gateway hands the delivery out
    again meanwhile — while it counts against the route's capacity and keeps a run of local mode
    from ever going idle."""
    returned_by = _returned_by(job, engine)
    if returned_by is not None and returned_by <= deadline:
        # The tries ran until the engine takes the delivery back (no try could land before it).
        logger.warning(
            "lease acquire kept failing until the engine takes the delivery back (its visibility timeout)",
            extra={"error": str(exc), "status": exc.status},
        )
        return
    logger.warning(
        "lease acquire kept failing until the invocation's deadline: handing the delivery back",
        extra={"error": str(exc), "status": exc.status},
    )
    hand_back(job, engine=engine, deadline=deadline, reason="lease acquire kept failing")


def fail_for_good(job: ActivatedJob, reason: str, *, engine: Engine, deadline: float) -> None:
    """Fail a job the poller can never queue, with the reason (no retries: it would only come back
    as large); a few quick tries each call. A lease not held until acquired (a begin lease) is
    acquired here first: a result for an execution that is not running is discarded, and the
    acknowledgement after it would drop the job for good. Refused: acknowledged without a result
    (the seeds allow that); not settled (acquire or report kept failing): handed back as the lease
    policy says."""
    logger.error("failing a job that cannot be queued", extra={"job_id": job.ref.job_id, "reason": reason})
    model = engine.lease
    if not model.held(None):
        try:
            begun = begin(job, engine=engine, deadline=deadline, hold=False)
        except EngineError as exc:
            requeue(job, f"could not acquire its lease to fail it: {exc}", engine=engine, deadline=deadline)
            return
        if not begun:
            logger.info("lease refused: acknowledging the delivery", extra={"job_id": job.ref.job_id})
            acknowledge(job, engine=engine, deadline=deadline, hold=False)
            return
    try:
        report(job.ref, Outcome.fail(reason, retries=0, terminal=True), engine=engine, deadline=deadline)
    except (FinalEngineError, RetryableEngineError) as exc:
        error = str(exc)
        model.hand_back(
            release=lambda: requeue(job, f"could not report its failure: {error}", engine=engine, deadline=deadline),
            acknowledge=lambda: logger.error(
                "could not fail the job; it returns when its lease lapses", extra={"error": error}
            ),
        )
        return
    observability.emit(job.ref.job_type, Lifecycle.FAILED, **observability.correlation_keys(job), reason=reason)
