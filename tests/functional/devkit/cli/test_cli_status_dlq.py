"""`workerless status` and `workerless dlq show|redrive` against a "deployed stack" on moto: SQS,
DynamoDB and CloudWatch are moto's; CloudFormation is a fake that lists the stack's resources (moto's
CloudFormation needs extras this environment lacks), as ListStackResources would."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from workerless._core.model import ActivatedJob, JobRef
from workerless_devkit import cli
from workerless_devkit.devtools import clients
from workerless_devkit.devtools.scaffold import add_job_type, stem, template_job_types, with_job_types
from workerless_devkit.local.extensions import expand_language_extensions
from workerless_devkit.local.template import parse_template_text

STACK = "workerless-test"
POLLER = f"{STACK}-PollerFunction-AbC123"
TEMPLATE = Path(__file__).resolve().parents[4] / "template.yaml"
LEASE_TOKEN = "lease-token-must-never-be-printed"


class FakeCloudFormation:
    """ListStackResources (paginated) and GetTemplate (processed) of the stacks it knows; GetTemplate
    refused as AccessDenied while ``template_refused``."""

    def __init__(self, stacks: dict[str, list[dict[str, str]]], templates: dict[str, dict[str, Any]]) -> None:
        self.stacks = stacks
        self.templates = templates
        self.template_refused = False

    def get_template(self, StackName: str, TemplateStage: str) -> dict[str, Any]:
        assert TemplateStage == "Processed"
        if self.template_refused:
            message = "not authorized to perform cloudformation:GetTemplate"
            error = {"Error": {"Code": "AccessDenied", "Message": message}}
            raise ClientError(error, "GetTemplate")  # type: ignore[arg-type]
        return {"TemplateBody": json.dumps(self.templates[StackName])}

    def get_paginator(self, operation: str) -> FakeCloudFormation:
        assert operation == "list_stack_resources"
        return self

    def paginate(self, StackName: str) -> list[dict[str, Any]]:
        if StackName not in self.stacks:
            error = {"Error": {"Code": "ValidationError", "Message": f"Stack with id {StackName} does not exist"}}
            raise ClientError(error, "ListStackResources")  # type: ignore[arg-type]
        summaries = self.stacks[StackName]
        return [{"StackResourceSummaries": summaries[:3]}, {"StackResourceSummaries": summaries[3:]}]


@dataclass
class Deployed:
    sqs: Any
    dynamodb: Any
    cloudwatch: Any
    queues: dict[str, str]
    table: str
    cloudformation: FakeCloudFormation


def processed_template(job_types: list[str]) -> dict[str, Any]:
    """What GetTemplate (Processed) gives for the repository's template with ``job_types`` as its
    routes: the route loop expanded, so each route's SSM parameter is there as the template writes
    it (its Value a Fn::Sub naming the route's queue by logical ID)."""
    text = TEMPLATE.read_text(encoding="utf-8")
    for job_type in job_types:
        if job_type not in template_job_types(text):
            text = add_job_type(text, job_type)[0]
    expanded = expand_language_extensions(parse_template_text(text), {})
    parameters = {k: r for k, r in expanded["Resources"].items() if r["Type"] == "AWS::SSM::Parameter"}
    assert len(parameters) == len(template_job_types(text))
    return {"Resources": parameters}


def processed_template_before_route_parameters(job_types: list[str]) -> dict[str, Any]:
    """What GetTemplate gave for a stack deployed before the routes were SSM parameters: every
    function carried WORKERLESS_ROUTES (a Fn::Sub of the routes, the queues by their logical IDs)."""
    lines = ",".join(f'{{"type":"{t}","queue":"${{{stem(t)}Queue}}","max":${{MaxInFlight}}}}' for t in job_types)
    environment = {"Variables": {"WORKERLESS_ROUTES": {"Fn::Sub": f"[{lines}]"}}}
    poller = {"Type": "AWS::Lambda::Function", "Properties": {"Environment": environment}}
    return {"Resources": {"PollerFunction": poller}}


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployed]:
    """Two job types' queues, both redriving (after 2 receives) to the one job dead-letter queue, the
    ticker queue, the job table."""
    with mock_aws():
        session: Any = boto3.session.Session(region_name="us-east-1")
        sqs, dynamodb = session.client("sqs"), session.client("dynamodb")
        queues: dict[str, str] = {}
        dlq = sqs.create_queue(QueueName=f"{STACK}-JobDeadLetterQueue-X1")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        queues["JobDeadLetterQueue"] = dlq
        for stem in ("chargepayment", "shipparcel"):
            queues[f"{stem}Queue"] = sqs.create_queue(
                QueueName=f"{STACK}-{stem}Queue-X1",
                Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})},
            )["QueueUrl"]
        queues["TickerQueue"] = sqs.create_queue(QueueName=f"{STACK}-TickerQueue-X1")["QueueUrl"]
        table = f"{STACK}-JobsTable-X1"
        dynamodb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        resources = [
            {"LogicalResourceId": lid, "ResourceType": "AWS::SQS::Queue", "PhysicalResourceId": url}
            for lid, url in queues.items()
        ]
        resources.append(
            {"LogicalResourceId": "JobsTable", "ResourceType": "AWS::DynamoDB::Table", "PhysicalResourceId": table}
        )
        resources.append(
            {
                "LogicalResourceId": "PollerFunction",
                "ResourceType": "AWS::Lambda::Function",
                "PhysicalResourceId": POLLER,
            }
        )
        fake = FakeCloudFormation({STACK: resources}, {STACK: processed_template(["charge-payment", "ship-parcel"])})

        def aws_client(service: str, **_: Any) -> Any:
            return fake if service == "cloudformation" else session.client(service)

        monkeypatch.setattr(clients, "aws_client", aws_client)
        yield Deployed(sqs, dynamodb, session.client("cloudwatch"), queues, table, fake)


def job_message(job_id: str, job_type: str = "charge-payment") -> str:
    return ActivatedJob(
        ref=JobRef("sheptra", job_id, job_type, attempt="r2", handle={"leaseToken": LEASE_TOKEN}),
        variables={"orderId": job_id},
        lease_expires_at=time.time() + 60,
        activated_at=time.time(),
        retries=2,
    ).to_message()


def dead_letter(deployed: Deployed, stem: str, bodies: list[str]) -> None:
    """Send to ``stem``'s job queue, then receive without deleting until SQS's redrive (after 2
    receives) has moved them all to the job dead-letter queue."""
    url = deployed.queues[f"{stem}Queue"]
    for body in bodies:
        deployed.sqs.send_message(QueueUrl=url, MessageBody=body)
    for _ in range(10 * len(bodies)):
        answer = deployed.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        if not answer.get("Messages"):
            break


def dead_letters(deployed: Deployed) -> int:
    counts = deployed.sqs.get_queue_attributes(
        QueueUrl=deployed.queues["JobDeadLetterQueue"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(v) for v in counts.values())


def bodies_in(deployed: Deployed, queue: str) -> list[str]:
    received: list[str] = []
    for _ in range(5):
        answer = deployed.sqs.receive_message(QueueUrl=deployed.queues[queue], MaxNumberOfMessages=10)
        received += [m["Body"] for m in answer.get("Messages", [])]
    return received


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- status


def test_status_of_a_stack_per_route(deployed: Deployed, capsys: pytest.CaptureFixture[str]) -> None:
    """GIVEN jobs waiting, in flight and dead-lettered (two routes into the one job dead-letter queue), a
    recent tick, and failure metrics WHEN status reads the stack THEN each route's numbers, the job
    dead-letter queue's depth, the last poll and the recent failures and dead letters are right."""
    dead_letter(deployed, "chargepayment", [job_message("dead-1"), job_message("dead-2")])
    dead_letter(deployed, "shipparcel", [job_message("dead-3", "ship-parcel")])
    charge = deployed.queues["chargepaymentQueue"]
    for i in range(3):
        deployed.sqs.send_message(QueueUrl=charge, MessageBody=job_message(f"wait-{i}"))
    deployed.sqs.receive_message(QueueUrl=charge, MaxNumberOfMessages=1, VisibilityTimeout=300)
    ship = deployed.queues["shipparcelQueue"]
    deployed.sqs.send_message(QueueUrl=ship, MessageBody=job_message("later", "ship-parcel"), DelaySeconds=60)
    tick = {"chain": "c1", "seq": 4, "last_tick": time.time() - 12}
    deployed.dynamodb.put_item(
        TableName=deployed.table,
        Item={"pk": {"S": "state#ticker"}, "value": {"S": json.dumps(tick)}, "version": {"N": "4"}},
    )
    dimensions = [{"Name": "service", "Value": "workerless"}, {"Name": "JobType", "Value": "charge-payment"}]
    deployed.cloudwatch.put_metric_data(
        Namespace="workerless",
        MetricData=[
            {"MetricName": "JobsFailed", "Dimensions": dimensions, "Value": 3},
            {"MetricName": "JobsThrown", "Dimensions": dimensions, "Value": 1},
            {"MetricName": "JobsDeadLettered", "Dimensions": dimensions, "Value": 2},
        ],
    )
    # Whether anyone polls: the poller function's own (free) invocation count.
    deployed.cloudwatch.put_metric_data(
        Namespace="AWS/Lambda",
        MetricData=[
            {"MetricName": "Invocations", "Dimensions": [{"Name": "FunctionName", "Value": POLLER}], "Value": 7}
        ],
    )

    code, out, err = run(capsys, "status", "--stack-name", STACK, "--json", "--template", "/nonexistent.yaml")
    assert code == 0, err
    status = json.loads(out)
    routes = {r["type"]: r for r in status["routes"]}
    assert set(routes) == {"charge-payment", "ship-parcel"}  # the ticker queue is not a route
    assert routes["charge-payment"]["errors"] == [] and status["errors"] == []
    assert (routes["charge-payment"]["waiting"], routes["charge-payment"]["in_flight"]) == (2, 1)
    assert status["dead_letters"] == 3  # one queue for both routes: SQS counts the queue
    assert (routes["charge-payment"]["recent_failures"], routes["charge-payment"]["recent_dead_lettered"]) == (4, 2)
    assert routes["ship-parcel"]["delayed"] == 1
    assert (routes["ship-parcel"]["recent_failures"], routes["ship-parcel"]["recent_dead_lettered"]) == (0, 0)
    assert 11 <= status["last_poll_seconds_ago"] < 60
    assert status["poller_invocations"] == 7

    code, out, _ = run(capsys, "status", "--stack-name", STACK, "--no-metrics")
    assert code == 0
    assert "charge-payment" in out and "last poll: 1" in out and "poller invocations" not in out
    assert "job dead-letter queue (every route's): 3 message(s)" in out


def test_status_reads_the_routes_of_a_stack_deployed_before_they_were_parameters(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN a stack whose processed template has no route parameters yet (its functions carry
    WORKERLESS_ROUTES, as deployed before the update) WHEN status reads it THEN the routes still
    have their names."""
    deployed.cloudformation.templates[STACK] = processed_template_before_route_parameters(
        ["charge-payment", "ship-parcel"]
    )
    code, out, err = run(capsys, "status", "--stack-name", STACK, "--json", "--no-metrics", "--template", "/none.yaml")
    assert code == 0, err
    assert {r["type"] for r in json.loads(out)["routes"]} == {"charge-payment", "ship-parcel"}


def test_status_names_the_routes_by_their_logical_ids_when_the_template_is_unreadable(
    deployed: Deployed, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """GIVEN a caller refused cloudformation:GetTemplate WHEN status reads the stack THEN every route is
    still found, named by its logical IDs' stem (the dashes the loop dropped cannot be told back)."""
    deployed.cloudformation.template_refused = True
    code, out, err = run(capsys, "status", "--stack-name", STACK, "--json", "--no-metrics", "--template", "/none.yaml")
    assert code == 0, err
    assert {r["type"] for r in json.loads(out)["routes"]} == {"chargepayment", "shipparcel"}
    # A local template.yaml names the routes it has (one of the test's own: the user's may have any).
    local = tmp_path / "template.yaml"
    local.write_text(with_job_types(TEMPLATE.read_text(encoding="utf-8"), ["charge-payment"]), encoding="utf-8")
    code, out, err = run(capsys, "status", "--stack-name", STACK, "--json", "--no-metrics", "--template", str(local))
    assert code == 0, err
    assert {r["type"] for r in json.loads(out)["routes"]} == {"charge-payment", "shipparcel"}


def test_status_says_why_the_last_poll_is_unknown_and_reads_explicit_routes(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    dead_letter(deployed, "shipparcel", [job_message("dead-1", "ship-parcel")])
    route = f"ship-parcel={deployed.queues['shipparcelQueue']}"
    dlq = deployed.queues["JobDeadLetterQueue"]
    code, out, err = run(
        capsys, "status", "--route", route, "--dead-letter-queue-url", dlq, "--table", deployed.table, "--no-metrics"
    )
    assert code == 0, err
    assert "ship-parcel" in out and "charge-payment" not in out
    assert "job dead-letter queue (every route's): 1 message(s)" in out
    assert "last poll: unknown (no ticker state: TickSeconds is 0" in out
    # The old per-route form names a dead-letter queue per route: refused, saying where it goes now.
    code, _, err = run(capsys, "status", "--route", f"{route},{dlq}", "--no-metrics")
    assert code == 2 and "given once with --dead-letter-queue-url" in err

    code, out, _ = run(capsys, "status", "--route", "ghost=https://sqs.us-east-1.amazonaws.com/123456789012/nope")
    assert code == 0 and "ghost: queue unreadable: AWS.SimpleQueueService.NonExistentQueue" in out


def test_status_usage_errors(deployed: Deployed, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "status")
    assert code == 2 and "give --stack-name NAME, or --route" in err
    code, _, err = run(capsys, "status", "--stack-name", "missing-stack")
    assert code == 2 and "cannot read stack 'missing-stack': ValidationError" in err


# ----------------------------------------------------------------------------- dlq


def test_dlq_show_lists_jobs_without_their_handle_and_deletes_nothing(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN dead letters of two routes (and a message that is no job) in the one job dead-letter queue
    WHEN dlq show reads it THEN every job is listed with the type its body names, never its handle,
    TYPE narrows it to that type's, and nothing is deleted."""
    dead_letter(deployed, "chargepayment", [job_message("dead-1"), job_message("dead-2"), "not json"])
    dead_letter(deployed, "shipparcel", [job_message("dead-3", "ship-parcel")])
    code, out, err = run(capsys, "dlq", "show", "--stack-name", STACK, "--peek-seconds", "0")
    assert code == 0, err
    assert "job dead-letter queue: about 4 message(s); showing 4" in out
    assert "job dead-1 type charge-payment engine sheptra attempt r2 retries 2 received 3x" in out
    assert "job dead-3 type ship-parcel engine sheptra" in out
    assert "not a workerless job message" in out
    assert LEASE_TOKEN not in out + err and "orderId" not in out

    code, out, err = run(capsys, "dlq", "show", "ship-parcel", "--stack-name", STACK, "--peek-seconds", "0")
    assert code == 0, err
    assert "showing 1 of type ship-parcel (of 4 read)" in out
    assert "dead-3" in out and "dead-1" not in out and "not a workerless job" not in out

    code, out, _ = run(
        capsys,
        "dlq",
        "show",
        "charge-payment",
        "--queue-url",
        deployed.queues["JobDeadLetterQueue"],
        "--json",
    )
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert {(line.get("job_id"), line.get("type")) for line in lines} == {
        ("dead-1", "charge-payment"),
        ("dead-2", "charge-payment"),
    }
    assert LEASE_TOKEN not in out
    assert dead_letters(deployed) == 4  # peeked, not deleted


def test_dlq_redrive_moves_each_message_back_to_its_own_types_queue_unchanged(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN dead letters of two routes in the one job dead-letter queue WHEN dlq redrive runs THEN
    each goes back, unchanged, to the job queue of the type its body names (as StartMessageMoveTask
    without a destination returns each to its source queue)."""
    charges = [job_message(f"dead-{i}") for i in range(9)]
    parcels = [job_message(f"parcel-{i}", "ship-parcel") for i in range(3)]
    dead_letter(deployed, "chargepayment", charges)
    dead_letter(deployed, "shipparcel", parcels)
    code, out, err = run(capsys, "dlq", "redrive", "--stack-name", STACK, "--limit", "5")
    assert code == 0, err
    assert out.startswith("moved 5 job(s) back to their job queue; 7 message(s) left in the DLQ\n")
    code, out, _ = run(capsys, "dlq", "redrive", "--stack-name", STACK)
    assert code == 0 and "moved 7 job(s)" in out and "0 message(s) left" in out
    assert sorted(bodies_in(deployed, "chargepaymentQueue")) == sorted(charges)
    assert sorted(bodies_in(deployed, "shipparcelQueue")) == sorted(parcels)


def test_dlq_redrive_of_one_type_leaves_the_others_visible_at_once(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN dead letters of two routes, one of a type the stack has no route for, and one that is no
    job WHEN dlq redrive TYPE runs THEN only TYPE's move; every other message stays in the queue and is
    visible again at once (not hidden for the redrive's visibility timeout from the dead-letter
    function)."""
    charges = [job_message(f"dead-{i}") for i in range(3)]
    parcel, stray = job_message("parcel-1", "ship-parcel"), job_message("stray-1", "no-such-route")
    dead_letter(deployed, "chargepayment", [*charges, stray, "not json"])
    dead_letter(deployed, "shipparcel", [parcel])
    code, out, err = run(capsys, "dlq", "redrive", "charge-payment", "--stack-name", STACK)
    assert code == 0, err
    assert "moved 3 charge-payment job(s) back to their job queue; 3 message(s) left in the DLQ" in out
    assert "kept 1 message(s): type ship-parcel" in out and "kept 1 message(s): not a workerless job" in out
    assert sorted(bodies_in(deployed, "chargepaymentQueue")) == sorted(charges)
    left = deployed.sqs.receive_message(
        QueueUrl=deployed.queues["JobDeadLetterQueue"], MaxNumberOfMessages=10, VisibilityTimeout=0
    )
    assert sorted(m["Body"] for m in left.get("Messages", [])) == sorted([parcel, stray, "not json"])
    # Every type: the one with no route here is kept, and said so.
    code, out, err = run(capsys, "dlq", "redrive", "--stack-name", STACK)
    assert code == 0, err
    assert "moved 1 job(s)" in out and "kept 1 message(s): type no-such-route, no route here" in out
    assert bodies_in(deployed, "shipparcelQueue") == [parcel]


def test_dlq_redrive_from_a_queue_url_moves_only_types_messages_to_the_queue_named(
    deployed: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN a dead-letter queue named by URL (an old per-route one, say) WHEN dlq redrive TYPE
    --to-queue-url runs THEN TYPE's messages go to that queue and the others stay."""
    charges = [job_message(f"dead-{i}") for i in range(2)]
    dead_letter(deployed, "chargepayment", charges)
    dead_letter(deployed, "shipparcel", [job_message("parcel-1", "ship-parcel")])
    target = deployed.sqs.create_queue(QueueName="elsewhere")["QueueUrl"]
    dlq = deployed.queues["JobDeadLetterQueue"]
    code, out, err = run(capsys, "dlq", "redrive", "charge-payment", "--queue-url", dlq, "--to-queue-url", target)
    assert code == 0, err
    assert "moved 2 charge-payment job(s) to --to-queue-url; 1 message(s) left in the DLQ" in out
    received = deployed.sqs.receive_message(QueueUrl=target, MaxNumberOfMessages=10).get("Messages", [])
    assert sorted(m["Body"] for m in received) == sorted(charges)


def test_dlq_usage_errors(deployed: Deployed, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "dlq", "redrive", "charge-payment", "--queue-url", "https://x/q")
    assert code == 2 and "--to-queue-url" in err
    # One queue for every type would hand each handler the other types' jobs.
    code, _, err = run(capsys, "dlq", "redrive", "--queue-url", "https://x/q", "--to-queue-url", "https://x/j")
    assert code == 2 and "--to-queue-url needs TYPE" in err
    code, _, err = run(capsys, "dlq", "redrive", "--stack-name", STACK, "--to-queue-url", "https://x/j")
    assert code == 2 and "--to-queue-url goes with --queue-url" in err
    code, _, err = run(capsys, "dlq", "show", "no-such-type", "--stack-name", STACK)
    assert (
        code == 2 and "no job type 'no-such-type' in stack workerless-test (known: charge-payment, ship-parcel)" in err
    )
    code, _, err = run(capsys, "dlq", "show", "charge-payment")
    assert code == 2 and "give --stack-name NAME, or --queue-url URL" in err
