"""The poller's intent log: no lease is left to lapse because a poller died mid-cycle.

Between activating jobs and handing them to SQS, the jobs exist only in the poller's memory; between
sending them and sending their heartbeat ticket, nothing keeps their leases alive. A poller that
dies in either gap (a Lambda crash, a timeout, an out-of-memory kill) would leave the engine waiting
a whole lease length (Sheptra, node-flow) before it hands the jobs out again, and a long job would
lose its lease under a handler that is still running it.

So the poller writes down what it is about to do, in one small record of the job table
(``state#poller-intents``, compare-and-set, no Scan needed to find it)::

    activated  → written before dispatch: the batch's job references (no variables)
    dispatched → after SendMessageBatch: only the jobs actually queued
    (removed)  → after the heartbeat tickets are sent (a batch is split into tickets of at most
                 100 jobs; a ticket that could not be sent leaves its jobs here, as dispatched)

Every poller invocation first looks for batches older than ``stale_seconds`` (a live poller takes
milliseconds between the steps) and finishes them for the dead one: an ``activated`` batch is handed
back to the engine at once (``Engine.release``); a ``dispatched`` batch gets its heartbeat tickets
(split as the poller splits them; those SQS still refuses go back in the record while a lease in
them runs).
Taking a batch out of the record is the compare-and-set, so only one invocation recovers it.

What it cannot cover (docs/guarantees.md): a poller that dies between the engine's answer and the
intent write (one DynamoDB call), or a record too big for one item (``max_bytes``): those jobs wait
for their lease to lapse, as without the log.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from workerless.model import ActivatedJob, JobRef
from workerless.observability import logger

INTENT_KEY = "poller-intents"
#: A CAS that keeps losing to concurrent pollers gives up after this many tries (the lease is the backstop).
MAX_CAS_TRIES = 5


def stale_after(lease_seconds: float) -> float:
    """How old an unfinished batch must be before another invocation finishes it: far longer than
    a live poller takes between two steps (milliseconds), far shorter than a lease."""
    return max(2.0, min(10.0, lease_seconds / 4.0))


def _entry(job: ActivatedJob) -> dict[str, Any]:
    """What recovery needs of a job, and no more (each step rewrites the record, so its size is
    what each write costs): the reference, the retries (to hand it back unchanged) and the lease
    granted (to time its ticket). Variables stay out."""
    return {"ref": job.ref.to_dict(), "retries": job.retries, "lease": job.lease_expires_at}


def _job(entry: dict[str, Any], at: float) -> ActivatedJob:
    retries = entry.get("retries")
    return ActivatedJob(
        ref=JobRef.from_dict(entry["ref"]),
        variables={},
        lease_expires_at=float(entry["lease"]),
        activated_at=at,
        retries=retries if isinstance(retries, int) and not isinstance(retries, bool) else None,
    )


class IntentLog:
    """The intent record on a :class:`~workerless.engines.base.SharedState` (the job table).

    Example:
        >>> log = IntentLog(MemoryState(), lease_seconds=60)          # doctest: +SKIP
        >>> intent = log.record(jobs); log.dispatched(intent, jobs); log.clear(intent)
    """

    def __init__(
        self,
        state: Any,
        *,
        lease_seconds: float,
        clock: Callable[[], float] = time.time,
        max_bytes: int = 300_000,
    ) -> None:
        self.state = state
        self.stale_seconds = stale_after(lease_seconds)
        self.clock = clock
        self.max_bytes = max_bytes
        self._known: dict[str, Any] | None = None
        #: Whether ``_known`` is a read of the item (None then means: there is none yet).
        self._read = False

    # -- the owner's three steps ----------------------------------------------------------------
    def record(self, jobs: Sequence[ActivatedJob]) -> str | None:
        """Write the batch as ``activated``; its id, or None when it could not be written."""
        intent_id = uuid.uuid4().hex
        entry = {
            "id": intent_id,
            "at": self.clock(),
            "phase": "activated",
            "jobs": [_entry(job) for job in jobs],
        }
        ok = self._update(lambda batches: [*batches, entry], what="record")
        return intent_id if ok else None

    def dispatched(self, intent_id: str | None, jobs: Sequence[ActivatedJob]) -> None:
        """The batch is queued: keep only the jobs that were sent, now owed a ticket."""
        if intent_id is None:
            return
        sent = [_entry(job) for job in jobs]

        def change(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [{**b, "phase": "dispatched", "jobs": sent} if b.get("id") == intent_id else b for b in batches]

        self._update(change, what="dispatched")

    def clear(self, intent_id: str | None) -> None:
        """The batch is fully handed over (queued and ticketed, or handed back)."""
        if intent_id is None:
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
        entry = {"id": uuid.uuid4().hex, "at": now, "phase": "dispatched", "jobs": [_entry(job) for job in live]}
        return self._update(lambda batches: [*batches, entry], what="put back")

    # -- recovery -------------------------------------------------------------------------------
    def take_stale(self) -> list[tuple[str, list[ActivatedJob]]]:
        """Remove and return the batches a dead poller left: (phase, jobs) each."""
        taken: list[dict[str, Any]] = []

        def change(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
            now = self.clock()
            taken.clear()
            keep = []
            for batch in batches:
                if now - float(batch.get("at", now)) >= self.stale_seconds:
                    taken.append(batch)
                else:
                    keep.append(batch)
            return keep

        current = self.state.get(INTENT_KEY)
        if not current or not current.get("batches"):
            # The common case: one read, nothing to do. What it read is what the owner's first step
            # compares against (the compare-and-set still guards it): no second read for ``record``.
            self._known = current
            self._read = True
            return []
        if not self._update(change, what="recover", current=current):
            return []
        found = []
        for batch in taken:
            jobs = []
            for entry in batch.get("jobs") or []:
                try:
                    jobs.append(_job(entry, float(batch.get("at", 0.0))))
                except Exception:  # noqa: BLE001 - one unreadable entry must not block the others
                    logger.error("unreadable entry in the poller intent log; left to its lease")
            found.append((str(batch.get("phase")), jobs))
        return found

    # -- plumbing -------------------------------------------------------------------------------
    def _update(
        self,
        change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        *,
        what: str,
        current: dict[str, Any] | None = None,
    ) -> bool:
        for attempt in range(MAX_CAS_TRIES):
            if attempt or (current is None and self._known is None and not self._read):
                current = self.state.get(INTENT_KEY)
            elif current is None:
                # What this invocation last wrote: the compare-and-set still guards it, and the
                # owner's next step usually needs no read at all.
                current = self._known
            version = None if current is None else int(current["version"])
            batches = list(current.get("batches") or []) if current else []
            new = change(batches)
            if len(json.dumps(new)) > self.max_bytes:
                logger.warning("poller intent log is full; this batch falls back to its lease", extra={"step": what})
                return False
            if self.state.put(INTENT_KEY, {"batches": new}, expected_version=version):
                self._known = {"batches": new, "version": (version or 0) + 1}
                self._read = True
                return True
        logger.warning("poller intent log kept changing under us; giving up this step", extra={"step": what})
        return False
