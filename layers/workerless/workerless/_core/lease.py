"""How an engine's lease works, as the pipeline needs to know it: a lease policy per lease model,
declared by each engine through the seam (:attr:`workerless.engines.base.Engine.lease`) and called by
the delivery, the settlement, the heartbeat, the dead-letter function and the poller, none of which
asks which engine it is nor which model it has.

Two lease models exist among the engines (``docs`` and the seeds say which):

- :class:`ActivationLease` (:data:`ACTIVATION_LEASE`): the engine leases the job when the poller
  activates it (Sheptra, node-flow). The job is ours from then on, waiting in SQS included: the
  heartbeat extends it from the first ticket, and a delivery the pipeline will not run needs no
  word to the engine (its lease lapses, or was lost).
- :class:`BeginLease` (:data:`BEGIN_LEASE`): activation only hands out a delivery; the lease starts
  when a handler acquires it, under its claim, just before the run (StageNext lease acquire). The
  heartbeat renews only what has been acquired, the engine's acquire has the last word on a delivery
  the job record says must not run, and a delivery given up on without a result is handed back
  (requeued), never acknowledged.

Where the models differ, the pipeline calls the policy; where that needs one of the pipeline's own
steps (lease acquire, acknowledging a delivery), the policy is handed them (:class:`DeliverySteps`)
and decides which to take.

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
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, Self, TypeVar

from workerless._core.model import JobRef
from workerless._core.record import JobRecord, Status

V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)


class DeliverySteps(Protocol[V_co]):
    """The steps of one delivery a lease policy chooses among (the handler's
    :class:`~workerless._handler.delivery.Delivery` implements them; ``V_co`` is its verdict)."""

    def acquire(self) -> V_co | None:
        """Lease acquire under this delivery's claim before the run; None: go on and run it."""
        ...

    def contest(self) -> V_co:
        """Lease acquire for a delivery of another message than the claim holder's (the engine
        handed the job out again): acknowledged when refused, handed back when granted."""
        ...

    def acknowledge_unrun(self, found: JobRecord | None) -> V_co:
        """Acknowledge at once a delivery its job record (``found``) says must not run."""
        ...

    def acquire_unrun(self, found: JobRecord | None) -> V_co:
        """Lease acquire for a delivery its job record (``found``) says must not run: acknowledged
        only once acquire refuses it; granted, its stored outcome is reported or it is handed back."""
        ...


@dataclass(frozen=True, slots=True)
class LeasePolicy(ABC):
    """How one engine's lease works. Build one with :data:`ACTIVATION_LEASE` or :data:`BEGIN_LEASE`
    (:meth:`granting` for an engine that sets the lease length itself)."""

    #: The lease length the engine grants whatever is asked for (None: what the pipeline asks for).
    granted_seconds: float | None = None
    #: A begin lease: how long after activation the engine leaves a delivery nobody acknowledged or
    #: handed back with us before it hands it out again on its own (StageNext's gateway visibility
    #: timeout). Until then the delivery is ours to settle, whatever the engine answers meanwhile.
    #: None: the job is ours until its lease lapses (an activation lease).
    returns_after: float | None = None

    @abstractmethod
    def fingerprint(self, ref: JobRef) -> str:
        """A fingerprint of the lease a delivery was handed out under, or "" where leases of one job
        id are not told apart (see :meth:`ActivationLease.fingerprint`)."""

    @abstractmethod
    def held(self, record: JobRecord | None) -> bool:
        """Whether the engine lease of a job whose record is ``record`` (None: no record) is live:
        what the heartbeat renews, and what needs no acquire before a result is reported outside a
        delivery (the dead-letter function, the poller)."""

    @abstractmethod
    def before_run(self, steps: DeliverySteps[V]) -> V | None:
        """What happens between a delivery's claim and the run of the handler; None: run it."""

    @abstractmethod
    def held_elsewhere(self, steps: DeliverySteps[V], *, other_message: bool) -> V | None:
        """What a delivery does whose claim another delivery holds (``other_message``: one of
        another SQS message, rather than an earlier receipt of this one); None: leave it for SQS's
        redelivery."""

    @abstractmethod
    def settle_unrun(self, steps: DeliverySteps[V], found: JobRecord | None) -> V:
        """What a delivery does that its job record (``found``) says must not run (reported, lost
        or skipped)."""

    @abstractmethod
    def hand_back(self, *, acknowledge: Callable[[], None], release: Callable[[], None]) -> None:
        """Give back a delivery that will not run and carries no result: ``acknowledge`` it, or
        ``release`` it (requeue), as this lease model needs."""

    def length(self, requested: float) -> float:
        """The lease an extension grants when ``requested`` is asked for: the engine's own length
        where it sets it (never more than asked: the heartbeat's schedule is built on the shorter)."""
        return requested if self.granted_seconds is None else min(requested, self.granted_seconds)

    def granting(self, seconds: float) -> Self:
        """This policy for an engine that grants leases of ``seconds`` whatever is asked for."""
        return dataclasses.replace(self, granted_seconds=float(seconds))

    def returning_after(self, seconds: float) -> Self:
        """This policy for an engine that hands a delivery out again ``seconds`` after activation
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


@dataclass(frozen=True, slots=True)
class ActivationLease(LeasePolicy):
    """Leased at activation (Sheptra, node-flow): the job is ours from activation, and the job record
    has the last word on a delivery that must not run."""

    def fingerprint(self, ref: JobRef) -> str:
        """A fingerprint of the lease a delivery was handed out under: a hash of ``ref.handle``
        (never the handle itself: it holds the lease token), or "" where there is nothing to tell
        leases apart by (an empty handle).

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
        if not ref.handle:
            return ""
        canonical = json.dumps(dict(ref.handle), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def held(self, record: JobRecord | None) -> bool:
        """Always: the lease was granted at activation."""
        return True

    def before_run(self, steps: DeliverySteps[V]) -> V | None:
        """Nothing: the lease was granted at activation."""
        return None

    def held_elsewhere(self, steps: DeliverySteps[V], *, other_message: bool) -> V | None:
        """The job record: a live claim leaves the delivery for SQS's redelivery."""
        return None

    def settle_unrun(self, steps: DeliverySteps[V], found: JobRecord | None) -> V:
        """The job record: reported, lost or skipped is acknowledged at once."""
        return steps.acknowledge_unrun(found)

    def hand_back(self, *, acknowledge: Callable[[], None], release: Callable[[], None]) -> None:
        """An acknowledgement: the engine owns the job from activation; its lease lapses or was lost."""
        acknowledge()


@dataclass(frozen=True, slots=True)
class BeginLease(LeasePolicy):
    """Leased at begin, by the handler's lease acquire (StageNext): the engine's acquire has the last
    word on whether a delivery runs, and a delivery without a result goes back by release."""

    def fingerprint(self, ref: JobRef) -> str:
        """None ("") : one job id is one lease here (the engine's acquire tells deliveries apart)."""
        return ""

    def held(self, record: JobRecord | None) -> bool:
        """Live once the claim holder's acquire landed (the claim's ``begun_at``), and while its
        result is STORED but not yet accepted. A claim not yet begun (acquire in flight, or failed
        and awaiting redelivery) has no lease: renewing it is refused, and marking that LOST would
        make the redelivery acknowledge a job nobody ran."""
        if record is None:
            return False
        return record.status is Status.STORED or (record.status is Status.CLAIMED and record.begun_at is not None)

    def before_run(self, steps: DeliverySteps[V]) -> V | None:
        """Lease acquire under the claim; refused means this delivery must not run. Once it lands
        the claim is stamped (``begun_at``) so the heartbeat starts renewing it."""
        return steps.acquire()

    def held_elsewhere(self, steps: DeliverySteps[V], *, other_message: bool) -> V | None:
        """The engine's lease acquire, for a delivery of another message than the claim holder's
        (the engine handed the job out again); an earlier receipt of the same message waits for
        SQS's redelivery."""
        return steps.contest() if other_message else None

    def settle_unrun(self, steps: DeliverySteps[V], found: JobRecord | None) -> V:
        """The engine's lease acquire: acknowledged only once acquire refuses it."""
        return steps.acquire_unrun(found)

    def hand_back(self, *, acknowledge: Callable[[], None], release: Callable[[], None]) -> None:
        """A release (requeue): an acknowledgement without a result would drop the job."""
        release()


#: Leased at activation (Sheptra, node-flow).
ACTIVATION_LEASE = ActivationLease()
#: Leased at begin, by the handler's lease acquire (StageNext).
BEGIN_LEASE = BeginLease()
