"""What the steps of a :class:`~workerless._handler.delivery.Delivery` answer: the claim (:class:`Claimed` or
:class:`Refused`) and the delivery's end (:data:`Verdict`: :class:`Ack` or :class:`Redeliver`).
Closed sets: the delivery and the handler wrapper match them exhaustively.
"""

from __future__ import annotations

from dataclasses import dataclass

from workerless._core.record import Decision, JobRecord
from workerless.errors import ClaimHeldError, ReportOwedError

__all__ = ["Ack", "ClaimHeldError", "Claimed", "Redeliver", "Refused", "ReportOwedError", "Verdict"]


@dataclass(frozen=True, slots=True)
class Ack:
    """Nothing more is owed for this SQS record: delete it. ``reason`` says why, for tests and logs."""

    reason: str


@dataclass(frozen=True, slots=True)
class Redeliver:
    """The SQS record must stay (a batch item failure): ``error`` says why."""

    error: ClaimHeldError | ReportOwedError

    @property
    def reason(self) -> str:
        return str(self.error)


#: What a delivery ends in.
Verdict = Ack | Redeliver


@dataclass(frozen=True, slots=True)
class Claimed:
    """The claim is ours: this delivery may run the handler."""


@dataclass(frozen=True, slots=True)
class Refused:
    """The claim was refused: ``found`` is the record that refused it, ``decision`` what it says."""

    found: JobRecord | None
    decision: Decision
