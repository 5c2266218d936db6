"""The poller's bookkeeping: which jobs of a batch a poller left unfinished may be handed back
(:func:`fence`), what a route holds without its SQS count (:func:`tracked`, :func:`depth_due`), and
what to do with a job whose input was not read (:func:`unread`). The engine calls that hand a job back
or fail it are :mod:`workerless._core.settlement`'s."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from workerless import observability
from workerless._core.claimcheck import too_large_reason
from workerless._core.model import ActivatedJob
from workerless.observability import logger

if TYPE_CHECKING:
    from workerless._core.lease import LeasePolicy
    from workerless._core.ports import JobStore
    from workerless._poller.poller_lock import Dispatches


def fence(
    store: JobStore | None, model: LeasePolicy, jobs: list[ActivatedJob]
) -> tuple[list[ActivatedJob], list[ActivatedJob]]:
    """Of an ``activated`` batch a poller left unfinished, the jobs safe to hand back and those a
    handler already has (queued after all: owed a ticket, never handed back).

    Its poller may still be dispatching them (a slow SendMessageBatch or claim-check upload past
    the stale window) or may have queued them and failed to record it. A job is handed back only
    once its record is fenced (``JobStore.fence``: LOST under its lease if no delivery touched it),
    so a message of it queued meanwhile is acknowledged without running, while the engine's next
    lease of the job (another fingerprint) claims the record. A record already there: ticketed. A
    fence that cannot be written leaves the job to its lease. Only for an activation lease whose
    leases are told apart (:meth:`~workerless._core.lease.LeasePolicy.fingerprint`); a begin lease is
    fenced by the engine's acquire, and a job without a fingerprint goes back as before."""
    if store is None or not model.held(None):
        return jobs, []
    back: list[ActivatedJob] = []
    queued: list[ActivatedJob] = []
    for job in jobs:
        lease = model.fingerprint(job.ref)
        if not lease:
            back.append(job)
            continue
        try:
            fenced = store.fence(
                job.record_key, reason="handed back by the poller's recovery", job_type=job.ref.job_type, lease=lease
            )
        except Exception:
            logger.warning(
                "could not fence a job before handing it back; left to its lease",
                extra={"job_type": job.ref.job_type, **observability.correlation_keys(job)},
                exc_info=True,
            )
            continue
        (back if fenced else queued).append(job)
    if queued:
        logger.warning(
            "jobs of an unfinished batch were queued after all: ticketed, not handed back", extra={"jobs": len(queued)}
        )
    return back, queued


#: A route whose tracked jobs leave room has its SQS count read again at least this often all the
#: same: for what reaches its queue from elsewhere (a dead-letter redrive).
DEPTH_MAX_AGE_SECONDS = 300.0


def depth_due(bound: float, max_in_flight: int, *, age: float) -> bool:
    """Whether a route's SQS count, read ``age`` seconds ago, must be read again before its room is
    known, given ``bound``: what :func:`tracked` makes of the jobs the poller itself tracks, their
    records just re-read (infinity when they cannot be trusted: no store, tracking not complete,
    records unreadable).

    Not while that bound leaves room under the route's MaxInFlight: it is an upper bound on what the
    route holds without the count, which could only confirm room already there. A GetQueueAttributes
    a route every 2 s while work flows was 0.74 SQS requests a job (bench/RESULTS.md). Due when it
    leaves none (the count may show room it does not: a job whose record never turns final counts
    for the lag window only with a fresh count), and at least every :data:`DEPTH_MAX_AGE_SECONDS`."""
    return age >= DEPTH_MAX_AGE_SECONDS or bound >= max_in_flight


def tracked(
    store: JobStore | None,
    dispatches: Dispatches,
    job_type: str,
    now: float,
    horizon: float,
    count: int,
    read_at: float,
    *,
    refresh: bool,
) -> float:
    """Upper bounds on what ``job_type``'s route holds, from the jobs the poller (and those before
    it, through the lock's item) activated and whose job record is not yet final; infinity when
    none can be trusted (the caller takes the smaller of this and SQS's count plus the sends of the
    lag window). ``count`` is SQS's count as read at ``read_at`` (epoch seconds).

    - The tracked jobs not final: exact where SQS's approximate counts lag (AWS: they may take a
      minute to settle). Valid once every job activated in the last ``horizon`` seconds is
      tracked: the longest the engine can hold a lease of ours (WORKERLESS_MAX_HOLD_SECONDS, after
      which the heartbeat stops extending it, plus a lease). Final records are dropped when
      ``refresh`` (every 2 s while the poller asks: one strongly consistent BatchGetItem of at most
      the route's jobs in flight); records that cannot be read leave it unused this time.
    - ``count`` plus the tracked jobs not final activated within the lag window before the read:
      valid once the window is tracked. A job whose record never turns final (a claim given back,
      a delivery left to the engine) stops counting here after the window, where it would hold a
      slot in the first bound until the horizon.
    """
    if store is None:
        return math.inf
    best = math.inf
    if refresh:
        dispatches.prune_live(now, horizon=horizon)
    keys = dispatches.live(job_type)
    if refresh and keys:
        try:
            records = store.get_many(keys)
        except Exception:
            logger.warning("could not read the route's job records; its SQS count bounds it", exc_info=True)
        else:
            dispatches.drop(job_type, [k for k, r in records.items() if not r.in_pipeline])
            if dispatches.complete(now, horizon=horizon):
                best = len(dispatches.live(job_type))
    elif dispatches.complete(now, horizon=horizon):
        best = len(keys)
    if dispatches.complete(now, horizon=dispatches.window):
        best = min(best, count + dispatches.live_since(job_type, read_at - dispatches.window))
    return best


def unread(job: ActivatedJob, limit: int, budget: int) -> tuple[bool, str]:
    """What to do with a job whose variables the poller did not read (``unread_bytes``): (fail it
    for good?, the reason). Over the payload limit: failed, naming its size and the limit (it would
    come back just as large). Otherwise it came past the answer's budget: handed back, retries
    unchanged, for a later poll (the first job of an answer always fits: the budget is at least
    the limit)."""
    size = job.unread_bytes or 0
    if size > limit:
        return True, too_large_reason("the job's input", size, limit)
    return False, f"no room for its {size} bytes of input in this poll (at most {budget} bytes an answer)"
