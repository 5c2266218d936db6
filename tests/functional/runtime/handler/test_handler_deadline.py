"""The handler's job-record writes run inside its deadline (issue 10, item 8): the result store is
tried again until the Lambda's time is nearly up — not a fixed four times, each with botocore's four
attempts (16 in all) whatever the time — and no AWS request, botocore's retries included, starts
past that deadline, so the invocation returns its partial batch response instead of being killed
(which would return the whole batch to the queue after its visibility timeout).

On moto's SQS and DynamoDB with the in-memory engine.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from moto.core.exceptions import JsonRESTError
from workerless import entrypoints, job_handler, testing
from workerless._core.record import Status
from workerless._handler.delivery import AWS_MARGIN_SECONDS
from workerless.errors import StoreError
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws, FakeContext
from tests.functional.pipeline import ROOT


class InjectedServerError(JsonRESTError):
    """What moto answers for the injected failure: HTTP 500 InternalServerError, which botocore's
    standard retry mode retries (up to its 4 attempts, with backoff)."""

    code = 500

    def __init__(self) -> None:
        super().__init__("InternalServerError", "injected by the test")


@pytest.fixture
def engine(aws: Aws) -> FakeEngine:
    """The in-memory engine of the test's wiring (this module's: the container is left alone)."""
    return FakeEngine()


@pytest.fixture
def wired(aws: Aws, engine: FakeEngine) -> Iterator[Wiring]:
    """The poller's and handlers' wiring around ``engine``, on the environment ``aws`` set; closed after."""
    wiring = Wiring(engine=engine)
    yield wiring
    wiring.close()


def load_handler(job_type: str) -> Any:
    return testing.load_handler(ROOT / "functions" / job_type.replace("-", "") / "app.py")


def test_a_failing_result_store_is_tried_until_it_lands_not_four_times(
    aws: Aws, engine: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a job table that refuses the result store six times in a row (past botocore's retries)
    and a Lambda with a minute left
    THEN the handler keeps trying while it has time, the seventh try stores the result, and the job
    is reported once: its run is not thrown away after four tries."""
    job_id = engine.add_job("send-receipt", {"orderId": "9"})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    store = wired.store
    real = store.store_outcome
    tries = {"n": 0}

    def flaky_store(key: str, **kwargs: Any) -> Any:
        tries["n"] += 1
        if tries["n"] <= 6:
            raise StoreError("DynamoDB update_item on the table failed: InternalServerError")
        return real(key, **kwargs)

    monkeypatch.setattr(store, "store_outcome", flaky_store)
    event = aws.receive_event(aws.queues["send-receipt"])

    response = load_handler("send-receipt")(event, FakeContext(remaining_ms=60_000), wired)

    assert response == {"batchItemFailures": []}
    assert tries["n"] == 7
    assert engine.jobs[job_id].state == "completed" and len(engine.reports[job_id]) == 1
    record = store.get(f"job#send-receipt#fake#{job_id}#r3")
    assert record is not None and record.status is Status.REPORTED


def test_no_job_table_request_starts_after_the_handlers_deadline(
    aws: Aws, engine: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a Lambda with 3 s left, a handler that runs 2.9 s (past the handler's AWS deadline, a
    quarter second before the Lambda's timeout) and a job table whose every UpdateItem would answer 500 (botocore
    retries each call 4 times, with backoff)
    THEN not one UpdateItem attempt is sent: the store gives up at once, and the record is a batch
    item failure of an invocation that returned in time — redelivered, never lost. (Before, the
    store made 4 tries of 4 attempts each, all of them after the deadline.)"""
    from moto.dynamodb.models import DynamoDBBackend

    job_id = engine.add_job("send-receipt", {"orderId": "9"})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    attempts: list[float] = []

    def failing_update(self: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(time.monotonic())
        raise InjectedServerError()

    monkeypatch.setattr(DynamoDBBackend, "update_item", failing_update)
    remaining, run_seconds = 3.0, 2.9
    assert remaining - AWS_MARGIN_SECONDS < run_seconds, "the run ends after the handler's AWS deadline"
    slow = job_handler("send-receipt")(lambda job: time.sleep(run_seconds) or {"receiptSent": True})
    event = aws.receive_event(aws.queues["send-receipt"])

    response = slow(event, FakeContext(remaining_ms=int(remaining * 1000)), wired)

    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [event["Records"][0]["messageId"]]
    assert attempts == [], f"{len(attempts)} UpdateItem attempts were sent after the deadline"
    assert job_id not in engine.reports
    record = wired.store.get(f"job#send-receipt#fake#{job_id}#r3")
    assert record is not None and record.status is Status.CLAIMED, "the claim stands until it expires"
