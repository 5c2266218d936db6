"""The heartbeat ticket: one delayed SQS message per dispatched batch, re-sent while jobs are live.

A ticket is bounded (:meth:`Ticket.split`): at most :data:`MAX_TICKET_ENTRIES` jobs, so one
heartbeat invocation can visit all of them, and at most :data:`MAX_TICKET_BYTES` of JSON, well
inside the heartbeat queue's message limit. A batch bigger than that gets several tickets.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from workerless._core.model import JobRef
from workerless.errors import MessageFormatError

TICKET_VERSION = 1
MAX_DELAY_SECONDS = 900
#: Jobs in one ticket. One heartbeat invocation (60 s) must be able to visit a whole ticket: 100
#: extends take 20 s at 200 ms each, 40 s at 400 ms. Entries a slow invocation does not reach are
#: carried to a new ticket, so the bound is about time, not correctness.
MAX_TICKET_ENTRIES = 100
#: Bytes of JSON in one ticket: a quarter of SQS's 1 MiB maximum, so a ticket fits any heartbeat
#: queue whose MaximumMessageSize is at least 256 KiB (the template's is SQS's default, 1 MiB). A
#: node-flow entry is about 330 bytes, so 100 entries take about 33 KB; the byte bound matters only
#: for engines whose handles are large (StageNext routing cookies).
MAX_TICKET_BYTES = 256 * 1024
#: The backoff of a ticket that has something to try again soon (an owed report, a failed call):
#: 1, 2, 4 ... seconds, at most a third of the lease (:func:`backoff_seconds`).
BACKOFF_BASE_SECONDS = 1.0


def backoff_seconds(retry: int, cap: float) -> float:
    """Seconds before round ``retry`` (1, 2, ...) of a ticket with something to try again:
    1, 2, 4 ... capped at ``cap`` (a third of the lease); 0 for ``retry`` 0."""
    if retry <= 0:
        return 0.0
    return float(min(cap, BACKOFF_BASE_SECONDS * 2 ** min(retry - 1, 16)))


@dataclass(frozen=True, slots=True)
class TicketEntry:
    ref: JobRef
    lease_expires_at: float


@dataclass(frozen=True, slots=True)
class Ticket:
    """``first_seen`` is when the poller dispatched the batch: the heartbeat stops extending a job
    held longer than WORKERLESS_MAX_HOLD_SECONDS after it.

    ``retry`` counts the rounds in a row that left something to try again soon (a report owed, an
    extend the engine refused with a retryable error): the ticket then comes back on a backoff of
    seconds (:func:`backoff_seconds`) instead of a third of the lease. ``failures`` counts the
    rounds in a row whose processing failed (the job table unreadable): the heartbeat gives such a
    ticket up to SQS's redelivery and dead-letter queue after a bounded number.
    """

    engine: str
    entries: tuple[TicketEntry, ...]
    first_seen: float
    retry: int = 0
    failures: int = 0

    def delay_seconds(self, now: float | None = None, *, soon: float | None = None) -> int:
        """When to look again: a third of the shortest remaining lease (at least 1 s, at most
        SQS's 900 s), so two heartbeats can be lost to a blip before a lease actually lapses; or
        ``soon`` seconds (a backoff) when that is sooner. Never under 1 s: a ticket is a timer,
        and the heartbeat must not spin on its own queue."""
        now = time.time() if now is None else now
        if not self.entries:
            return 0
        remaining = min(e.lease_expires_at for e in self.entries) - now
        normal = int(max(1, min(MAX_DELAY_SECONDS, remaining / 3)))
        if soon is not None:
            return int(max(1, min(normal, soon)))
        return normal

    def with_entries(self, entries: Sequence[TicketEntry], *, retry: int | None = None, failures: int = 0) -> Ticket:
        """The same ticket (engine, first_seen) for ``entries``; ``retry`` kept unless given."""
        return Ticket(self.engine, tuple(entries), self.first_seen, self.retry if retry is None else retry, failures)

    def split(self, *, max_entries: int = MAX_TICKET_ENTRIES, max_bytes: int = MAX_TICKET_BYTES) -> list[Ticket]:
        """This ticket as consecutive parts of at most ``max_entries`` entries and ``max_bytes``
        of JSON each (one part when it already fits; none when it has no entries). An entry too
        big for ``max_bytes`` on its own is a part of its own (SQS will refuse it)."""
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        parts: list[Ticket] = []
        chunk: list[TicketEntry] = []
        size = len(self.with_entries(()).to_json())
        for entry in self.entries:
            entry_size = len(json.dumps(_entry_dict(entry), separators=(",", ":")).encode()) + 1
            if chunk and (len(chunk) >= max_entries or size + entry_size > max_bytes):
                parts.append(self.with_entries(chunk, failures=self.failures))
                chunk, size = [], len(self.with_entries(()).to_json())
            chunk.append(entry)
            size += entry_size
        if chunk:
            parts.append(self.with_entries(chunk, failures=self.failures))
        return parts

    def to_json(self) -> str:
        data: dict[str, object] = {
            "v": TICKET_VERSION,
            "engine": self.engine,
            "first_seen": self.first_seen,
            "jobs": [_entry_dict(e) for e in self.entries],
        }
        if self.retry:
            data["retry"] = self.retry
        if self.failures:
            data["failures"] = self.failures
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, body: str) -> Ticket:
        try:
            data = json.loads(body)
        except (TypeError, ValueError) as exc:
            raise MessageFormatError(f"ticket is not JSON: {exc}", field="body") from exc
        if not isinstance(data, dict) or data.get("v") != TICKET_VERSION:
            raise MessageFormatError("ticket is not a version-1 object", field="v")
        engine, jobs, first_seen = data.get("engine"), data.get("jobs"), data.get("first_seen")
        if not isinstance(engine, str):
            raise MessageFormatError("ticket field 'engine' must be a string", field="engine")
        if not isinstance(jobs, list):
            raise MessageFormatError("ticket field 'jobs' must be a list", field="jobs")
        if not isinstance(first_seen, int | float) or isinstance(first_seen, bool):
            raise MessageFormatError("ticket field 'first_seen' must be a number", field="first_seen")
        counters = {}
        for name in ("retry", "failures"):
            value = data.get(name, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise MessageFormatError(f"ticket field {name!r} must be a non-negative integer", field=name)
            counters[name] = value
        entries = []
        for index, item in enumerate(jobs):
            if not isinstance(item, dict):
                raise MessageFormatError(f"ticket job {index} is not an object", field=f"jobs[{index}]")
            expiry = item.get("lease_expires_at")
            if not isinstance(expiry, int | float) or isinstance(expiry, bool):
                raise MessageFormatError(
                    f"ticket job {index} has no numeric lease_expires_at", field=f"jobs[{index}].lease_expires_at"
                )
            entries.append(TicketEntry(JobRef.from_dict(item.get("ref") or {}), float(expiry)))
        return cls(engine, tuple(entries), float(first_seen), counters["retry"], counters["failures"])


def _entry_dict(entry: TicketEntry) -> dict[str, object]:
    return {"ref": entry.ref.to_dict(), "lease_expires_at": entry.lease_expires_at}
