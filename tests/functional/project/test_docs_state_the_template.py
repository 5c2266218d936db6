"""What docs/guarantees.md and docs/operating.md say about the stack's encryption and its job
dead-letter alarm, held to template.yaml (issue 26, item 2.11's last two: guarantees.md said the
table was SSE-KMS while it is encrypted with the AWS owned key by default, and operating.md promised
a dead-letter alarm for every job type while there is one job dead-letter queue, with one alarm).

Each test reads the template as CloudFormation expands it (the route loop included) and the
sentence of the page that describes it; a change to either that the other does not follow fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from workerless_devkit.devtools.scaffold import template_routes
from workerless_devkit.local.extensions import expand_language_extensions
from workerless_devkit.local.template import parse_template_text

ROOT = Path(__file__).resolve().parents[3]
GUARANTEES = ROOT / "docs" / "guarantees.md"
OPERATING = ROOT / "docs" / "operating.md"

#: What each TableKey value deploys (AWS::DynamoDB::Table SSESpecification: "If enabled (true),
#: server-side encryption type is set to KMS and an AWS managed key is used (AWS KMS charges apply).
#: If disabled (false) or not specified, server-side encryption is set to AWS owned key."), and
#: how guarantees.md must name it.
TABLE_KEYS = {False: "the AWS owned key", True: "aws/dynamodb (SSE-KMS)"}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    source = (ROOT / "template.yaml").read_text(encoding="utf-8")
    return expand_language_extensions(parse_template_text(source), {})


@pytest.fixture(scope="module")
def routes() -> list[str]:
    return template_routes((ROOT / "template.yaml").read_text(encoding="utf-8"))


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == kind}


def _table_sse_enabled(template: dict[str, Any], table_key: str) -> bool:
    """SSEEnabled of the one table with TableKey set to ``table_key``: the template's Fn::If on its
    condition, resolved as CloudFormation would."""
    (table,) = _of_type(template, "AWS::DynamoDB::Table").values()
    sse = table["Properties"]["SSESpecification"]
    assert set(sse) == {"SSEEnabled"}, f"a key the page does not describe: {sse}"
    condition, if_true, if_false = sse["SSEEnabled"]["Fn::If"]
    assert template["Conditions"][condition] == {"Fn::Equals": [{"Ref": "TableKey"}, "aws-managed"]}
    return bool(if_true if table_key == "aws-managed" else if_false)


def _secrets_paragraph() -> str:
    text = GUARANTEES.read_text(encoding="utf-8")
    match = re.search(r"\*\*Secrets\.\*\*(.*?)\n\n", text, re.S)
    assert match, "guarantees.md has no **Secrets.** paragraph"
    return " ".join(match.group(1).split())


def test_guarantees_names_the_key_the_table_and_queues_are_encrypted_with(template: dict[str, Any]) -> None:
    """The table's clause names the key TableKey's default deploys ("by default") and the other
    value's key; the queues' clause SSE-SQS, which every queue enables."""
    parameter = template["Parameters"]["TableKey"]
    default = parameter["Default"]
    other = next(v for v in parameter["AllowedValues"] if v != default)
    paragraph = _secrets_paragraph()
    table = re.search(r"table: (.*?);", paragraph)
    assert table, f"no 'table: ...;' clause in guarantees.md's Secrets paragraph: {paragraph!r}"
    clause = table.group(1)
    assert f"{TABLE_KEYS[_table_sse_enabled(template, default)]} by default" in clause, (default, clause)
    assert f"`TableKey {other}`" in clause and TABLE_KEYS[_table_sse_enabled(template, other)] in clause, clause

    queues = _of_type(template, "AWS::SQS::Queue")
    assert queues and all(q["Properties"].get("SqsManagedSseEnabled") is True for q in queues.values())
    assert "queues: SSE-SQS" in paragraph, paragraph


def test_operating_names_the_claim_check_buckets_encryption(template: dict[str, Any]) -> None:
    """operating.md's claim-check row says SSE-S3: the bucket's default encryption is AES256
    (SSE-S3), not aws:kms."""
    (bucket,) = _of_type(template, "AWS::S3::Bucket").values()
    (rule,) = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    (row,) = [line for line in OPERATING.read_text(encoding="utf-8").splitlines() if line.startswith("| Claim check")]
    assert "SSE-S3" in row and "KMS" not in row, row


def _alarm_rows() -> dict[str, str]:
    """operating.md's alarm table: each row's alarm name (as written, ``<route>`` for the per-route
    ones) to the row's text."""
    lines = OPERATING.read_text(encoding="utf-8").splitlines()
    start = lines.index("| alarm | fires when | look at |")
    rows: dict[str, str] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        name = re.match(r"\| `([^`]+)`", line)
        assert name, line
        rows[name.group(1)] = line
    return rows


def _queue_of(alarm: dict[str, Any]) -> str | None:
    """The queue an SQS alarm reads (its QueueName dimension's queue), None for another alarm."""
    queues = [d["Value"]["Fn::GetAtt"] for d in alarm["Properties"].get("Dimensions", []) if d["Name"] == "QueueName"]
    if not queues:
        return None
    ((queue, attribute),) = queues
    assert attribute == "QueueName"
    return str(queue)


def test_operating_gives_the_one_job_dead_letter_queue_its_alarm(template: dict[str, Any], routes: list[str]) -> None:
    """Every route's queue redrives to one JobDeadLetterQueue; the alarm on its received letters is
    one resource, and operating.md's row says so, naming the metric and the queue the alarm reads."""
    resources = template["Resources"]
    assert len(routes) > 1, routes
    targets = {
        route: resources[f"{route}Queue"]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        for route in routes
    }
    assert set(targets.values()) == {"JobDeadLetterQueue"}, targets

    alarms = _of_type(template, "AWS::CloudWatch::Alarm")
    on_received = [
        lid
        for lid, alarm in alarms.items()
        if _queue_of(alarm) == "JobDeadLetterQueue" and alarm["Properties"]["MetricName"] == "NumberOfMessagesReceived"
    ]
    assert on_received == ["JobDeadLetterQueueAlarm"], on_received
    row = _alarm_rows()["JobDeadLetterQueueAlarm"]
    assert "(one, for the one job dead-letter queue every route shares)" in row, row
    assert "`NumberOfMessagesReceived` on `JobDeadLetterQueue`" in row, row


def test_operating_says_per_route_only_of_the_alarms_made_per_route(
    template: dict[str, Any], routes: list[str]
) -> None:
    """A row claims one alarm per route (or job type) exactly when its name carries ``<route>``, and
    then the template has that alarm for each route; any other row's alarm is one resource."""
    alarms = _of_type(template, "AWS::CloudWatch::Alarm")
    rows = _alarm_rows()
    assert rows
    for name, row in rows.items():
        claims_per_route = re.search(r"\bone (?:for every|for each|per) (?:job type|route|type)\b", row)
        if "<route>" in name:
            assert claims_per_route, row
            assert all(name.replace("<route>", route) in alarms for route in routes), (name, routes)
        else:
            assert not claims_per_route, f"operating.md says {name} is one per route/type: {row}"
            assert name in alarms, f"operating.md names {name}, which template.yaml does not create"
