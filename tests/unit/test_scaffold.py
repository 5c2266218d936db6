"""new-handler's template edit: only additions, in the template's own style, refused when the type exists."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from workerless.devtools.scaffold import (
    ScaffoldError,
    _yaml,
    add_job_type,
    camel,
    event_json,
    resource_ids,
    route_types,
    validate_job_type,
)
from workerless.devtools.stack import from_resources, kebab
from workerless.model import ActivatedJob

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = (ROOT / "template.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("job_type", ["ship-parcel", "a", "report2", "x-1-y"])
def test_valid_job_types_round_trip_through_their_logical_id_stem(job_type: str) -> None:
    assert validate_job_type(job_type) == job_type
    assert kebab(camel(job_type)) == job_type or any(c.isdigit() for c in job_type)


@pytest.mark.parametrize(
    ("job_type", "why"),
    [
        ("Ship-Parcel", "lowercase"),
        ("ship_parcel", "lowercase letters, digits and single hyphens"),
        ("ship--parcel", "single hyphens"),
        ("-ship", "starting with a letter"),
        ("9lives", "starting with a letter"),
        ("poller", "reserved"),
        ("heartbeat", "reserved"),
        ("dead-letter", "reserved"),
        ("ticker", "reserved"),
        ("x" * 49, "longer than 48"),
    ],
)
def test_malformed_or_reserved_types_are_refused_with_the_reason(job_type: str, why: str) -> None:
    with pytest.raises(ScaffoldError, match=why):
        validate_job_type(job_type)


def test_the_edit_only_adds_lines_except_the_one_routes_line() -> None:
    """GIVEN the shipped template WHEN a job type is added THEN every original line is still there in
    order (comments, tags and quoting included), and the only changed line is WORKERLESS_ROUTES."""
    new, added = add_job_type(TEMPLATE, "ship-parcel")
    old_lines, new_lines = TEMPLATE.splitlines(), new.splitlines()
    removed = [
        line
        for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes()
        if tag in ("replace", "delete")
        for line in old_lines[i1:i2]
    ]
    assert len(removed) == 1 and '{"type":"generate-report"' in removed[0]
    assert added == [*resource_ids("ship-parcel"), "ShipParcelDeadLetterQueueAlarm", "ShipParcelQueueAgeAlarm"]
    assert "  # ---------------------------------------------------------------- job type ship-parcel" in new_lines


def test_the_edit_wires_every_place_the_header_comment_lists() -> None:
    new, _ = add_job_type(TEMPLATE, "ship-parcel")
    data = _yaml().load(new)
    resources = data["Resources"]
    assert route_types(data)[-1] == ("ship-parcel", "ShipParcelQueue")
    assert [t for t, _ in route_types(data)] == ["charge-payment", "send-receipt", "generate-report", "ship-parcel"]
    order = list(resources)
    # The new block sits after the last example type's function, before the dead-letter section.
    assert order.index("ShipParcelQueue") == order.index("GenerateReportFunction") + 1
    assert order.index("ShipParcelFunction") < order.index("DeadLetterFunctionLogGroup")

    def statement(role: str, sid: str) -> list[str]:
        statements = resources[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        found = next(s for s in statements if s["Sid"] == sid)
        return [f"{item.tag.value} {item.value}" for item in found["Resource"]]

    assert statement("PollerFunctionRole", "FanOut")[-1] == "!GetAtt ShipParcelQueue.Arn"
    assert statement("DeadLetterFunctionRole", "DeadLetterEventSources")[-1] == "!GetAtt ShipParcelDeadLetterQueue.Arn"
    event = resources["DeadLetterFunction"]["Properties"]["Events"]["ShipParcelDeadLetters"]
    assert event["Properties"]["Queue"].value == "ShipParcelDeadLetterQueue.Arn"
    function = resources["ShipParcelFunction"]["Properties"]
    assert function["CodeUri"] == "functions/ship-parcel/"
    assert function["Events"]["Jobs"]["Properties"]["Queue"].value == "ShipParcelQueue.Arn"
    assert resources["ShipParcelQueue"]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"].value == (
        "ShipParcelDeadLetterQueue.Arn"
    )
    assert {"ShipParcelQueueUrl", "ShipParcelDeadLetterQueueUrl", "ShipParcelFunctionName"} <= set(data["Outputs"])


def test_an_existing_type_or_logical_id_is_refused() -> None:
    with pytest.raises(ScaffoldError, match="'charge-payment' already exists: WORKERLESS_ROUTES routes it"):
        add_job_type(TEMPLATE, "charge-payment")
    once, _ = add_job_type(TEMPLATE, "ship-parcel")
    with pytest.raises(ScaffoldError, match="already exists"):
        add_job_type(once, "ship-parcel")
    # A logical id taken by something else (no route): named in the refusal.
    clash = TEMPLATE.replace("  JobsTable:\n", "  ShipParcelFunctionRole:\n    Type: AWS::IAM::Role\n  JobsTable:\n", 1)
    with pytest.raises(ScaffoldError, match=r"template\.yaml has ShipParcelFunctionRole"):
        add_job_type(clash, "ship-parcel")


def test_two_types_in_a_row_stay_in_the_job_type_section() -> None:
    twice, _ = add_job_type(add_job_type(TEMPLATE, "ship-parcel")[0], "track-parcel")
    order = list(_yaml().load(twice)["Resources"])
    assert order.index("TrackParcelQueue") == order.index("ShipParcelFunction") + 1
    assert order.index("TrackParcelDeadLetterQueueAlarm") == order.index("ShipParcelDeadLetterQueueAlarm") + 1
    assert order.index("TrackParcelQueueAgeAlarm") == order.index("ShipParcelQueueAgeAlarm") + 1


def test_the_generated_event_carries_one_job_of_the_type() -> None:
    event = json.loads(event_json("ship-parcel"))
    (record,) = event["Records"]
    job = ActivatedJob.from_message(record["body"])
    assert job.ref.job_type == "ship-parcel"
    assert record["eventSourceARN"].endswith(":workerless-ShipParcelQueue-Q4H0Z6L3K2PA")


def test_a_stack_is_read_by_the_template_contract() -> None:
    resources = [
        ("ShipParcelQueue", "AWS::SQS::Queue", "https://q/ShipParcelQueue"),
        ("ShipParcelDeadLetterQueue", "AWS::SQS::Queue", "https://q/ShipParcelDLQ"),
        ("Report2PdfQueue", "AWS::SQS::Queue", "https://q/R"),
        ("Report2PdfDeadLetterQueue", "AWS::SQS::Queue", "https://q/RD"),
        ("TickerQueue", "AWS::SQS::Queue", "https://q/T"),
        ("TickerDeadLetterQueue", "AWS::SQS::Queue", "https://q/TD"),
        ("JobsTable", "AWS::DynamoDB::Table", "stack-JobsTable-1"),
    ]
    deployment = from_resources(resources, routes=[("report2-pdf", "Report2PdfQueue")])
    assert [(r.job_type, r.queue_url, r.dead_letter_url) for r in deployment.routes] == [
        ("ship-parcel", "https://q/ShipParcelQueue", "https://q/ShipParcelDLQ"),
        ("report2-pdf", "https://q/R", "https://q/RD"),
    ]
    assert deployment.table == "stack-JobsTable-1"
    assert deployment.library_queues["TickerQueue"] == "https://q/T"
