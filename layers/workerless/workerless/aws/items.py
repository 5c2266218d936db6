"""The job table's items: a :class:`~workerless._core.record.JobRecord` read from a DynamoDB item, and an
outcome's ``outcome`` attribute (JSON, zlib-compressed past :data:`COMPRESS_OVER`)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from workerless._core.claimcheck import PayloadRef
from workerless._core.model import Outcome
from workerless._core.record import JobRecord, Status

__all__ = ["COMPRESS_OVER", "decode_outcome", "encode_inline", "inline_bytes", "to_record"]

COMPRESS_OVER = 32 * 1024


def encode_inline(raw: bytes) -> dict[str, Any]:
    """The ``outcome`` attribute for an outcome's JSON: a string, or zlib-compressed binary past 32 KiB."""
    if len(raw) <= COMPRESS_OVER:
        return {"S": raw.decode()}
    return {"B": zlib.compress(raw, 6)}


def decode_outcome(value: dict[str, Any]) -> Outcome:
    """The outcome an ``outcome`` attribute (or a claim-check object, as ``{"B": ...}``) holds."""
    raw = zlib.decompress(value["B"]) if "B" in value else value["S"].encode()
    return Outcome.from_dict(json.loads(raw))


def inline_bytes(value: dict[str, Any]) -> int:
    """The ``outcome`` attribute's size as DynamoDB counts it: its name plus its value's bytes."""
    body = value["B"] if "B" in value else value["S"].encode()
    return len("outcome") + len(body)


#: Every attribute of a job record but ``outcome`` (a stored result's body): what
#: :meth:`workerless.aws.dynamo.JobStore.get_many` reads.
STATE_ATTRIBUTES = (
    "pk",
    "status",
    "owner",
    "claim_expires_at",
    "outcome_ref",
    "lost_reason",
    "deliveries",
    "lease",
    "begun_at",
    "report_owed_at",
    "receipt",
    "receipt_queue",
    "stored_at",
)


def to_record(item: dict[str, Any]) -> JobRecord:
    """The job record a DynamoDB item of the job table holds."""
    return JobRecord(
        key=item["pk"]["S"],
        status=Status(item["status"]["S"]),
        owner=item.get("owner", {}).get("S"),
        claim_expires_at=float(item["claim_expires_at"]["N"]) if "claim_expires_at" in item else None,
        outcome=decode_outcome(item["outcome"]) if "outcome" in item else None,
        outcome_ref=_outcome_ref(item),
        lost_reason=item.get("lost_reason", {}).get("S"),
        deliveries=int(item.get("deliveries", {}).get("N", "0")),
        lease=item.get("lease", {}).get("S"),
        begun_at=float(item["begun_at"]["N"]) if "begun_at" in item else None,
        report_owed_at=float(item["report_owed_at"]["N"]) if "report_owed_at" in item else None,
        receipt=item.get("receipt", {}).get("S"),
        receipt_queue=item.get("receipt_queue", {}).get("S"),
        # Read without its outcome (STATE_ATTRIBUTES): stored_at says one was stored.
        outcome_unread="stored_at" in item and "outcome" not in item and "outcome_ref" not in item,
    )


def _outcome_ref(item: dict[str, Any]) -> PayloadRef | None:
    if "outcome_ref" not in item:
        return None
    return PayloadRef.from_dict(json.loads(item["outcome_ref"]["S"]), field="outcome_ref")
