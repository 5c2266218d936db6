"""The dead-letter function settles every dead letter (issue 10, item 4): a refusal for good (a 404
or 400 from the engine, a malformed job reference) is an ERROR line with the reason, a
``DeadLettersRejected`` count and a deleted message — not a batch item failure retried every 360 s
until the DLQ's 14-day retention ends. A retryable error still leaves the message for the DLQ's
next delivery."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from workerless import entrypoints, observability, runtime
from workerless.errors import EngineError, EngineUnavailableError, RejectedError, ResponseShapeError
from workerless.model import ActivatedJob, Demand, JobRef, Outcome
from workerless.record import Status
from workerless.testing import FakeEngine

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
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    error: EngineError,
) -> None:
    """GIVEN the engine refuses the dead-letter function's report for good
    THEN the message is not a batch item failure (the DLQ deletes it), one report was tried, an ERROR
    line carries the engine's reason, DeadLettersRejected counts it, and the job record is settled."""
    engine = RefusingEngine(error)
    runtime.set_engine(engine)
    job = activated(engine)
    capsys.readouterr()

    with caplog.at_level(logging.INFO, logger="workerless"):
        response = entrypoints.deadletter(letter(job), FakeContext())

    assert response == {"batchItemFailures": []}
    assert engine.report_calls == 1, "a final refusal was retried"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any(str(error) in str(getattr(r, "reason", "")) for r in errors), [r.__dict__ for r in errors]
    assert ("charge-payment", "dead_letter_rejected") in [(t, e) for t, e, _ in events]
    assert observability.EVENT_METRICS["dead_letter_rejected"] == "DeadLettersRejected"
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    assert any(doc.get("DeadLettersRejected") == [1.0] and doc.get("JobType") == "charge-payment" for doc in emf)
    record = runtime.get_store().get(job.key)
    assert record is not None and record.status is Status.REPORTED


def test_a_retryable_error_leaves_the_letter_for_the_queues_next_delivery(aws: Aws, events: Events) -> None:
    """GIVEN the engine is unavailable THEN the letter is a batch item failure: the DLQ hands it back
    after its visibility timeout (360 s) and the settlement is tried again; nothing is counted as
    rejected and the record is not settled."""
    engine = RefusingEngine(EngineUnavailableError("fail answered 503", engine="fake", status=503))
    runtime.set_engine(engine)
    job = activated(engine)

    response = entrypoints.deadletter(letter(job), FakeContext())

    assert response == {"batchItemFailures": [{"itemIdentifier": "m-dlq"}]}
    assert "dead_letter_rejected" not in [e for _, e, _ in events]
    assert runtime.get_store().get(job.key) is None


def test_a_stored_result_in_the_claim_check_is_reported_from_the_dead_letter_queue(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a dead-lettered job whose handler stored a 900 KB incompressible result (too large for
    its record: in the claim check's S3 bucket, moto's) THEN the dead-letter function reads it back
    and reports exactly that outcome, and settles the record."""
    import base64
    import random

    import boto3

    monkeypatch.setenv("WORKERLESS_PAYLOAD_BUCKET", "payloads")
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="payloads")
    runtime.reset()
    engine = FakeEngine()
    runtime.set_engine(engine)
    job = activated(engine)
    store = runtime.get_store()
    big = Outcome.complete({"blob": base64.b64encode(random.Random(7).randbytes(675_000)).decode()})
    assert store.claim(job.key, owner="o", claim_seconds=-1, job_type="charge-payment") == (True, None)
    assert store.store_outcome(job.key, owner="o", outcome=big, job_type="charge-payment") is None
    stored = store.get(job.key)
    assert stored is not None and stored.outcome is None and stored.outcome_ref is not None
    assert stored.outcome_ref.key.startswith("results/charge-payment/")

    response = entrypoints.deadletter(letter(job), FakeContext())

    assert response == {"batchItemFailures": []}
    assert engine.reports[job.ref.job_id] == [big]
    record = store.get(job.key)
    assert record is not None and record.status is Status.REPORTED
