"""Every path that acknowledges or skips a StageNext delivery (issue 10, item 3's audit), through the
real handler wrapper and dead-letter function on moto, against the emulator over loopback.

The rule: whatever workerless reports to StageNext it reports under an acquired lease, and a
delivery is acknowledged only after a result StageNext will apply, or once lease acquire has
refused it (the seed allows that). A delivery the handler will not run is otherwise handed back
(ack requeue:true) or left to the gateway's own requeue — acknowledged, it would never come back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from workerless import entrypoints, runtime, testing
from workerless.engines.stagenext import StageNextEngine, from_values
from workerless.model import ActivatedJob, Demand, Outcome
from workerless.record import Status
from workerless_devkit.emulators.http import EmulatorServer
from workerless_devkit.emulators.stagenext import StageNextEmulator
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.aws import Aws, FakeContext

ROOT = Path(__file__).resolve().parents[2]


class StageNext:
    def __init__(self, emulator: StageNextEmulator, server: EmulatorServer, engine: StageNextEngine) -> None:
        self.emulator = emulator
        self.server = server
        self.engine = engine

    def fault(self, path: str, **spec: Any) -> None:
        answer = httpx.post(f"{self.server.url}/_admin/faults", json={"method": "POST", "path": path, **spec})
        assert answer.status_code == 201, answer.text

    def pull(self, job_type: str = "send-receipt") -> ActivatedJob:
        [job] = self.engine.activate([Demand(job_type, 1)], lease_seconds=60)
        return job

    def state(self, stage_id: str) -> dict[str, Any]:
        state: dict[str, Any] = self.emulator.job_state(stage_id)
        return state


@pytest.fixture
def sn(aws: Aws, workerless_emulator: EmulatorFactory) -> Iterator[StageNext]:
    running = workerless_emulator("stagenext", lease_seconds=30)
    emulator, server = running.emulator, running.server
    client = httpx.Client(timeout=5)
    engine = from_values(emulator.engine_values(server.url), client, clock=emulator.now)
    runtime.set_engine(engine)
    try:
        yield StageNext(emulator, server, engine)
    finally:
        runtime.reset()  # closes the engine while its client is still open
        client.close()


def handle(aws: Aws, job: ActivatedJob) -> dict[str, Any]:
    """Queue ``job``'s message and run its handler function on it, as the event source would."""
    queue = aws.queues[job.ref.job_type]
    aws.sqs.send_message(QueueUrl=queue, MessageBody=job.to_message())
    event = aws.receive_event(queue)
    handler = testing.load_handler(ROOT / "functions" / job.ref.job_type.replace("-", "") / "app.py")
    response: dict[str, Any] = handler(event, FakeContext())
    aws.settle(queue, event, response)
    return response


def dead_letter(job: ActivatedJob) -> dict[str, Any]:
    record = {
        "messageId": "dlq-1",
        "receiptHandle": "r",
        "body": job.to_message(),
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "x",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{job.ref.job_type}-dlq",
        "awsRegion": "us-east-1",
    }
    response: dict[str, Any] = entrypoints.deadletter({"Records": [record]}, FakeContext())
    return response


def events(state: dict[str, Any]) -> list[str]:
    return [str(h["event"]) for h in state["history"]]


# ------------------------------------------------------------------------------------------------
# The handler's skip paths


def test_a_delivery_recorded_as_reported_but_never_applied_is_reported_under_its_lease(aws: Aws, sn: StageNext) -> None:
    """GIVEN a job record that says REPORTED (with its outcome) for an execution StageNext never
    applied a result to (say, one posted without the lease and discarded)
    WHEN a delivery of it arrives
    THEN the handler does not acknowledge it on the record's word: lease acquire is granted, so the
    stored outcome is reported under that lease, applied, and only then acknowledged. (Acknowledged
    without acquire, the stage was lost: nothing would ever dispatch it again.)"""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r1"})
    job = sn.pull()
    store = runtime.get_store()
    assert store.claim(job.record_key, owner="earlier:m0:x", claim_seconds=60, job_type="send-receipt")[0]
    store.store_outcome(job.record_key, owner="earlier:m0:x", outcome=Outcome.complete({"receiptSent": True}))
    store.mark_reported(job.record_key)

    assert handle(aws, job) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert state["state"] == "completed" and state["output"] == {"receiptSent": True}
    assert events(state).index("lease_acquired") < events(state).index("result_accepted")
    assert [(a["status"], a["requeue"]) for a in state["acks"]] == [(200, False)]


def test_a_reported_job_whose_redelivery_is_refused_at_acquire_is_acknowledged(aws: Aws, sn: StageNext) -> None:
    """GIVEN a stage finished by its first delivery, whose ack was lost, and the gateway delivering
    it again THEN the redelivery's acquire is refused (finished) and only then is it acknowledged."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r2"})
    # The first delivery's report tries its ack ACK_TRIES (3) times and then ends without it; the
    # fourth 502 meets the redelivery's ack, which is retried too.
    sn.fault("/jobs/ack", status=502, times=4)
    assert handle(aws, sn.pull()) == {"batchItemFailures": []}
    sn.emulator.advance(61)  # the gateway requeues the unacknowledged delivery

    assert handle(aws, sn.pull()) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert state["state"] == "completed"
    assert "acquire_refused" in events(state)
    assert [(a["status"], a["requeue"]) for a in state["acks"]] == [(200, False)]
    assert len(state["results"]) == 1


def test_a_delivery_recorded_as_skipped_but_granted_the_lease_is_handed_back_not_acknowledged(
    aws: Aws, sn: StageNext
) -> None:
    """GIVEN a job record that says SKIPPED for an execution StageNext still holds dispatched
    WHEN a delivery of it arrives and its acquire is granted
    THEN it is handed back (ack requeue:true), not acknowledged: the stage stays pending and its
    delivery comes back (acknowledged, it never would)."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r3"})
    job = sn.pull()
    runtime.get_store().mark(job.record_key, Status.SKIPPED, reason="test", job_type="send-receipt")

    assert handle(aws, job) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert [(a["status"], a["requeue"]) for a in state["acks"]] == [(200, True)]
    assert state["state"] != "completed" and not state["results"]
    again = sn.pull()
    assert again.ref.job_id == stage_id


def test_a_refused_delivery_whose_ack_is_throttled_is_acknowledged_on_retry_and_completes_its_message(
    aws: Aws, sn: StageNext
) -> None:
    """GIVEN a delivery refused at acquire (another worker holds the lease) whose ack is answered
    429 THEN the ack is retried and lands, and the SQS message completes: failed, it would sit in
    flight for the queue's visibility timeout to redeliver a token that has expired by then."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r4"})
    job = sn.pull()
    with httpx.Client(timeout=5) as other_client:
        other = from_values(
            {**sn.emulator.engine_values(sn.server.url), "STAGENEXT_INSTANCE_ID": "other"},
            other_client,
            clock=sn.emulator.now,
        )
        assert other.begin(job) is True
    sn.fault("/jobs/ack", status=429, headers={"Retry-After": "0"}, times=1)

    assert handle(aws, job) == {"batchItemFailures": []}

    assert [a["status"] for a in sn.state(stage_id)["acks"]] == [200]
    assert aws.depth(aws.queues["send-receipt"]) == 0


def test_a_lease_acquire_that_keeps_failing_leaves_the_delivery_to_the_gateway(aws: Aws, sn: StageNext) -> None:
    """GIVEN lease acquire answers 503 to every try THEN the SQS message completes without an ack
    (no result: it must not be acknowledged), the claim is given back, and the gateway hands the
    delivery out again after its visibility timeout; that delivery runs."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r5"})
    sn.fault("/stages/{stageId}/lease/acquire", status=503, times=4)

    assert handle(aws, sn.pull()) == {"batchItemFailures": []}
    assert sn.state(stage_id)["acks"] == []
    assert aws.depth(aws.queues["send-receipt"]) == 0

    sn.emulator.advance(61)
    assert handle(aws, sn.pull()) == {"batchItemFailures": []}
    state = sn.state(stage_id)
    assert state["state"] == "completed" and len(state["executions"]) == 1


# ------------------------------------------------------------------------------------------------
# The dead-letter function


def test_a_dead_lettered_stage_nobody_acquired_is_failed_under_a_lease_it_acquires(aws: Aws, sn: StageNext) -> None:
    """GIVEN a delivery that reached the DLQ before any handler acquired its lease
    THEN the dead-letter function acquires the lease and then fails the stage with the reason: the
    result is applied (retries left: StageNext dispatches it again), not discarded as not running."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "d1"}, retries=3)
    job = sn.pull()

    assert dead_letter(job) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    [result] = state["results"]
    assert result["applied"], result
    assert result["status"] == "failed" and "did not finish" in result["errorMessage"]
    assert state["retries"] == 2 and len(state["executions"]) == 2


def test_a_dead_lettered_stage_whose_handler_stored_a_result_is_reported_under_the_handlers_lease(
    aws: Aws, sn: StageNext
) -> None:
    """GIVEN a handler acquired the lease and stored its result, and only the report kept failing
    THEN the dead-letter function reports the stored result under that lease (the deployment's
    worker record holds it) without a second acquire, which would be refused as lease_held."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "d2"})
    job = sn.pull()
    assert sn.engine.begin(job) is True
    store = runtime.get_store()
    assert store.claim(job.record_key, owner="gone:m0:x", claim_seconds=0, job_type="send-receipt")[0]
    assert store.mark_begun(job.record_key, owner="gone:m0:x")
    store.store_outcome(job.record_key, owner="gone:m0:x", outcome=Outcome.complete({"receiptSent": True}))

    assert dead_letter(job) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert state["state"] == "completed"
    assert [r["applied"] for r in state["results"]] == [True]
    assert store.get(job.record_key).status is Status.REPORTED  # type: ignore[union-attr]


def test_a_dead_lettered_delivery_of_a_finished_stage_is_settled_without_a_result(aws: Aws, sn: StageNext) -> None:
    """GIVEN the stage finished under another delivery and a stale delivery of it is dead-lettered
    THEN its acquire is refused, nothing is reported, and the letter is settled (deleted)."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "d3"})
    job = sn.pull()
    assert sn.engine.begin(job) is True
    sn.engine.report(job.ref, Outcome.complete({"receiptSent": True}))
    stale = ActivatedJob.from_message(job.to_message())

    assert dead_letter(stale) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert state["state"] == "completed" and len(state["results"]) == 1
    assert "acquire_refused" in events(state)
    record = runtime.get_store().get(job.record_key)
    assert record is not None and record.status is Status.REPORTED
    assert json.loads(job.to_message())["ref"]["job_id"] == stage_id
