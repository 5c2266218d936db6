"""One poller at a time, and what it dispatched recently: MaxInFlight is a bound, not a hope.

Three things invoke the poller — the watchdog schedule, the self-rescheduling tick (up to two at
once: the ticker event source's minimum concurrency) and a busy invocation's relay — and each used to
poll. Every one read the same SQS counts and took the same room, so a route could be leased about
three times its MaxInFlight. Now an invocation polls only while it holds the **poller lock**, one
small item of the job table (``state#poller-lock``), written only by compare-and-set
(:class:`~workerless.engines.base.SharedState`: a consistent GetItem, then a conditional PutItem on
the item's version)::

    take     read the item; free, or its holder's expiry passed (the holder died) → write it as ours
    keep     before each poll cycle, and when the engine has answered: when less than half the
             lock time is left, write it again (a refused write: taken over, stop polling)
    release  at the end of the invocation: write it free
    hand on  an invocation that relays to a fresh one (work still flowing) does not release: the
             relay message carries the lock's version, and the fresh invocation takes it over with
             one write conditional on that version (no read; a duplicate delivery of the relay, or
             a relay that arrives after another invocation took the lock, finds the version moved
             and falls back to ``take``)

The version makes the lock exclusive, not the clocks: every taker writes the item, so an invocation
whose ``keep`` or ``release`` write still succeeds knows nobody polled since its last write. The
expiry only decides when another invocation may take a dead holder's lock over.

The item also hands on **what the holder dispatched recently** (:class:`Dispatches`). SQS's counts
are approximate and can lag a send (AWS: they "may not achieve consistency until at least 1 minute
after the producers stop sending"), so the poller counts a job it sent itself for
``WORKERLESS_SQS_LAG_SECONDS`` on top of what SQS reports — and, through the lock item, so does the
next invocation. docs/guarantees.md states the bound that remains.

An invocation that finds the lock held costs one read, polls nothing and ends: the tick chain was
continued before (entry point), so the flow goes on; it still finishes a dead poller's intent
batches (handing jobs back never takes room).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from workerless.observability import logger

LOCK_KEY = "poller-lock"


class Dispatches:
    """Jobs sent per route in the last ``window`` seconds (wall clock), in one-second buckets.

    A bucket's time is the end of its second: a send is counted a little longer, never shorter, than
    the window (the safe side).
    """

    def __init__(self, window: float, sent: Mapping[str, Any] | None = None) -> None:
        self.window = float(window)
        self._sent: dict[str, dict[int, int]] = {}
        for job_type, buckets in (sent or {}).items():
            if not isinstance(buckets, list):
                continue
            for bucket in buckets:
                try:
                    at, count = int(bucket[0]), int(bucket[1])
                except (TypeError, ValueError, IndexError):
                    continue  # an unreadable entry: SQS's count alone covers it
                if count > 0:
                    self._sent.setdefault(str(job_type), {})[at] = count

    def add(self, job_type: str, count: int, *, at: float) -> None:
        """``count`` jobs of ``job_type`` sent at ``at`` (epoch seconds)."""
        if count <= 0:
            return
        buckets = self._sent.setdefault(job_type, {})
        second = math.ceil(at)
        buckets[second] = buckets.get(second, 0) + count

    def since(self, job_type: str, after: float) -> int:
        """Jobs of ``job_type`` sent after ``after`` (epoch seconds)."""
        return sum(n for at, n in self._sent.get(job_type, {}).items() if at > after)

    def prune(self, now: float, *, keep: float = 0.0) -> None:
        """Forget sends older than the window (plus ``keep`` seconds)."""
        horizon = now - self.window - keep
        for job_type in list(self._sent):
            buckets = {at: n for at, n in self._sent[job_type].items() if at > horizon}
            if buckets:
                self._sent[job_type] = buckets
            else:
                del self._sent[job_type]

    def to_dict(self) -> dict[str, list[list[int]]]:
        return {job_type: sorted([at, n] for at, n in buckets.items()) for job_type, buckets in self._sent.items()}


class PollerLock:
    """The poller lock on a :class:`~workerless.engines.base.SharedState` (the job table in AWS).

    Args:
        state: the shared state (``get`` / compare-and-set ``put``).
        seconds: how long a take or a renewal holds the lock; a holder that dies blocks polling for
            at most this long. Renewed when less than half is left, so a poll cycle starts with at
            least ``seconds / 2`` of lock ahead of it.
        window: how long a dispatch is counted on top of SQS's count (``WORKERLESS_SQS_LAG_SECONDS``).
        keep_seconds: extra seconds of dispatches kept (the poller re-reads SQS at most this often).
        clock: wall clock (epoch seconds; default time.time): the expiry is read by other containers.

    Example:
        >>> lock = PollerLock(MemoryState(), seconds=30, window=2)    # doctest: +SKIP
        >>> if lock.acquire():
        ...     try: poll(lock.dispatches, keep_polling=lock.keep)
        ...     finally: lock.release()
    """

    def __init__(
        self,
        state: Any,
        *,
        seconds: float,
        window: float,
        keep_seconds: float = 0.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.state = state
        self.seconds = float(seconds)
        self.window = float(window)
        self.keep_seconds = float(keep_seconds)
        self.clock = clock or time.time  # looked up now: a benchmark's virtual time.time is seen
        self.owner = uuid.uuid4().hex
        #: What was dispatched recently, handed on from the last holder and added to by this one.
        self.dispatches = Dispatches(window)
        #: Who held the lock when :meth:`acquire` found it taken, and until when (for the log).
        self.held_by: tuple[str, float] | None = None
        self._version: int | None = None
        self._until = 0.0

    @property
    def held(self) -> bool:
        """This invocation took the lock and has not released or lost it."""
        return self._version is not None

    def acquire(self) -> bool:
        """Take the lock if it is free or its holder's expiry has passed. One read; one write when free."""
        current = self.state.get(LOCK_KEY)
        now = self.clock()
        if current is not None and current.get("holder") and float(current.get("until", 0.0)) > now:
            self.held_by = (str(current["holder"]), float(current["until"]))
            return False
        if current is not None and current.get("holder"):
            logger.warning(
                "taking over the poller lock of an invocation that did not release it",
                extra={"holder": current.get("holder"), "expired_seconds_ago": round(now - float(current["until"]), 1)},
            )
        self.dispatches = Dispatches(self.window, (current or {}).get("sent"))
        version = None if current is None else int(current["version"])
        if not self._write(version, holder=self.owner, until=now + self.seconds, now=now):
            self.held_by = ("another invocation", now)  # it took the lock between our read and our write
            return False
        return True

    def handover(self) -> dict[str, Any] | None:
        """What a relay message carries so that the invocation it starts takes this lock over
        (:meth:`inherit`) instead of reading and re-taking it; None when not held. The lock stays
        ours until :meth:`handed_over` (the relay was sent) or :meth:`release` (it was not)."""
        if self._version is None:
            return None
        return {"version": self._version, "sent": self.dispatches.to_dict()}

    def handed_over(self) -> None:
        """The relay is sent: the lock is the next invocation's now (its expiry frees it if the relay
        never arrives)."""
        self._version = None

    def inherit(self, token: Mapping[str, Any]) -> bool:
        """Take the lock over from the invocation that relayed to this one: one write conditional on
        the version it handed on. When that version is no longer the item's (a duplicate relay, or
        the lock expired and was taken), it is a plain :meth:`acquire`."""
        try:
            version = int(token["version"])
        except (KeyError, TypeError, ValueError):
            return self.acquire()
        now = self.clock()
        self.dispatches = Dispatches(self.window, token.get("sent") if isinstance(token.get("sent"), dict) else None)
        if self._write(version, holder=self.owner, until=now + self.seconds, now=now):
            return True
        return self.acquire()

    def keep(self) -> bool:
        """Before a poll cycle: renew when less than half the lock time is left (one write, not one
        per cycle). False when the lock is no longer ours: stop polling."""
        if self._version is None:
            return False
        now = self.clock()
        if self._until - now > self.seconds / 2:
            return True
        try:
            renewed = self._write(self._version, holder=self.owner, until=now + self.seconds, now=now)
        except Exception:  # noqa: BLE001 - unknown is not ours: stop polling, try to release
            logger.warning("could not renew the poller lock; polling stops", exc_info=True)
            return False
        if renewed:
            return True
        logger.warning("the poller lock was taken over while this invocation held it; polling stops")
        self._version = None
        return False

    def release(self) -> None:
        """Free the lock, handing on the recent dispatches. Never raises: the expiry is the backstop."""
        if self._version is None:
            return
        version, self._version = self._version, None
        try:
            if not self._write(version, holder=None, until=0.0, now=self.clock()):
                logger.warning("the poller lock was taken over before this invocation released it")
        except Exception:  # noqa: BLE001 - the lock frees itself at its expiry
            logger.warning("could not release the poller lock; it frees itself at its expiry", exc_info=True)

    def _write(self, version: int | None, *, holder: str | None, until: float, now: float) -> bool:
        self.dispatches.prune(now, keep=self.keep_seconds)
        value = {"holder": holder, "until": until, "sent": self.dispatches.to_dict()}
        written = version_after = (version or 0) + 1
        if not self.state.put(LOCK_KEY, value, expected_version=version):
            # Our own write may have landed and its answer been lost (botocore retried the call and
            # the retry met our new version): only this invocation writes its owner id, and only a
            # holder writes the item free, so the item itself tells.
            current = self.state.get(LOCK_KEY)
            if (
                current is None
                or int(current["version"]) != version_after
                or current.get("holder") != holder
                or float(current.get("until", 0.0)) != until
            ):
                return False
            written = int(current["version"])
        if holder is not None:
            self._version, self._until = written, until
        return True
