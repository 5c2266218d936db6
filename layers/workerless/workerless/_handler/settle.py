"""The engine calls that settle a delivery the handler will not run — acknowledge it, hand it back —
and the lease acquire that decides whether it runs. Each runs under the retry policy and logs, never
raises, when it gives up.

A delivery the engine hands out again on its own unless it is settled (a begin lease with
:attr:`~workerless._core.lease.LeasePolicy.returns_after`: StageNext's gateway requeues an unacknowledged
delivery after its visibility timeout) is ours until it is acknowledged or requeued: these calls are
tried through an outage (:data:`~workerless._core.retry.HELD`) until the engine has taken it back, within
the invocation's deadline — meanwhile its SQS message stays in flight, so the route counts it
against MaxInFlight and a local run is not idle. Dropped after a few quick tries, it was held at the
gateway for a minute, uncounted, its stage unfinished, while the poller pulled others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from workerless._core.model import ActivatedJob
from workerless._core.retry import CALLS, HELD
from workerless.engines.base import require_lease_acquire
from workerless.errors import EngineError, RetryableEngineError
from workerless.observability import logger

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


def settling(job: ActivatedJob, engine: Engine, call: Callable[[], T], *, deadline: float) -> T:
    """``call`` (an engine call settling ``job``'s delivery) under the retry policy: :data:`HELD`
    until the engine takes the delivery back or ``deadline`` (``time.monotonic()``), whichever is
    first, for a delivery the engine takes back on its own; :data:`CALLS` otherwise. The last
    error propagates."""
    returned_by = _returned_by(job, engine)
    if returned_by is None:
        return CALLS.call(call, deadline=deadline)
    return HELD.call(call, deadline=min(deadline, returned_by))


def acknowledge(job: ActivatedJob, *, engine: Engine, deadline: float) -> None:
    """Acknowledge the delivery (the engine's lease acquire ``skip``, see :func:`settling`); nothing
    where the engine has no lease acquire (its lease started at activation: nothing to acknowledge).
    Giving up is logged, not raised: the delivery is then unacknowledged, and a begin-leased engine
    (StageNext's gateway) hands it out again after its visibility timeout (60 s); its next delivery
    is refused at acquire and acknowledged. Failing the SQS message instead would only hold it for
    the queue's visibility timeout, to redeliver a token that has expired by then."""
    acquire = engine.lease_acquire
    if acquire is None:
        return
    try:
        settling(job, engine, lambda: acquire.skip(job.ref), deadline=deadline)
    except EngineError as exc:
        logger.warning(
            "could not acknowledge the delivery; the engine hands it out again",
            extra={"error": str(exc), "returned": returned(job, engine)},
        )


def hand_back(job: ActivatedJob, *, engine: Engine, deadline: float, reason: str) -> None:
    """Give a delivery the handler will not run back to the engine without a result, as its lease
    policy says (:meth:`~workerless._core.lease.LeasePolicy.hand_back`): released (StageNext requeues it) — never an
    acknowledgement, which would drop a stage whose lease no result settles — or acknowledged where
    the engine owns the job from activation (nothing to acknowledge there; the lease lapses or
    was lost). Giving up is logged: a begin-leased engine hands out an unacknowledged delivery again
    after its visibility timeout anyway."""

    def release() -> None:
        try:
            settling(job, engine, lambda: engine.release(job, reason), deadline=deadline)
        except EngineError as exc:
            logger.warning(
                "could not hand the delivery back; the gateway requeues it",
                extra={"error": str(exc), "returned": returned(job, engine)},
            )

    engine.lease.hand_back(acknowledge=lambda: acknowledge(job, engine=engine, deadline=deadline), release=release)


def begin(job: ActivatedJob, *, engine: Engine, deadline: float) -> bool:
    """Lease acquire (the engine's ``lease_acquire.begin``, see :func:`settling`): whether it was
    granted. The last error propagates when it keeps failing."""
    acquire = require_lease_acquire(engine)
    granted: bool = settling(job, engine, lambda: acquire.begin(job), deadline=deadline)
    return granted


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
