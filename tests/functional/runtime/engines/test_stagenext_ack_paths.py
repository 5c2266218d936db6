"""Every path that acknowledges or skips a StageNext delivery (issue 10, item 3's audit), through the
real handler wrapper and dead-letter function on moto, against the emulator over loopback.

The rule: whatever workerless reports to StageNext it reports under an acquired lease, and a
delivery is acknowledged only after a result StageNext will apply, or once lease acquire has
refused it (the seed allows that). A delivery the handler will not run is otherwise handed back
(ack requeue:true) or left to the gateway's own requeue — acknowledged, it would never come back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from workerless import entrypoints, testing
from workerless._core.model import ActivatedJob, Demand, Outcome
from workerless._core.record import Status
from workerless._core.report import report_stored
from workerless._core.retry import HELD
from workerless.engines.stagenext import StageNextEngine, from_values
from workerless.wiring import Wiring
from workerless_devkit.emulators.http import EmulatorServer
from workerless_devkit.emulators.stagenext import StageNextEmulator
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.aws import Aws, FakeContext

ROOT = Path(__file__).resolve().parents[4]


class StageNext:
    def __init__(
        self, emulator: StageNextEmulator, server: EmulatorServer, engine: StageNextEngine, wiring: Wiring
    ) -> None:
        self.emulator = emulator
        self.server = server
        self.engine = engine
        #: The handler's and dead-letter function's wiring, around ``engine``.
        self.wiring = wiring

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
    wiring = Wiring(engine=engine)
    try:
        yield StageNext(emulator, server, engine, wiring)
    finally:
        wiring.close()  # closes the engine while its client is still open
        client.close()


def handle(aws: Aws, job: ActivatedJob, wiring: Wiring) -> dict[str, Any]:
    """Queue ``job``'s message and run its handler function on it with ``wiring``, as the event source would."""
    queue = aws.queues[job.ref.job_type]
    aws.sqs.send_message(QueueUrl=queue, MessageBody=job.to_message())
    event = aws.receive_event(queue)
    handler = testing.load_handler(ROOT / "functions" / job.ref.job_type.replace("-", "") / "app.py")
    response: dict[str, Any] = handler(event, FakeContext(), wiring)
    aws.settle(queue, event, response)
    return response


def dead_letter(job: ActivatedJob, wiring: Wiring) -> dict[str, Any]:
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
    response: dict[str, Any] = entrypoints.deadletter({"Records": [record]}, FakeContext(), wiring=wiring)
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
    store = sn.wiring.store
    assert store.claim(job.record_key, owner="earlier:m0:x", claim_seconds=60, job_type="send-receipt")[0]
    store.store_outcome(job.record_key, owner="earlier:m0:x", outcome=Outcome.complete({"receiptSent": True}))
    store.mark_reported(job.record_key)

    assert handle(aws, job, sn.wiring) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert state["state"] == "completed" and state["output"] == {"receiptSent": True}
    assert events(state).index("lease_acquired") < events(state).index("result_accepted")
    assert [(a["status"], a["requeue"]) for a in state["acks"]] == [(200, False)]


def test_a_reported_job_whose_redelivery_is_refused_at_acquire_is_acknowledged(aws: Aws, sn: StageNext) -> None:
    """GIVEN a stage finished by its first delivery, whose ack failed only once the gateway had
    requeued it (past its visibility timeout), and the gateway delivering it again THEN the
    redelivery's acquire is refused (finished) and only then is it acknowledged."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r2"})
    job = sn.pull()
    sn.emulator.advance(61)  # the gateway requeues the delivery: its token is dead
    sn.fault("/jobs/ack", status=502, times=1)
    assert handle(aws, job, sn.wiring) == {"batchItemFailures": []}

    assert handle(aws, sn.pull(), sn.wiring) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert state["state"] == "completed"
    assert "acquire_refused" in events(state)
    assert [(a["status"], a["requeue"]) for a in state["acks"]] == [(200, False)]
    assert len(state["results"]) == 1


def test_an_accepted_result_whose_ack_keeps_failing_is_owed_and_acknowledged_later(aws: Aws, sn: StageNext) -> None:
    """GIVEN a result accepted (202) and every ack after it refused 503 through the handler's tries
    THEN the report is owed, not dropped: the message stays in flight (a batch item failure) and
    the record says so; the heartbeat's re-report — another container, which posts the result again
    (StageNext's fencing discards the duplicate) — acknowledges the delivery once the gateway
    answers. (Dropped after three failed acks, the delivery was left to the gateway's requeue.)"""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r6"})
    job = sn.pull()
    sn.fault("/jobs/ack", status=503, times=4)  # every try of the handler's retry policy

    response = handle(aws, job, sn.wiring)

    assert len(response["batchItemFailures"]) == 1
    record = sn.wiring.store.get(job.record_key)
    assert record is not None and record.report_owed
    state = sn.state(stage_id)
    assert state["state"] == "completed" and state["acks"] == []
    outcome = sn.wiring.store.load_outcome(record)
    assert outcome is not None
    with httpx.Client(timeout=5) as other_client:
        other = from_values(sn.emulator.engine_values(sn.server.url), other_client, clock=sn.emulator.now)
        assert report_stored(job.ref, outcome, engine=other, store=sn.wiring.store, deadline=time.monotonic() + 10)
    state = sn.state(stage_id)
    assert [(a["status"], a["requeue"]) for a in state["acks"]] == [(200, False)]
    assert [r["applied"] for r in state["results"]] == [True, False]
    assert sn.emulator.inflight() == [0, 0]


def test_a_delivery_recorded_as_skipped_but_granted_the_lease_is_handed_back_not_acknowledged(
    aws: Aws, sn: StageNext
) -> None:
    """GIVEN a job record that says SKIPPED for an execution StageNext still holds dispatched
    WHEN a delivery of it arrives and its acquire is granted
    THEN it is handed back (ack requeue:true), not acknowledged: the stage stays pending and its
    delivery comes back (acknowledged, it never would)."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r3"})
    job = sn.pull()
    sn.wiring.store.mark(job.record_key, Status.SKIPPED, reason="test", job_type="send-receipt")

    assert handle(aws, job, sn.wiring) == {"batchItemFailures": []}

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

    assert handle(aws, job, sn.wiring) == {"batchItemFailures": []}

    assert [a["status"] for a in sn.state(stage_id)["acks"]] == [200]
    assert aws.depth(aws.queues["send-receipt"]) == 0


def test_a_lease_acquire_refused_through_an_outage_is_retried_until_it_lands(aws: Aws, sn: StageNext) -> None:
    """GIVEN lease acquire answered 503 six times in a row (more than a few quick tries) THEN the
    handler keeps trying on a backoff — the delivery is ours until it is acknowledged or requeued —
    and the stage runs on this delivery once acquire answers. (Before, after four tries the
    delivery was left unacknowledged to the gateway's requeue a minute later.)"""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "r5"})
    sn.fault("/stages/{stageId}/lease/acquire", status=503, times=6)

    assert handle(aws, sn.pull(), sn.wiring) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert state["state"] == "completed" and len(state["executions"]) == 1
    assert state["deliveries"] == 1
    assert [(a["status"], a["requeue"]) for a in state["acks"]] == [(200, False)]
    assert sn.emulator.router.pending_faults() == 0
    assert aws.depth(aws.queues["send-receipt"]) == 0


VISIBILITY = 6


def test_a_lease_acquire_that_fails_until_the_gateway_takes_the_delivery_back_stops_there(
    aws: Aws, workerless_emulator: EmulatorFactory
) -> None:
    """GIVEN a gateway whose visibility timeout is 6 s and lease acquire answered 503 throughout
    THEN the handler's tries stop once the gateway has taken the delivery back (a bound, whatever
    the invocation's time): the SQS message completes with no ack (the gateway requeued it), and
    the delivery the gateway hands out next runs once acquire answers."""
    running = workerless_emulator("stagenext", visibility_timeout=VISIBILITY)
    emulator, server = running.emulator, running.server
    with httpx.Client(timeout=5) as client:
        engine = from_values(emulator.engine_values(server.url), client, clock=emulator.now)
        wiring = Wiring(engine=engine)
        try:
            stage_id = emulator.create_job("send-receipt", {"orderId": "r7"})
            spec = {"method": "POST", "path": "/stages/{stageId}/lease/acquire", "status": 503, "rate": 1.0}
            httpx.post(f"{server.url}/_admin/faults", json=spec).raise_for_status()
            [job] = engine.activate([Demand("send-receipt", 1)], lease_seconds=60)

            assert handle(aws, job, wiring) == {"batchItemFailures": []}

            # Given up only when the next wait would pass the gateway's visibility timeout.
            assert time.time() >= job.activated_at + VISIBILITY - HELD.max_delay, "given up early"
            assert emulator.job_state(stage_id)["acks"] == [], "no result: it must not be acknowledged"
            assert aws.depth(aws.queues["send-receipt"]) == 0
            httpx.delete(f"{server.url}/_admin/faults").raise_for_status()
            emulator.advance(VISIBILITY)  # past the gateway's visibility timeout, whatever the machine's pace
            [again] = engine.activate([Demand("send-receipt", 1)], lease_seconds=60)
            assert handle(aws, again, wiring) == {"batchItemFailures": []}
            state = emulator.job_state(stage_id)
            assert state["state"] == "completed" and len(state["executions"]) == 1
            assert "visibility_requeue" in events(state)
        finally:
            wiring.close()


# ------------------------------------------------------------------------------------------------
# The dead-letter function


def test_a_dead_lettered_stage_nobody_acquired_is_failed_under_a_lease_it_acquires(aws: Aws, sn: StageNext) -> None:
    """GIVEN a delivery that reached the DLQ before any handler acquired its lease
    THEN the dead-letter function acquires the lease and then fails the stage with the reason: the
    result is applied (retries left: StageNext dispatches it again), not discarded as not running."""
    stage_id = sn.emulator.create_job("send-receipt", {"orderId": "d1"}, retries=3)
    job = sn.pull()

    assert dead_letter(job, sn.wiring) == {"batchItemFailures": []}

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
    store = sn.wiring.store
    assert store.claim(job.record_key, owner="gone:m0:x", claim_seconds=0, job_type="send-receipt")[0]
    assert store.mark_begun(job.record_key, owner="gone:m0:x")
    store.store_outcome(job.record_key, owner="gone:m0:x", outcome=Outcome.complete({"receiptSent": True}))

    assert dead_letter(job, sn.wiring) == {"batchItemFailures": []}

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

    assert dead_letter(stale, sn.wiring) == {"batchItemFailures": []}

    state = sn.state(stage_id)
    assert state["state"] == "completed" and len(state["results"]) == 1
    assert "acquire_refused" in events(state)
    record = sn.wiring.store.get(job.record_key)
    assert record is not None and record.status is Status.REPORTED
    assert json.loads(job.to_message())["ref"]["job_id"] == stage_id
