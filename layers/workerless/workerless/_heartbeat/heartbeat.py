"""The heartbeat: keep the leases of live jobs alive, and re-send reports the engine refused during
an outage, without Step Functions.

A ticket (one per dispatched batch, at most 100 jobs) arrives delayed by a third of the shortest
remaining lease::

    read the batch's job records (one BatchGetItem)
      reported / lost / skipped ─────────────► drop: nothing left to keep alive
      held past WORKERLESS_MAX_HOLD_SECONDS ──► drop: let the lease lapse, the engine re-hands it
      lease not held yet (a begin lease, ────► keep watching, nothing to renew yet
      acquire not landed yet)                   (a stored, unreported result still renews: see below)
      report owed (the handler gave up on it) ► re-report the stored outcome; landed → mark REPORTED,
                                                delete the job message the handler left in flight
      otherwise ─► extend the lease (re-anchored to now + lease by the engine; a round's
                    extensions run side by side, WORKERLESS_EXTEND_CONCURRENCY at a time)
                    409 / refusal ─► mark LOST: the running handler sees job.lease_lost() and stops
                    retryable ──────► keep it, and stop calling the engine for the rest of this
                                      ticket: it is down or refusing, and every call would spend
                                      the retry policy's waits
    send the ticket again for what is still live

When the next ticket comes:

- nothing left to try again: a third of the shortest remaining lease, as before;
- something to try again (a report owed, a call refused with a retryable error): on a backoff of
  1, 2, 4 ... s, at most a third of the lease. Such an early round re-reports what is owed and
  extends only the leases that are due (a third of the lease gone), not those with plenty left.

Nothing in a ticket waits out the heartbeat queue's visibility timeout (360 s, six times the
function's) because one call went wrong, while its leases are 60 s:

- No engine call starts after the invocation's call deadline (its remaining time, less a call's
  timeout and time to send): the entries not reached yet go on in a ticket of their own, due in
  a second, for the next invocation.
- A ticket whose processing fails (the job table unreadable, an unexpected error) is sent again on
  the failure backoff, with its ``failures`` count: after :data:`MAX_TICKET_FAILURES` rounds in a
  row it is left to SQS (visible again in a third of a lease; after MaxReceiveCount, the heartbeat
  dead-letter queue and its alarm).
- A ticket that cannot be sent at all: the entry point makes the message it came from visible
  again in a third of a lease (ChangeMessageVisibility) instead of the queue's 360 s.

The re-send is an intended loop (this function feeds its own queue): the template sets
``RecursiveLoop: Allow`` on it, or Lambda would stop the chain after about 16 rounds.
The ticket is sent last, so a failure before it redelivers the old ticket instead of forking a
second chain.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workerless import observability
from workerless._core.record import JobRecord, Status
from workerless._core.report import report_stored
from workerless._core.retry import CALLS
from workerless._core.settings import Settings
from workerless._core.threads import map_in_threads
from workerless._heartbeat.ticket import Ticket, TicketEntry, backoff_seconds
from workerless.aws.clients import call_deadline
from workerless.errors import (
    ConfigurationError,
    FinalEngineError,
    LeaseLostError,
    PipelineError,
    RetryableEngineError,
    StoreError,
    TicketNotSentError,
)
from workerless.observability import Lifecycle, logger

if TYPE_CHECKING:
    from workerless._core.ports import JobStore, Queues
    from workerless.engines.base import Engine

#: Rounds in a row a ticket's processing may fail (each re-sent on the backoff) before it is left to
#: SQS's redelivery and, after MaxReceiveCount, to the heartbeat dead-letter queue and its alarm.
MAX_TICKET_FAILURES = 8
#: Kept back from the invocation's deadline when deciding whether to start another engine call:
#: time to send the tickets after the last call ends.
SEND_RESERVE_SECONDS = 2.0


def calls_deadline(deadline: float, *, http_timeout: float, now: float) -> float:
    """The ``time.monotonic()`` after which the heartbeat starts no engine call: ``deadline`` (the
    invocation's) less one call's timeout and :data:`SEND_RESERVE_SECONDS`, but never less than
    half of what is left."""
    reserve = min(http_timeout + SEND_RESERVE_SECONDS, max(0.0, deadline - now) / 2)
    return deadline - reserve


def lease_length(settings: Settings, engine: Engine) -> float:
    """The lease a heartbeat extension grants: what we ask for, or the engine's own where its lease
    model says it sets the length."""
    return float(engine.lease.length(float(settings.lease_seconds)))


@dataclass
class _Round:
    """What one visit of a ticket decided for its entries."""

    keep: list[TicketEntry] = field(default_factory=list)  # live, on the normal schedule
    again: list[TicketEntry] = field(default_factory=list)  # try again soon (owed, a write failed)
    failing: list[TicketEntry] = field(default_factory=list)  # an engine call refused: tried last
    unvisited: list[TicketEntry] = field(default_factory=list)  # not reached before the deadline
    engine_down: bool = False


def process_ticket(
    body: str,
    *,
    settings: Settings,
    engine: Engine,
    store: JobStore,
    queues: Queues,
    deadline: float,
) -> list[Ticket]:
    """Handle one ticket; returns the tickets sent on (none when nothing is live any more).

    ``deadline`` (a ``time.monotonic()`` value, see :func:`calls_deadline`) is when the heartbeat stops
    starting engine calls. A ticket that cannot be parsed raises MessageFormatError (SQS's
    redelivery, then the dead-letter queue); one whose successors cannot be sent raises
    :class:`TicketNotSentError`.
    """
    ticket = Ticket.from_json(body)
    cap = lease_length(settings, engine) / 3
    if time.monotonic() >= deadline:
        # An earlier ticket of this batch used the invocation's time: on to the next invocation.
        logger.info("no time left in this invocation: ticket carried on", extra={"jobs": len(ticket.entries)})
        return _send(settings, queues, [(ticket, 1)])
    try:
        # The job-table calls (and botocore's retries of them) stop at the deadline too; the sends
        # that carry the ticket on come after, outside it.
        with call_deadline(deadline):
            records = store.get_many([e.ref.record_key for e in ticket.entries])
            visit = _visit(
                ticket,
                records,
                settings=settings,
                engine=engine,
                store=store,
                queues=queues,
                deadline=deadline,
            )
    except Exception as exc:  # any failure: the ticket goes on; it must not wait out 360 s
        failures = ticket.failures + 1
        logger.exception(
            "heartbeat ticket failed; sending it again",
            extra={"error": f"{type(exc).__name__}: {exc}", "failures": failures},
        )
        if failures > MAX_TICKET_FAILURES:
            raise TicketNotSentError(
                f"ticket failed {failures} rounds in a row: left to SQS's redelivery", retry_in=max(1, int(cap))
            ) from exc
        again = ticket.with_entries(ticket.entries, failures=failures)
        return _send(settings, queues, [(again, again.delay_seconds(soon=backoff_seconds(failures, cap)))])
    return _send(settings, queues, _successors(ticket, visit, cap=cap))


def _visit(
    ticket: Ticket,
    records: dict[str, JobRecord],
    *,
    settings: Settings,
    engine: Engine,
    store: JobStore,
    queues: Queues,
    deadline: float,
) -> _Round:
    visit = _Round()
    now = time.time()
    lease_seconds = lease_length(settings, engine)
    model = engine.lease
    # An early round (a backoff): extend only what a normal round would, leases a third gone.
    early = ticket.retry > 0
    # The leases to extend, with whether the job's report is still owed: extended side by side
    # after every entry has been looked at (_extend_all).
    extends: list[tuple[TicketEntry, bool]] = []
    for entry in ticket.entries:
        ref = entry.ref
        record = records.get(ref.record_key)
        lease = model.fingerprint(ref)
        # A record another lease left done (the lost lease before this one, of the same job
        # id) says nothing about this lease: keep it alive until its delivery claims the record.
        if record is not None and not record.in_pipeline and not record.other_lease(lease):
            continue
        if now - ticket.first_seen > settings.max_hold_seconds:
            logger.warning(
                "job held past the maximum hold time: no longer extending its lease",
                extra={"job_id": ref.job_id, "job_type": ref.job_type, "max_hold_seconds": settings.max_hold_seconds},
            )
            if model.held(record) and not _give_up(entry, store=store, lease=lease):
                visit.again.append(entry)  # the mark did not land: the next round marks it
            continue
        # A begin lease is renewed once the handler's lease acquire has landed (the claim's
        # begun_at), and also while the result is STORED but not yet accepted: its re-report is
        # applied only to a still-running execution; a lapsed one is discarded as stale and the
        # stage runs again. A claim not yet begun (acquire in flight, or failed and awaiting
        # redelivery) has no lease: renewing it is refused, and marking that LOST would make the
        # redelivery acknowledge an execution nobody ran. Look again a third of a lease from now: an
        # acquire landing after this read has the whole lease ahead of it.
        if not model.held(record):
            visit.keep.append(TicketEntry(ref, max(entry.lease_expires_at, now + lease_seconds)))
            continue
        if visit.engine_down:
            visit.again.append(entry)  # the engine refused a call just now: not again this round
            continue
        if time.monotonic() >= deadline:
            visit.unvisited.append(entry)
            continue
        due = entry.lease_expires_at - now <= lease_seconds * 2 / 3  # a third of the lease gone
        if record is not None and record.report_owed and not record.other_lease(lease):
            result = _rereport(
                entry, record, settings=settings, engine=engine, store=store, queues=queues, deadline=deadline
            )
            if result == "settled":
                continue
            if result == "retry":
                visit.again.append(entry)
                continue
            if result == "owed":
                if due:
                    # Keep the lease the report needs (reports refused, extends perhaps not).
                    extends.append((entry, True))
                else:
                    visit.engine_down = True
                    visit.failing.append(entry)
                continue
            # "final": no longer owed; a live job like any other from here on.
        if early and not due:
            visit.keep.append(entry)  # plenty of lease left: no call
            continue
        extends.append((entry, False))
    _extend_all(extends, visit, settings=settings, engine=engine, store=store, deadline=deadline)
    return visit


def _extend_all(
    extends: list[tuple[TicketEntry, bool]],
    visit: _Round,
    *,
    settings: Settings,
    engine: Engine,
    store: JobStore,
    deadline: float,
) -> None:
    """Extend the round's due leases, up to ``settings.extend_concurrency`` at a time.

    One after another, a ticket's leases would be renewed a call's answer time apart: a ticket of
    MaxInFlight jobs against an engine answering in 2.5 s would renew its last lease 2.5 s x jobs
    after its first, past a 10 s lease from four jobs on, and that job would run again. Side by
    side, a round takes about one answer's time per ``extend_concurrency`` jobs. Each extension
    notes what it decided in a round of its own, merged in the ticket's order; once one is refused
    with a retryable error (the engine down), the ones not started yet make no call this round.
    Up to ``extend_concurrency`` calls may already be in flight then: each is refused the same way.
    """
    if not extends:
        return
    # Not set by a re-report refused earlier in the round: the entries looked at before it are
    # extended, as they were when each call came in the ticket's order (those after it are not here).
    down = threading.Event()

    def one(item: tuple[TicketEntry, bool]) -> _Round:
        entry, owed = item
        mine = _Round()
        if down.is_set():
            mine.again.append(entry)  # the engine refused a call just now: not again this round
        elif time.monotonic() >= deadline:
            mine.unvisited.append(entry)
        else:
            _extend(entry, mine, settings=settings, engine=engine, store=store, deadline=deadline, owed=owed)
            if mine.engine_down:
                down.set()
        return mine

    width = min(len(extends), settings.extend_concurrency)
    rounds = [one(item) for item in extends] if width == 1 else map_in_threads(one, extends, max_workers=width)
    for mine in rounds:
        visit.keep += mine.keep
        visit.again += mine.again
        visit.failing += mine.failing
        visit.unvisited += mine.unvisited
        visit.engine_down = visit.engine_down or mine.engine_down


def _give_up(entry: TicketEntry, *, store: JobStore, lease: str) -> bool:
    """Mark LOST a lease the heartbeat stops extending (held past WORKERLESS_MAX_HOLD_SECONDS): the
    engine hands the job out again once it lapses, so no delivery of this lease may run the handler
    after that. Without the mark, a message that comes back later (a dead invocation's, after its
    queue's visibility timeout: 5,400 s for a long route, past the 3,600 s hold) would take over the
    dead claim and run the job a second time beside the engine's new attempt. A stored or reported
    result is left as it is (``mark`` writes only an unclaimed or claimed record). False when the
    write failed (tried again next round)."""
    ref = entry.ref
    try:
        marked = store.mark(
            ref.record_key,
            Status.LOST,
            reason="held past WORKERLESS_MAX_HOLD_SECONDS",
            job_type=ref.job_type,
            lease=lease,
        )
    except StoreError as exc:
        logger.warning("could not mark the lease lost; trying again", extra={"job_id": ref.job_id, "error": str(exc)})
        return False
    if marked:  # not a stored or reported result's record: those lost nothing
        observability.emit(ref.job_type, Lifecycle.LEASE_LOST, job_id=ref.job_id)
    return True


def _rereport(
    entry: TicketEntry,
    record: JobRecord,
    *,
    settings: Settings,
    engine: Engine,
    store: JobStore,
    queues: Queues,
    deadline: float,
) -> str:
    """Re-report a stored outcome whose report the handler left owed: "settled" (accepted, or
    someone else has the job: dropped from the ticket), "owed" (the engine refused it with a
    retryable error: tried again on the backoff), "retry" (it may have landed, but the record could
    not be marked: tried again, a repeat meets 409) or "final" (the engine refused it for good: the
    owed mark is cleared and the job message's SQS redelivery settles it, as before)."""
    ref = entry.ref
    try:
        # The round read the record without its outcome's body (JobStore.get_many): read it whole
        # now; an outcome too large for the record is read from the claim check's bucket.
        full = store.get(ref.record_key)
        outcome = store.load_outcome(full) if full is not None and full.report_owed else None
        if outcome is None:
            return "settled" if full is None or not full.report_owed else "retry"
        settled = report_stored(ref, outcome, engine=engine, store=store, deadline=deadline)
    except StoreError as exc:
        logger.warning(
            "could not record the re-sent report; trying again", extra={"job_id": ref.job_id, "error": str(exc)}
        )
        return "retry"
    except (FinalEngineError, ConfigurationError) as exc:
        logger.error(
            "engine refused the owed report for good; its SQS redelivery settles it",
            extra={"job_id": ref.job_id, "error": str(exc)},
        )
        try:
            store.clear_owed(ref.record_key)
        except StoreError:
            logger.warning("could not clear the owed mark", extra={"job_id": ref.job_id})
        return "final"
    if not settled:
        return "owed"
    observability.emit(ref.job_type, Lifecycle.REREPORTED, job_id=ref.job_id)
    _delete_message(ref.job_type, record, settings=settings, queues=queues, job_id=ref.job_id)
    return "settled"


def _delete_message(job_type: str, record: JobRecord, *, settings: Settings, queues: Queues, job_id: str) -> None:
    """Delete the job message the handler kept in flight while the report was owed, so the route
    stops counting it: in the queue the handler noted with its receipt handle (so the heartbeat
    never reads the routes; a record noted before the queue was, by the route of WORKERLESS_ROUTES
    when that is set). If this fails or no queue is known, the message comes back after its
    visibility timeout and its delivery finds the job reported (it is acknowledged, not run)."""
    if record.receipt is None:
        return
    route = settings.route(job_type)
    queue_url = record.receipt_queue or (route.queue_url if route is not None else None)
    if queue_url is None:
        logger.info(
            "the re-reported job's message has no queue noted; it returns after its visibility timeout, acknowledged",
            extra={"job_id": job_id},
        )
        return
    try:
        queues.delete(queue_url, record.receipt)
    except PipelineError as exc:
        logger.warning(
            "could not delete the job message of a re-reported job; it returns after its visibility timeout",
            extra={"job_id": job_id, "error": str(exc)},
        )


def _extend(
    entry: TicketEntry,
    visit: _Round,
    *,
    settings: Settings,
    engine: Engine,
    store: JobStore,
    deadline: float,
    owed: bool = False,
) -> None:
    """Extend one lease; ``owed``: the job's report is still owed, so the entry stays on the backoff
    even when the extension lands."""
    ref = entry.ref
    try:
        expiry: float = CALLS.call(functools.partial(engine.extend, ref, settings.lease_seconds), deadline=deadline)
    except LeaseLostError:
        try:
            marked = store.mark(
                ref.record_key,
                Status.LOST,
                reason="engine refused the lease extension",
                job_type=ref.job_type,
                lease=engine.lease.fingerprint(ref),
            )
        except StoreError as exc:
            # Try again soon: the handler must learn that its lease is gone.
            logger.warning(
                "could not mark the lease lost; trying again", extra={"job_id": ref.job_id, "error": str(exc)}
            )
            visit.again.append(entry)
            return
        if not marked:
            # Not written: the record holds a stored or reported result (the engine refuses to
            # renew a job whose result it is accepting: StageNext's 409 for a succeeded execution)
            # or another lease's claim. No run of ours to stop, so no lost lease to count.
            logger.debug("extension refused after the job's result was stored", extra={"job_id": ref.job_id})
            return
        observability.emit(ref.job_type, Lifecycle.LEASE_LOST, job_id=ref.job_id)
        logger.info("lease lost: marked so the handler stops", extra={"job_id": ref.job_id})
        return
    except RetryableEngineError as exc:
        logger.warning("lease extension failed; trying again sooner", extra={"job_id": ref.job_id, "error": str(exc)})
        visit.engine_down = True
        visit.failing.append(entry)
        return
    except FinalEngineError as exc:
        logger.error("lease extension rejected; no longer extending", extra={"job_id": ref.job_id, "error": str(exc)})
        return
    observability.emit(ref.job_type, Lifecycle.EXTENDED, job_id=ref.job_id)
    (visit.failing if owed else visit.keep).append(TicketEntry(ref, expiry))


def _successors(ticket: Ticket, visit: _Round, *, cap: float) -> list[tuple[Ticket, int]]:
    """The tickets that carry a round's live entries on, each with its delay."""
    sends: list[tuple[Ticket, int]] = []
    scheduled = [*visit.keep, *visit.again, *visit.failing]  # the entry a call failed on goes last
    if scheduled:
        trouble = bool(visit.again or visit.failing)
        retry = ticket.retry + 1 if trouble else 0
        successor = ticket.with_entries(scheduled, retry=retry)
        soon = backoff_seconds(retry, cap) if trouble else None
        sends.append((successor, successor.delay_seconds(soon=soon)))
    if visit.unvisited:
        # Not reached before the deadline: in a second, for the next invocation.
        logger.info("invocation out of time: carrying unvisited jobs on", extra={"jobs": len(visit.unvisited)})
        sends.append((ticket.with_entries(visit.unvisited), 1))
    return sends


def _send(settings: Settings, queues: Queues, sends: list[tuple[Ticket, int]]) -> list[Ticket]:
    """Send each ticket (split to the ticket bounds) with its delay; a part SQS refuses is tried
    once more. Raises TicketNotSentError if a part still cannot be sent: the message this round
    came from must then come back, so that no entry loses its heartbeat (the parts already sent
    may then be visited twice for a while: extends are idempotent)."""
    if not settings.heartbeat_queue_url:
        return []
    sent: list[Ticket] = []
    for ticket, delay in sends:
        for part in ticket.split():
            try:
                _send_part(queues, settings.heartbeat_queue_url, part, delay)
            except PipelineError as exc:
                raise TicketNotSentError(
                    f"could not send a heartbeat ticket of {len(part.entries)} jobs: {exc}",
                    retry_in=max(1, min(delay, part.delay_seconds())),
                ) from exc
            sent.append(part)
    return sent


def _send_part(queues: Queues, queue_url: str, part: Ticket, delay: int) -> None:
    try:
        queues.send(queue_url, part.to_json(), delay_seconds=delay)
    except PipelineError as exc:
        logger.warning("heartbeat ticket send failed; trying once more", extra={"error": str(exc)})
        queues.send(queue_url, part.to_json(), delay_seconds=delay)
