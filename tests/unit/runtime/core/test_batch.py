"""workerless._core.batch: an SQS event in, each record handled in order, the partial batch response out."""

from __future__ import annotations

from typing import Any

import pytest
from workerless._core.batch import SqsRecord, process_batch
from workerless.errors import MessageFormatError
from workerless_devkit.chaos.plan import SimulatedCrash


def sqs_record(message_id: str, body: str = "{}", receive_count: str | None = "1") -> dict[str, Any]:
    """One record as Lambda's SQS event source shapes it."""
    attributes = {"SentTimestamp": "1700000000000"}
    if receive_count is not None:
        attributes["ApproximateReceiveCount"] = receive_count
    return {
        "messageId": message_id,
        "receiptHandle": f"handle-{message_id}",
        "body": body,
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:charge-payment",
        "awsRegion": "us-east-1",
    }


def test_an_empty_batch_has_no_failures_and_handles_nothing() -> None:
    seen: list[SqsRecord] = []
    assert process_batch({"Records": []}, seen.append) == {"batchItemFailures": []}
    assert seen == []


def test_every_record_succeeding_is_an_empty_failure_list_and_each_is_handled_once_in_order() -> None:
    seen: list[str] = []
    event = {"Records": [sqs_record("m1"), sqs_record("m2"), sqs_record("m3")]}
    assert process_batch(event, lambda r: seen.append(r.message_id)) == {"batchItemFailures": []}
    assert seen == ["m1", "m2", "m3"]


def test_a_record_that_raises_is_a_batch_item_failure_and_the_rest_still_run() -> None:
    """GIVEN a batch whose second record's handling raises mid-batch (a crash of that record)
    WHEN the batch is processed
    THEN the records after it still run, in order, and only it is named in batchItemFailures."""
    seen: list[str] = []

    def handle(record: SqsRecord) -> None:
        seen.append(record.message_id)
        if record.message_id == "m2":
            raise RuntimeError("boom")

    event = {"Records": [sqs_record("m1"), sqs_record("m2"), sqs_record("m3")]}
    assert process_batch(event, handle) == {"batchItemFailures": [{"itemIdentifier": "m2"}]}
    assert seen == ["m1", "m2", "m3"]


def test_every_record_failing_is_reported_not_raised() -> None:
    def handle(record: SqsRecord) -> None:
        raise MessageFormatError("not a job")

    event = {"Records": [sqs_record("m1"), sqs_record("m2")]}
    assert process_batch(event, handle) == {"batchItemFailures": [{"itemIdentifier": "m1"}, {"itemIdentifier": "m2"}]}


def test_a_process_going_down_propagates_and_stops_the_batch() -> None:
    """A BaseException (the runtime dying) is no record's outcome: it unwinds the invocation, and
    Lambda retries the whole batch."""
    seen: list[str] = []

    def handle(record: SqsRecord) -> None:
        seen.append(record.message_id)
        if record.message_id == "m2":
            raise SimulatedCrash("killed")

    event = {"Records": [sqs_record("m1"), sqs_record("m2"), sqs_record("m3")]}
    with pytest.raises(SimulatedCrash):
        process_batch(event, handle)
    assert seen == ["m1", "m2"]


def test_a_record_carries_its_id_body_receipt_handle_and_receive_count() -> None:
    seen: list[SqsRecord] = []
    process_batch({"Records": [sqs_record("m1", body='{"a": 1}', receive_count="3")]}, seen.append)
    assert seen == [SqsRecord(message_id="m1", body='{"a": 1}', receipt_handle="handle-m1", receive_count=3)]


@pytest.mark.parametrize("count", [None, "", "not a number"])
def test_a_receive_count_the_event_does_not_give_reads_as_the_first_delivery(count: str | None) -> None:
    seen: list[SqsRecord] = []
    process_batch({"Records": [sqs_record("m1", receive_count=count)]}, seen.append)
    assert seen[0].receive_count == 1


@pytest.mark.parametrize("event", [{}, {"Records": None}, {"Records": "m1"}, {"records": []}])
def test_an_event_that_is_not_an_sqs_batch_is_a_clear_error(event: dict[str, Any]) -> None:
    with pytest.raises(MessageFormatError, match="not an SQS event"):
        process_batch(event, lambda r: None)


@pytest.mark.parametrize("record", [{"body": "{}"}, {"messageId": "", "body": "{}"}, "m1"])
def test_a_record_no_failure_could_name_fails_the_whole_batch_before_any_runs(record: Any) -> None:
    """Lambda treats a response it cannot match to a record as the whole batch failing: say so at once,
    before any record of the batch is handled."""
    seen: list[str] = []
    with pytest.raises(MessageFormatError):
        process_batch({"Records": [sqs_record("m1"), record]}, lambda r: seen.append(r.message_id))
    assert seen == []
