"""A handler batch starts a job only while the invocation can finish it (issue 26, 2.6).

Five jobs run one after another in one timeout. Before, a job started with seconds left, a timeout
failed the whole batch, and the jobs never started came back only after the queue's visibility
timeout (720 s), each having spent a receive (five such timeouts dead-letter a job that never ran).
Now a job starts only with the longest run seen so far (plus the time to store and report) left,
and a watchdog hands back the jobs not started when a running one is about to meet the timeout:
either way they are made visible again at once (ChangeMessageVisibility 0) and are batch item
failures of this invocation. On moto's SQS and DynamoDB with the in-memory engine.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from workerless import Job, job_handler
from workerless._core.model import Demand
from workerless._handler.startgate import WATCHDOG_MARGIN_SECONDS
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws


@dataclass
class VirtualContext:
    """A Lambda context whose remaining time the handler spends (a virtual clock)."""

    left: float
    aws_request_id: str = "req-1"
    function_name: str = "sendreceipt"

    def get_remaining_time_in_millis(self) -> int:
        return int(self.left * 1000)


@dataclass
class CountdownContext:
    """A Lambda context whose remaining time runs down with the real clock."""

    seconds: float
    started: float = field(default_factory=time.monotonic)
    aws_request_id: str = "req-2"
    function_name: str = "sendreceipt"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.started + self.seconds - time.monotonic()) * 1000))


class SpyQueues:
    """The pipeline's queues, noting every visibility change (and signalling it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.visibility: list[tuple[str, str, int]] = []
        self.changed = threading.Event()

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> None:
        self.visibility.append((queue_url, receipt_handle, seconds))
        self.inner.change_visibility(queue_url, receipt_handle, seconds)
        self.changed.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _spied(engine: FakeEngine) -> tuple[SpyQueues, Wiring]:
    """The handler's wiring, built on the environment ``aws`` set: ``engine``, and the spy over its queues."""
    plain = Wiring(engine=engine)
    spy = SpyQueues(plain.queues)
    return spy, Wiring(settings=plain.settings, engine=engine, store=plain.store, queues=spy)


def _batch(aws: Aws, engine: FakeEngine, count: int) -> tuple[dict[str, Any], dict[str, str]]:
    """``count`` send-receipt jobs queued and received as one batch; job id by message id."""
    for n in range(count):
        engine.add_job("send-receipt", {"orderId": str(n)})
    queue = aws.queues["send-receipt"]
    for job in engine.activate([Demand("send-receipt", count)], 60):
        aws.sqs.send_message(QueueUrl=queue, MessageBody=job.to_message())
    event = aws.receive_event(queue, visibility=720)
    assert len(event["Records"]) == count
    ids = {r["messageId"]: json.loads(r["body"])["ref"]["job_id"] for r in event["Records"]}
    return event, ids


def test_a_job_the_batch_has_no_time_to_finish_is_handed_back_not_started(aws: Aws) -> None:
    """GIVEN five jobs of 30 s each in a batch with 120 s left
    THEN three run, and the two that could no longer finish (30 s left, 35 s needed) are never
    started: handed back at once (visibility 0) and reported as batch item failures, so they run in
    another invocation now, not after the queue's 720 s visibility timeout."""
    engine = FakeEngine()
    spy, wiring = _spied(engine)
    event, ids = _batch(aws, engine, 5)
    context = VirtualContext(left=120.0)
    started: list[str] = []

    def thirty_seconds(job: Job) -> dict[str, Any]:
        started.append(job.activated.ref.job_id)
        context.left -= 30.0
        return {"sent": True}

    handler = job_handler("send-receipt")(thirty_seconds)

    response = handler(event, context, wiring)

    order = [r["messageId"] for r in event["Records"]]
    assert started == [ids[m] for m in order[:3]]
    assert response == {"batchItemFailures": [{"itemIdentifier": m} for m in order[3:]]}
    receipts = {r["messageId"]: r["receiptHandle"] for r in event["Records"]}
    assert spy.visibility == [(aws.queues["send-receipt"], receipts[m], 0) for m in order[3:]]
    assert all(engine.jobs[ids[m]].state == "completed" for m in order[:3])
    back = aws.receive_event(aws.queues["send-receipt"])
    assert sorted(r["messageId"] for r in back["Records"]) == sorted(order[3:]), "visible again at once"


def test_a_running_job_about_to_meet_the_timeout_has_the_rest_handed_back(aws: Aws) -> None:
    """GIVEN three jobs in a batch with a little over the watchdog's margin left, whose first job
    runs until the time is nearly up (it waits for the hand-back, as one that will meet the timeout)
    THEN the watchdog hands back the two jobs not started before Lambda would end the invocation,
    and neither starts afterwards."""
    engine = FakeEngine()
    spy, wiring = _spied(engine)
    event, ids = _batch(aws, engine, 3)
    context = CountdownContext(seconds=WATCHDOG_MARGIN_SECONDS + 0.5)
    started: list[str] = []

    def slow(job: Job) -> dict[str, Any]:
        started.append(job.activated.ref.job_id)
        assert spy.changed.wait(timeout=60), "the watchdog never handed anything back"
        return {"sent": True}

    handler = job_handler("send-receipt")(slow)

    response = handler(event, context, wiring)

    order = [r["messageId"] for r in event["Records"]]
    assert started == [ids[order[0]]]
    assert response == {"batchItemFailures": [{"itemIdentifier": m} for m in order[1:]]}
    receipts = {r["messageId"]: r["receiptHandle"] for r in event["Records"]}
    assert sorted(spy.visibility) == sorted((aws.queues["send-receipt"], receipts[m], 0) for m in order[1:])
