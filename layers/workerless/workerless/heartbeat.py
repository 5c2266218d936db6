"""The heartbeat: keep the leases of live jobs alive, without Step Functions.

A ticket (one per dispatched batch) arrives delayed by a third of the shortest remaining lease::

    read the batch's job records (one BatchGetItem)
      reported / lost / skipped ─────────────► drop: nothing left to keep alive
      held past WORKERLESS_MAX_HOLD_SECONDS ──► drop: let the lease lapse, the engine re-hands it
      StageNext, handler not begun yet ──────► keep watching, nothing to renew yet
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
from workerless.record import Status, lease_of
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
        # StageNext renews from begin on, and also while the result is STORED but not yet accepted:
        # its re-report (an SQS redelivery, minutes later) is applied only to a still-Running
        # execution; a lapsed one is discarded as stale and the stage runs again.
        if engine.lease_from == "begin" and (record is None or record.status not in (Status.CLAIMED, Status.STORED)):
            live.append(entry)
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
