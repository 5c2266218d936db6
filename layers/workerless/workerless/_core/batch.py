"""SQS batches in, partial batch responses out (the event sources' ``ReportBatchItemFailures``).

Every SQS-triggered function (the handlers, the heartbeat, the dead-letter function) hands each
record of its batch, in order and one at a time, to a callable: a record whose callable returns is
done (Lambda deletes it), one whose callable raises an ``Exception`` is a batch item failure
(``{"batchItemFailures": [{"itemIdentifier": messageId}]}``: SQS makes it visible again after its
visibility timeout, or the heartbeat deletes it first). A ``BaseException`` (the process is going
down) propagates: Lambda then retries the whole batch.

This is what Powertools' ``BatchProcessor`` did here, without its per-record machinery (a data class
per record, its success and failure bookkeeping, a signature inspection per batch) or its import on
the cold path: the functions only need the loop. Unlike it, an event whose ``Records`` is an empty
list is answered with no failures (Powertools raised on it; Lambda never sends one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workerless.errors import MessageFormatError

#: What a function returns to its SQS event source (ReportBatchItemFailures).
BatchResponse = dict[str, list[dict[str, str]]]


@dataclass(frozen=True, slots=True)
class SqsRecord:
    """The parts of one SQS event record the functions read."""

    message_id: str
    body: str
    receipt_handle: str
    #: SQS's ApproximateReceiveCount: 1 on the first delivery (and when the event does not say).
    receive_count: int

    @classmethod
    def from_event(cls, record: Mapping[str, Any]) -> SqsRecord:
        """One record of an SQS event. Raises MessageFormatError when ``messageId`` is missing (no
        failure could name the record)."""
        message_id = record.get("messageId")
        if not isinstance(message_id, str) or not message_id:
            raise MessageFormatError("an SQS event record has no messageId", field="messageId")
        return cls(
            message_id=message_id,
            body=str(record.get("body") or ""),
            receipt_handle=str(record.get("receiptHandle") or ""),
            receive_count=_receive_count(record.get("attributes")),
        )

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> SqsRecord:
        """One message of a ReceiveMessage answer (asked with ApproximateReceiveCount): the same
        record an event source would have delivered it as."""
        return cls(
            message_id=str(message.get("MessageId") or ""),
            body=str(message.get("Body") or ""),
            receipt_handle=str(message.get("ReceiptHandle") or ""),
            receive_count=_receive_count(message.get("Attributes")),
        )


def _receive_count(attributes: object) -> int:
    """SQS's ApproximateReceiveCount from a message's attributes; 1 when it does not say."""
    count = attributes.get("ApproximateReceiveCount") if isinstance(attributes, Mapping) else None
    try:
        return int(count or 1)
    except (TypeError, ValueError):
        return 1


def process_batch(
    event: Mapping[str, Any], handle: Callable[[SqsRecord], object], *, concurrency: int = 1
) -> BatchResponse:
    """``handle`` every record of the SQS ``event`` in order; the partial batch response.

    ``concurrency`` above 1 (async handlers: the route's ``concurrency=``) handles up to that many
    records at once, each on its own thread; every record still runs its own steps in order, and
    the response names exactly the records whose callable raised, in the batch's order.

    Raises MessageFormatError when ``event`` is not an SQS event (no ``Records`` list) or a record
    has no ``messageId``: the invocation fails and Lambda retries the whole batch, which is what it
    would do with a response that cannot name the record.
    """
    records = event.get("Records")
    if not isinstance(records, list):
        raise MessageFormatError("not an SQS event: no Records list", field="Records")
    parsed = [SqsRecord.from_event(r) if isinstance(r, Mapping) else _not_a_record() for r in records]
    if concurrency > 1 and len(parsed) > 1:
        from workerless._core.threads import map_in_threads

        # Each record in a copy of the invocation's context: its metrics and span are the invocation's.
        failed = map_in_threads(lambda record: _failed(handle, record), parsed, max_workers=concurrency, name="job")
    else:
        failed = [_failed(handle, record) for record in parsed]
    return {
        "batchItemFailures": [{"itemIdentifier": r.message_id} for r, bad in zip(parsed, failed, strict=True) if bad]
    }


def _failed(handle: Callable[[SqsRecord], object], record: SqsRecord) -> bool:
    try:
        handle(record)
    except Exception:  # noqa: BLE001 - a failed record is reported, never dropped; the callable logs why
        return True
    return False


def _not_a_record() -> SqsRecord:
    raise MessageFormatError("an SQS event record is not an object", field="Records")
