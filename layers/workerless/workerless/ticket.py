"""The heartbeat ticket: one delayed SQS message per dispatched batch, re-sent while jobs are live."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from workerless.errors import MessageFormatError
from workerless.model import JobRef

TICKET_VERSION = 1
MAX_DELAY_SECONDS = 900


@dataclass(frozen=True, slots=True)
class TicketEntry:
    ref: JobRef
    lease_expires_at: float


@dataclass(frozen=True, slots=True)
class Ticket:
    """``first_seen`` is when the poller dispatched the batch: the heartbeat stops extending a job
    held longer than WORKERLESS_MAX_HOLD_SECONDS after it."""

    engine: str
    entries: tuple[TicketEntry, ...]
    first_seen: float

    def delay_seconds(self, now: float | None = None) -> int:
        """When to look again: a third of the shortest remaining lease (at least 1 s, at most
        SQS's 900 s), so two heartbeats can be lost to a blip before a lease actually lapses."""
        now = time.time() if now is None else now
        if not self.entries:
            return 0
        remaining = min(e.lease_expires_at for e in self.entries) - now
        return int(max(1, min(MAX_DELAY_SECONDS, remaining / 3)))

    def with_entries(self, entries: Sequence[TicketEntry]) -> Ticket:
        return Ticket(self.engine, tuple(entries), self.first_seen)

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": TICKET_VERSION,
                "engine": self.engine,
                "first_seen": self.first_seen,
                "jobs": [{"ref": e.ref.to_dict(), "lease_expires_at": e.lease_expires_at} for e in self.entries],
            },
            separators=(",", ":"),
        )

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
        return cls(engine, tuple(entries), float(first_seen))
