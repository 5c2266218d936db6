"""The handler wrapper's batch loop (workerless._core.batch) on moto's SQS and DynamoDB with an in-memory
engine: what each record of one SQS batch comes to, and the partial batch response that says so."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from workerless import entrypoints, job_handler, observability
from workerless._core.record import Status
from workerless.errors import EngineUnavailableError, StoreError
from workerless.testing import FakeEngine
from workerless.wiring import Wiring
from workerless_devkit.chaos.plan import SimulatedCrash

from tests.functional.aws import Aws, FakeContext

TYPE = "send-receipt"


class JsonLines(logging.Handler):
    """The library logger's lines, formatted by its own JSON formatter."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(observability.logger.registered_formatter.format(record)))


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    handler = JsonLines()
    library = logging.getLogger(observability.logger.name)
    saved = library.level
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    yield handler.lines
    library.removeHandler(handler)
    library.setLevel(saved)


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


def queued_jobs(aws: Aws, engine: FakeEngine, wiring: Wiring, n: int) -> tuple[list[str], dict[str, Any]]:
    """``n`` jobs activated and queued by the poller; their ids and the SQS event of all of them."""
    ids = [engine.add_job(TYPE, {"orderId": str(i)}) for i in range(n)]
    entrypoints.poller({}, FakeContext(), wiring=wiring)
    event = aws.receive_event(aws.queues[TYPE])
    assert len(event["Records"]) == n
    return ids, event


def message_of(event: dict[str, Any], job_id: str) -> str:
    for record in event["Records"]:
        if json.loads(record["body"])["ref"]["job_id"] == job_id:
            return str(record["messageId"])
    raise AssertionError(f"no message for job {job_id}")


def status(wiring: Wiring, job_id: str) -> Status | None:
    record = wiring.store.get(f"job#{TYPE}#fake#{job_id}#r3")
    return None if record is None else record.status


def ran_handler() -> tuple[Any, list[str]]:
    runs: list[str] = []

    def fn(job: Any) -> dict[str, Any]:
        runs.append(job.id)
        return {"receiptSent": True}

    return job_handler(TYPE)(fn), runs


def test_an_empty_batch_answers_no_failures(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    handler, runs = ran_handler()
    assert handler({"Records": []}, FakeContext(), wired) == {"batchItemFailures": []}
    assert runs == [] and engine.reports == {}


def test_a_batch_that_all_succeeds_runs_each_job_once_in_order_and_answers_no_failures(
    aws: Aws, engine: FakeEngine, wired: Wiring, logs: list[dict[str, Any]]
) -> None:
    ids, event = queued_jobs(aws, engine, wired, 3)
    handler, runs = ran_handler()

    assert handler(event, FakeContext(), wired) == {"batchItemFailures": []}

    order = [json.loads(r["body"])["ref"]["job_id"] for r in event["Records"]]
    assert runs == order
    assert all(engine.jobs[i].state == "completed" and status(wired, i) is Status.REPORTED for i in ids)
    # One INFO line per job outcome, carrying the job's correlation keys.
    outcomes = [line for line in logs if line.get("lifecycle") == "completed"]
    assert [line["job_id"] for line in outcomes] == order
    assert all((line["job_type"], line["engine"], line["level"]) == (TYPE, "fake", "INFO") for line in outcomes)


def test_a_report_left_owed_keeps_only_its_message_in_flight(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    """GIVEN a batch of three whose second report the engine keeps refusing (an outage)
    WHEN the batch is handled
    THEN its message alone is a batch item failure (kept in flight for the heartbeat), its result is
    stored and marked owed with that message's receipt handle, and the other two are reported."""
    ids, event = queued_jobs(aws, engine, wired, 3)
    owed = ids[1]
    real_report = engine.report

    def refusing(ref: Any, outcome: Any) -> None:
        if ref.job_id == owed:
            # Retry-After past the invocation's deadline: the retry policy gives up at once.
            raise EngineUnavailableError("down", engine="fake", job_id=ref.job_id, status=503, retry_after=3600)
        real_report(ref, outcome)

    engine.report = refusing  # type: ignore[method-assign]
    handler, runs = ran_handler()

    response = handler(event, FakeContext(), wired)

    assert response == {"batchItemFailures": [{"itemIdentifier": message_of(event, owed)}]}
    assert sorted(runs) == sorted(ids)
    record = wired.store.get(f"job#{TYPE}#fake#{owed}#r3")
    assert record is not None and record.report_owed
    owed_message = message_of(event, owed)
    assert record.receipt == next(r["receiptHandle"] for r in event["Records"] if r["messageId"] == owed_message)
    assert [status(wired, i) for i in ids if i != owed] == [Status.REPORTED, Status.REPORTED]


def test_a_record_that_crashes_mid_batch_fails_alone_and_the_rest_still_run(
    aws: Aws, engine: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a batch of three whose middle job's claim fails at DynamoDB (not a handler outcome)
    WHEN the batch is handled
    THEN that message is a batch item failure (SQS redelivers it) and never ran; the jobs before and
    after it ran and were reported."""
    _, event = queued_jobs(aws, engine, wired, 3)
    order = [json.loads(r["body"])["ref"]["job_id"] for r in event["Records"]]
    broken = order[1]
    store = wired.store
    real_claim = store.claim

    def claim(key: str, **kwargs: Any) -> Any:
        if key == f"job#{TYPE}#fake#{broken}#r3":
            raise StoreError("access denied", code="AccessDeniedException", retryable=False)
        return real_claim(key, **kwargs)

    monkeypatch.setattr(store, "claim", claim)
    handler, runs = ran_handler()

    assert handler(event, FakeContext(), wired) == {
        "batchItemFailures": [{"itemIdentifier": message_of(event, broken)}]
    }
    assert runs == [order[0], order[2]]
    assert status(wired, broken) is None
    assert status(wired, order[0]) is status(wired, order[2]) is Status.REPORTED


def test_a_process_dying_mid_batch_unwinds_the_invocation(aws: Aws, engine: FakeEngine, wired: Wiring) -> None:
    """A runtime that dies returns no partial batch response: Lambda retries the whole batch, and the
    job records say what was done (the first job reported, the second claimed, the third untouched)."""
    _, event = queued_jobs(aws, engine, wired, 3)
    order = [json.loads(r["body"])["ref"]["job_id"] for r in event["Records"]]

    def fn(job: Any) -> dict[str, Any]:
        if job.id == order[1]:
            raise SimulatedCrash("the runtime died")
        return {}

    with pytest.raises(SimulatedCrash):
        job_handler(TYPE)(fn)(event, FakeContext(), wired)

    assert [status(wired, i) for i in order] == [Status.REPORTED, Status.CLAIMED, None]


def test_a_message_that_is_not_a_job_fails_alone_and_says_why(
    aws: Aws, engine: FakeEngine, wired: Wiring, logs: list[dict[str, Any]]
) -> None:
    """GIVEN a batch of two jobs and a message that is not a workerless job
    WHEN the batch is handled
    THEN that message is a batch item failure (redelivered, then the dead-letter queue: never
    dropped), an ERROR line names it, and both jobs are reported."""
    ids = [engine.add_job(TYPE, {"orderId": str(i)}) for i in range(2)]
    entrypoints.poller({}, FakeContext(), wiring=wired)
    aws.sqs.send_message(QueueUrl=aws.queues[TYPE], MessageBody="hello")
    event = aws.receive_event(aws.queues[TYPE])
    assert len(event["Records"]) == 3
    stranger = next(r["messageId"] for r in event["Records"] if r["body"] == "hello")
    handler, runs = ran_handler()

    assert handler(event, FakeContext(), wired) == {"batchItemFailures": [{"itemIdentifier": stranger}]}

    assert sorted(runs) == sorted(ids)
    assert all(status(wired, i) is Status.REPORTED for i in ids)
    (error,) = [line for line in logs if line["level"] == "ERROR"]
    assert error["message"] == "message is not a workerless job" and error["message_id"] == stranger
