"""The dead-letter function settles every dead letter (issue 10, item 4): a refusal for good (a 404
or 400 from the engine, a malformed job reference) is an ERROR line with the reason, a
``DeadLettersRejected`` count and a deleted message — not a batch item failure retried every 360 s
until the DLQ's 14-day retention ends. A retryable error still leaves the message for the DLQ's
next delivery."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from workerless import entrypoints, observability
from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
from workerless._core.ports import JobStore
from workerless._core.record import Status
from workerless.errors import EngineError, EngineUnavailableError, RejectedError, ResponseShapeError
from workerless.testing import FakeEngine
from workerless.wiring import Hooks, Wiring

from tests.functional.aws import Aws, FakeContext
from tests.functional.pipeline import Events


class RefusingEngine(FakeEngine):
    """A FakeEngine whose report raises ``error`` (every time)."""

    def __init__(self, error: EngineError) -> None:
        super().__init__()
        self.error = error
        self.report_calls = 0

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        self.report_calls += 1
        raise self.error


@pytest.fixture
def wire(aws: Aws) -> Iterator[Callable[..., Wiring]]:
    """Builds the test's wirings (``Wiring(**kwargs)``, settings read from the environment on first
    use), closed after the test: the dead-letter function is given one; the container is left alone."""
    built: list[Wiring] = []

    def build(**kwargs: Any) -> Wiring:
        built.append(Wiring(**kwargs))
        return built[-1]

    yield build
    for wiring in built:
        wiring.close()


def letter(job: ActivatedJob) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": "m-dlq",
                "receiptHandle": "r",
                "body": job.to_message(),
                "attributes": {"ApproximateReceiveCount": "3"},
                "messageAttributes": {},
                "md5OfBody": "x",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:charge-payment-dlq",
                "awsRegion": "us-east-1",
            }
        ]
    }


def activated(engine: FakeEngine) -> ActivatedJob:
    engine.add_job("charge-payment", {"orderId": "1", "amount": 1})
    [job] = engine.activate([Demand("charge-payment", 1)], 60)
    return job


@pytest.mark.parametrize(
    "error",
    [
        RejectedError("fail answered 404: job not found", engine="fake", status=404),
        RejectedError("fail answered 400: retries must be >= 0", engine="fake", status=400),
        ResponseShapeError("fail answered 200 with a list", engine="fake", field="body", status=200),
    ],
    ids=["404", "400", "shape"],
)
def test_a_final_rejection_is_logged_counted_and_the_letter_deleted(
    aws: Aws,
    events: Events,
    wire: Callable[..., Wiring],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    error: EngineError,
) -> None:
    """GIVEN the engine refuses the dead-letter function's report for good
    THEN the message is not a batch item failure (the DLQ deletes it), one report was tried, an ERROR
    line carries the engine's reason, DeadLettersRejected counts it, and the job record is settled."""
    engine = RefusingEngine(error)
    wiring = wire(engine=engine, hooks=Hooks(lifecycle_listeners=(events,)))
    job = activated(engine)
    capsys.readouterr()

    with caplog.at_level(logging.INFO, logger="workerless"):
        response = entrypoints.deadletter(letter(job), FakeContext(), wiring=wiring)

    assert response == {"batchItemFailures": []}
    assert engine.report_calls == 1, "a final refusal was retried"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any(str(error) in str(getattr(r, "reason", "")) for r in errors), [r.__dict__ for r in errors]
    assert ("charge-payment", "dead_letter_rejected") in [(t, e) for t, e, _ in events]
    assert observability.EVENT_METRICS["dead_letter_rejected"] == "DeadLettersRejected"
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    assert any(doc.get("DeadLettersRejected") == [1.0] and doc.get("JobType") == "charge-payment" for doc in emf)
    record = wiring.store.get(job.record_key)
    assert record is not None and record.status is Status.REPORTED


def test_a_retryable_error_leaves_the_letter_for_the_queues_next_delivery(
    aws: Aws, events: Events, wire: Callable[..., Wiring]
) -> None:
    """GIVEN the engine is unavailable THEN the letter is a batch item failure: the DLQ hands it back
    after its visibility timeout (360 s) and the settlement is tried again; nothing is counted as
    rejected and the record is not settled."""
    engine = RefusingEngine(EngineUnavailableError("fail answered 503", engine="fake", status=503))
    wiring = wire(engine=engine, hooks=Hooks(lifecycle_listeners=(events,)))
    job = activated(engine)

    response = entrypoints.deadletter(letter(job), FakeContext(), wiring=wiring)

    assert response == {"batchItemFailures": [{"itemIdentifier": "m-dlq"}]}
    assert "dead_letter_rejected" not in [e for _, e, _ in events]
    assert wiring.store.get(job.record_key) is None


def _result_in_the_claim_check(
    monkeypatch: pytest.MonkeyPatch, wire: Callable[..., Wiring]
) -> tuple[FakeEngine, ActivatedJob, JobStore, Outcome, Wiring]:
    """A charge-payment job taken from a fake engine whose handler stored a 900 KB incompressible
    result (too large for its record: in the claim check's bucket on moto): the engine, the job, the
    store, the outcome and the wiring (on the environment naming the bucket) they are in."""
    import base64
    import random

    import boto3

    monkeypatch.setenv("WORKERLESS_PAYLOAD_BUCKET", "payloads")
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="payloads")
    engine = FakeEngine()
    wiring = wire(engine=engine)
    job = activated(engine)
    store = wiring.store
    big = Outcome.complete({"blob": base64.b64encode(random.Random(7).randbytes(675_000)).decode()})
    assert store.claim(job.record_key, owner="o", claim_seconds=-1, job_type="charge-payment") == (True, None)
    assert store.store_outcome(job.record_key, owner="o", outcome=big, job_type="charge-payment") is None
    return engine, job, store, big, wiring


def test_a_stored_result_in_the_claim_check_is_reported_from_the_dead_letter_queue(
    aws: Aws, wire: Callable[..., Wiring], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a dead-lettered job whose handler stored a 900 KB incompressible result (too large for
    its record: in the claim check's S3 bucket, moto's) THEN the dead-letter function reads it back
    and reports exactly that outcome, and settles the record."""
    engine, job, store, big, wiring = _result_in_the_claim_check(monkeypatch, wire)
    stored = store.get(job.record_key)
    assert stored is not None and stored.outcome is None and stored.outcome_ref is not None
    assert stored.outcome_ref.key.startswith("results/charge-payment/")

    response = entrypoints.deadletter(letter(job), FakeContext(), wiring=wiring)

    assert response == {"batchItemFailures": []}
    assert engine.reports[job.ref.job_id] == [big]
    record = store.get(job.record_key)
    assert record is not None and record.status is Status.REPORTED


# ---------------------------------------------------------------------------------------- the drain
# The job dead-letter queue has no event source (it would long-poll all month): the function runs on
# a one-minute schedule and drains the queue itself.

SCHEDULED = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}


class RefusingOne(FakeEngine):
    """A FakeEngine whose report of one job id is answered 503 (every time); the rest as usual."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: str | None = None

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        if ref.job_id == self.refused:
            raise EngineUnavailableError("fail answered 503", engine="fake", status=503)
        super().report(ref, outcome)


def _visible_and_in_flight(aws: Aws, url: str) -> tuple[int, int]:
    attrs = aws.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_the_scheduled_drain_settles_each_letter_and_deletes_only_the_settled(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, events: Events, wire: Callable[..., Wiring]
) -> None:
    """GIVEN three letters in the job dead-letter queue: a job the engine accepts the failure of, one
    whose report the engine answers 503, and a message that is not a job
    WHEN the schedule fires
    THEN the first is failed at the engine with the reason and deleted, the not-a-job one is deleted
    (nothing at an engine to fail), and the 503 one is left in flight for the queue to hand back
    after its visibility timeout, its record not settled."""
    url = aws.dlqs["charge-payment"]
    monkeypatch.setenv("WORKERLESS_DEAD_LETTER_QUEUE_URL", url)
    engine = RefusingOne()
    wiring = wire(engine=engine, hooks=Hooks(lifecycle_listeners=(events,)))
    settled, refused = activated(engine), activated(engine)
    engine.refused = refused.ref.job_id
    for body in (settled.to_message(), refused.to_message(), '{"not": "a job"}'):
        aws.sqs.send_message(QueueUrl=url, MessageBody=body)

    answer = entrypoints.deadletter(SCHEDULED, FakeContext(), wiring=wiring)

    assert answer["received"] == 3 and answer["settled"] == 2 and answer["left"] == 1, answer
    [outcome] = engine.reports[settled.ref.job_id]
    assert outcome.kind == "fail" and "did not finish this job" in (outcome.message or ""), outcome
    assert refused.ref.job_id not in engine.reports
    assert _visible_and_in_flight(aws, url) == (0, 1)
    store = wiring.store
    record = store.get(settled.record_key)
    assert record is not None and record.status is Status.REPORTED
    assert store.get(refused.record_key) is None
    assert [(t, e) for t, e, _ in events if e == "dead_lettered"] == [("charge-payment", "dead_lettered")]


class _Untouchable:
    """A job store an empty drain must not touch: any attribute read fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"an empty drain used the job store ({name})")


def test_an_empty_drain_makes_one_receive_and_builds_no_engine(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN an empty job dead-letter queue, and a wiring with no engine configured (building one
    would fail) and a store that fails on any use
    WHEN the schedule fires
    THEN the drain makes one short-poll ReceiveMessage and nothing else: no secret read, no DynamoDB
    call (nor its KMS request), every minute of an idle month."""
    from workerless._core.settings import Settings
    from workerless.aws.sqs import Queues
    from workerless.wiring import Wiring

    url = aws.dlqs["charge-payment"]
    calls: list[tuple[str, dict[str, Any]]] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            method = getattr(aws.sqs, name)

            def call(**kwargs: Any) -> Any:
                calls.append((name, kwargs))
                return method(**kwargs)

            return call

    settings = Settings.from_env({"WORKERLESS_DEAD_LETTER_QUEUE_URL": url})
    wiring = Wiring(settings=settings, queues=Queues(client=Counting()), store=_Untouchable())  # type: ignore[arg-type]

    answer = entrypoints.deadletter(SCHEDULED, FakeContext(), wiring=wiring)

    assert answer == {"receives": 1, "received": 0, "settled": 0, "left": 0}
    assert [name for name, _ in calls] == ["receive_message"]
    assert calls[0][1]["WaitTimeSeconds"] == 0 and calls[0][1]["MaxNumberOfMessages"] == 10


def test_a_drain_without_time_for_a_letter_receives_none(
    aws: Aws, wire: Callable[..., Wiring], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a letter waiting WHEN the schedule fires with less time left than one letter may need
    (its engine calls' HTTP timeouts) THEN nothing is received: the letter stays visible for the next
    drain instead of being hidden for the queue's visibility timeout unsettled."""
    url = aws.dlqs["charge-payment"]
    monkeypatch.setenv("WORKERLESS_DEAD_LETTER_QUEUE_URL", url)
    engine = FakeEngine()
    wiring = wire(engine=engine)
    aws.sqs.send_message(QueueUrl=url, MessageBody=activated(engine).to_message())

    answer = entrypoints.deadletter(SCHEDULED, FakeContext(remaining_ms=5_000), wiring=wiring)

    assert answer == {"receives": 0, "received": 0, "settled": 0, "left": 0}
    assert _visible_and_in_flight(aws, url) == (1, 0)
    assert engine.reports == {}


def test_a_scheduled_drain_without_its_queue_fails_naming_the_setting(aws: Aws, wire: Callable[..., Wiring]) -> None:
    """GIVEN no WORKERLESS_DEAD_LETTER_QUEUE_URL WHEN the schedule fires THEN the invocation fails
    with an error naming the variable (Lambda's Errors metric shows it), not a silent no-op."""
    from workerless.errors import ConfigurationError

    wiring = wire(engine=FakeEngine())
    with pytest.raises(ConfigurationError, match="WORKERLESS_DEAD_LETTER_QUEUE_URL"):
        entrypoints.deadletter(SCHEDULED, FakeContext(), wiring=wiring)


def test_a_stored_result_whose_object_is_gone_fails_the_job_once_not_every_360_seconds(
    aws: Aws, wire: Callable[..., Wiring], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a dead-lettered job whose handler stored a result too large for its record (in the claim
    check's bucket) and whose object is gone (expired with the bucket's 7-day lifecycle; S3 answers
    NoSuchKey to the dead-letter role, which may list results/: final)
    THEN the letter is settled at once: the job is failed at the engine with a message naming the
    lost result and the record is settled; before, the letter was handed back every 360 s for the
    queue's 14 days."""
    import boto3

    engine, job, store, _, wiring = _result_in_the_claim_check(monkeypatch, wire)
    stored = store.get(job.record_key)
    assert stored is not None and stored.outcome_ref is not None
    boto3.client("s3", region_name="us-east-1").delete_object(
        Bucket="payloads", Key=stored.outcome_ref.key
    )  # the lifecycle's expiry

    response = entrypoints.deadletter(letter(job), FakeContext(), wiring=wiring)

    assert response == {"batchItemFailures": []}, "settled: not handed back for another try in 360 s"
    [outcome] = engine.reports[job.ref.job_id]
    assert outcome.kind == "fail" and outcome.retries == 2, outcome
    assert "can no longer be read (NoSuchKey" in str(outcome.message), outcome.message
    record = store.get(job.record_key)
    assert record is not None and record.status is Status.REPORTED


def test_a_stored_result_s3_refuses_to_read_keeps_the_letter_and_fails_nothing(
    aws: Aws, wire: Callable[..., Wiring], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """GIVEN a dead-lettered job whose stored result is in the claim check and S3 refuses its read
    with AccessDenied (a permission fault: the role may list results/, so a missing object would be
    NoSuchKey) THEN the job is not failed as if its result had expired: nothing is reported, the
    record stays STORED, the letter is a batch item failure (back in 360 s, when the read may be
    allowed) and an ERROR line names the configuration fault. Before, it was failed at the engine."""
    from botocore.exceptions import ClientError
    from workerless.aws.payloads import Payloads

    engine, job, store, _, wiring = _result_in_the_claim_check(monkeypatch, wire)

    class Refusing:
        def get_object(self, **kwargs: Any) -> Any:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject")

    store.payloads = Payloads("payloads", client=Refusing())  # type: ignore[attr-defined]

    with caplog.at_level(logging.INFO, logger="workerless"):
        response = entrypoints.deadletter(letter(job), FakeContext(), wiring=wiring)

    assert response == {"batchItemFailures": [{"itemIdentifier": "m-dlq"}]}
    assert job.ref.job_id not in engine.reports, "a refused read was taken for a lost result"
    record = store.get(job.record_key)
    assert record is not None and record.status is Status.STORED
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any("configuration fault" in r.getMessage() and r.code == "AccessDenied" for r in errors), [  # type: ignore[attr-defined]
        r.__dict__ for r in errors
    ]
