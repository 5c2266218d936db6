"""SQS: job messages to the route queues, heartbeat tickets, poller ticks, and queue depth."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workerless.errors import PipelineError

#: SQS's cap on one message and on one SendMessageBatch call. AWS raised it to 1 MiB in 2025;
#: 256 KiB is what every region and moto accept, so workerless plans for it (docs/assumptions.md).
MAX_MESSAGE_BYTES = 256 * 1024
MAX_BATCH_ENTRIES = 10
MAX_DELAY_SECONDS = 900
MAX_VISIBILITY_SECONDS = 43_200


@dataclass(frozen=True, slots=True)
class SendFailure:
    index: int
    reason: str
    oversized: bool = False


class QueueError(PipelineError):
    """An SQS call failed after botocore's retries."""


class Queues:
    """Thin, typed wrapper over the SQS calls the pipeline makes."""

    def __init__(self, client: Any = None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            from workerless.aws.clients import client

            self._client = client("sqs")
        return self._client

    def _call(self, operation: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        from workerless.aws.clients import DeadlineReachedError

        try:
            return getattr(self.client, operation)(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "error")
            raise QueueError(f"SQS {operation} failed: {code}") from exc
        except BotoCoreError as exc:
            raise QueueError(f"SQS {operation} failed: {type(exc).__name__}") from exc
        except DeadlineReachedError as exc:
            raise QueueError(f"SQS {operation} not sent: the invocation's deadline has passed") from exc

    def in_flight(self, queue_url: str) -> int:
        """Messages waiting, being processed, or delayed: what a route already holds."""
        answer = self._call(
            "get_queue_attributes",
            QueueUrl=queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )
        attrs: Mapping[str, str] = answer.get("Attributes", {})
        return sum(int(v) for v in attrs.values())

    def send_batch(self, queue_url: str, bodies: Sequence[str]) -> list[SendFailure]:
        """Send ``bodies`` with as few SendMessageBatch calls as the caps allow.

        Returns the failures by index; a body over the message cap is never sent (``oversized``).
        A call that fails as a whole marks all of its entries failed rather than raising, so the
        caller can hand every unsent job back to the engine.
        """
        failures: list[SendFailure] = []
        chunk: list[tuple[int, str]] = []
        chunk_bytes = 0

        def flush() -> None:
            nonlocal chunk, chunk_bytes
            if not chunk:
                return
            entries = [{"Id": str(i), "MessageBody": body} for i, body in chunk]
            try:
                answer = self._call("send_message_batch", QueueUrl=queue_url, Entries=entries)
            except QueueError as exc:
                failures.extend(SendFailure(i, str(exc)) for i, _ in chunk)
            else:
                for failed in answer.get("Failed", []):
                    failures.append(
                        SendFailure(int(failed["Id"]), f"SQS refused the message: {failed.get('Code', 'error')}")
                    )
            chunk, chunk_bytes = [], 0

        for index, body in enumerate(bodies):
            size = len(body.encode())
            if size > MAX_MESSAGE_BYTES:
                failures.append(
                    SendFailure(index, f"job message is {size} bytes; SQS caps a message at {MAX_MESSAGE_BYTES}", True)
                )
                continue
            if len(chunk) == MAX_BATCH_ENTRIES or chunk_bytes + size > MAX_MESSAGE_BYTES:
                flush()
            chunk.append((index, body))
            chunk_bytes += size
        flush()
        return failures

    def send(self, queue_url: str, body: Mapping[str, Any] | str, *, delay_seconds: int = 0) -> None:
        text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
        delay = max(0, min(MAX_DELAY_SECONDS, int(delay_seconds)))
        self._call("send_message", QueueUrl=queue_url, MessageBody=text, DelaySeconds=delay)

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
