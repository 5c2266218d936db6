"""``workerless dlq show [TYPE]`` / ``workerless dlq redrive [TYPE]``: the job dead-letter queue.

Every route's job queue dead-letters to one queue (template.yaml's ``JobDeadLetterQueue``): which
job type a dead letter is, is in its body (``ref.job_type``, as the dead-letter function reads it),
never in the name of a queue. ``TYPE`` narrows both commands to that type's messages.

A job message (``ActivatedJob.to_message``) carries the engine's handle for the job, which may hold
lease or ack tokens: ``show`` prints the job id, type, engine, attempt, retries and SQS's receive
count, never the handle (nor the variables, unless asked with ``--variables``: they are the user's
data, not credentials, but can be large).

``show`` peeks: it receives with a short visibility timeout and does not delete, so the messages are
back (and the dead-letter function sees them) a few seconds later. Note that every receive counts
toward ``ApproximateReceiveCount``.

``redrive`` moves each message back to the job queue of the type its body names, with receive,
send, delete in a bounded loop (at most ``limit`` messages, at most ``max_seconds``), deleting a
message only after its copy was sent, so a crash in between duplicates a message rather than losing
one (the handler's job record makes a duplicate harmless). A message it does not move (another type
than ``TYPE``, a type with no route here, not a job) is made visible again at once
(ChangeMessageVisibility 0): the dead-letter function is not kept waiting for it. SQS's own
StartMessageMoveTask without a destination does the same server-side for the whole queue: each
message goes back to the queue it was dead-lettered from (``aws sqs start-message-move-task
--source-arn ARN``; never with ``--destination-arn``, which would send every type to one queue);
moto does not implement it. Bear in mind that the dead-letter function, when deployed, consumes the
queue and fails the jobs at the engine: a message is only there while it waits for that.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
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


def show(
    sqs: Any,
    queue_url: str,
    *,
    limit: int = 10,
    peek_seconds: int = 5,
    job_type: str | None = None,
    scan: int = 100,
) -> tuple[list[DeadLetter], int]:
    """Up to ``limit`` messages of the queue (of ``job_type`` only, when given), decoded; none
    deleted (every message read is hidden ``peek_seconds``). Reads at most ``max(limit, scan)``
    messages; returns the letters and how many distinct messages were read."""
    seen: dict[str, DeadLetter] = {}
    shown: list[DeadLetter] = []
    most = max(limit, scan) if job_type is not None else limit
    for _ in range(max(1, (most + RECEIVE_MAX - 1) // RECEIVE_MAX) + 2):  # bounded; SQS may answer short
        if len(shown) >= limit or len(seen) >= most:
            break
        answer = _call(
            sqs,
            "receive_message",
            QueueUrl=queue_url,
            MaxNumberOfMessages=min(RECEIVE_MAX, most - len(seen)),
            VisibilityTimeout=peek_seconds,
            WaitTimeSeconds=0,
            AttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
        )
        messages = answer.get("Messages", [])
        fresh = [m for m in messages if str(m["MessageId"]) not in seen]
        if not fresh:
            break
        for message in fresh:
            letter = decode(message)
            seen[letter.message_id] = letter
            if job_type is None or letter.job_type == job_type:
                shown.append(letter)
    return shown[:limit], len(seen)


@dataclass(frozen=True)
class Redriven:
    moved: int
    failed: int
    left: int
    #: Messages read and left in the queue (made visible again), by why: a type, or "not a job".
    kept: dict[str, int] = field(default_factory=dict)


def redrive(
    sqs: Any,
    dead_letter_url: str,
    queues: Mapping[str, str],
    *,
    job_type: str | None = None,
    limit: int = 100,
    max_seconds: float = 60.0,
    visibility_seconds: int = 30,
) -> Redriven:
    """Move up to ``limit`` messages from ``dead_letter_url`` to the job queue of the type each names
    (``queues``: job type -> queue URL), send then delete; only ``job_type``'s when given."""
    moved = failed = 0
    kept: dict[str, set[str]] = {}
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
        by_queue: dict[str, list[dict[str, Any]]] = {}
        others: list[dict[str, Any]] = []
        fresh = False
        for message in messages:
            letter = decode(message)
            target = queues.get(letter.job_type or "") if job_type in (None, letter.job_type) else None
            if target is None:
                reason = letter.job_type or "not a job"
                fresh = fresh or letter.message_id not in kept.get(reason, set())
                kept.setdefault(reason, set()).add(letter.message_id)
                others.append(message)
            else:
                fresh = True
                by_queue.setdefault(target, []).append(message)
        if others:
            # Not ours to move: back in the queue at once, for the dead-letter function.
            _call(
                sqs,
                "change_message_visibility_batch",
                QueueUrl=dead_letter_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                    for i, m in enumerate(others)
                ],
            )
        refused = False
        for queue_url, batch in by_queue.items():
            sent_ok, deleted = _move(sqs, dead_letter_url, queue_url, batch)
            moved += deleted
            failed += len(batch) - sent_ok
            refused = refused or sent_ok < len(batch)
        if refused or not fresh:
            break  # a refused send, or only messages already kept: stop rather than spin on them
    left = depth(sqs, dead_letter_url)
    return Redriven(moved, failed, left, {reason: len(ids) for reason, ids in sorted(kept.items())})


def _move(sqs: Any, dead_letter_url: str, queue_url: str, messages: list[dict[str, Any]]) -> tuple[int, int]:
    """Send ``messages`` to ``queue_url``, then delete from the DLQ those sent: (sent, deleted)."""
    entries = []
    for index, message in enumerate(messages):
        entry: dict[str, Any] = {"Id": str(index), "MessageBody": message["Body"]}
        if message.get("MessageAttributes"):
            entry["MessageAttributes"] = message["MessageAttributes"]
        entries.append(entry)
    sent = _call(sqs, "send_message_batch", QueueUrl=queue_url, Entries=entries)
    ok = sorted({int(s["Id"]) for s in sent.get("Successful", [])})
    if not ok:
        return 0, 0
    deleted = _call(
        sqs,
        "delete_message_batch",
        QueueUrl=dead_letter_url,
        Entries=[{"Id": str(i), "ReceiptHandle": messages[i]["ReceiptHandle"]} for i in ok],
    )
    return len(ok), len(deleted.get("Successful", []))
