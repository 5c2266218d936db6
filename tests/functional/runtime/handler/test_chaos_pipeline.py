"""Recoveries the chaos suite asked of the handler wrapper, one hop at a time (moto's SQS and
DynamoDB, the in-memory FakeEngine): bad handler output, a failed result store, a failed lease check."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from workerless import Job, entrypoints, job_handler
from workerless.errors import StoreError
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws, FakeContext

#: Runs the topology for seconds to minutes: `make test` runs it, `make test-fast` does not.
pytestmark = pytest.mark.slow


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


def deliver(aws: Aws, handler: Any, wiring: Wiring) -> dict[str, Any]:
    event = aws.receive_event(aws.queues["send-receipt"])
    response: dict[str, Any] = handler(event, FakeContext(), wiring)
    aws.settle(aws.queues["send-receipt"], event, response)
    return response


def test_output_that_is_not_json_serialisable_fails_the_job_with_the_reason(
    aws: Aws, engine: FakeEngine, wired: Wiring
) -> None:
    job_id = engine.add_job("send-receipt", {})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    handler = job_handler("send-receipt")(lambda job: {"sentAt": datetime.datetime(2026, 1, 1), "ok": True})

    assert deliver(aws, handler, wired) == {"batchItemFailures": []}

    (outcome,) = engine.reports[job_id]
    assert outcome.kind == "fail"
    assert "not JSON-serialisable" in (outcome.message or "")
    assert "datetime" in (outcome.message or ""), "the reason names what could not be serialised"
    assert outcome.retries == 2


def test_a_result_store_that_fails_is_retried_and_the_handler_runs_once(
    aws: Aws, engine: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN DynamoDB fails the first two tries at storing a finished run's result
    THEN the wrapper tries again, stores it, reports it: the handler ran once, nothing redelivered."""
    job_id = engine.add_job("send-receipt", {})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    store = wired.store
    real = store.store_outcome
    failures = [StoreError("DynamoDB update_item failed: InternalServerError")] * 2

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "store_outcome", flaky)
    runs: list[str] = []

    def fn(job: Job) -> dict[str, Any]:
        runs.append(job.id)
        return {"receiptSent": True}

    assert deliver(aws, job_handler("send-receipt")(fn), wired) == {"batchItemFailures": []}
    assert runs == [job_id]
    assert engine.jobs[job_id].state == "completed"
    assert failures == []


def test_a_lease_check_that_cannot_read_the_record_does_not_fail_the_run(
    aws: Aws, engine: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unknown is not lost: a DynamoDB blip during job.lease_lost() must not fail a healthy job."""
    job_id = engine.add_job("send-receipt", {})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    store = wired.store

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("DynamoDB get_item failed: ProvisionedThroughputExceededException")

    monkeypatch.setattr(store, "get", broken)

    def fn(job: Job) -> dict[str, Any]:
        assert job.lease_lost() is False
        return {"receiptSent": True}

    assert deliver(aws, job_handler("send-receipt")(fn), wired) == {"batchItemFailures": []}
    assert engine.reports[job_id][-1].kind == "complete"
