"""The engine calls that settle a delivery the handler will not run: acknowledge it, hand it back,
or let lease acquire decide. Each runs under the retry policy and logs, never raises, when it gives
up: an unsettled delivery comes back from the engine on its own (its lease lapses, or a begin-leased
engine hands out an unacknowledged delivery again after its visibility timeout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from workerless.errors import EngineError, RetryableEngineError
from workerless.lease import HandBack
from workerless.model import ActivatedJob
from workerless.observability import logger
from workerless.retry import CALLS

if TYPE_CHECKING:
    from workerless.engines.base import Engine


def acknowledge(job: ActivatedJob, *, engine: Engine, deadline: float) -> None:
    """``engine.skip`` with the retry policy. Giving up is logged, not raised: the delivery is then
    unacknowledged, and a begin-leased engine (StageNext's gateway) hands it out again after its
    visibility timeout (60 s); its next delivery is refused at acquire and acknowledged. Failing the
    SQS message instead would only hold it for the queue's visibility timeout, to redeliver a token
    that has expired by then."""
    try:
        CALLS.call(lambda: engine.skip(job.ref), deadline=deadline)
    except EngineError as exc:
        logger.warning("could not acknowledge the delivery; the engine hands it out again", extra={"error": str(exc)})


def hand_back(job: ActivatedJob, *, engine: Engine, deadline: float, reason: str) -> None:
    """Give a delivery the handler will not run back to the engine without a result, as its lease
    model says (:class:`~workerless.lease.HandBack`): released (StageNext requeues it) — never an
    acknowledgement, which would drop a stage whose lease no result settles — or acknowledged where
    the engine owns the job from activation (``skip`` is a no-op there; the lease lapses or was
    lost). Giving up is logged: a begin-leased engine hands out an unacknowledged delivery again
    after its visibility timeout anyway."""
    match engine.lease.hand_back:
        case HandBack.ACKNOWLEDGE:
            acknowledge(job, engine=engine, deadline=deadline)
        case HandBack.RELEASE:
            try:
                CALLS.call(lambda: engine.release(job, reason), deadline=deadline)
            except EngineError as exc:
                logger.warning("could not hand the delivery back; the gateway requeues it", extra={"error": str(exc)})
        case never:
            assert_never(never)


def acquire_or_leave(job: ActivatedJob, *, engine: Engine, deadline: float) -> bool | None:
    """Lease acquire for a delivery that does not hold the claim: whether it was granted; None when
    acquire kept failing retryably and the delivery is left to the engine (the caller returns)."""
    try:
        begun: bool = CALLS.call(lambda: engine.begin(job), deadline=deadline)
    except RetryableEngineError as exc:
        leave_to_the_engine(exc)
        return None
    return begun


def leave_to_the_engine(exc: RetryableEngineError) -> None:
    """Lease acquire kept failing: the delivery is left unacknowledged and its SQS message
    completes. A begin-leased engine (StageNext's gateway) hands out an unacknowledged delivery
    again after its visibility timeout (60 s), and the poller pulls it again then.

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
