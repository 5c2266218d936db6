"""Every change of a job's state in an emulator, as it happens (for checks that must hold at every moment).

Sampling ``jobs()`` can miss a peak that lasts a few milliseconds; a listener on :class:`StateWatch`
cannot: each emulator calls :meth:`StateWatch.note` under its own lock right after every change to a
job, with the job's ``state`` as ``job_state`` reports it (``ready``, ``leased``, ``completed``,
``failed``, ``thrown``). :class:`LeasedPeak` counts, per job type, the jobs leased and not yet final,
and keeps the highest count and when it was reached.

Example:
    >>> watch = StateWatch()
    >>> peak = LeasedPeak()
    >>> unsubscribe = watch.subscribe(peak)
    >>> watch.note("charge", "j1", "ready"); watch.note("charge", "j1", "leased")
    >>> peak.highest
    {'charge': 1}
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

#: (job type, job id, the state before — None for a new job —, the state now)
Listener = Callable[[str, str, "str | None", str], None]

LEASED = "leased"


class StateWatch:
    """The listeners of one emulator. ``note`` is cheap when nobody listens."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._last: dict[str, str] = {}
        self._guard = threading.Lock()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every later change; returns what unsubscribes it."""
        with self._guard:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._guard:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def note(self, job_type: str, job_id: str, state: str) -> None:
        """Record ``job_id``'s state now; listeners hear of it only when it differs from the last."""
        with self._guard:
            before = self._last.get(job_id)
            if before == state:
                return
            self._last[job_id] = state
            listeners = list(self._listeners)
        for listener in listeners:
            listener(job_type, job_id, before, state)


@dataclass(frozen=True, slots=True)
class Peak:
    """The moment a type's leased count reached its highest: the count and the change that made it."""

    count: int
    job_id: str
    sequence: int


class LeasedPeak:
    """A :class:`StateWatch` listener: per job type, jobs leased and not final, now and at the highest."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._leased: dict[str, set[str]] = {}
        self._peaks: dict[str, Peak] = {}
        self._changes = 0

    def __call__(self, job_type: str, job_id: str, before: str | None, state: str) -> None:
        with self._guard:
            self._changes += 1
            leased = self._leased.setdefault(job_type, set())
            if state == LEASED:
                leased.add(job_id)
            else:
                leased.discard(job_id)
            peak = self._peaks.get(job_type)
            if peak is None or len(leased) > peak.count:
                self._peaks[job_type] = Peak(len(leased), job_id, self._changes)

    @property
    def highest(self) -> dict[str, int]:
        """The most jobs of each type that were leased and not final at one moment."""
        with self._guard:
            return {job_type: peak.count for job_type, peak in self._peaks.items()}

    @property
    def peaks(self) -> dict[str, Peak]:
        with self._guard:
            return dict(self._peaks)

    @property
    def now(self) -> dict[str, int]:
        """Jobs of each type leased and not final at this moment."""
        with self._guard:
            return {job_type: len(ids) for job_type, ids in self._leased.items()}

    @property
    def changes(self) -> int:
        """State changes heard so far."""
        with self._guard:
            return self._changes
