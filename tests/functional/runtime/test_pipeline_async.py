"""An async handler through the real pipeline (poller → SQS → wrapper → store → report): the jobs of
one batch run concurrently, each keeps its claim → store → report order, and a returned model is
what the engine is told."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from pydantic import BaseModel, Field
from workerless import Job, entrypoints, job_handler, observability, runtime
from workerless._core.record import Status
from workerless.testing import FakeEngine

from tests.functional.aws import Aws, FakeContext
from tests.functional.pipeline import Events


class Charge(BaseModel):
    order_id: str = Field(alias="orderId")


class Charged(BaseModel):
    charge_id: str = Field(alias="chargeId")


def test_an_async_batch_runs_its_jobs_concurrently_and_reports_each(
    aws: Aws, engine: FakeEngine, events: Events
) -> None:
    """GIVEN 4 charge jobs in one SQS batch and an async handler
    THEN all 4 are running at once (a barrier of 4 only a concurrent batch passes; no wall time),
    every job is claimed, stored and reported in that order, the engine gets each returned model as
    variables, the batch response owes nothing, and the invocation's metrics count every job (each
    thread counts into the invocation's buffer)."""
    documents: list[dict[str, Any]] = []
    observability.configure(metrics=True, sink=lambda line: documents.append(json.loads(line)))
    barrier = threading.Barrier(4)
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    @job_handler("charge-payment")
    async def handler(job: Job[Charge]) -> Charged:
        with lock:
            seen.append(("start", job.id))
        job.log("waiting for the others")
        assert not job.lease_lost()
        await asyncio.to_thread(barrier.wait, 120)  # generous: only a one-at-a-time batch waits it out
        with lock:
            seen.append(("end", job.id))
        return Charged(chargeId=f"ch_{job.input.order_id}")

    ids = [engine.add_job("charge-payment", {"orderId": str(i)}) for i in range(4)]
    entrypoints.poller({}, FakeContext())
    queue = aws.queues["charge-payment"]
    event = aws.receive_event(queue)
    assert len(event["Records"]) == 4

    try:
        response = handler(event, FakeContext())
    finally:
        observability.configure(metrics=None, sink=None)
    aws.settle(queue, event, response)

    assert response == {"batchItemFailures": []}
    completed = [value for doc in documents for value in doc.get("JobsCompleted", [])]
    assert sum(completed) == 4, documents
    assert [kind for kind, _ in seen] == ["start"] * 4 + ["end"] * 4
    for i, job_id in enumerate(ids):
        assert engine.jobs[job_id].state == "completed"
        assert engine.reports[job_id][-1].variables == {"chargeId": f"ch_{i}"}
        record = runtime.get_store().get(f"job#charge-payment#fake#{job_id}#r3")
        assert record is not None and record.status is Status.REPORTED
    for job_id in ids:
        steps = [name for _type, name, fields in events if fields.get("job_id") == job_id]
        assert steps.count("completed") == 1, f"reported once, after its own run: {steps}"
        assert steps.index("dispatched") < steps.index("completed"), steps
    assert aws.depth(queue) == 0


def test_invalid_input_to_a_typed_route_is_a_terminal_failure_naming_the_field(aws: Aws, engine: FakeEngine) -> None:
    @job_handler("charge-payment")
    async def handler(job: Job[Charge]) -> Charged:
        raise AssertionError("never runs on invalid input")

    job_id = engine.add_job("charge-payment", {"orderId": 7})
    entrypoints.poller({}, FakeContext())
    queue = aws.queues["charge-payment"]
    event: dict[str, Any] = aws.receive_event(queue)
    response = handler(event, FakeContext())
    aws.settle(queue, event, response)

    outcome = engine.reports[job_id][-1]
    assert (outcome.kind, outcome.retries, outcome.terminal) == ("fail", 0, True)
    assert outcome.message == "invalid input for Charge: orderId: Input should be a valid string"
