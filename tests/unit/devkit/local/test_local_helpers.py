"""Pure pieces of local mode: the summary counters and table, Lambda's partial-batch-response rules,
the SQS record shape and the fake context's countdown."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from workerless_devkit.local import summary
from workerless_devkit.local.context import LocalLambdaContext
from workerless_devkit.local.event_source import batch_item_failures as _batch_item_failures
from workerless_devkit.local.event_source import sqs_record as _record
from workerless_devkit.local.template import FunctionSpec, QueueSpec


def test_summary_counts_per_type_and_prints_a_table() -> None:
    counts = summary.Summary()
    threads = [threading.Thread(target=lambda: [counts.record("a", "completed") for _ in range(500)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts.record("b", "activated")
    counts.record("b", "rereported")
    counts.record("b", "started")  # counted, not a table column
    assert counts.count("a", "completed") == 2000
    assert counts.total("activated") == 1
    assert counts.as_dict()["b"] == {"activated": 1, "rereported": 1, "started": 1}
    lines = counts.table().splitlines()
    assert lines[0].split() == [
        "job",
        "type",
        "activated",
        "completed",
        "failed",
        "thrown",
        "lease",
        "lost",
        "rereported",
    ]
    assert lines[2].split() == ["a", "0", "2000", "0", "0", "0", "0"]
    assert lines[-1].split() == ["total", "1", "2000", "0", "0", "0", "1"]


def test_module_level_record_is_global_and_never_raises() -> None:
    summary.reset_summary()
    summary.record("t", "activated")
    summary.record(None, "completed")  # type: ignore[arg-type] - a bad call must not fail a pipeline step
    assert summary.get_summary().count("t", "activated") == 1
    assert summary.get_summary().as_dict()["None"] == {"completed": 1}
    summary.reset_summary()
    assert summary.get_summary().as_dict() == {}


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (None, set()),
        ({}, set()),
        ({"batchItemFailures": []}, set()),
        ({"batchItemFailures": [{"itemIdentifier": "m2"}]}, {"m2"}),
        ({"batchItemFailures": [{"itemIdentifier": "nope"}]}, None),
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, None),
        ({"batchItemFailures": [{"id": "m1"}]}, None),
        ({"batchItemFailures": "m1"}, None),
    ],
)
def test_partial_batch_response_rules(response: object, expected: set[str] | None) -> None:
    """None means: invalid, Lambda retries the whole batch."""
    assert _batch_item_failures(response, {"m1", "m2"}) == expected


def test_record_shape_and_context_countdown() -> None:
    queue = QueueSpec(logical_id="Q", name="stack-Q")
    record = _record(
        {
            "MessageId": "m1",
            "ReceiptHandle": "rh",
            "Body": "{}",
            "MD5OfBody": "99914b932bd37a50b983c5e7c90ae93b",
            "Attributes": {"ApproximateReceiveCount": "2"},
            "MessageAttributes": {"k": {"DataType": "Binary", "BinaryValue": b"\x01"}},
        },
        queue,
    )
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == "arn:aws:sqs:us-east-1:123456789012:stack-Q"
    assert record["attributes"] == {"ApproximateReceiveCount": "2"}
    assert record["messageAttributes"]["k"] == {
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "Binary",
        "binaryValue": "AQ==",
    }
    now = [100.0]
    spec = FunctionSpec(logical_id="F", function_name="stack-F", code_dir=Path("/x"), handler="app.handler", timeout=3)
    context = LocalLambdaContext(spec, clock=lambda: now[0])
    assert context.get_remaining_time_in_millis() == 3000
    now[0] += 2.5
    assert context.get_remaining_time_in_millis() == 500
    now[0] += 10
    assert context.get_remaining_time_in_millis() == 0
    assert context.invoked_function_arn == "arn:aws:lambda:us-east-1:123456789012:function:stack-F"
