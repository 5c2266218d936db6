"""The poller's intent log: no lease is left to lapse because a poller died mid-cycle.

Between activating jobs and handing them to SQS, the jobs exist only in the poller's memory; between
sending them and sending their heartbeat ticket, nothing keeps their leases alive. A poller that
dies in either gap (a Lambda crash, a timeout, an out-of-memory kill) would leave the engine waiting
a whole lease length (Sheptra, node-flow) before it hands the jobs out again, and a long job would
lose its lease under a handler that is still running it.

So the poller writes down what it is about to do, as a batch in its own poller-lock item
(``state#poller-lock``: :mod:`workerless._poller.poller_lock`; no shared item, no Scan, no read of its own:
the holder knows the item it last wrote)::

    activated  → written before dispatch: the batch's job references (no variables); this write is
                 also the holder's compare-and-set check that the lock is still its own
    dispatched → after SendMessageBatch: only the jobs actually queued
    (closed)   → after the heartbeat tickets are sent: in memory only, no write; the holder's next
                 write of the item drops the batch (the next batch's ``activated``, a renewal, the
                 release, or the relayed invocation's takeover). A ticket that could not be sent
                 leaves its jobs open, as dispatched.

Two writes a batch, where a shared intent item took three and a read (and the lock its own write on
top). The ``dispatched`` write stays: it is what tells a dead poller's queued jobs (owed a ticket)
from its unqueued ones (handed back); without it a poller dying between SendMessageBatch and the
ticket would cost those jobs a second run (handed back while queued) or their leases (not ticketed).

Who finishes a batch a poller left open:

- the invocation that takes the lock from a holder that is gone (released with a ticket still owed,
  expired, or relayed with a batch still open): at once, taken with the takeover write;
- an invocation that finds the lock held: a batch older than ``stale_seconds`` (a live poller
  usually takes milliseconds between the steps, but not always: claim-check uploads one after
  another and SQS calls botocore retries can take tens of seconds, so the batch may still be being
  queued; the poller fences each job's record before handing it back, see
  :func:`workerless._poller.bookkeeping.fence`), taken by compare-and-set (stamped with the time taken),
  the holder and its expiry left as they are (a live holder's next write sees that and carries on).

A taken batch stays in the item until it is finished (the holder's next write drops it; an
invocation that found the lock held writes once more): one that dies while finishing it leaves it
to the next, after the stale window.

An ``activated`` batch is handed back to the engine at once (``Engine.release``); a ``dispatched``
batch gets its heartbeat tickets (split as the poller splits them; those SQS still refuses go back
in the item while a lease in them runs). Taking a batch is the compare-and-set, so only one
invocation at a time finishes it.

What it cannot cover (docs/guarantees.md): a poller that dies between the engine's answer and the
intent write (one DynamoDB call), or a batch too big for the item (``max_bytes``): those jobs wait
for their lease to lapse, as without the log. A poller that dies after its ticket but before its
next write leaves a batch that is finished but looks dispatched: its ticket is sent a second time
(a second heartbeat chain for those jobs while they run; extends are idempotent), never a job.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from workerless._core.model import ActivatedJob, JobRef
from workerless._poller.poller_lock import Batches, PollerLock
from workerless.observability import logger


def stale_after(lease_seconds: float) -> float:
    """How old an unfinished batch must be before another invocation finishes it: longer than a live
    poller usually takes between two steps (milliseconds), far shorter than a lease. Not a bound on
    a slow dispatch (it can take tens of seconds): finishing a batch early is made safe by the job
    record fence (:func:`workerless._poller.bookkeeping.fence`), not by this window."""
    return max(2.0, min(10.0, lease_seconds / 4.0))


def encode_batch(intent_id: str, at: float, phase: str, jobs: Sequence[ActivatedJob]) -> dict[str, Any]:
    """A batch as the item keeps it: what recovery needs of each job and no more, compactly (every
    write of the item is billed by its size, a write unit per started KiB): the reference, the
    retries (to hand it back unchanged) and the lease granted (to time its ticket); variables stay
    out. Each job is ``[job id, job type #, attempt, handle #, retries, lease expiry]``, its type
    and handle (one per activation on some engines) indexes into the batch's ``types`` and
    ``handles``; the engine is the batch's."""
    types: list[str] = []
    handles: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    for job in jobs:
        ref, handle = job.ref, dict(job.ref.handle)
        if ref.job_type not in types:
            types.append(ref.job_type)
        if handle not in handles:
            handles.append(handle)
        rows.append(
            [
                ref.job_id,
                types.index(ref.job_type),
                ref.attempt,
                handles.index(handle),
                job.retries,
                round(job.lease_expires_at, 3),
            ]
        )
    engine = jobs[0].ref.engine if jobs else ""
    return {
        "id": intent_id,
        "at": at,
        "phase": phase,
        "engine": engine,
        "types": types,
        "handles": handles,
        "jobs": rows,
    }


def decode_batch(batch: dict[str, Any]) -> list[ActivatedJob]:
    """The jobs of a batch :func:`encode_batch` wrote; an unreadable one is logged and left to its lease."""
    at = float(batch.get("at", 0.0))
    types, handles = batch.get("types") or [], batch.get("handles") or []
    jobs = []
    for row in batch.get("jobs") or []:
        try:
            job_id, type_index, attempt, handle_index, retries, lease = row
            ref = JobRef.from_dict(
                {
                    "engine": batch["engine"],
                    "job_id": job_id,
                    "job_type": types[type_index],
                    "attempt": attempt,
                    "handle": handles[handle_index],
                }
            )
            jobs.append(
                ActivatedJob(
                    ref=ref,
                    variables={},
                    lease_expires_at=float(lease),
                    activated_at=at,
                    retries=retries if isinstance(retries, int) and not isinstance(retries, bool) else None,
                )
            )
        except Exception:  # noqa: BLE001 - one unreadable entry must not block the others
            logger.error("unreadable entry in the poller intent log; left to its lease")
    return jobs


class IntentLog:
    """The intent batches on a :class:`~workerless._poller.poller_lock.PollerLock`'s item.

    The lock is this invocation's: taken (the owner's steps write it as its holder), or found held
    by another invocation (:meth:`take_stale` and :meth:`put_back_dispatched` then change only the
    batches of the item it read).

    Example:
        An illustration (a held :class:`~workerless._poller.poller_lock.PollerLock` and activated jobs)::

            log = IntentLog(lock, lease_seconds=60)
            intent = log.write(jobs); log.dispatched(intent, jobs); log.clear(intent)
    """

    def __init__(
        self,
        lock: PollerLock,
        *,
        lease_seconds: float,
        clock: Callable[[], float] = time.time,
        max_bytes: int = 300_000,
    ) -> None:
        self.lock = lock
        self.stale_seconds = stale_after(lease_seconds)
        self.clock = clock
        self.max_bytes = max_bytes
        #: The ids of the batches :meth:`take_stale` last returned, until :meth:`finished`.
        self._taken: list[str] = []

    # -- the owner's three steps ----------------------------------------------------------------
    def write(self, jobs: Sequence[ActivatedJob]) -> str | None:
        """Write the batch as ``activated``; its id, or None when it could not be written (then
        ``lock.held`` tells whether the lock is still ours)."""
        intent_id = uuid.uuid4().hex[:16]
        entry = encode_batch(intent_id, self.clock(), "activated", jobs)
        ok = self._update(lambda batches: [*batches, entry], what="write")
        return intent_id if ok else None

    def dispatched(self, intent_id: str | None, jobs: Sequence[ActivatedJob]) -> None:
        """The batch is queued: keep only the jobs that were sent, now owed a ticket."""
        if intent_id is None:
            return
        found = False

        def change(batches: Batches) -> Batches:
            nonlocal found
            found = any(b.get("id") == intent_id for b in batches)
            return [
                encode_batch(intent_id, float(b.get("at", 0.0)), "dispatched", jobs) if b.get("id") == intent_id else b
                for b in batches
            ]

        try:
            written = self._update(change, what="dispatched")
        except Exception:
            # The jobs are queued whatever the item says: the next write of the item must say so.
            self._amend(change)
            raise
        if not written and self.lock.held:
            self._amend(change)
        if written and not found:
            # Only a recoverer removes a live holder's batch: this one stalled past stale_seconds
            # between its steps, and its jobs were handed back while being queued.
            logger.warning("this batch was finished by another invocation while being dispatched")

    def clear(self, intent_id: str | None) -> None:
        """The batch is fully handed over (queued and ticketed, or handed back). A dispatched batch
        is dropped by the item's next write (no write now); one never dispatched (every job handed
        back) is dropped at once, so that nobody hands its jobs back a second time."""
        if intent_id is None:
            return
        batch = next((b for b in self.lock.batches if b.get("id") == intent_id), None)
        if batch is not None and batch.get("phase") == "dispatched":
            self.lock.close(intent_id)
            return
        self._update(lambda batches: [b for b in batches if b.get("id") != intent_id], what="clear")

    def put_back_dispatched(self, jobs: Sequence[ActivatedJob]) -> bool:
        """Recovery could not send these queued jobs' ticket: write them back as a ``dispatched``
        batch for a later invocation to try again, while any of their leases still runs (after
        that a ticket keeps nothing alive). True if written."""
        now = self.clock()
        live = [job for job in jobs if job.lease_expires_at > now]
        if not live:
            logger.warning(
                "recovered ticket not sent and every lease in it has lapsed: dropped", extra={"jobs": len(jobs)}
            )
            return False
        entry = encode_batch(uuid.uuid4().hex[:16], now, "dispatched", live)
        return self._update(lambda batches: [*batches, entry], what="put back")

    # -- recovery -------------------------------------------------------------------------------
    def take_stale(self) -> list[tuple[str, list[ActivatedJob]]]:
        """Take the batches a dead poller left, to finish them: (phase, jobs) each. The lock's holder
        finishes the :attr:`~workerless._poller.poller_lock.PollerLock.orphans` it took with the lock (no
        call: the takeover write took them); an invocation that found the lock held takes, from the
        item it read, the batches older than ``stale_seconds`` (a write only when there is one),
        stamping them with the time taken so no other invocation takes them for the stale window.
        Either way they stay in the item until :meth:`finished`: an invocation that dies while
        finishing them leaves them to the next (a ticket sent twice, or a hand-back refused as
        already done, rather than a batch lost)."""
        if self.lock.held:
            taken, self.lock.orphans = self.lock.orphans, []
        else:
            taken = self._take_found()
        self._taken = [str(b.get("id")) for b in taken]
        return [(str(batch.get("phase")), decode_batch(batch)) for batch in taken]

    def finished(self) -> None:
        """The batches :meth:`take_stale` returned are finished (handed back, or ticketed, or put
        back as a new batch): out of the item. The holder drops them with its next write (no write
        now); an invocation that found the lock held writes the item once."""
        taken, self._taken = set(self._taken), []
        if not taken:
            return
        if self.lock.held:
            for batch_id in taken:
                self.lock.close(batch_id)
            return
        self._update(lambda batches: [b for b in batches if b.get("id") not in taken], what="finished")

    def _amend(self, change: Callable[[Batches], Batches]) -> None:
        """Keep a ``dispatched`` step the item refused (a failed write) in the holder's memory, so
        its next write, its release or its hand-over records the jobs as queued (never re-offered)."""
        self.lock.amend(change)

    def _take_found(self) -> Batches:
        if self.lock.found is None or not self.lock.found.get("batches"):
            return []  # the common case: what the lock's read returned holds no batch
        taken: Batches = []

        def change(batches: Batches) -> Batches:
            now = self.clock()
            taken.clear()
            kept: Batches = []
            for batch in batches:
                if now - float(batch.get("at", now)) >= self.stale_seconds:
                    batch = {**batch, "at": now}
                    taken.append(batch)
                kept.append(batch)
            return kept

        if not self.lock.update_found(change):
            return []
        return list(taken)

    # -- plumbing -------------------------------------------------------------------------------
    def _update(self, change: Callable[[Batches], Batches], *, what: str) -> bool:
        def bounded(batches: Batches) -> Batches:
            new = change(batches)
            if len(json.dumps(new)) > self.max_bytes:
                raise _TooBig
            return new

        try:
            if self.lock.held:
                return self.lock.update_batches(bounded)
            if self.lock.found is not None:
                return self.lock.update_found(bounded)
        except _TooBig:
            logger.warning("poller intent log is full; this batch falls back to its lease", extra={"step": what})
            return False
        logger.warning("no poller lock to write the intent log to; this batch falls back to its lease")
        return False


class _TooBig(Exception):
    """The batches would not fit the item (``max_bytes``)."""
