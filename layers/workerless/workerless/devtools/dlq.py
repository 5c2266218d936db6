"""``workerless dlq show TYPE`` / ``workerless dlq redrive TYPE``: a job type's dead-letter queue.

A job message (``ActivatedJob.to_message``) carries the engine's handle for the job, which may hold
lease or ack tokens: ``show`` prints the job id, type, engine, attempt, retries and SQS's receive
count, never the handle (nor the variables, unless asked with ``--variables``: they are the user's
data, not credentials, but can be large).

``show`` peeks: it receives with a short visibility timeout and does not delete, so the messages are
back (and the dead-letter function sees them) a few seconds later. Note that every receive counts
toward ``ApproximateReceiveCount``.

``redrive`` moves messages back to the job queue with receive, send, delete in a bounded loop (at
most ``limit`` messages, at most ``max_seconds``), deleting a message only after its copy was sent,
so a crash in between duplicates a message rather than losing one (the handler's job record makes
a duplicate harmless). SQS's own StartMessageMoveTask does the same server-side for a whole queue
(``aws sqs start-message-move-task``); moto does not implement it, and this loop needs no
redrive-allow policy. Bear in mind that the dead-letter function, when deployed, consumes these
queues and fails the jobs at the engine: a message is only there while it waits for that.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from workerless.errors import WorkerlessError

#: SQS's cap on messages per ReceiveMessage call.
RECEIVE_MAX = 10


class QueueAccessError(WorkerlessError):
    """An SQS call failed; the message names the operation and error code."""


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    receive_count: int
    sent_at: float | None
    job_id: str | None
    job_type: str | None
    engine: str | None
    attempt: str | None
    retries: int | None
    variables: dict[str, Any] | None
    problem: str | None = None

    def as_dict(self, *, variables: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "message_id": self.message_id,
            "job_id": self.job_id,
            "type": self.job_type,
            "engine": self.engine,
            "attempt": self.attempt,
            "retries": self.retries,
            "receive_count": self.receive_count,
            "sent_at": self.sent_at,
        }
        if variables:
            out["variables"] = self.variables
        if self.problem:
            out["problem"] = self.problem
        return out


def _call(sqs: Any, operation: str, **kwargs: Any) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return getattr(sqs, operation)(**kwargs)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        raise QueueAccessError(f"SQS {operation} failed: {code}") from None
    except BotoCoreError as exc:
        raise QueueAccessError(f"SQS {operation} failed: {type(exc).__name__}") from None


def decode(message: dict[str, Any]) -> DeadLetter:
    """The job a dead-lettered message carries, without its handle."""
    attributes = message.get("Attributes", {})
    sent = attributes.get("SentTimestamp")
    message_id = str(message.get("MessageId", ""))
    receive_count = int(attributes.get("ApproximateReceiveCount", 0))
    sent_at = int(sent) / 1000 if sent else None
    try:
        data = json.loads(message.get("Body", ""))
        ref = data["ref"]
        retries = data.get("retries")
        return DeadLetter(
            message_id=message_id,
            receive_count=receive_count,
            sent_at=sent_at,
            job_id=str(ref["job_id"]),
            job_type=str(ref["job_type"]),
            engine=str(ref.get("engine", "")),
            attempt=str(ref.get("attempt", "")),
            retries=int(retries) if isinstance(retries, int) else None,
            variables=data.get("variables") if isinstance(data.get("variables"), dict) else None,
        )
    except (ValueError, TypeError, KeyError):
        return DeadLetter(
            message_id=message_id,
            receive_count=receive_count,
            sent_at=sent_at,
            job_id=None,
            job_type=None,
            engine=None,
            attempt=None,
            retries=None,
            variables=None,
            problem="not a workerless job message",
        )


def depth(sqs: Any, queue_url: str) -> int:
    answer = _call(
        sqs,
        "get_queue_attributes",
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )
    return sum(int(v) for v in answer.get("Attributes", {}).values())


def show(sqs: Any, queue_url: str, *, limit: int = 10, peek_seconds: int = 5) -> list[DeadLetter]:
    """Up to ``limit`` messages of the queue, decoded; none deleted (hidden ``peek_seconds`` while read)."""
    seen: dict[str, DeadLetter] = {}
    for _ in range(max(1, (limit + RECEIVE_MAX - 1) // RECEIVE_MAX) + 2):  # bounded; SQS may answer short
        if len(seen) >= limit:
            break
        answer = _call(
            sqs,
            "receive_message",
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(RECEIVE_MAX, limit - len(seen)),
            VisibilityTimeout=peek_seconds,
            WaitTimeSeconds=0,
            AttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
        )
        messages = answer.get("Messages", [])
        if not messages:
            break
        for message in messages:
            seen.setdefault(str(message["MessageId"]), decode(message))
    return list(seen.values())[:limit]


@dataclass(frozen=True)
class Redriven:
    moved: int
    failed: int
    left: int


def redrive(
    sqs: Any,
    dead_letter_url: str,
    queue_url: str,
    *,
    limit: int = 100,
    max_seconds: float = 60.0,
    visibility_seconds: int = 30,
) -> Redriven:
    """Move up to ``limit`` messages from ``dead_letter_url`` to ``queue_url`` (send, then delete)."""
    moved = failed = 0
    deadline = time.monotonic() + max_seconds
    while moved + failed < limit and time.monotonic() < deadline:
        answer = _call(
            sqs,
            "receive_message",
            QueueUrl=dead_letter_url,
            MaxNumberOfMessages=min(RECEIVE_MAX, limit - moved - failed),
            VisibilityTimeout=visibility_seconds,
            WaitTimeSeconds=0,
            MessageAttributeNames=["All"],
        )
        messages = answer.get("Messages", [])
        if not messages:
            break
        entries = []
        for index, message in enumerate(messages):
            entry: dict[str, Any] = {"Id": str(index), "MessageBody": message["Body"]}
            if message.get("MessageAttributes"):
                entry["MessageAttributes"] = message["MessageAttributes"]
            entries.append(entry)
        sent = _call(sqs, "send_message_batch", QueueUrl=queue_url, Entries=entries)
        ok = {int(s["Id"]) for s in sent.get("Successful", [])}
        failed += len(messages) - len(ok)
        if ok:
            deleted = _call(
                sqs,
                "delete_message_batch",
                QueueUrl=dead_letter_url,
                Entries=[{"Id": str(i), "ReceiptHandle": messages[i]["ReceiptHandle"]} for i in sorted(ok)],
            )
            moved += len(deleted.get("Successful", []))
        if len(ok) < len(messages):
            break  # a refused send: stop rather than spin on the same messages
    return Redriven(moved, failed, depth(sqs, dead_letter_url))
