"""SQS: job messages to the route queues, heartbeat tickets, poller ticks, queue depth, and the job
dead-letter queue's drain."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

# Declared in the one error tree (workerless.errors); re-exported where callers have always found it.
from workerless.errors import QueueError as QueueError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

    from workerless._core.batch import SqsRecord
    from workerless.aws.clients import Clients

#: A message's size limit is each queue's MaximumMessageSize (SQS's default and maximum: 1 MiB since
#: 2025, existing queues included). This is the size planned for while a queue's own limit has not
#: been read: the old default, never too high.
FALLBACK_MESSAGE_BYTES = 262_144
MAX_BATCH_ENTRIES = 10
#: A poll's SendMessageBatch calls to one queue made at once, at most (botocore's connection pool
#: holds 10 per client).
SEND_CONCURRENCY = 8
#: ReceiveMessage's MaxNumberOfMessages cap.
MAX_RECEIVE_MESSAGES = 10
MAX_DELAY_SECONDS = 900
MAX_VISIBILITY_SECONDS = 43_200


#: Each partition's DNS suffix, as SQS's queue URLs carry it (https://sqs.<region>.<suffix>/...).
_PARTITION_DNS_SUFFIX = {
    "aws": "amazonaws.com",
    "aws-us-gov": "amazonaws.com",
    "aws-cn": "amazonaws.com.cn",
    "aws-iso": "c2s.ic.gov",
    "aws-iso-b": "sc2s.sgov.gov",
    "aws-iso-e": "cloud.adc-e.uk",
    "aws-iso-f": "csp.hci.ic.gov",
}


def queue_url_of_arn(arn: object) -> str | None:
    """The URL of the queue whose ARN is ``arn`` (an SQS event record's ``eventSourceARN``):
    ``arn:<partition>:sqs:<region>:<account>:<name>`` -> ``https://sqs.<region>.<suffix>/<account>/<name>``,
    the form CloudFormation's Ref and GetQueueUrl give. None for anything else (a partition whose
    suffix is not known here included)."""
    if not isinstance(arn, str):
        return None
    parts = arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs" or not all(parts[3:]):
        return None
    suffix = _PARTITION_DNS_SUFFIX.get(parts[1])
    if suffix is None:
        return None
    return f"https://sqs.{parts[3]}.{suffix}/{parts[4]}/{parts[5]}"


@dataclass(frozen=True, slots=True)
class SendFailure:
    index: int
    reason: str
    oversized: bool = False


class Queues:
    """Thin, typed wrapper over the SQS calls the pipeline makes."""

    def __init__(self, client: SQSClient | None = None, *, clients: Clients | None = None) -> None:
        self._client, self._clients = client, clients  # the client, else whose to build on first use
        #: Each queue's MaximumMessageSize as last read (it caps a message and a batch's total). Read
        #: with the depth the poller asks for anyway: no call of its own. A queue's limit changes only
        #: with SetQueueAttributes (a stack update), and a container lives for hours at most.
        self._limits: dict[str, int] = {}

    @property
    def client(self) -> SQSClient:
        if self._client is None:
            from workerless.aws.clients import Clients

            # Not given one (a test's store on moto): a client of its own, on the default endpoint.
            self._client = (self._clients or Clients()).sqs
        return self._client

    def _call(self, operation: str, **kwargs: object) -> dict[str, Any]:
        from workerless.aws.clients import DeadlineReachedError, call_aws, error_code

        def translate(exc: Exception) -> NoReturn:
            if isinstance(exc, DeadlineReachedError):
                raise QueueError(f"SQS {operation} not sent: the invocation's deadline has passed") from exc
            raise QueueError(f"SQS {operation} failed: {error_code(exc) or type(exc).__name__}") from exc

        return call_aws(self.client, operation, kwargs, translate)

    def in_flight(self, queue_url: str) -> int:
        """Messages waiting, being processed, or delayed: what a route already holds. The same call
        reads the queue's MaximumMessageSize for :meth:`send_batch`."""
        depth = (
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        )
        answer = self._call("get_queue_attributes", QueueUrl=queue_url, AttributeNames=[*depth, "MaximumMessageSize"])
        attrs: Mapping[str, str] = answer.get("Attributes", {})
        self._learn_limit(queue_url, attrs)
        return sum(int(attrs.get(name, 0)) for name in depth)

    def max_message_bytes(self, queue_url: str) -> int | None:
        """The queue's MaximumMessageSize (bytes), read once per container; None when it cannot be
        read (the caller then plans for FALLBACK_MESSAGE_BYTES and calls nothing "too large")."""
        if queue_url not in self._limits:
            try:
                answer = self._call("get_queue_attributes", QueueUrl=queue_url, AttributeNames=["MaximumMessageSize"])
            except QueueError:
                return None
            self._learn_limit(queue_url, answer.get("Attributes", {}))
        return self._limits.get(queue_url)

    def _learn_limit(self, queue_url: str, attrs: Mapping[str, str]) -> None:
        raw = attrs.get("MaximumMessageSize")
        try:
            limit = int(raw) if raw is not None else 0
        except ValueError:
            limit = 0
        if limit > 0:
            self._limits[queue_url] = limit

    def send_batch(self, queue_url: str, bodies: Sequence[str]) -> list[SendFailure]:
        """Send ``bodies`` with as few SendMessageBatch calls as the caps allow: at most 10 entries,
        and at most the queue's MaximumMessageSize in all (SQS's rule for a batch).

        Returns the failures by index. A body over the queue's MaximumMessageSize is never sent
        (``oversized``: it can never fit this queue); while the limit is unknown (it could not be
        read) a body over FALLBACK_MESSAGE_BYTES is not sent either, but as a plain failure: the job
        is handed back and tried again, not failed for good on a guess. A call that fails as a whole
        marks all of its entries failed rather than raising, so the caller can hand every unsent job
        back to the engine.
        """
        known = self.max_message_bytes(queue_url)
        limit = known if known is not None else FALLBACK_MESSAGE_BYTES
        failures: list[SendFailure] = []
        chunks: list[list[tuple[int, str]]] = [[]]
        chunk_bytes = 0
        for index, body in enumerate(bodies):
            size = len(body.encode())
            if size > limit:
                if known is None:
                    reason = f"job message is {size} bytes and the queue's MaximumMessageSize could not be read"
                else:
                    reason = f"job message is {size} bytes; the queue's MaximumMessageSize is {known} bytes"
                failures.append(SendFailure(index, reason, oversized=known is not None))
                continue
            if len(chunks[-1]) == MAX_BATCH_ENTRIES or chunk_bytes + size > limit:
                chunks.append([])
                chunk_bytes = 0
            chunks[-1].append((index, body))
            chunk_bytes += size
        chunks = [chunk for chunk in chunks if chunk]
        if len(chunks) > 1:
            # A big poll's calls side by side, not one after another: each is a round trip, and the
            # poll cycle (and so one poller's dispatch rate) is mostly their sum (docs/scaling.md).
            from workerless._core.threads import map_in_threads

            answers = map_in_threads(
                lambda chunk: self._send_chunk(queue_url, chunk),
                chunks,
                max_workers=min(len(chunks), SEND_CONCURRENCY),
                name="send-batch",
            )
        else:
            answers = [self._send_chunk(queue_url, chunk) for chunk in chunks]
        for answer in answers:
            failures.extend(answer)
        return sorted(failures, key=lambda f: f.index)

    def _send_chunk(self, queue_url: str, chunk: list[tuple[int, str]]) -> list[SendFailure]:
        """One SendMessageBatch call; every entry it could not send, as failures (never raises)."""
        entries = [{"Id": str(i), "MessageBody": body} for i, body in chunk]
        try:
            answer = self._call("send_message_batch", QueueUrl=queue_url, Entries=entries)
        except QueueError as exc:
            return [SendFailure(i, str(exc)) for i, _ in chunk]
        return [
            SendFailure(int(failed["Id"]), f"SQS refused the message: {failed.get('Code', 'error')}")
            for failed in answer.get("Failed", [])
        ]

    def send(self, queue_url: str, body: Mapping[str, Any] | str, *, delay_seconds: int = 0) -> None:
        text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
        delay = max(0, min(MAX_DELAY_SECONDS, int(delay_seconds)))
        self._call("send_message", QueueUrl=queue_url, MessageBody=text, DelaySeconds=delay)

    def receive(self, queue_url: str, *, max_messages: int = MAX_RECEIVE_MESSAGES) -> list[SqsRecord]:
        """Up to ``max_messages`` (1 to 10) visible messages, without waiting (a short poll: one
        billed request, answered at once, empty or not), as the records an SQS event would carry.
        Each received message is hidden for the queue's visibility timeout: one not deleted by then
        comes back."""
        from workerless._core.batch import SqsRecord

        count = max(1, min(MAX_RECEIVE_MESSAGES, int(max_messages)))
        answer = self._call(
            "receive_message",
            QueueUrl=queue_url,
            MaxNumberOfMessages=count,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
        return [SqsRecord.from_message(message) for message in answer.get("Messages") or []]

    def delete(self, queue_url: str, receipt_handle: str) -> None:
        """Delete a received message (the heartbeat, once a job's owed report has landed)."""
        self._call("delete_message", QueueUrl=queue_url, ReceiptHandle=receipt_handle)

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> None:
        """Make a received message visible again in ``seconds`` (0 to 43,200) instead of after the
        queue's visibility timeout."""
        timeout = max(0, min(MAX_VISIBILITY_SECONDS, int(seconds)))
        self._call(
            "change_message_visibility", QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=timeout
        )
