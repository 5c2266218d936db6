"""The side-effect ledger: what the wrapped handlers did, keyed by the job's idempotency key.

A handler's side effect (charging a card, sending a receipt) is recorded under ``job.key`` — stable
across redeliveries of one engine attempt, distinct per retry — in two steps: ``effect`` when the
side effect is done, ``completed`` when the run returns its result. A run that dies in between
leaves an effect without a completion; the next run of the same attempt repeats the effect, which a
real downstream deduplicates on the key (counted as ``effects_repeated``, the documented window). Two
*completed* runs for one engine attempt are what the promise forbids (``duplicate_completions``).

An engine attempt is one key under one lease. node-flow keeps a task's id (so its key) when a
lapsed lease is re-handed: the handler then runs again under the new lease, as the design says it
must (``reruns_after_lapse``). The lease is told apart by :meth:`~workerless._core.lease.LeasePolicy.fingerprint`, the
fingerprint the pipeline itself uses; it is "" where the key already names the attempt (StageNext's
execution id), so every delivery of one execution counts as the same attempt.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Entry:
    key: str
    job_id: str
    effects: int = 0
    completions: int = 0
    times: list[float] = field(default_factory=list)
    #: Per completed run: who ran it (the lease fingerprint of its delivery, the Lambda time left).
    runs: list[str] = field(default_factory=list)
    #: Completed runs per lease (:meth:`~workerless._core.lease.LeasePolicy.fingerprint`) of this key.
    leases: Counter[str] = field(default_factory=Counter)

    @property
    def duplicates(self) -> int:
        """Completed runs beyond the first under one lease."""
        return sum(max(0, n - 1) for n in self.leases.values())


class Ledger:
    """Thread-safe; optionally appends every line to a JSONL file (``path``)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._path = Path(path) if path is not None else None

    def _write(self, line: dict[str, Any]) -> None:
        if self._path is not None:
            with self._path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")

    def effect(self, key: str, job_id: str) -> None:
        with self._lock:
            entry = self._entries.setdefault(key, Entry(key, job_id))
            entry.effects += 1
            entry.times.append(time.time())
            self._write({"key": key, "job_id": job_id, "step": "effect", "n": entry.effects})

    def completed(self, key: str, job_id: str, run: str = "", lease: str = "") -> None:
        with self._lock:
            entry = self._entries.setdefault(key, Entry(key, job_id))
            entry.completions += 1
            entry.runs.append(run)
            entry.leases[lease] += 1
            self._write({"key": key, "job_id": job_id, "step": "completed", "n": entry.completions})

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries.values())

    @property
    def duplicate_completions(self) -> int:
        """Completed runs beyond the first, for one engine attempt (must be 0)."""
        return sum(e.duplicates for e in self.entries())

    @property
    def reruns_after_lapse(self) -> int:
        """Completed runs of one key under a later lease (its earlier lease lapsed): by design."""
        return sum(max(0, len(e.leases) - 1) for e in self.entries())

    @property
    def effects_repeated(self) -> int:
        """Side effects repeated for one attempt after a run died before storing its result."""
        return sum(max(0, e.effects - 1) for e in self.entries())

    def duplicated_keys(self) -> list[str]:
        return sorted(e.key for e in self.entries() if e.duplicates > 0)
