"""The pipeline's own logic — poller, handler wrapper, heartbeat, dead-letter — on moto's SQS and
DynamoDB with an in-memory engine, one hop at a time. (The same pipeline against each engine's
emulator over loopback, driven by `workerless local`, is in test_local_pipeline_*.py.)

Each test builds its own :class:`~workerless.wiring.Wiring` and passes it to the entry points and
handlers; one (``test_handler_completes_and_records_the_report``) runs them as Lambda calls them,
without ``wiring=``, on the container's."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from workerless import entrypoints, runtime, testing
from workerless._core.lease import BEGIN_LEASE
from workerless._core.model import ActivatedJob
from workerless._core.record import Status
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws, FakeContext

ROOT = Path(__file__).resolve().parents[3]


def load_handler(job_type: str) -> Any:
    return testing.load_handler(ROOT / "functions" / job_type.replace("-", "") / "app.py")


@pytest.fixture
def engine(aws: Aws) -> FakeEngine:
    """The in-memory engine of the test's wiring (this module's: the container is left alone)."""
    return FakeEngine()


@pytest.fixture
def wired(aws: Aws, engine: FakeEngine) -> Iterator[Wiring]:
    """The pipeline's wiring around ``engine``, on the environment ``aws`` set; closed after."""
    wiring = Wiring(engine=engine)
    yield wiring
    wiring.close()


@pytest.fixture
def wire(aws: Aws) -> Iterator[Callable[..., Wiring]]:
    """Builds more wirings (``Wiring(**kwargs)``, on the environment ``aws`` set), closed after the test."""
    built: list[Wiring] = []

    def build(**kwargs: Any) -> Wiring:
        built.append(Wiring(**kwargs))
        return built[-1]

    yield build
    for wiring in built:
        wiring.close()


def run_handler(aws: Aws, job_type: str, wiring: Wiring | None, **context: Any) -> dict[str, Any]:
    """Receive a batch of ``job_type`` and run its function on it with ``wiring`` (the container's
    when None, as Lambda calls it)."""
    event = aws.receive_event(aws.queues[job_type])
    response = load_handler(job_type)(event, FakeContext(**context), wiring)
    aws.settle(aws.queues[job_type], event, response)
    return response


def test_poller_never_leases_more_than_the_route_can_start(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    """GIVEN 10 queued charge jobs and a route that allows 4 in flight
    WHEN the poller runs
    THEN exactly 4 are activated and queued, one message each, and one ticket covers the batch."""
    for i in range(10):
        engine.add_job("charge-payment", {"orderId": str(i), "amount": 10})

    report = entrypoints.poller({}, FakeContext(), wiring=wired)

    assert report["activated"] == 4
    assert aws.depth(aws.queues["charge-payment"]) == 4
    assert sum(1 for j in engine.jobs.values() if j.state == "leased") == 4
    tickets = aws.sqs.get_queue_attributes(QueueUrl=aws.heartbeat_queue, AttributeNames=["All"])["Attributes"]
    assert int(tickets["ApproximateNumberOfMessagesDelayed"]) + int(tickets["ApproximateNumberOfMessages"]) == 1


def test_handler_completes_and_records_the_report(aws: Aws, engine: FakeEngine, container: None) -> None:
    """Lambda's default path, kept on purpose: the poller and the function's handler are called
    without ``wiring=`` (as Lambda calls them) and use the container's wiring, installed here around
    the in-memory engine (``container`` starts it over and closes it)."""
    lambda_wiring = Wiring(engine=engine)
    runtime.reset(lambda_wiring)
    job_id = engine.add_job("charge-payment", {"orderId": "7", "amount": 12.5})
    entrypoints.poller({}, FakeContext())

    response = run_handler(aws, "charge-payment", None)

    assert response == {"batchItemFailures": []}
    assert engine.jobs[job_id].state == "completed"
    assert engine.reports[job_id][-1].variables == {"paymentOk": True, "chargeId": "ch_7"}
    record = lambda_wiring.store.get(f"job#charge-payment#fake#{job_id}#r3")
    assert record is not None and record.status is Status.REPORTED
    assert aws.depth(aws.queues["charge-payment"]) == 0


def test_terminal_error_fails_with_no_retries(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    job_id = engine.add_job("charge-payment", {"orderId": "8", "amount": -1})
    entrypoints.poller({}, FakeContext(), wiring=wired)

    run_handler(aws, "charge-payment", wired)

    outcome = engine.reports[job_id][-1]
    assert outcome.kind == "fail" and outcome.retries == 0 and outcome.terminal
    # Typed input: validated before the handler runs, the bad field named as pydantic says.
    assert "ChargeInput: amount: Value error, amount must be a positive number" in (outcome.message or "")
    assert engine.jobs[job_id].state == "failed"


def test_redelivered_job_with_stored_result_is_rereported_not_rerun(
    aws: Aws, engine: FakeEngine, wired: Wiring
) -> None:
    """GIVEN a handler whose first report fails (engine unavailable)
    WHEN SQS redelivers the message
    THEN the stored result is reported and the handler is not run again."""
    from workerless.errors import EngineUnavailableError

    job_id = engine.add_job("send-receipt", {"orderId": "9"})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    handler = load_handler("send-receipt")
    runs = []
    original_fn = handler.processor.fn

    def counting(job: Any) -> Any:
        runs.append(job.id)
        return original_fn(job)

    handler.processor.fn = counting
    real_report = engine.report
    calls = {"n": 0}

    def flaky_report(ref: Any, outcome: Any) -> None:
        calls["n"] += 1
        if calls["n"] <= 4:  # every try of the first delivery fails
            raise EngineUnavailableError("down", engine="fake", job_id=ref.job_id, status=503)
        real_report(ref, outcome)

    engine.report = flaky_report  # type: ignore[method-assign]

    event = aws.receive_event(aws.queues["send-receipt"], visibility=0)
    first = handler(event, FakeContext(), wired)
    assert len(first["batchItemFailures"]) == 1
    assert wired.store.get(f"job#send-receipt#fake#{job_id}#r3").status is Status.STORED

    event = aws.receive_event(aws.queues["send-receipt"])
    assert event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "2"
    second = handler(event, FakeContext(), wired)

    assert second == {"batchItemFailures": []}
    assert runs == [job_id]
    assert engine.jobs[job_id].state == "completed"
    assert wired.store.get(f"job#send-receipt#fake#{job_id}#r3").status is Status.REPORTED


def test_handler_returning_a_non_object_fails_the_job_with_the_reason(
    aws: Aws, engine: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workerless import job_handler

    job_id = engine.add_job("send-receipt", {})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    handler = job_handler("send-receipt")(lambda job: ["not", "an", "object"])

    event = aws.receive_event(aws.queues["send-receipt"])
    handler(event, FakeContext(), wired)

    outcome = engine.reports[job_id][-1]
    assert outcome.kind == "fail" and "not a JSON object" in (outcome.message or "")
    assert outcome.retries == 2


def test_output_over_the_engine_cap_fails_the_job_with_the_cap(aws: Aws, wire: Callable[..., Wiring]) -> None:
    from workerless import job_handler
    from workerless._core.model import JobRef, Outcome
    from workerless.engines.base import json_size
    from workerless.errors import PayloadTooLargeError

    class CappedEngine(FakeEngine):
        def report(self, ref: JobRef, outcome: Outcome) -> None:
            if json_size(outcome.variables or {}) > 1000:
                raise PayloadTooLargeError("over", engine="fake", cap=1000, job_id=ref.job_id, status=413)
            super().report(ref, outcome)

    engine = CappedEngine()
    wired = wire(engine=engine)
    job_id = engine.add_job("send-receipt", {})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    handler = job_handler("send-receipt")(lambda job: {"blob": "x" * 5000})

    event = aws.receive_event(aws.queues["send-receipt"])
    assert handler(event, FakeContext(), wired) == {"batchItemFailures": []}

    outcome = engine.reports[job_id][-1]
    assert outcome.kind == "fail"
    assert outcome.retries == 0
    assert "cap of 1000 bytes" in (outcome.message or "")
    assert engine.jobs[job_id].state == "failed"


def test_heartbeat_extends_live_jobs_and_stops_after_the_report(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    job_id = engine.add_job("generate-report", {"seconds": 0})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    ticket_event = _ticket_event(aws)

    entrypoints.heartbeat(ticket_event, FakeContext(), wiring=wired)
    assert engine.extensions[job_id] == 1
    resent = _ticket_event(aws)
    assert len(json.loads(resent["Records"][0]["body"])["jobs"]) == 1

    run_handler(aws, "generate-report", wired)
    entrypoints.heartbeat(resent, FakeContext(), wiring=wired)
    assert engine.extensions[job_id] == 1, "a reported job is not extended again"
    assert aws.depth(aws.heartbeat_queue) == 0, "no ticket is re-sent once nothing is live"


def test_heartbeat_marks_a_lost_lease_and_the_handler_does_not_run(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    job_id = engine.add_job("charge-payment", {"orderId": "1", "amount": 1})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    engine.lost.add(job_id)

    entrypoints.heartbeat(_ticket_event(aws), FakeContext(), wiring=wired)
    record = wired.store.get(f"job#charge-payment#fake#{job_id}#r3")
    assert record is not None and record.status is Status.LOST

    response = run_handler(aws, "charge-payment", wired)
    assert response == {"batchItemFailures": []}
    assert job_id not in engine.reports


def test_dispatch_failure_hands_the_job_back_at_once(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    """An SQS send that fails must not leave the job to wait out its lease."""
    job_id = engine.add_job("charge-payment", {"orderId": "1", "amount": 1})
    queues = wired.queues

    def refuse(queue_url: str, bodies: list[str]) -> list[Any]:
        from workerless.aws.sqs import SendFailure

        return [SendFailure(i, "throttled") for i in range(len(bodies))]

    queues.send_batch = refuse  # type: ignore[method-assign]
    report = entrypoints.poller({}, FakeContext(), wiring=wired)

    assert report["released"] == 1 and report["dispatched"] == 0
    assert engine.releases[job_id] and engine.jobs[job_id].state == "ready"


def test_dead_letter_fails_the_job_with_the_reason(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    job_id = engine.add_job("charge-payment", {"orderId": "1", "amount": 1})
    [job] = engine.activate([__import__("workerless._core.model", fromlist=["Demand"]).Demand("charge-payment", 1)], 60)
    event = {
        "Records": [
            {
                "messageId": "m-1",
                "receiptHandle": "r",
                "body": job.to_message(),
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "x",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:charge-payment-dlq",
                "awsRegion": "us-east-1",
            }
        ]
    }
    response = entrypoints.deadletter(event, FakeContext(), wiring=wired)

    assert response == {"batchItemFailures": []}
    outcome = engine.reports[job_id][-1]
    assert outcome.kind == "fail" and "did not finish" in (outcome.message or "")
    assert outcome.retries == 2


def test_message_round_trip() -> None:
    engine = FakeEngine()
    engine.add_job("send-receipt", {"orderId": "x", "nested": {"a": [1, 2]}})
    [job] = engine.activate([__import__("workerless._core.model", fromlist=["Demand"]).Demand("send-receipt", 1)], 60)
    assert ActivatedJob.from_message(job.to_message()) == job


def _ticket_event(aws: Aws) -> dict[str, Any]:
    """Take the delayed ticket off the heartbeat queue (the tests' 5 s lease makes it ~1 s)."""
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        event = aws.receive_event(aws.heartbeat_queue)
        if event["Records"]:
            aws.settle(aws.heartbeat_queue, event, {"batchItemFailures": []})
            return event
        time.sleep(0.2)
    raise AssertionError("no ticket on the heartbeat queue")


def test_a_claim_whose_answer_was_lost_is_still_ours(aws: Aws, wired: Wiring) -> None:
    """botocore retries a put whose answer was lost; the retry meets our own claim: still ours,
    and nobody else's."""
    store = wired.store
    assert store.claim("fake#1#r3", owner="req-a:m1", claim_seconds=60, job_type="t") == (True, None)
    assert store.claim("fake#1#r3", owner="req-a:m1", claim_seconds=60, job_type="t") == (True, None)
    claimed, found = store.claim("fake#1#r3", owner="req-b:m1", claim_seconds=60, job_type="t")
    assert claimed is False
    assert found is not None
    assert found.owner == "req-a:m1"


class _BeginLeased(FakeEngine):
    """A begin-leased engine (StageNext's shape) whose lease acquire takes long enough that the
    delivery's claim expires and another delivery claims the record meanwhile."""

    lease = BEGIN_LEASE

    def __init__(self) -> None:
        super().__init__()
        self.begun: list[str] = []
        self.skipped: list[str] = []
        #: The job store of the wiring it is in (set by the test once built).
        self.store: Any = None

    @property
    def lease_acquire(self) -> _BeginLeased:
        return self

    def begin(self, job: ActivatedJob) -> bool:
        store = self.store
        # Another delivery takes the claim over (as if ours had expired during the acquire).
        store._call(
            "update_item",
            TableName=store.table,
            Key={"pk": {"S": job.record_key}},
            UpdateExpression="SET #owner = :other",
            ExpressionAttributeNames={"#owner": "owner"},
            ExpressionAttributeValues={":other": {"S": "another-delivery"}},
        )
        self.begun.append(job.ref.job_id)
        return True

    def skip(self, ref: Any) -> None:
        self.skipped.append(ref.job_id)


def test_a_claim_taken_over_during_lease_acquire_is_not_run(aws: Aws, wire: Callable[..., Wiring]) -> None:
    """GIVEN a begin-leased engine, and a claim that changes hands while the lease is acquired
    WHEN the handler processes the job
    THEN it does not run the handler (its result could not be stored), hands the delivery back
    without acknowledging it (StageNext: requeue; no result settles the lease it holds), and leaves
    the other delivery's claim as it was, unstamped."""
    engine = _BeginLeased()
    wired = wire(engine=engine)
    engine.store = wired.store
    job_id = engine.add_job("charge-payment", {"orderId": "9", "amount": 5})
    entrypoints.poller({}, FakeContext(), wiring=wired)

    response = run_handler(aws, "charge-payment", wired)

    assert response == {"batchItemFailures": []}
    assert engine.begun == [job_id] and engine.skipped == []
    assert engine.releases[job_id], "the delivery was not handed back"
    assert job_id not in engine.reports, "the handler ran and reported"
    record = wired.store.get(f"job#charge-payment#fake#{job_id}#r3")
    assert record is not None and record.status is Status.CLAIMED
    assert record.owner == "another-delivery" and record.begun_at is None


def test_a_lease_held_past_the_maximum_hold_is_marked_lost_and_never_run_after(
    aws: Aws, engine: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a dispatched job whose ticket is older than WORKERLESS_MAX_HOLD_SECONDS (a route whose
    message can come back later than that: a dead invocation's, after a 5,400 s visibility timeout)
    WHEN the heartbeat stops extending its lease THEN it marks the lease LOST, so the message that
    comes back is acknowledged without running the handler: the engine's new attempt is the only
    run (issue 26, 2.3: before, the returning message ran the job a second time)."""
    job_id = engine.add_job("charge-payment", {"orderId": "1", "amount": 1})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    event = _ticket_event(aws)
    (record,) = event["Records"]
    ticket = json.loads(record["body"])
    ticket["first_seen"] = time.time() - wired.settings.max_hold_seconds - 1
    record["body"] = json.dumps(ticket)

    entrypoints.heartbeat(event, FakeContext(), wiring=wired)
    stored = wired.store.get(f"job#charge-payment#fake#{job_id}#r3")
    assert stored is not None and stored.status is Status.LOST
    assert job_id not in engine.extensions

    response = run_handler(aws, "charge-payment", wired)
    assert response == {"batchItemFailures": []}
    assert job_id not in engine.reports


def test_the_pollers_aws_calls_stop_one_attempt_before_its_deadline(
    aws: Aws, engine: FakeEngine, wired: Wiring, wire: Callable[..., Wiring]
) -> None:
    """Issue 26 (the poller's AWS calls vs its deadline). GIVEN a poller invocation with 14 s left
    (its deadline 11 s away, less than one AWS attempt's connect + read timeout, 13 s) THEN it starts
    no AWS call of its poll (an attempt started then could still be waiting for its answer when the
    invocation must be done): its first, the route's queue count, is refused, the invocation fails
    before it takes a job, and nothing is leased or queued (before: the poll ran, its calls started
    with 11 s left and free to run 13 s each). With a minute left the same poll queues the jobs."""
    from workerless._core.deadline import MARGIN_SECONDS
    from workerless.aws.clients import ATTEMPT_SECONDS
    from workerless.errors import QueueError

    for i in range(2):
        engine.add_job("charge-payment", {"orderId": str(i), "amount": 10})
    assert 14 - MARGIN_SECONDS < ATTEMPT_SECONDS

    with pytest.raises(QueueError, match="deadline has passed"):
        entrypoints.poller({}, FakeContext(remaining_ms=14_000), wiring=wired)

    assert aws.depth(aws.queues["charge-payment"]) == 0
    assert not any(j.state == "leased" for j in engine.jobs.values()), "a job left leased and unqueued"

    fresh = wire(engine=engine)  # a new container's, around the same engine
    entrypoints.poller({}, FakeContext(), wiring=fresh)
    assert aws.depth(aws.queues["charge-payment"]) == 2
