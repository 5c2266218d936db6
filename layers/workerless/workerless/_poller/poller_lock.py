"""One poller at a time, and what it dispatched recently: MaxInFlight is a bound, not a hope.

The watchdog schedule, the tick (up to two at once) and a busy invocation's relay each used to
poll, reading the same SQS counts and taking the same room (a route leased about three times its
MaxInFlight). Now an invocation polls only while it holds the **poller lock**, one item of the job
table (``state#poller-lock``), written only by compare-and-set (a consistent GetItem, then a
PutItem conditional on the item's version)::

    take     read the item; free, or its holder's expiry passed (the holder died) → write it as ours
    keep     before each poll cycle, and when the engine has answered: when less than half the
             lock time is left, write it again (a refused write: taken over, stop polling)
    release  at the end of the invocation: write it free
    hand on  an invocation that relays to a fresh one (work still flowing) does not release: the
             relay message carries the lock's version, and the fresh invocation takes it over with
             one write conditional on that version (no read; a duplicate or late relay finds the
             version moved and falls back to ``take``)

The version makes the lock exclusive, not the clocks (a holder whose write succeeds knows nobody
polled since its last one); the expiry only decides when a dead holder's lock may be taken over.

The item also hands on **what the holder dispatched recently** (:class:`Dispatches`). SQS's counts
are approximate and can lag a send (AWS: they "may not achieve consistency until at least 1 minute
after the producers stop sending"), so the poller (and, through the item, the next invocation)
counts a job it sent for ``WORKERLESS_SQS_LAG_SECONDS`` on top of SQS's count (docs/guarantees.md).

The item also carries the holder's **intent batches** (:mod:`workerless._poller.intent`): the jobs it
activated and has not yet fully handed over, written by compare-and-set like the rest of the item,
so an intent write is also the holder's check that the lock is still its own (and a renewal). A
batch whose ticket was sent is *closed* in memory only: the holder's next write of the item drops it
(the next batch's intent, a renewal, the release, or the relayed invocation's takeover), so closing
costs no write of its own. Whoever takes the lock from a holder that is gone (released, expired, or
relayed with a batch still open) takes the batches left in it over as *orphans*, to finish them;
they stay in the item until finished, so a taker that dies meanwhile leaves them to the next.

An invocation that finds the lock held costs one read, polls nothing and ends (the tick chain was
continued before); it still finishes a dead poller's intent batches from that read (handing jobs
back never takes room), writing the item only to take one, its holder, expiry and sends unchanged.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from workerless._core.retry import COMPARE_AND_SET, ambient_deadline
from workerless._poller import sendlog
from workerless.observability import logger

if TYPE_CHECKING:
    from workerless._core.ports import SharedState

LOCK_KEY = "poller-lock"
#: A write that keeps meeting a recoverer's writes (the holder is unchanged) gives up after this many
#: (:data:`workerless._core.retry.COMPARE_AND_SET`, the policy the loops run under).
MAX_WRITE_TRIES = COMPARE_AND_SET.attempts

Batches = list[dict[str, Any]]


class Dispatches:
    """Jobs sent per route in the last ``window`` seconds (wall clock), in one-second buckets.

    A bucket's time is the end of its second: a send is counted a little longer, never shorter, than
    the window (the safe side).

    It also keeps, per route, when a depth read found the route's queue **empty** (the poller's
    :meth:`note_empty`), for as long as nothing has been sent to the route since: any send drops the
    mark. Stored as a bucket of 0 jobs at the read's second (rounded down); a reader that predates
    the marks drops such a bucket, and so re-reads that route's depth, as before.
    """

    def __init__(self, window: float, sent: Mapping[str, Any] | None = None) -> None:
        self.window = float(window)
        self._sent: dict[str, dict[int, int]] = {}
        self._empty: dict[str, int] = {}
        # The jobs activated for each route whose record was not yet seen final: job record key ->
        # when (epoch second). Kept under a "#live" key of the record (a reader that predates it
        # skips it: not a list). ``tracking_since``: since when every job is in it (0: since the
        # item was made; None: not known, an item written by a poller that predates it).
        self._live: dict[str, dict[str, int]] = {}
        self.tracking_since: float | None = 0.0 if sent is None else None
        live, since = (sent or {}).get("#live"), (sent or {}).get("#since")
        if isinstance(live, dict) and isinstance(since, int | float):
            self.tracking_since = float(since)
            for job_type, rows in live.items():
                for row in rows if isinstance(rows, list) else []:
                    try:
                        key, at = sendlog.record_key(str(job_type), str(row[0])), int(row[1])
                    except (TypeError, ValueError, IndexError):
                        self.tracking_since = None  # an unreadable entry: the record is incomplete
                        continue
                    self._live.setdefault(str(job_type), {})[key] = at
        for job_type, stored in (sent or {}).items():
            for at, count in sendlog.entries(stored):  # an unreadable entry: SQS's count alone covers it
                if count > 0:
                    self._sent.setdefault(str(job_type), {})[at] = count
                elif count == 0:
                    self._empty[str(job_type)] = max(at, self._empty.get(str(job_type), at))
        # A mark with a send in or after its second says nothing any more.
        for job_type, at in list(self._empty.items()):
            if any(sent_at > at for sent_at in self._sent.get(job_type, {})):
                del self._empty[job_type]

    def note_empty(self, job_type: str, *, at: float) -> None:
        """A depth read at ``at`` (epoch seconds) found ``job_type``'s queue empty, with nothing sent
        to it within the window before the read (the caller checks)."""
        self._empty[job_type] = math.floor(at)

    def empty_since(self, job_type: str) -> int | None:
        """When ``job_type``'s queue was last read empty, if nothing was sent to it since (None: not
        known empty)."""
        return self._empty.get(job_type)

    def forget_empty(self, job_type: str) -> None:
        """Drop ``job_type``'s empty mark (jobs of it are about to be sent, or it was read non-empty)."""
        self._empty.pop(job_type, None)

    def add(self, job_type: str, count: int, *, at: float) -> None:
        """``count`` jobs of ``job_type`` sent at ``at`` (epoch seconds)."""
        if count <= 0:
            return
        self._empty.pop(job_type, None)
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

    def track(self, job_type: str, key: str, *, at: float) -> None:
        """A job of ``job_type`` (its record key) was activated at ``at``: counted until its record
        is seen final (:meth:`drop`) or the horizon passes (:meth:`prune_live`)."""
        if self.tracking_since is None:
            self.tracking_since = float(math.floor(at))  # complete from now on
        self._live.setdefault(job_type, {})[key] = math.floor(at)

    def live(self, job_type: str) -> list[str]:
        """The record keys of ``job_type``'s tracked jobs."""
        return list(self._live.get(job_type, {}))

    def live_since(self, job_type: str, after: float) -> int:
        """Tracked jobs of ``job_type`` activated after ``after`` (epoch seconds; a job counts from
        the start of its second: a little longer, never shorter)."""
        return sum(1 for at in self._live.get(job_type, {}).values() if at + 1 > after)

    def drop(self, job_type: str, keys: Iterable[str]) -> None:
        """These jobs are final (or were never queued): no longer counted."""
        tracked = self._live.get(job_type)
        if tracked is None:
            return
        for key in keys:
            tracked.pop(key, None)
        if not tracked:
            del self._live[job_type]

    def prune_live(self, now: float, *, horizon: float) -> None:
        """Forget jobs activated more than ``horizon`` seconds ago: their lease is ours no longer."""
        for job_type in list(self._live):
            self.drop(job_type, [k for k, at in self._live[job_type].items() if at < now - horizon])

    def complete(self, now: float, *, horizon: float) -> bool:
        """Whether every job activated in the last ``horizon`` seconds is tracked."""
        return self.tracking_since is not None and (self.tracking_since == 0.0 or now - self.tracking_since >= horizon)

    def _routes(self) -> list[str]:
        return sorted({*self._sent, *self._empty})

    def to_dict(self) -> dict[str, Any]:
        # one string per route (workerless._poller.sendlog): a third of the lists' bytes, the item under 1 KiB
        out: dict[str, Any] = {t: sendlog.encode(self._sent.get(t, {}), self._empty.get(t)) for t in self._routes()}
        if self.tracking_since is not None:
            out["#since"] = self.tracking_since
            out["#live"] = {
                t: [[sendlog.short_key(t, k), at] for k, at in keys.items()] for t, keys in self._live.items()
            }
        return out


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
        key: the item's shared-state key (a poller shard's own: :func:`workerless._poller.shards.state_key`).

    Example:
        An illustration of its use by the poller (``poll`` stands for the poll loop)::

            lock = PollerLock(MemoryState(), seconds=30, window=2)
            if lock.acquire():
                try: poll(lock.dispatches, keep_polling=lock.keep)
                finally: lock.release()
    """

    def __init__(
        self,
        state: SharedState,
        *,
        seconds: float,
        window: float,
        keep_seconds: float = 0.0,
        clock: Callable[[], float] | None = None,
        key: str = LOCK_KEY,
    ) -> None:
        self.state = state
        #: The item's key: LOCK_KEY, or a poller shard's own (workerless._poller.shards.state_key).
        self.key = key
        self.seconds = float(seconds)
        self.window = float(window)
        self.keep_seconds = float(keep_seconds)
        self.clock = clock or time.time  # looked up now: a benchmark's virtual time.time is seen
        self.owner = uuid.uuid4().hex
        #: What was dispatched recently, handed on from the last holder and added to by this one.
        self.dispatches = Dispatches(window)
        #: Who held the lock when :meth:`acquire` found it taken, and until when (for the log).
        self.held_by: tuple[str, float] | None = None
        #: The item as :meth:`acquire` read it when it found the lock held (a dead holder's
        #: batches are finished from it: :meth:`update_found`).
        self.found: dict[str, Any] | None = None
        #: Batches left in the item by a holder that is gone, taken over with the lock: the caller
        #: finishes them (:meth:`workerless._poller.intent.IntentLog.take_stale`).
        self.orphans: Batches = []
        #: The intent batches in the item as this holder last wrote it.
        self.batches: Batches = []
        self._closed: set[str] = set()
        #: :attr:`batches` holds a change the item does not (:meth:`amend`): the next write carries it.
        self._unwritten = False
        self._version: int | None = None
        self._until = 0.0
        #: The item as read back after a refused write (who wrote it instead).
        self._conflict: dict[str, Any] | None = None

    @property
    def held(self) -> bool:
        """This invocation took the lock and has not released or lost it."""
        return self._version is not None

    def acquire(self) -> bool:
        """Take the lock if it is free or its holder's expiry has passed. One read; one write when free."""
        return self._take(self.state.get(self.key))

    def _take(
        self, current: dict[str, Any] | None, *, closed: frozenset[str] = frozenset(), handed: bool = False
    ) -> bool:
        """Take the lock from ``current`` (the item as just read) if it is free or expired, or
        ``handed`` on to us by its holder's relay; its batches (less ``closed``: known to be
        finished) become :attr:`orphans`."""
        now = self.clock()
        held = current is not None and current.get("holder") and float(current.get("until", 0.0)) > now
        if held and not handed:
            assert current is not None
            self.held_by = (str(current["holder"]), float(current["until"]))
            self.found = current
            return False
        if current is not None and current.get("holder") and not handed:
            logger.warning(
                "taking over the poller lock of an invocation that did not release it",
                extra={"holder": current.get("holder"), "expired_seconds_ago": round(now - float(current["until"]), 1)},
            )
        self.dispatches = Dispatches(self.window, (current or {}).get("sent"))
        # The batches left in the item are taken with the lock: the holder that wrote them is gone, so
        # they are finished now, by this invocation. They stay in the item, stamped now (an invocation
        # that finds the lock held leaves them alone for the stale window), until they are finished:
        # if this invocation dies first, the next one finishes them.
        left = [{**b, "at": now} for b in _batches_of(current) if b.get("id") not in closed]
        version = None if current is None else int(current["version"])
        if not self._write(version, holder=self.owner, until=now + self.seconds, now=now, batches=left):
            self.held_by = ("another invocation", now)  # it took the lock between our read and our write
            return False
        self.orphans = left
        return True

    def handover(self) -> dict[str, Any] | None:
        """What a relay message carries so that the invocation it starts takes this lock over
        (:meth:`inherit`) instead of reading and re-taking it; None when not held. The lock stays
        ours until :meth:`handed_over` (the relay was sent) or :meth:`release` (it was not)."""
        if self._version is None:
            return None
        if self._unwritten and [b for b in self.batches if b.get("id") not in self._closed]:
            # The item still says something this holder knows to be wrong about a batch that is still
            # open (a failed write: :meth:`amend`); the relayed invocation would read and act on it.
            try:
                if not self.update_batches(None):
                    return None
            except Exception:
                logger.warning("could not write the poller lock before relaying; released instead", exc_info=True)
                return None
        ids = [str(b.get("id")) for b in self.batches]
        return {
            "version": self._version,
            "sent": self.dispatches.to_dict(),
            "holder": self.owner,
            # The batches in the item: those finished (dropped by the next invocation's takeover,
            # no read needed) and those not (their tickets are owed: it reads the item first).
            "closed": [i for i in ids if i in self._closed],
            "open": [i for i in ids if i not in self._closed],
        }

    def handed_over(self) -> None:
        """The relay is sent: the lock is the next invocation's now (its expiry frees it if the relay
        never arrives)."""
        self._version = None

    def inherit(self, token: Mapping[str, Any]) -> bool:
        """Take the lock over from the invocation that relayed to this one: one write conditional on
        the version it handed on, no read, when every intent batch in the item is finished (the
        write drops them). Otherwise, or when that version is no longer the item's, the item is
        read: still the relaying holder's (its batches still owed a ticket, or a recoverer wrote
        it meanwhile), it is taken over with the batches left in it as :attr:`orphans`; anyone
        else's (a duplicate relay, or the lock expired and was taken), it is a plain :meth:`acquire`."""
        try:
            version = int(token["version"])
        except (KeyError, TypeError, ValueError):
            return self.acquire()
        # A token without these (an older poller's, from before its lock item held batches) names
        # an item with no batch in it: taken over like one whose batches are all finished.
        holder, closed, still_open = token.get("holder"), token.get("closed") or [], token.get("open") or []
        if not isinstance(closed, list) or not isinstance(still_open, list):
            return self.acquire()
        finished = frozenset(str(i) for i in closed)
        if not still_open:
            # Every batch in the item is finished: the takeover write drops them all, unread.
            now = self.clock()
            sent = token.get("sent")
            self.dispatches = Dispatches(self.window, sent if isinstance(sent, dict) else None)
            if self._write(version, holder=self.owner, until=now + self.seconds, now=now, batches=[]):
                return True
        for _ in COMPARE_AND_SET.tries(deadline=ambient_deadline()):
            current = self.state.get(self.key)
            if current is None or not holder or current.get("holder") != holder:
                return self._take(current, closed=finished)
            # Still the relaying invocation's: ours, with its batches. A recoverer writing between
            # this read and write (it takes a stale batch, then drops it) refuses the write: read
            # again, or nobody holds the lock and nothing polls until its expiry (issue 26).
            if self._take(current, closed=finished, handed=True):
                return True
            if self._conflict is None or self._conflict.get("holder") != holder:
                return False
        return False

    def keep(self) -> bool:
        """Before a poll cycle: renew when less than half the lock time is left (one write, not one
        per cycle). False when the lock is no longer ours: stop polling."""
        if self._version is None:
            return False
        now = self.clock()
        if self._until - now > self.seconds / 2:
            return True
        try:
            renewed = self.update_batches(None)
        except Exception:
            logger.warning("could not renew the poller lock; polling stops", exc_info=True)
            return False
        if renewed:
            return True
        logger.warning("the poller lock was taken over while this invocation held it; polling stops")
        return False

    def amend(self, change: Callable[[Batches], Batches]) -> None:
        """A write of the batches through ``change`` failed (DynamoDB, after botocore's retries), but
        what it records has happened (the jobs were queued): keep it in memory so that the holder's
        next write of the item (a renewal, the next batch, the release) carries it. Without this, that
        write saved the batch as it was (``activated``) and the next invocation handed back jobs
        that were queued and ticketed."""
        if self._version is None:
            return
        self.batches = change([b for b in self.batches if b.get("id") not in self._closed])
        self._unwritten = True

    def close(self, batch_id: str) -> None:
        """``batch_id`` is finished (queued and ticketed): the next write of the item drops it."""
        self._closed.add(batch_id)

    def update_batches(self, change: Callable[[Batches], Batches] | None) -> bool:
        """Write the item as this holder's, renewed, with its batches (finished ones dropped) passed
        through ``change``. False when the lock is no longer ours (then no longer held). A write
        refused because a recoverer wrote the item meanwhile (its holder left as it was) is made
        again on what it wrote."""
        for _ in COMPARE_AND_SET.tries(deadline=ambient_deadline()):
            if self._version is None:
                return False
            now = self.clock()
            batches = [b for b in self.batches if b.get("id") not in self._closed]
            if change is not None:
                batches = change(batches)
            if self._write(self._version, holder=self.owner, until=now + self.seconds, now=now, batches=batches):
                return True
            if not self._adopt_conflict():
                self._version = None
                return False
        logger.warning("the poller lock item kept changing under this invocation; treated as lost")
        self._version = None
        return False

    def _adopt_conflict(self) -> bool:
        """After a refused write: whether the item is still ours (a recoverer wrote it, leaving our
        holder as it was: only this invocation writes its owner id, and a taker writes its own); if
        so, go on from its version, expiry and batches."""
        current = self._conflict
        if current is None or current.get("holder") != self.owner:
            return False
        self._version, self.batches = int(current["version"]), _batches_of(current)
        self._until = float(current.get("until", 0.0))
        return True

    def update_found(self, change: Callable[[Batches], Batches]) -> bool:
        """Change the batches of a lock another invocation holds (:attr:`found`, as :meth:`acquire`
        read it), leaving its holder, expiry and sends as they are: how an invocation that finds
        the lock held takes a dead holder's batches, or puts one back. Compare-and-set on the
        version read, read again when it moved. True when written."""
        current = self.found
        for attempt in COMPARE_AND_SET.tries(deadline=ambient_deadline()):
            if attempt > 1:
                current = self.state.get(self.key)
            if current is None:
                return False
            value = {k: v for k, v in current.items() if k not in ("version", "batches")}
            batches = change(_batches_of(current))
            if batches:
                value["batches"] = batches
            if self.state.put(self.key, value, expected_version=int(current["version"])):
                self.found = {**value, "version": int(current["version"]) + 1}
                return True
        logger.warning("the poller lock item kept changing; a dead poller's batch is left for later")
        return False

    def release(self) -> None:
        """Free the lock, handing on the recent dispatches. Never raises: the expiry is the backstop."""
        if self._version is None:
            return
        try:
            freed = False
            for _ in COMPARE_AND_SET.tries(deadline=ambient_deadline()):
                open_batches = [b for b in self.batches if b.get("id") not in self._closed]
                if self._write(self._version, holder=None, until=0.0, now=self.clock(), batches=open_batches):
                    freed = True
                    break
                if not self._adopt_conflict():
                    break
            self._version = None
            if not freed:
                logger.warning("the poller lock was taken over before this invocation released it")
        except Exception:
            logger.warning("could not release the poller lock; it frees itself at its expiry", exc_info=True)

    def _write(self, version: int | None, *, holder: str | None, until: float, now: float, batches: Batches) -> bool:
        self.dispatches.prune(now, keep=self.keep_seconds)
        value: dict[str, Any] = {"holder": holder, "until": until, "sent": self.dispatches.to_dict()}
        if batches:
            value["batches"] = batches
        written = version_after = (version or 0) + 1
        if not self.state.put(self.key, value, expected_version=version):
            # Our own write may have landed and its answer been lost (botocore retried the call and
            # the retry met our new version): only this invocation writes its owner id, and only a
            # holder writes the item free, so the item itself tells.
            current = self.state.get(self.key)
            if (
                current is None
                or int(current["version"]) != version_after
                or current.get("holder") != holder
                or float(current.get("until", 0.0)) != until
            ):
                self._conflict = current
                return False
            written = int(current["version"])
        self._conflict = None
        self._unwritten = False
        if holder is not None:
            self._version, self._until = written, until
        self.batches = list(batches)
        self._closed &= {str(b.get("id")) for b in batches}
        return True


def _batches_of(item: Mapping[str, Any] | None) -> Batches:
    batches = (item or {}).get("batches")
    return [b for b in batches if isinstance(b, dict)] if isinstance(batches, list) else []
