"""The heartbeat: keep the leases of live jobs alive, without Step Functions.

A ticket (one per dispatched batch) arrives delayed by a third of the shortest remaining lease::

    read the batch's job records (one BatchGetItem)
      reported / lost / skipped ─────────────► drop: nothing left to keep alive
      held past WORKERLESS_MAX_HOLD_SECONDS ──► drop: let the lease lapse, the engine re-hands it
      StageNext, lease not acquired yet ─────► keep watching, nothing to renew yet
                                                (a stored, unreported result still renews: see below)
      otherwise ─► extend the lease (re-anchored to now + lease by the engine)
                    409 / refusal ─► mark LOST: the running handler sees job.lease_lost() and stops
                    retryable ──────► keep it; the next ticket comes sooner (the old expiry is nearer)
    send the ticket again for what is still live

The re-send is an intended loop (this function feeds its own queue): the template sets
``RecursiveLoop: Allow`` on it, or Lambda would stop the chain after about 16 rounds.
The ticket is sent last, so a failure before it redelivers the old ticket instead of forking a
second chain.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from workerless import observability
from workerless.errors import FinalEngineError, LeaseLostError, RetryableEngineError
from workerless.observability import logger
from workerless.record import JobRecord, Status, lease_of
from workerless.retry import CALLS
from workerless.settings import Settings
from workerless.ticket import Ticket, TicketEntry


def process_ticket(
    body: str, *, settings: Settings, engine: Any, store: Any, queues: Any, deadline: float
) -> Ticket | None:
    """Handle one ticket; returns the ticket re-sent (None when nothing is live any more)."""
    ticket = Ticket.from_json(body)
    records = store.get_many([e.ref.key for e in ticket.entries])
    now = time.time()
    live: list[TicketEntry] = []
    for entry in ticket.entries:
        ref = entry.ref
        record = records.get(ref.key)
        lease = lease_of(ref, engine.lease_from)
        # A record another lease left done (node-flow: the lost lease before this one, same task
        # id) says nothing about this lease: keep it alive until its delivery claims the record.
        if record is not None and not record.in_pipeline and not record.other_lease(lease):
            continue
        if now - ticket.first_seen > settings.max_hold_seconds:
            logger.warning(
                "job held past the maximum hold time: no longer extending its lease",
                extra={"job_id": ref.job_id, "job_type": ref.job_type, "max_hold_seconds": settings.max_hold_seconds},
            )
            continue
        # StageNext renews once the handler's lease acquire has landed (the claim's begun_at), and
        # also while the result is STORED but not yet accepted: its re-report (an SQS redelivery,
        # minutes later) is applied only to a still-Running execution; a lapsed one is discarded as
        # stale and the stage runs again. A claim not yet begun (acquire in flight, or failed and
        # awaiting redelivery) has no lease: renewing it is refused, and marking that LOST would
        # make the redelivery acknowledge an execution nobody ran. Look again a third of a lease
        # from now: an acquire landing after this read has the whole lease ahead of it.
        if engine.lease_from == "begin" and not _begun(record):
            lease_seconds = min(settings.lease_seconds, getattr(engine, "lease_seconds", settings.lease_seconds))
            live.append(TicketEntry(ref, max(entry.lease_expires_at, now + lease_seconds)))
            continue
        try:
            expiry: float = CALLS.call(functools.partial(engine.extend, ref, settings.lease_seconds), deadline=deadline)
        except LeaseLostError:
            store.mark(
                ref.key, Status.LOST, reason="engine refused the lease extension", job_type=ref.job_type, lease=lease
            )
            observability.record(ref.job_type, "lease_lost", job_id=ref.job_id)
            logger.info("lease lost: marked so the handler stops", extra={"job_id": ref.job_id})
            continue
        except RetryableEngineError as exc:
            logger.warning(
                "lease extension failed; trying again sooner", extra={"job_id": ref.job_id, "error": str(exc)}
            )
            live.append(entry)
            continue
        except FinalEngineError as exc:
            logger.error(
                "lease extension rejected; no longer extending", extra={"job_id": ref.job_id, "error": str(exc)}
            )
            continue
        observability.record(ref.job_type, "extended", job_id=ref.job_id)
        live.append(TicketEntry(ref, expiry))
    if not live:
        return None
    next_ticket = ticket.with_entries(live)
    if settings.heartbeat_queue_url:
        queues.send(settings.heartbeat_queue_url, next_ticket.to_json(), delay_seconds=next_ticket.delay_seconds())
    return next_ticket


def _begun(record: JobRecord | None) -> bool:
    """Whether a begin-leased job's lease is live to renew: acquired by the claim holder, or its
    result stored and not yet accepted."""
    if record is None:
        return False
    return record.status is Status.STORED or (record.status is Status.CLAIMED and record.begun_at is not None)
