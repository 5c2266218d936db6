"""Lambda's SQS event source mapping, one per SQS event of a function.

Long-polls up to BatchSize messages (within MaximumBatchingWindowInSeconds), runs at most
MaximumConcurrency batches at once, deletes what succeeded (honouring ReportBatchItemFailures), and
leaves the rest to the visibility timeout; moto does the redelivery, the ApproximateReceiveCount
and the redrive to the DLQ. A message at the recursive-loop limit is stopped instead of delivered
(:mod:`workerless_devkit.local.recursion`).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workerless_devkit.local.host import ThreadSet
from workerless_devkit.local.idle import IdleTracker
from workerless_devkit.local.recursion import LoopDetector
from workerless_devkit.local.template import FunctionSpec, LocalTemplate, QueueSpec, SqsEventSpec

log = logging.getLogger("workerless_devkit.local")

#: Runs one invocation: (function, event, depth in its chain, counts as work) -> (ok, result).
Invoke = Callable[..., tuple[bool, Any]]


@dataclass(slots=True)
class MappingRuntime:
    """What every mapping of a topology shares: the embedded SQS, the stop signal, the knobs."""

    sqs: Any
    queue_urls: Mapping[str, str]
    stopping: threading.Event
    threads: ThreadSet
    idle: IdleTracker
    loops: LoopDetector
    loop_limit: int
    wait_seconds: int
    max_batching_window_seconds: float | None


@dataclass(slots=True)
class SqsEventSourceMapping:
    """One SQS event of one function, polled as Lambda polls it (:meth:`pump`, on its own thread)."""

    function: FunctionSpec
    event: SqsEventSpec
    queue: QueueSpec
    concurrency: int

    def pump(
        self,
        runtime: MappingRuntime,
        dispatch: Callable[[SqsEventSourceMapping, str, list[dict[str, Any]], threading.BoundedSemaphore], None],
    ) -> None:
        """Receive batches until the topology stops; each runs on its own thread (``dispatch``:
        the topology's hook, which calls :meth:`run_batch`), at most ``concurrency`` at once."""
        slots = threading.BoundedSemaphore(self.concurrency)
        url = runtime.queue_urls[self.queue.logical_id]
        while not runtime.stopping.is_set():
            if not slots.acquire(timeout=0.2):
                continue
            try:
                messages = self.receive(runtime, url)
            except Exception as exc:  # noqa: BLE001 - the event source keeps polling, as Lambda's does
                slots.release()
                if not runtime.stopping.is_set():
                    log.warning("%s: receive from %s failed: %s", self.function.logical_id, self.queue.logical_id, exc)
                runtime.stopping.wait(0.5)
                continue
            if not messages:
                slots.release()
                continue
            thread = threading.Thread(
                target=dispatch,
                args=(self, url, messages, slots),
                name=f"{self.function.logical_id}#{uuid.uuid4().hex[:8]}",
                daemon=True,
            )
            runtime.threads.start_batch(thread)

    def receive(self, runtime: MappingRuntime, url: str) -> list[dict[str, Any]]:
        window = self.event.batching_window_seconds
        if runtime.max_batching_window_seconds is not None:
            window = min(window, runtime.max_batching_window_seconds)
        deadline = time.monotonic() + window
        messages: list[dict[str, Any]] = []
        while len(messages) < self.event.batch_size and not runtime.stopping.is_set():
            answer = runtime.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(10, self.event.batch_size - len(messages)),
                WaitTimeSeconds=0 if messages else runtime.wait_seconds,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            received = answer.get("Messages") or []
            messages.extend(received)
            if not messages or time.monotonic() >= deadline:
                break
            if not received:
                runtime.stopping.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        return messages

    def run_batch(
        self,
        runtime: MappingRuntime,
        invoke: Invoke,
        url: str,
        messages: list[dict[str, Any]],
        slots: threading.BoundedSemaphore,
    ) -> None:
        spec = self.function
        background = runtime.idle.is_timer(self.queue.name)
        try:
            deliver: list[dict[str, Any]] = []
            depth = 0
            for message in messages:
                owner, message_depth = runtime.loops.depth_of(message, self.queue.name)
                if owner != spec.logical_id:
                    message_depth = 0
                if message_depth >= runtime.loop_limit and not spec.allows_recursion:
                    runtime.loops.stop(
                        runtime.sqs, runtime.queue_urls, spec.logical_id, self.queue, url, message, message_depth
                    )
                    continue
                depth = max(depth, message_depth)
                deliver.append(message)
            if not deliver:
                return
            event = {"Records": [sqs_record(message, self.queue) for message in deliver]}
            ok, result = invoke(spec, event, depth=depth, work=not background)
            if not ok:
                return  # the whole batch returns to the queue after the visibility timeout
            done = deliver
            if self.event.report_batch_item_failures:
                failed = batch_item_failures(result, {m["MessageId"] for m in deliver})
                if failed is None:
                    log.warning(
                        "%s returned an invalid batchItemFailures response: the whole batch is retried", spec.logical_id
                    )
                    return
                done = [m for m in deliver if m["MessageId"] not in failed]
            self._delete(runtime, url, done)
        except Exception:
            if not runtime.stopping.is_set():
                log.exception("%s: event source error", spec.logical_id)
        finally:
            slots.release()
            runtime.threads.batch_done()

    def _delete(self, runtime: MappingRuntime, url: str, messages: list[dict[str, Any]]) -> None:
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            answer = runtime.sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
            for failure in answer.get("Failed") or []:
                log.warning(
                    "delete of a processed message failed (%s): it will be delivered again", failure.get("Code")
                )
            runtime.loops.forget(message["MessageId"] for message in chunk)


def mappings_of(spec: FunctionSpec, template: LocalTemplate, default_concurrency: int) -> list[SqsEventSourceMapping]:
    """The enabled SQS event source mappings of a function; one without ScalingConfig gets
    ``default_concurrency`` (Lambda scales it up to the account's concurrency; local mode caps it)."""
    return [
        SqsEventSourceMapping(
            function=spec,
            event=event,
            queue=template.queue(event.queue_id),
            concurrency=event.maximum_concurrency or default_concurrency,
        )
        for event in spec.sqs_events
        if event.enabled
    ]


def sqs_record(message: Mapping[str, Any], queue: QueueSpec) -> dict[str, Any]:
    """One SQS event record, shaped as Lambda's SQS event source delivers it."""
    attributes = {str(k): str(v) for k, v in (message.get("Attributes") or {}).items()}
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": attributes,
        "messageAttributes": {
            name: _message_attribute(value) for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue.arn,
        "awsRegion": queue.place.region,
    }
    if message.get("MD5OfMessageAttributes"):
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def _message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    def b64(data: Any) -> str:
        return base64.b64encode(data if isinstance(data, bytes) else str(data).encode()).decode()

    out: dict[str, Any] = {
        "stringListValues": list(value.get("StringListValues") or []),
        "binaryListValues": [b64(v) for v in value.get("BinaryListValues") or []],
        "dataType": value.get("DataType", "String"),
    }
    if "StringValue" in value:
        out["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        out["binaryValue"] = b64(value["BinaryValue"])
    return out


def batch_item_failures(result: Any, message_ids: set[str]) -> set[str] | None:
    """The failed message ids of a partial batch response; None when the response is invalid.

    Lambda's rules: no response, no ``batchItemFailures`` or an empty list is complete success; an
    item without an identifier, or with one that is not in the batch, fails the whole batch.
    """
    if not isinstance(result, dict) or result.get("batchItemFailures") is None:
        return set()
    failures = result["batchItemFailures"]
    if not isinstance(failures, list):
        return None
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or identifier not in message_ids:
            return None
        failed.add(identifier)
    return failed
