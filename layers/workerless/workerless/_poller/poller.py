"""The poller: short-poll the engine for as many jobs as the routes can start, fan them out.

One invocation (a schedule tick or a ticker message)::

    capacity per route = max in flight - what its queue already holds
        ▼
    activate (waitSeconds 0: a Lambda must not pay to sit in a long poll)
        ▼
    SendMessageBatch per route ──refused──► hand the job straight back to the engine (release),
        │                                   or fail it outright when it can never fit SQS
        ▼
    one delayed heartbeat ticket for the dispatched batch
        ▼
    again at once after a dispatch, while the poll budget lasts; when a poll finds nothing (or no
    room) while work keeps arriving (within LINGER_SECONDS of the last dispatch), end and relay to a
    fresh invocation RELAY_DELAY_SECONDS later (a delayed ticker message): no Lambda sleeps between
    polls, billed at its memory for every second it waits

Only one invocation polls at a time: the entry point takes the poller lock (:mod:`workerless._poller.poller_lock`)
first, and each cycle renews it when due. What a route holds is SQS's approximate count plus every job sent in the
last WORKERLESS_SQS_LAG_SECONDS before that count was read (the lock hands that record on), or, smaller, the jobs
activated whose record is not final (exact; tracked in the same record; while they leave room, SQS is read every 5
minutes only: depth_due). A route read empty, with nothing sent to it since, is marked so in that record and not read
again for EMPTY_RECHECK_SECONDS (only the poller sends to it): an idle tick reads no queue.

Why dispatch before the ticket: if the poller dies between the two, the jobs still run and a short job finishes inside
its lease; the other order would have the heartbeat keep alive jobs no handler will ever see, for up to the maximum
hold time.

A poller that dies mid-cycle must not cost its jobs a lease either: with an intent log
(:mod:`workerless._poller.intent`, batches in the poller lock's item) the batch is written down before dispatch and
marked dispatched after it, and the next invocation finishes a dead poller's batch (hands the jobs back, or sends the
ticket). Two writes a dispatching cycle; the batch is dropped by the item's next write."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from workerless import observability
from workerless._core import settlement
from workerless._core.claimcheck import JOBS_PREFIX, message_threshold, object_key, too_large_reason
from workerless._core.model import ActivatedJob, Demand
from workerless._core.retry import POLL_BACKOFF_FINAL, POLL_BACKOFF_RETRYABLE, poll_backoff
from workerless._core.settings import Settings
from workerless._heartbeat.ticket import Ticket, TicketEntry
from workerless._poller.bookkeeping import depth_due, fence, tracked, unread
from workerless._poller.poller_lock import Dispatches
from workerless.aws.payloads import PayloadError
from workerless.aws.sqs import FALLBACK_MESSAGE_BYTES
from workerless.errors import ConfigurationError, EngineError, RetryableEngineError
from workerless.observability import Lifecycle, logger

if TYPE_CHECKING:
    from workerless._core.ports import Intents, JobStore, PayloadStore, Queues
    from workerless._poller.poller_lock import PollerLock
    from workerless.engines.base import Engine

T = TypeVar("T")

#: Upper bound on cycles in one invocation, whatever the budget (every loop is bounded).
MAX_CYCLES = 1000
#: Time kept back from the Lambda's remaining time when deciding whether to poll again.
SAFETY_MARGIN_SECONDS = 3.0
#: While work keeps arriving the poller keeps polling until nothing was dispatched for this long.
LINGER_SECONDS = 5.0
#: While lingering, an empty or capacity-bound poll ends the invocation and relays to a fresh one
#: this many seconds later (DelaySeconds: whole seconds). Sleeping instead is billed at the
#: function's memory for every second (256 MB: $3.3 per million seconds); a relay costs one SQS send,
#: receive and delete, one Lambda request and one lock write ($2.2 per million), and a poll a second
#: keeps pickup within the targets (p50 <= 1 s, p99 <= 2 s at 2 jobs/s; bench/RESULTS.md).
RELAY_DELAY_SECONDS = 1
#: A route's SQS in-flight count is re-read at most this often (a relay hands the counts on).
DEPTH_REFRESH_SECONDS = 2.0
#: A route whose queue was read empty, with nothing sent to it since (the lock's dispatch record says
#: so), is not read again for this long: only the poller sends to it, so it is still empty. Read again
#: after it all the same, for what reaches a job queue from elsewhere (a dead-letter redrive).
EMPTY_RECHECK_SECONDS = 300.0


@dataclass
class PollReport:
    cycles: int = 0
    polls: int = 0
    empty_polls: int = 0
    activated: int = 0
    dispatched: int = 0
    released: int = 0
    errors: int = 0
    #: 1 when the invocation stopped because its poller lock was taken over.
    lock_lost: int = 0
    per_type: dict[str, int] = field(default_factory=dict)


class Poller:
    """One poller invocation's work. Engine, queues and settings are injected (fakes in tests).

    Example (an illustration: it needs a running engine or AWS, which tests/functional provide)::

        report = Poller(settings, engine, queues).run(deadline=time.monotonic() + 20)
    """

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        queues: Queues,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        intents: Intents | None = None,
        lock: PollerLock | None = None,
        wall: Callable[[], float] | None = None,
        payloads: PayloadStore | None = None,
        store: JobStore | None = None,
    ) -> None:
        self.settings = settings
        self.store = store  # the job records: fence hand-backs (fence), bound what routes hold (demands)
        self.engine = engine
        self.queues = queues
        #: workerless.aws.payloads.Payloads, the claim check (None or disabled: nothing is offloaded).
        self.payloads = payloads
        #: workerless._poller.intent.IntentLog (None: no log; a dead poller's jobs wait out their lease).
        self.intents = intents
        #: workerless._poller.poller_lock.PollerLock, already taken (None: the caller guarantees one poller).
        self.lock = lock
        self.clock = clock
        self.sleep = sleep
        # Dispatch times are wall-clock times (``wall``, default time.time as it is when the poller is
        # built): they outlive the invocation (the lock hands them on).
        self._wall_clock = wall or time.time
        #: Jobs sent per route recently: the lock's record (handed on between invocations) or our own.
        self.dispatches: Dispatches = lock.dispatches if lock is not None else Dispatches(settings.sqs_lag_seconds)
        # Each route's SQS count as last read and when (``clock``; it can only over-count: handlers
        # finish jobs meanwhile), and when its tracked records were last re-read (see demands).
        self._depths: dict[str, tuple[int, float]] = {}
        self._refreshed: dict[str, float] = {}
        #: When a job was last dispatched (epoch seconds; a relay carries it to the next invocation).
        self.last_dispatch: float | None = None
        #: The poll budget ran out while work was still arriving.
        self.busy_at_end = False
        #: Set when the invocation ended with work still flowing: relay to a fresh invocation this
        #: many seconds later (0: at once, the budget ran out while busy). None: no relay.
        self.relay_delay: int | None = None

    def depths_for_relay(self) -> dict[str, list[float]]:
        """Each route's last SQS count and when it was read (epoch seconds), for the relayed
        invocation (:meth:`inherit_depths`): it re-reads a route only when the count is due."""
        return {t: [count, round(self._wall(at), 3)] for t, (count, at) in self._depths.items()}

    def inherit_depths(self, depths: object) -> None:
        """Counts handed on by the invocation that relayed to this one (see :meth:`depths_for_relay`);
        anything unreadable is left out (that route's count is read again)."""
        if not isinstance(depths, dict):
            return
        offset = self._wall_clock() - self.clock()
        for job_type, value in depths.items():
            try:
                count, read_wall = int(value[0]), float(value[1])
            except (TypeError, ValueError, IndexError, KeyError):
                continue
            if count >= 0 and self.settings.route(str(job_type)) is not None:
                self._depths[str(job_type)] = (count, read_wall - offset)

    def demands(self) -> list[Demand]:
        """Each route's room: MaxInFlight minus what it holds (module docstring). Its tracked records
        are re-read every DEPTH_REFRESH_SECONDS, its SQS count only when due (depth_due)."""
        demands = []
        now, wall = self.clock(), self._wall_clock()
        horizon = float(self.settings.max_hold_seconds + self.settings.lease_seconds)
        for route in self.settings.routes:
            if route.type not in self._depths:
                self._depths[route.type] = self._depth(route.type, route.queue_url, now)
            if refresh := (now - self._refreshed.get(route.type, -math.inf) >= DEPTH_REFRESH_SECONDS):
                self._refreshed[route.type] = now
            count, read_at = self._depths[route.type]
            bounds = (self.store, self.dispatches, route.type, wall, horizon)
            bound = tracked(*bounds, count, self._wall(read_at), refresh=refresh)
            age = now - read_at
            if age >= DEPTH_REFRESH_SECONDS and depth_due(bound, route.max_in_flight, age=age):
                count, read_at = self._depths[route.type] = self._depth(route.type, route.queue_url, now)
                bound = tracked(*bounds, count, self._wall(read_at), refresh=False)
            # Not yet in SQS's count: every job sent after (read time - lag), after the read included;
            # the lock keeps the sends that long only for a count under DEPTH_REFRESH_SECONDS old.
            recent = self.dispatches.since(route.type, self._wall(read_at) - self.dispatches.window)
            estimate = count + recent if now - read_at < DEPTH_REFRESH_SECONDS else math.inf
            capacity = max(0, route.max_in_flight - int(min(estimate, bound)))
            limits = (self.settings.max_payload_bytes, self.settings.answer_budget_bytes)
            demands.append(Demand(route.type, capacity, route.engine_queue, *limits))
        return demands

    def _depth(self, job_type: str, queue_url: str, now: float) -> tuple[int, float]:
        """The route's count and when it holds (``clock``): 0 without a call while its queue is known
        empty (read empty under :data:`EMPTY_RECHECK_SECONDS` ago, nothing sent to it since: an idle
        tick reads no queue), else SQS's count, read now (timed before the call: a send that SQS's
        answer may not include is counted by :meth:`demands`)."""
        wall = self._wall(now)
        empty = self.dispatches.empty_since(job_type)
        if empty is not None and 0 <= wall - empty < EMPTY_RECHECK_SECONDS:
            return 0, now
        count = self.queues.in_flight(queue_url)
        if count == 0 and not self.dispatches.since(job_type, wall - self.dispatches.window):
            self.dispatches.note_empty(job_type, at=wall)  # SQS's 0 is not a send it has not counted yet
        else:
            self.dispatches.forget_empty(job_type)
        return count, now

    def _wall(self, at: float) -> float:
        """A ``clock`` reading as a wall-clock time (the two advance together; a virtual clock too)."""
        return at + self._wall_clock() - self.clock()

    def _keep_lock(self, report: PollReport) -> bool:
        """Renew the poller lock when due; False (and noted) when it is no longer ours."""
        if self.lock is None or self.lock.keep():
            return True
        report.lock_lost = 1
        return False

    def recover(self, *, deadline: float) -> PollReport:
        """Only finish what a dead poller left (see :meth:`_recover`), without polling: what an
        invocation that finds the poller lock held still does, so that a dead poller's batch is not
        left waiting for its lock to expire. Safe beside the holder: each batch is taken once."""
        report = PollReport()
        self._recover(report, deadline=deadline)
        return report

    def run(self, *, deadline: float) -> PollReport:
        """Poll until nothing is left to take now, or time runs out.

        Idle, the first empty poll ends the invocation (one short poll per tick). After a cycle that
        dispatched, it polls again at once (more may be waiting). An empty or capacity-bound cycle
        while work keeps flowing (a dispatch within LINGER_SECONDS) ends the invocation with
        ``relay_delay`` set: the entry point relays to a fresh invocation RELAY_DELAY_SECONDS later,
        so a job that becomes activatable while work flows is picked up within about a second, and
        no invocation sleeps between polls. ``busy_at_end`` (with ``relay_delay`` 0) tells the entry
        point that the budget ran out while jobs were still being taken.
        """
        report = PollReport()
        self._recover(report, deadline=deadline)
        budget_end = min(deadline, self.clock() + self.settings.poll_budget_seconds)
        failures_in_a_row = 0
        while report.cycles < MAX_CYCLES:
            if not self._keep_lock(report):
                break  # another invocation polls now: two would share the same room
            report.cycles += 1
            released_before = report.released
            dispatched, wait = self.cycle(report, deadline=deadline)
            now = self.clock()
            if wait is not None:
                # A failed poll: back off (1 s retryable / Retry-After, 5 s final, doubling while
                # polls keep failing) if time allows.
                failures_in_a_row += 1
                wait = poll_backoff(wait, failures_in_a_row)
                if now + wait + SAFETY_MARGIN_SECONDS >= budget_end:
                    break
                self.sleep(wait)
                continue
            failures_in_a_row = 0
            if dispatched:
                self.last_dispatch = time.time()
            elif report.released > released_before:
                # Every job of the cycle was handed back: the next tick tries again, not this poll.
                break
            lingering = self.last_dispatch is not None and time.time() - self.last_dispatch < LINGER_SECONDS
            if not dispatched:
                if lingering:
                    self.relay_delay = RELAY_DELAY_SECONDS
                break
            if now + SAFETY_MARGIN_SECONDS >= budget_end:
                self.busy_at_end = True
                self.relay_delay = 0
                break
        try:  # the engine's liveness report, where it wants one (None: no word after a cycle)
            if (liveness := self.engine.liveness) is not None:
                liveness.after_cycle({k: v for k, v in vars(report).items() if isinstance(v, int)})
        except Exception:
            logger.warning("engine after_cycle hook failed", exc_info=True)
        return report

    def cycle(self, report: PollReport, *, deadline: float) -> tuple[int, float | None]:
        """One poll: returns (jobs dispatched, backoff to wait before the next poll or None)."""
        demands = [d for d in self.demands() if d.capacity > 0]
        if not demands:
            return 0, None
        report.polls += 1
        try:
            jobs = self.engine.activate(demands, self.settings.lease_seconds)
        except ConfigurationError:
            raise
        except RetryableEngineError as exc:
            report.errors += 1
            logger.warning(
                "poll failed; backing off", extra={"engine": self.engine.name, "error": str(exc), "status": exc.status}
            )
            return 0, max(POLL_BACKOFF_RETRYABLE, exc.retry_after or 0.0)
        except EngineError as exc:
            report.errors += 1
            logger.error(
                "poll rejected; backing off",
                extra={"engine": self.engine.name, "error": str(exc), "status": exc.status},
            )
            return 0, POLL_BACKOFF_FINAL
        if not jobs:
            report.empty_polls += 1
            return 0, None
        report.activated += len(jobs)
        for job_type in {job.ref.job_type for job in jobs}:
            # Its queue is about to hold them: not empty, from the intent write below on.
            self.dispatches.forget_empty(job_type)
        at = self._wall_clock()
        for job in jobs:
            # Counted until their records are final, from the intent write below on (written with it).
            self.dispatches.track(job.ref.job_type, job.record_key, at=at)
        # Written down before dispatch, so a poller that dies now does not cost the jobs a lease. The
        # write is to the lock's item, compare-and-set: it also tells whether the lock is still ours.
        try:
            intent = None if self.intents is None else self.intents.write(jobs)
        except Exception:  # DynamoDB failed it after botocore's retries. Had this poller died before the send,
            # nothing could hand the batch back (its lease lapsed): it goes back now, polled again after a back-off.
            logger.warning("poller intent write failed; handing the batch back", exc_info=True)
            self._hand_back(jobs, "the intent log could not record the jobs", report, deadline=deadline)
            report.errors += 1
            return 0, POLL_BACKOFF_RETRYABLE
        if (intent is None and not self._keep_lock(report)) or (self.lock is not None and not self.lock.held):
            # The lock was taken over while the engine answered (a cycle slower than half the lock):
            # the new holder counts room without these jobs, so they go straight back.
            report.lock_lost = 1
            self._hand_back(jobs, "the poller lock was taken over before they were queued", report, deadline=deadline)
            return 0, None
        return self._dispatch(jobs, report, deadline=deadline, intent=intent), None

    def _intent(self, step: Callable[[Intents], T]) -> T | None:
        """One step of the intent log; never fails the cycle (the lease is the backstop)."""
        if self.intents is None:
            return None
        try:
            return step(self.intents)
        except Exception:
            logger.warning("poller intent log step failed; a crash now would cost this batch a lease", exc_info=True)
            return None

    def _recover(self, report: PollReport, *, deadline: float) -> None:
        """Finish what a dead poller left: hand back jobs it activated but never queued, send the
        ticket of jobs it queued but never ticketed."""
        stale = self._intent(lambda log: log.take_stale()) or []
        for phase, jobs in stale:
            logger.warning("finishing a batch a poller left unfinished", extra={"phase": phase, "jobs": len(jobs)})
            if phase == "dispatched":
                unsent = self._send_ticket(jobs) if jobs else []
                if unsent:
                    # Back in the log for the next invocation, while any of their leases still runs.
                    self._intent(lambda log: log.put_back_dispatched(unsent))  # noqa: B023 - run at once
                continue
            reason = "the poller that activated it stopped before queuing it"
            back, queued = fence(self.store, self.engine.lease, jobs)  # safe to hand back / queued
            self._hand_back(back, reason, report, deadline=deadline)
            unsent = self._send_ticket(queued) if queued else []
            if unsent:
                self._intent(lambda log: log.put_back_dispatched(unsent))  # noqa: B023 - run at once
        if stale:
            # Out of the log only now: a poller that dies while finishing them leaves them to the next.
            self._intent(lambda log: log.finished())

    def _dispatch(
        self, jobs: list[ActivatedJob], report: PollReport, *, deadline: float, intent: str | None = None
    ) -> int:
        by_type: dict[str, list[ActivatedJob]] = {}
        for job in jobs:
            by_type.setdefault(job.ref.job_type, []).append(job)
            observability.emit(job.ref.job_type, Lifecycle.ACTIVATED, **observability.correlation_keys(job))
        sent: list[ActivatedJob] = []
        for job_type, batch in by_type.items():
            route = self.settings.route(job_type)
            if route is None:
                # The engine handed us a type we did not ask for: never hold it.
                self._hand_back(batch, f"no route handles job type {job_type!r}", report, deadline=deadline)
                continue
            for job in [j for j in batch if j.unread_bytes is not None]:  # variables not read: too large
                final, reason = unread(job, self.settings.max_payload_bytes, self.settings.answer_budget_bytes)
                (self._fail_for_good if final else self._hand_back)([job], reason, report, deadline=deadline)
            batch, bodies = self._messages(
                route.queue_url, [j for j in batch if j.unread_bytes is None], report, deadline=deadline
            )
            failures = {f.index: f for f in self.queues.send_batch(route.queue_url, bodies)}
            sent_here = 0
            for index, job in enumerate(batch):
                failure = failures.get(index)
                if failure is None:
                    sent.append(job)
                    sent_here += 1
                    observability.emit(job_type, Lifecycle.DISPATCHED, **observability.correlation_keys(job))
                elif failure.oversized:
                    # It can never fit an SQS message: fail it for good, with the cap in the reason.
                    self._fail_for_good([job], failure.reason, report, deadline=deadline)
                else:
                    self._hand_back([job], f"could not queue the job: {failure.reason}", report, deadline=deadline)
            self.dispatches.add(job_type, sent_here, at=self._wall(self.clock()))
            report.per_type[job_type] = report.per_type.get(job_type, 0) + sent_here
        report.dispatched += len(sent)
        if sent:
            self._intent(lambda log: log.dispatched(intent, sent))
            unsent = self._send_ticket(sent)
            if unsent:
                # Left in the intent log as dispatched, only the jobs still owed a ticket: the next
                # invocation's recovery sends theirs.
                self._intent(lambda log: log.dispatched(intent, unsent))
                return len(sent)
        self._intent(lambda log: log.clear(intent))
        return len(sent)

    def _messages(
        self, queue_url: str, batch: list[ActivatedJob], report: PollReport, *, deadline: float
    ) -> tuple[list[ActivatedJob], list[str]]:
        """Each job's message body, its variables in the claim check's bucket when the message would be
        over the queue's MaximumMessageSize less the margin (:mod:`workerless._core.claimcheck`). A job over
        WORKERLESS_MAX_PAYLOAD_BYTES is failed, one whose payload cannot be written handed back."""
        payloads = self.payloads
        if payloads is None or not payloads.enabled:
            return batch, [job.to_message() for job in batch]
        known = self.queues.max_message_bytes(queue_url)
        # Unknown (unreadable) limit: plan for the old 256 KiB default, never too high; offloading
        # a message that would have fitted costs a PUT and a GET, not the job.
        threshold = message_threshold(known if known is not None else FALLBACK_MESSAGE_BYTES)
        kept: list[ActivatedJob] = []
        bodies: list[str] = []
        for job in batch:
            body = "" if (job.variables_size() or 0) > threshold else job.to_message()  # raw: size known
            size = len(body.encode()) if body else threshold + 1
            if size > threshold:
                offloaded = self._offload(job, size, payloads, report, deadline=deadline)
                if offloaded is None:
                    continue
                body = offloaded
            kept.append(job)
            bodies.append(body)
        return kept, bodies

    def _offload(
        self, job: ActivatedJob, size: int, payloads: PayloadStore, report: PollReport, *, deadline: float
    ) -> str | None:
        """The job's message with its variables in the claim check's bucket; None when the job was
        failed (too large for workerless to carry) or handed back (the bucket refused the write)."""
        data = job.variables_json()
        limit = self.settings.max_payload_bytes
        if len(data) > limit:
            self._fail_for_good([job], too_large_reason("the job's input", len(data), limit), report, deadline=deadline)
            return None
        try:
            ref = payloads.put(object_key(JOBS_PREFIX, job.ref.job_type), data)
        except PayloadError as exc:
            reason = f"could not write the job's variables to the claim check: {exc}"
            self._hand_back([job], reason, report, deadline=deadline)
            return None
        keys = observability.correlation_keys(job)
        observability.emit(job.ref.job_type, Lifecycle.OFFLOADED, **keys, bytes=len(data))
        return job.to_message(payload=ref)

    def _send_ticket(self, jobs: list[ActivatedJob]) -> list[ActivatedJob]:
        """Send the heartbeat tickets of ``jobs``: one per :data:`~workerless._heartbeat.ticket.MAX_TICKET_ENTRIES`
        jobs (and within the ticket byte bound), so a large batch never makes a message SQS refuses.
        Returns the jobs whose ticket could not be sent (the jobs are queued and will run; only jobs
        longer than their lease are at risk, and the intent log's recovery sends it later)."""
        if not self.settings.heartbeat_queue_url:
            logger.warning("no WORKERLESS_HEARTBEAT_QUEUE_URL: leases of long jobs will not be extended")
            return []
        ticket = Ticket(
            engine=jobs[0].ref.engine,
            entries=tuple(TicketEntry(j.ref, j.lease_expires_at) for j in jobs),
            first_seen=time.time(),
        )
        unsent: list[ActivatedJob] = []
        offset = 0
        for part in ticket.split():
            covered = jobs[offset : offset + len(part.entries)]
            offset += len(part.entries)
            try:
                self.queues.send(self.settings.heartbeat_queue_url, part.to_json(), delay_seconds=part.delay_seconds())
            except Exception:
                logger.exception("could not send a heartbeat ticket", extra={"jobs": len(covered)})
                unsent.extend(covered)
        return unsent

    def _hand_back(self, jobs: list[ActivatedJob], reason: str, report: PollReport, *, deadline: float) -> None:
        for job in jobs:
            report.released += 1
            self.dispatches.drop(job.ref.job_type, [job.record_key])  # not ours any more (never queued, or fenced)
            observability.emit(job.ref.job_type, Lifecycle.RELEASED, **(keys := observability.correlation_keys(job)))
            logger.warning(
                "handing the job back to the engine", extra={"job_type": job.ref.job_type, **keys, "reason": reason}
            )
            settlement.release(job, reason, engine=self.engine, deadline=deadline, hold=False)

    def _fail_for_good(self, jobs: list[ActivatedJob], reason: str, report: PollReport, *, deadline: float) -> None:
        for job in jobs:
            report.released += 1
            self.dispatches.drop(job.ref.job_type, [job.record_key])
            settlement.fail_for_good(job, reason, engine=self.engine, deadline=deadline)
