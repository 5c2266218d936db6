"""Per-job-type counters that local mode prints.

The pipeline reports each lifecycle step (activated, completed, failed, thrown, lease lost,
skipped, ...) through :func:`workerless.observability.emit`; a running
:class:`~workerless_devkit.local.LocalTopology` subscribes to those events and counts them here.
:func:`record` is a dict increment under a lock that never raises.

Example:
    >>> from workerless_devkit.local import summary
    >>> summary.reset_summary()
    >>> summary.record("charge-payment", "activated")
    >>> summary.get_summary().count("charge-payment", "activated")
    1
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final, Literal

SummaryEvent = Literal["activated", "completed", "failed", "thrown", "lease_lost", "skipped", "redelivered"]

#: The events the pipeline reports, in the order the summary table shows them.
EVENTS: Final[tuple[str, ...]] = ("activated", "completed", "failed", "thrown", "lease_lost", "skipped", "redelivered")
#: Columns always shown.
_ALWAYS: Final[tuple[str, ...]] = ("activated", "completed", "failed", "thrown", "lease_lost")
#: Columns shown when something was counted (the pipeline also reports steps such as "started" or
#: "extended": counted, in :meth:`Summary.as_dict`, but too chatty for the table).
#: "failed" split by what comes next: the engine retries the job (retries left, not terminal) or
#: the failure is final (no retries left, or a TerminalError); a hand-back is neither.
_SHOWN_IF_COUNTED: Final[tuple[str, ...]] = (
    "failed_will_retry",
    "failed_final",
    "skipped",
    "redelivered",
    "rereported",
    "released",
    "dead_lettered",
)


class Summary:
    """Thread-safe counters: job type → event → count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[str]] = {}
        self._version = 0

    def record(self, job_type: str, event: str, count: int = 1) -> None:
        """Count ``event`` for ``job_type``. Unknown events are counted under their own name (a typo
        shows up in the table instead of raising inside a Lambda handler)."""
        job_type, event = str(job_type), str(event)
        with self._lock:
            counter = self._counts.get(job_type)
            if counter is None:
                counter = self._counts[job_type] = Counter()
            counter[event] += count
            self._version += 1

    def record_lifecycle(self, job_type: str, event: str, fields: Mapping[str, Any]) -> None:
        """Count a pipeline lifecycle event; a handler's failure (its fields carry ``terminal`` and
        ``retries``) is also counted as ``failed_will_retry`` or ``failed_final``, so the run's
        summary tells a job the engine will run again from one that is done failing."""
        self.record(job_type, event)
        if event == "failed" and "terminal" in fields:
            retries = fields.get("retries")
            final = bool(fields.get("terminal")) or (isinstance(retries, int) and retries <= 0)
            self.record(job_type, "failed_final" if final else "failed_will_retry")

    def count(self, job_type: str, event: str) -> int:
        with self._lock:
            counter = self._counts.get(job_type)
            return counter[event] if counter is not None else 0

    def total(self, event: str) -> int:
        """``event`` summed over every job type."""
        with self._lock:
            return sum(counter[event] for counter in self._counts.values())

    @property
    def version(self) -> int:
        """Grows with every :meth:`record` call (local mode's idle detection watches it)."""
        with self._lock:
            return self._version

    def job_types(self) -> list[str]:
        with self._lock:
            return sorted(self._counts)

    def as_dict(self) -> dict[str, dict[str, int]]:
        """A copy: ``{job_type: {event: count}}``."""
        with self._lock:
            return {job_type: dict(counter) for job_type, counter in sorted(self._counts.items())}

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._version += 1

    def table(self) -> str:
        """The counters as a plain-text table, one row per job type and a total row."""
        data = self.as_dict()
        extra = [e for e in _SHOWN_IF_COUNTED if any(counter.get(e) for counter in data.values())]
        columns = [*_ALWAYS, *extra]
        headers = ["job type", *(c.replace("_", " ") for c in columns)]
        rows = [[job_type, *(str(counter.get(c, 0)) for c in columns)] for job_type, counter in data.items()]
        if not rows:
            rows = [["(no jobs)", *("0" for _ in columns)]]
        else:
            rows.append(["total", *(str(sum(counter.get(c, 0) for counter in data.values())) for c in columns)])
        widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

        def line(cells: list[str]) -> str:
            first = cells[0].ljust(widths[0])
            rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
            return "  ".join([first, *rest]).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return "\n".join([line(headers), rule, *(line(r) for r in rows)])


_SUMMARY = Summary()


def record(job_type: str, event: SummaryEvent | str, count: int = 1) -> None:
    """Count ``event`` for ``job_type`` in the process-wide summary. Cheap, thread-safe, never raises."""
    # A counter must never fail the pipeline step that calls it.
    with contextlib.suppress(Exception):
        _SUMMARY.record(job_type, event, count)


def get_summary() -> Summary:
    """The process-wide summary."""
    return _SUMMARY


def reset_summary() -> None:
    """Zero the process-wide summary (local mode does this when a topology starts)."""
    _SUMMARY.reset()
