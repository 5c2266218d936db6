"""The job record: one DynamoDB item per engine attempt of a job, read by three parties.

- The handler wrapper asks "may this delivery run the handler?" (claim), "what result do I
  re-report?" (stored outcome) and records that the report landed.
- The heartbeat asks "is this job still in the pipeline?" and marks it lost when the engine says
  the lease is gone, so the running handler can stop cooperatively.
- The dead-letter function asks "did the handler ever store a result?" before failing the job.

States and who moves them (every write is conditional, so racing deliveries cannot both win)::

    (none) ──claim──► CLAIMED ──store──► STORED ──report ok / 409──► REPORTED
      │                 │  ▲ claim again once claim_expires_at has passed (that container died)
      │                 └──┘
      ├──heartbeat 409──► LOST ◄──heartbeat 409── CLAIMED     (STORED/REPORTED are never made LOST:
      │                                                        the result is owed or delivered)
      └──begin refused──► SKIPPED  (StageNext: another delivery holds the lease)

StageNext's lease starts at begin (lease acquire), after the claim. The handler stamps the claim
``begun_at`` once acquire succeeds, and only then does the heartbeat renew it: renewing an execution
that was never acquired is refused ("not running"), and marking that LOST would make its redelivery
acknowledge a delivery nobody ran — the execution would never run (chaos run, seed 7).

A delivery that finds STORED re-reports the stored outcome and never runs the handler again. One
that finds CLAIMED with a live claim leaves the message for a later redelivery. A report the engine
keeps refusing with a retryable error (an outage) is marked owed on the STORED record
(``report_owed_at``, with the job message's SQS receipt handle): the heartbeat re-reports it every
few seconds, marks it REPORTED and deletes the message, so the job need not wait for the message's
visibility timeout. Every item has a
TTL (``expires_at``) well past the longest a job can be in flight.

Where the engine's lease starts at activation, the record also keeps which lease wrote it (its
fingerprint: :meth:`workerless._core.lease.LeasePolicy.fingerprint`): a later lease of the same job id
(node-flow, after a lapse) claims a LOST record again and re-reports a result whose report the lost
lease had refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from workerless._core.claimcheck import PayloadRef
from workerless._core.model import Outcome


class Status(StrEnum):
    CLAIMED = "claimed"
    STORED = "stored"
    REPORTED = "reported"
    LOST = "lost"
    SKIPPED = "skipped"


#: States after which nothing more is owed to the engine for this attempt.
DONE = frozenset({Status.REPORTED, Status.LOST, Status.SKIPPED})


@dataclass(frozen=True, slots=True)
class JobRecord:
    key: str
    status: Status
    owner: str | None = None
    claim_expires_at: float | None = None
    outcome: Outcome | None = None
    lost_reason: str | None = None
    deliveries: int = 0
    #: The fingerprint (:meth:`workerless._core.lease.LeasePolicy.fingerprint`) of the lease the record was
    #: last written under ("" or None: not known, as for engines whose lease starts at begin).
    lease: str | None = None
    #: When the claim holder's engine lease began (StageNext lease acquire), None before that.
    begun_at: float | None = None
    #: When a STORED result's report was first given up on by the handler (the engine refused it
    #: with a retryable error past the handler's quick retries): the heartbeat re-reports it.
    report_owed_at: float | None = None
    #: The SQS receipt handle of the job message kept in flight while the report is owed: the
    #: heartbeat deletes that message once the report lands. It authorises deleting the message:
    #: kept out of repr(), never logged.
    receipt: str | None = field(default=None, repr=False)
    #: The URL of the queue that message is in (the handler's event source): where the heartbeat
    #: deletes it, without reading the routes.
    receipt_queue: str | None = None
    #: Where the stored outcome is when it was too large for the record (the claim check's bucket):
    #: ``outcome`` is then None; the store's ``load_outcome`` reads it.
    outcome_ref: PayloadRef | None = None
    #: A result is stored in the record but was not read (``JobStore.get_many`` leaves it out):
    #: ``outcome`` is then None; read the whole record to have it.
    outcome_unread: bool = False

    @property
    def has_outcome(self) -> bool:
        """Whether a result is stored, in the record or in the claim check's bucket."""
        return self.outcome is not None or self.outcome_ref is not None or self.outcome_unread

    @property
    def in_pipeline(self) -> bool:
        """Whether the heartbeat should still keep this job's lease alive."""
        return self.status not in DONE

    @property
    def report_owed(self) -> bool:
        """Whether the heartbeat should re-report this record's stored result."""
        return self.status is Status.STORED and self.has_outcome and self.report_owed_at is not None

    def claim_live(self, now: float) -> bool:
        return self.status is Status.CLAIMED and (self.claim_expires_at or 0.0) > now

    def other_lease(self, lease: str) -> bool:
        """Whether the record was written under a different lease than ``lease`` (both known)."""
        return bool(lease) and bool(self.lease) and self.lease != lease


class Decision(StrEnum):
    """What a delivery should do, given the record it found when its claim was refused."""

    RUN = "run"  # claimed: run the handler
    REREPORT = "rereport"  # a result is stored: report it again, do not run
    DONE = "done"  # reported already: acknowledge the delivery
    SKIP = "skip"  # lost or skipped: do not run; acknowledge (StageNext: ack without executing)
    RETRY_LATER = "retry_later"  # another delivery holds a live claim: leave for redelivery


def decide(found: JobRecord | None, now: float, lease: str = "") -> Decision:
    """The move for a delivery whose conditional claim failed because ``found`` exists.

    ``lease`` is the delivery's lease fingerprint (:meth:`workerless._core.lease.LeasePolicy.fingerprint`):
    a REPORTED record written under another lease (its report was refused: that lease had lapsed)
    is re-reported under this one.

    Example:
        >>> decide(JobRecord("k", Status.STORED, outcome=Outcome.complete({})), now=0.0)
        <Decision.REREPORT: 'rereport'>
    """
    if found is None:
        return Decision.RUN
    if found.status is Status.STORED:
        return Decision.REREPORT
    if found.status is Status.REPORTED:
        if found.has_outcome and found.other_lease(lease):
            return Decision.REREPORT
        return Decision.DONE
    if found.status in (Status.LOST, Status.SKIPPED):
        return Decision.SKIP
    if found.claim_live(now):
        return Decision.RETRY_LATER
    return Decision.RUN
