"""Local mode holds every AWS call to AWS's limits, also where moto 5.2.5 is more lenient.

Each refusal is the ``ClientError`` AWS answers with (code, message; per-entry ``Failed`` where AWS
reports batch entries one by one), and the largest call AWS accepts still goes through. The rows
marked "moto too" are refused by moto already: they stay here so that a moto upgrade cannot loosen
local mode unnoticed. The others pass on moto alone and are what :mod:`workerless_devkit.local.limits` adds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from workerless_devkit.devtools.scaffold import with_job_types
from workerless_devkit.local.runtime import LocalTopology
from workerless_devkit.local.template import TemplateError, parse_template_text, resolve_template

MIB = 1_048_576
TABLE = "workerless-local-Table"  # {stack}-{LogicalId}, as local mode names it

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Parameters:
  SmallMessages:
    Type: Number
    Default: 1024
  MaxReceives:
    Type: Number
    Default: 3
Resources:
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      MaximumMessageSize: 1048576
      VisibilityTimeout: 30
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt DeadLetterQueue.Arn
        maxReceiveCount: !Ref MaxReceives
  SmallQueue:
    Type: AWS::SQS::Queue
    Properties:
      MaximumMessageSize: !Ref SmallMessages
  DeadLetterQueue:
    Type: AWS::SQS::Queue
  Table:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
"""


@pytest.fixture
def top(tmp_path: Path) -> Iterator[LocalTopology]:
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    with LocalTopology(tmp_path / "template.yaml") as topology:
        yield topology


def refused(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call()
    error: dict[str, Any] = caught.value.response["Error"]
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return error


def attribute(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


# ------------------------------------------------------------------------------------------- SQS


def test_a_message_is_measured_in_utf8_bytes_of_body_and_attributes(top: LocalTopology) -> None:
    """1 MiB of UTF-8 bytes is the most a message may hold, attribute names, types and values
    included: moto counts characters and ignores attributes, so it accepts both refused sends."""
    sqs, url = top.client("sqs"), top.queue_url("Queue")
    sqs.send_message(QueueUrl=url, MessageBody="é" * (MIB // 2))  # exactly 1 MiB of UTF-8
    error = refused(lambda: sqs.send_message(QueueUrl=url, MessageBody="é" * (MIB // 2) + "x"))
    assert error == {
        "Code": "InvalidParameterValue",
        "Message": "One or more parameters are invalid. Reason: Message must be shorter than 1048576 bytes.",
        "QueryErrorCode": "InvalidParameterValue",
        "Type": "Sender",
    }
    # name "trace" (5) + type "String" (6) + value (5) = 16 bytes of attribute.
    sqs.send_message(QueueUrl=url, MessageBody="x" * (MIB - 16), MessageAttributes={"trace": attribute("abcde")})
    error = refused(
        lambda: sqs.send_message(
            QueueUrl=url, MessageBody="x" * (MIB - 15), MessageAttributes={"trace": attribute("abcde")}
        )
    )
    assert error["Code"] == "InvalidParameterValue"


def test_a_queue_is_created_with_the_templates_maximum_message_size_and_holds_to_it(top: LocalTopology) -> None:
    """The template's MaximumMessageSize reaches the embedded queue (moto would default to 1 MiB)
    and bounds each message there, attributes included."""
    sqs, url = top.client("sqs"), top.queue_url("SmallQueue")
    size = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])["Attributes"]
    assert size == {"MaximumMessageSize": "1024"}
    sqs.send_message(QueueUrl=url, MessageBody="x" * 1008, MessageAttributes={"t": attribute("123456789")})
    error = refused(
        lambda: sqs.send_message(QueueUrl=url, MessageBody="x" * 1009, MessageAttributes={"t": attribute("123456789")})
    )
    assert error["Message"] == "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes."


def test_the_templates_visibility_and_max_receive_count_reach_the_queue_unchanged(top: LocalTopology) -> None:
    sqs = top.client("sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=top.queue_url("Queue"), AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "30"
    assert attributes["MaximumMessageSize"] == str(MIB)
    assert json.loads(attributes["RedrivePolicy"])["maxReceiveCount"] == 3


def test_a_batch_is_measured_in_bytes_and_failing_entries_fail_on_their_own(top: LocalTopology) -> None:
    """SendMessageBatch: at most 10 entries (moto too) and 1 MiB in all, counted in UTF-8 bytes with
    the attributes (moto counts characters); an entry over its queue's MaximumMessageSize, or with
    more than 10 attributes, fails on its own in ``Failed`` while the others are sent."""
    sqs, url, small = top.client("sqs"), top.queue_url("Queue"), top.queue_url("SmallQueue")
    error = refused(
        lambda: sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)])
    )
    assert (error["Code"], error["QueryErrorCode"]) == (
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        "TooManyEntriesInBatchRequest",
    )

    quarter = "é" * (MIB // 8)  # 256 KiB of UTF-8 in 128 Ki characters
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": quarter} for i in range(4)])
    entries = [{"Id": str(i), "MessageBody": quarter} for i in range(4)]
    entries[0]["MessageAttributes"] = {"a": attribute("b")}  # type: ignore[assignment]
    error = refused(lambda: sqs.send_message_batch(QueueUrl=url, Entries=entries))
    assert error == {
        "Code": "AWS.SimpleQueueService.BatchRequestTooLong",
        "Message": f"Batch requests cannot be longer than {MIB} bytes. You have sent {MIB + 8} bytes.",
        "QueryErrorCode": "BatchRequestTooLong",
        "Type": "Sender",
    }

    answer = sqs.send_message_batch(
        QueueUrl=small,
        Entries=[
            {"Id": "big", "MessageBody": "x" * 1025},
            {"Id": "attrs", "MessageBody": "x", "MessageAttributes": {f"a{i}": attribute("v") for i in range(11)}},
            {"Id": "fine", "MessageBody": "x" * 1024},
        ],
    )
    assert [entry["Id"] for entry in answer["Successful"]] == ["fine"]
    assert {entry["Id"]: (entry["Code"], entry["SenderFault"], entry["Message"]) for entry in answer["Failed"]} == {
        "big": (
            "InvalidParameterValue",
            True,
            "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.",
        ),
        "attrs": ("InvalidParameterValue", True, "Number of message attributes [11] exceeds the allowed maximum [10]."),
    }
    only_failures = sqs.send_message_batch(QueueUrl=small, Entries=[{"Id": "big", "MessageBody": "x" * 1025}])
    assert (only_failures["Successful"], [e["Id"] for e in only_failures["Failed"]]) == ([], ["big"])
    received = sqs.receive_message(QueueUrl=small, MaxNumberOfMessages=10)["Messages"]
    assert [len(m["Body"]) for m in received] == [1024], "only the entry that fits reached the queue"


def test_at_most_ten_message_attributes(top: LocalTopology) -> None:
    sqs = top.client("sqs")
    sqs.send_message(
        QueueUrl=top.queue_url("Queue"), MessageBody="x", MessageAttributes={f"a{i}": attribute("v") for i in range(10)}
    )
    error = refused(
        lambda: sqs.send_message(
            QueueUrl=top.queue_url("Queue"),
            MessageBody="x",
            MessageAttributes={f"a{i}": attribute("v") for i in range(11)},
        )
    )
    assert error["Message"] == "Number of message attributes [11] exceeds the allowed maximum [10]."


@pytest.mark.parametrize(
    ("operation", "kwargs", "code"),
    [
        # moto too (the first four): AWS's ranges for single-call parameters.
        ("send_message", {"MessageBody": "x", "DelaySeconds": 901}, "InvalidParameterValue"),
        ("receive_message", {"MaxNumberOfMessages": 11}, "InvalidParameterValue"),
        ("receive_message", {"WaitTimeSeconds": 21}, "InvalidParameterValue"),
        ("receive_message", {"VisibilityTimeout": 43_201}, "InvalidParameterValue"),
        (
            "delete_message_batch",
            {"Entries": [{"Id": str(i), "ReceiptHandle": f"r{i}"} for i in range(11)]},
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
    ],
)
def test_sqs_parameter_ranges(top: LocalTopology, operation: str, kwargs: dict[str, Any], code: str) -> None:
    sqs = top.client("sqs")
    assert refused(lambda: getattr(sqs, operation)(QueueUrl=top.queue_url("Queue"), **kwargs))["Code"] == code


def test_visibility_can_reach_at_most_12_hours(top: LocalTopology) -> None:
    """ChangeMessageVisibility: 43,200 s at most, and no further than 12 hours from the send (moto
    too, both)."""
    sqs, url = top.client("sqs"), top.queue_url("Queue")
    sqs.send_message(QueueUrl=url, MessageBody="m")
    handle = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    assert (
        refused(lambda: sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=43_201))[
            "Code"
        ]
        == "InvalidParameterValue"
    )
    top.run_until(lambda: False, max_seconds=1.1, poll_seconds=0.1)  # at least a second since the send
    error = refused(lambda: sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=43_200))
    assert "Total VisibilityTimeout for the message is beyond the limit [43200 seconds]" in error["Message"]


def test_queue_attributes_outside_sqs_ranges_are_refused(top: LocalTopology) -> None:
    """moto creates a queue with a 13-hour visibility timeout; SQS refuses it."""
    sqs = top.client("sqs")
    error = refused(lambda: sqs.create_queue(QueueName="too-long", Attributes={"VisibilityTimeout": "43201"}))
    assert error == {
        "Code": "InvalidAttributeValue",
        "Message": "Invalid value for the parameter VisibilityTimeout.",
        "QueryErrorCode": "InvalidAttributeValue",
        "Type": "Sender",
    }
    for name, value in (("DelaySeconds", "901"), ("MessageRetentionPeriod", "59"), ("MaximumMessageSize", "1023")):
        assert refused(lambda n=name, v=value: sqs.create_queue(QueueName="q", Attributes={n: v}))["Code"] == (
            "InvalidAttributeValue"
        )
    url = sqs.create_queue(QueueName="fine", Attributes={"VisibilityTimeout": "43200"})["QueueUrl"]
    assert refused(lambda: sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "43201"}))


# -------------------------------------------------------------------------------------- DynamoDB

#: 380,000 bytes of string and a 20,000-element list of one-letter strings: moto sizes it at about
#: 400,000 bytes (no list overhead) and stores it; by AWS's measure (3 bytes a list, 1 an element) it
#: is 420,000 bytes, over the 409,600 limit.
BIG_STRING = {"S": "x" * 380_000}
BIG_LIST = {"L": [{"S": "a"}] * 20_000}


def test_item_size_counts_names_values_and_list_overhead(top: LocalTopology) -> None:
    """AWS: 400 KB (409,600 bytes) by its measure. (moto refuses past 405,000 bytes of its own
    measure, which is stricter for flat items: local mode never accepts more than AWS.)"""
    ddb, table = top.client("dynamodb"), TABLE
    error = refused(lambda: ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": BIG_STRING, "l": BIG_LIST}))
    assert error == {"Code": "ValidationException", "Message": "Item size has exceeded the maximum allowed size"}
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": BIG_STRING, "l": {"L": [{"S": "a"}] * 9_000}})
    # Names count: 2 + 1 + 1 + 409,597 bytes is one over.
    assert refused(lambda: ddb.put_item(TableName=table, Item={"pk": {"S": "b"}, "v": {"S": "x" * 409_597}}))
    error = refused(
        lambda: ddb.batch_write_item(
            RequestItems={table: [{"PutRequest": {"Item": {"pk": {"S": "c"}, "v": BIG_STRING, "l": BIG_LIST}}}]}
        )
    )
    assert error["Message"] == "Item size has exceeded the maximum allowed size"
    assert "Item" not in ddb.get_item(TableName=table, Key={"pk": {"S": "c"}})


def test_an_update_that_leaves_an_item_over_400_kb_is_refused_and_changes_nothing(top: LocalTopology) -> None:
    ddb, table = top.client("dynamodb"), TABLE
    ddb.put_item(TableName=table, Item={"pk": {"S": "u"}, "v": BIG_STRING})
    error = refused(
        lambda: ddb.update_item(
            TableName=table,
            Key={"pk": {"S": "u"}},
            UpdateExpression="SET l = :l",
            ExpressionAttributeValues={":l": BIG_LIST},
        )
    )
    assert error == {
        "Code": "ValidationException",
        "Message": "Item size to update has exceeded the maximum allowed size",
    }
    item = ddb.get_item(TableName=table, Key={"pk": {"S": "u"}}, ConsistentRead=True)["Item"]
    assert item == {"pk": {"S": "u"}, "v": BIG_STRING}
    ddb.update_item(
        TableName=table,
        Key={"pk": {"S": "u"}},
        UpdateExpression="SET w = :w",
        ExpressionAttributeValues={":w": {"N": "1"}},
    )
    assert ddb.get_item(TableName=table, Key={"pk": {"S": "u"}})["Item"]["w"] == {"N": "1"}


def test_batch_and_transaction_sizes(top: LocalTopology) -> None:
    """BatchWriteItem at most 25 requests (moto takes 26), BatchGetItem 100 keys (moto too, per
    table), TransactWriteItems 100 (moto too)."""
    ddb, table = top.client("dynamodb"), TABLE
    puts = [{"PutRequest": {"Item": {"pk": {"S": str(i)}}}} for i in range(26)]
    error = refused(lambda: ddb.batch_write_item(RequestItems={table: puts}))
    assert error == {"Code": "ValidationException", "Message": "Too many items requested for the BatchWriteItem call"}
    assert "Item" not in ddb.get_item(TableName=table, Key={"pk": {"S": "0"}})
    ddb.batch_write_item(RequestItems={table: puts[:25]})
    keys = [{"pk": {"S": str(i)}} for i in range(101)]
    assert refused(lambda: ddb.batch_get_item(RequestItems={table: {"Keys": keys}}))["Code"] == "ValidationException"
    assert len(ddb.batch_get_item(RequestItems={table: {"Keys": keys[:100]}})["Responses"][table]) == 25
    writes = [{"Put": {"TableName": table, "Item": {"pk": {"S": f"t{i}"}}}} for i in range(101)]
    assert refused(lambda: ddb.transact_write_items(TransactItems=writes))["Code"] == "ValidationException"


# ------------------------------------------------------------------------------------ the template


def test_a_template_queue_outside_sqs_ranges_does_not_start(tmp_path: Path) -> None:
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    with pytest.raises(TemplateError, match=r"SmallQueue\.MaximumMessageSize: SQS refuses 1023"):
        LocalTopology(tmp_path / "template.yaml", parameters={"SmallMessages": "1023"})
    with pytest.raises(TemplateError, match=r"Invalid value for maxReceiveCount: 1001"):
        LocalTopology(tmp_path / "template.yaml", parameters={"MaxReceives": "1001"})


# ----------------------------------------------------------------------------- environment size

ROOT = Path(__file__).resolve().parents[4]
SCALING = ROOT / "docs" / "scaling.md"


def _with_routes(count: int) -> str:
    """template.yaml with ``count`` routes of 14-character types (as long as charge-payment)."""
    types = [f"job-type-{i:05d}" for i in range(count)]
    return with_job_types((ROOT / "template.yaml").read_text(encoding="utf-8"), types)


def _environments(count: int) -> dict[str, dict[str, str]]:
    template = resolve_template(
        parse_template_text(_with_routes(count)), base_dir=ROOT, path=ROOT / "template.yaml", parameters={}
    )
    return {f.logical_id: f.environment for f in template.functions}


def test_the_functions_environment_no_longer_grows_with_routes() -> None:
    """GIVEN template.yaml with 3 routes and with 40 (past the 22 that WORKERLESS_ROUTES, a line per
    route in every function's environment, let fit in Lambda's 4 KB) WHEN local mode reads it (it
    refuses a function over 4 KB deployed) THEN it starts, and each library function's environment
    is the same: the routes are SSM parameters, the functions get their path only. docs/scaling.md's
    row says so."""
    few, many = _environments(3), _environments(40)
    for function in ("PollerFunction", "HeartbeatFunction", "DeadLetterFunction"):
        assert many[function] == few[function], function
        assert "WORKERLESS_ROUTES" not in many[function]
    row = re.search(r"^\| Lambda environment variables \|.*$", SCALING.read_text(encoding="utf-8"), re.MULTILINE)
    assert row is not None, "docs/scaling.md has no row for Lambda's environment-variable quota"
    assert "does not grow with routes" in row.group(0)


def _resources_translated(count: int) -> int:
    from workerless_devkit.local.extensions import expand_language_extensions
    from workerless_devkit.local.iam.roles import translate

    parameters = {"EngineSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:engine-AbCdEf"}
    source = expand_language_extensions(parse_template_text(_with_routes(count)), parameters)
    return len(translate(source, parameters)["Resources"])


def test_the_routes_per_stack_stated_are_what_the_resource_quota_allows() -> None:
    """GIVEN template.yaml translated by SAM (what CloudFormation counts against its 500 resources a
    stack) WHEN routes are added THEN each adds the same number of resources, and the routes that fit
    are the figure docs/scaling.md's row for the quota states."""
    one, two = _resources_translated(1), _resources_translated(2)
    per_route, library = two - one, one - (two - one)
    fits = (500 - library) // per_route
    assert _resources_translated(fits) <= 500 < _resources_translated(fits + 1)
    stated = re.search(
        r"CloudFormation resources per stack \|.*?\*\*≈? ?(\d+) routes per stack\*\*",
        SCALING.read_text(encoding="utf-8"),
    )
    assert stated is not None, "docs/scaling.md states no routes-per-stack figure for the resource quota"
    assert int(stated.group(1)) == fits, (per_route, library)
