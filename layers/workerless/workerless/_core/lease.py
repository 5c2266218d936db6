"""How an engine's lease works, as the pipeline needs to know it: declared by each engine through the
seam (:attr:`workerless.engines.base.Engine.lease`), read by the delivery, the heartbeat, the
dead-letter function and the poller, none of which asks which engine it is.

Two kinds of lease exist among the engines (``docs`` and the seeds say which):

- an activation lease (:data:`ACTIVATION_LEASE`): the engine leases the job when the poller
  activates it (Sheptra, node-flow). The job is ours from then on, waiting in SQS included: the
  heartbeat extends it from the first ticket, and a delivery the pipeline will not run needs no
  word to the engine (its lease lapses, or was lost).
- a begin lease (:data:`BEGIN_LEASE`): activation only hands out a delivery; the lease starts when a
  handler acquires it, under its claim, just before the run (StageNext lease acquire). The heartbeat
  renews only what has been acquired, the engine's acquire has the last word on a delivery the job
  record says must not run, and a delivery given up on without a result is handed back (requeued),
  never acknowledged.

Each behaviour that differs is a field of its own, a closed set matched exhaustively where it is used.

Example:
    >>> BEGIN_LEASE.held(None), ACTIVATION_LEASE.held(None)
    (False, True)
    >>> BEGIN_LEASE.granting(30.0).length(60.0)
    30.0
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from enum import Enum

from workerless._core.model import JobRef
from workerless._core.record import JobRecord, Status


class BeforeRun(Enum):
    """What happens between a delivery's claim and the run of the handler."""

    #: Nothing: the lease was granted at activation.
    NOTHING = "nothing"
    #: Lease acquire (``Engine.begin``) under the claim; refused means this delivery must not run.
    #: Once it lands the claim is stamped (``begun_at``) so the heartbeat starts renewing it.
    ACQUIRE = "acquire"


class RefusedClaim(Enum):
    """Who has the last word when a delivery's claim is refused and the record says not to run it
    (reported, lost or skipped) or another delivery holds the claim."""

    #: The job record: reported, lost or skipped is acknowledged at once; a live claim leaves the
    #: delivery for SQS's redelivery.
    RECORD = "record"
    #: The engine's lease acquire: a delivery the record says not to run is acknowledged only once
    #: acquire refuses it; a delivery of another message than the claim holder's (the engine handed
    #: the job out again) is acquired, acknowledged when refused and handed back when granted.
    ACQUIRE = "acquire"


class HandBack(Enum):
    """What a delivery that will not run, and carries no result, owes the engine."""

    #: An acknowledgement (``Engine.skip``, a no-op where the engine has none): the engine owns the
    #: job from activation; its lease lapses or was lost.
    ACKNOWLEDGE = "acknowledge"
    #: ``Engine.release`` (requeue): an acknowledgement without a result would drop the job.
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class LeaseModel:
    """How one engine's lease works. Build one with :data:`ACTIVATION_LEASE` or :data:`BEGIN_LEASE`
    (:meth:`granting` for an engine that sets the lease length itself)."""

    before_run: BeforeRun
    refused_claim: RefusedClaim
    hand_back: HandBack
    #: Whether leases of one job id are told apart by a hash of ``JobRef.handle`` (see
    #: :meth:`fingerprint`).
    fingerprinted: bool
    #: The lease length the engine grants whatever is asked for (None: what the pipeline asks for).
    granted_seconds: float | None = None
    #: A begin lease: how long after activation the engine leaves a delivery nobody acknowledged or
    #: handed back with us before it hands it out again on its own (StageNext's gateway visibility
    #: timeout). Until then the delivery is ours to settle, whatever the engine answers meanwhile.
    #: None: the job is ours until its lease lapses (an activation lease).
    returns_after: float | None = None

    def fingerprint(self, ref: JobRef) -> str:
        """A fingerprint of the lease a delivery was handed out under: a hash of ``ref.handle``
        (never the handle itself: it holds the lease token), or "" where there is nothing to tell
        leases apart by (an empty handle, or a model that does not fingerprint).

        Why: node-flow keeps the task id when a lease lapses and the task is leased again, so the new
        lease has the same job record as the lost one. Without telling the two leases apart, the new
        lease's delivery would find the record LOST and skip the job, its lease would lapse unheld,
        the poller would lease it again, and so on for ever. With it, a LOST record of another lease
        is claimed again, and a result stored under a lease that was refused is re-reported under
        the new one. Every SQS delivery of one message shares the fingerprint.

        Example:
            >>> ref = JobRef("nodeflow", "t1", "charge", handle={"leaseToken": "lt_1"})
            >>> len(ACTIVATION_LEASE.fingerprint(ref)), BEGIN_LEASE.fingerprint(ref)
            (16, '')
        """
        if not self.fingerprinted or not ref.handle:
            return ""
        canonical = json.dumps(dict(ref.handle), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def held(self, record: JobRecord | None) -> bool:
        """Whether the engine lease of a job whose record is ``record`` (None: no record) is live:
        what the heartbeat renews, and what needs no acquire before a result is reported outside a
        delivery (the dead-letter function, the poller).

        A begin lease is live once the claim holder's acquire landed (the claim's ``begun_at``), and
        while its result is STORED but not yet accepted. A claim not yet begun (acquire in flight,
        or failed and awaiting redelivery) has no lease: renewing it is refused, and marking that
        LOST would make the redelivery acknowledge a job nobody ran.
        """
        match self.before_run:
            case BeforeRun.NOTHING:
                return True
            case BeforeRun.ACQUIRE:
                if record is None:
                    return False
                return record.status is Status.STORED or (
                    record.status is Status.CLAIMED and record.begun_at is not None
                )

    def length(self, requested: float) -> float:
        """The lease an extension grants when ``requested`` is asked for: the engine's own length
        where it sets it (never more than asked: the heartbeat's schedule is built on the shorter)."""
        return requested if self.granted_seconds is None else min(requested, self.granted_seconds)

    def granting(self, seconds: float) -> LeaseModel:
        """This model for an engine that grants leases of ``seconds`` whatever is asked for."""
        return dataclasses.replace(self, granted_seconds=float(seconds))

    def returning_after(self, seconds: float) -> LeaseModel:
        """This model for an engine that hands a delivery out again ``seconds`` after activation
        unless it was settled (:attr:`returns_after`)."""
        return dataclasses.replace(self, returns_after=float(seconds))

    def returned_at(self, activated_at: float) -> float | None:
        """When the engine takes back a delivery activated at ``activated_at`` (epoch seconds) by
        itself; None where it never does (see :attr:`returns_after`).

        Example:
            >>> BEGIN_LEASE.returning_after(60).returned_at(1000.0), ACTIVATION_LEASE.returned_at(1000.0)
            (1060.0, None)
        """
        return None if self.returns_after is None else activated_at + self.returns_after


#: Leased at activation (Sheptra, node-flow).
ACTIVATION_LEASE = LeaseModel(
    before_run=BeforeRun.NOTHING,
    refused_claim=RefusedClaim.RECORD,
    hand_back=HandBack.ACKNOWLEDGE,
    fingerprinted=True,
)
#: Leased at begin, by the handler's lease acquire (StageNext).
BEGIN_LEASE = LeaseModel(
    before_run=BeforeRun.ACQUIRE,
    refused_claim=RefusedClaim.ACQUIRE,
    hand_back=HandBack.RELEASE,
    fingerprinted=False,
)
