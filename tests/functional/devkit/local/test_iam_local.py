"""Local mode holds each function to its role (workerless_devkit.local.iam), in a running topology.

A copy of template.yaml with one grant removed sees that call refused with the error boto3 raises
on AWS; a role that cannot poll its event queue is refused at start, as CreateEventSourceMapping
refuses it; a role that cannot write its logs is warned about; and the StageNext lease-acquire
failure path gives its claim back within the handler role's grants (issue 10, section 2, item 1).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError
from workerless_devkit.devtools.scaffold import stem, template_job_types
from workerless_devkit.emulators import RunningEmulator
from workerless_devkit.local import LocalTopology, TemplateError
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.pipeline import FINAL, ROOT, TEMPLATE, Events, job_timings, route_timings, topology

ACCOUNT = "123456789012"


def without_statement(text: str, role: str, sid: str) -> str:
    """``text`` with the statement ``sid`` of ``role``'s policy cut out (the rest of the file as is):
    a block (``- Sid: X`` and its keys) or a flow mapping (``- {Sid: X, ...}``, its continuation lines
    indented deeper).

    ``role`` is a logical ID as written in the template: a library role (``PollerFunctionRole``), or
    the route loop's ``"${Route}FunctionRole"``, whose statement is then cut from every route's role."""
    match = re.search(rf"\n[ ]*{re.escape(role)}:\n", text)
    assert match is not None, f"no resource {role} in the template"
    start = match.start()
    found = re.compile(rf"- (?:Sid: {sid}\n|\{{Sid: {sid},)").search(text, start)
    assert found is not None, f"no statement {sid} in {role}"
    head = found.start()
    line_start = text.rindex("\n", 0, head) + 1
    indent = head - line_start
    lines = text[line_start:].split("\n")
    end = 1
    while end < len(lines) and (len(lines[end]) - len(lines[end].lstrip()) > indent or not lines[end].strip()):
        end += 1
    # Comment lines just above the statement belong to it.
    before = text[:line_start].rstrip("\n").split("\n")
    while before and before[-1].strip().startswith("#"):
        before.pop()
    return "\n".join(before) + "\n" + "\n".join(lines[end:])


def template_copy(tmp_path: Path, text: str) -> Path:
    """A template next to the real functions and layer (its CodeUri paths resolve as in the repo)."""
    for name in ("functions", "layers"):
        link = tmp_path / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    path = tmp_path / "template.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def sheptra_env(sheptra_emulator: RunningEmulator) -> tuple[Any, Path]:
    assert sheptra_emulator.env_file is not None
    return sheptra_emulator.emulator, sheptra_emulator.env_file


def test_the_without_statement_helper_cuts_exactly_one_statement() -> None:
    text = TEMPLATE.read_text(encoding="utf-8")
    cut = without_statement(text, "PollerFunctionRole", "HeartbeatTickets")
    assert "Sid: HeartbeatTickets" not in cut
    assert len(re.findall(r"\bSid: ", cut)) == len(re.findall(r"\bSid: ", text)) - 1
    assert "Sid: NextTick" in cut and "Sid: PollerState" in cut


@pytest.mark.parametrize(
    ("sid", "code", "status", "action"),
    [
        ("HeartbeatTickets", "AccessDenied", 403, "sqs:sendmessage"),
        ("PollerState", "AccessDeniedException", 400, "dynamodb:GetItem"),
        ("EngineSecret", "AccessDeniedException", 400, "secretsmanager:GetSecretValue"),
        # The routes' path: Parameter Store authorises GetParametersByPath against the path asked for.
        ("Routes", "AccessDeniedException", 400, "ssm:GetParametersByPath"),
    ],
)
def test_a_removed_grant_is_refused_in_the_running_topology_with_awss_error(
    tmp_path: Path, sheptra_env: tuple[Any, Path], sid: str, code: str, status: int, action: str
) -> None:
    """GIVEN template.yaml without one statement of the poller's role, run with the engine values in
    an embedded secret (as deployed) and a job to dispatch
    WHEN the poller runs THEN its call that needed the statement is refused, and the same call made
    as the poller raises the ClientError boto3 raises on AWS: the code, the HTTP status and the message
    naming the role session, the action and the resource."""
    emulator, env_file = sheptra_env
    emulator.create_job("send-receipt", {"orderId": "o1"})
    path = template_copy(tmp_path, without_statement(TEMPLATE.read_text(encoding="utf-8"), "PollerFunctionRole", sid))
    principal = (
        f"arn:aws:sts::{ACCOUNT}:assumed-role/workerless-local-PollerFunctionRole/workerless-local-PollerFunction"
    )
    with LocalTopology(
        path,
        env_file,
        parameters={"TickSeconds": "1", **job_timings(10)},
        route_settings=route_timings(10, path),
        schedule_seconds=1,
        engine_secret=True,
    ) as topo:
        assert topo.iam is not None
        iam = topo.iam
        refused = topo.run_until(
            lambda: any(r.function == "PollerFunction" and r.action.lower() == action.lower() for r in iam.refusals),
            max_seconds=30,
        )
        assert refused, f"no refusal of {action}: {iam.refusals}"
        calls = {
            "HeartbeatTickets": lambda: topo.client("sqs").send_message(
                QueueUrl=topo.queue_url("HeartbeatQueue"), MessageBody="{}"
            ),
            "PollerState": lambda: topo.client("dynamodb").get_item(
                TableName="workerless-local-JobsTable", Key={"pk": {"S": "state#x"}}
            ),
            "EngineSecret": lambda: topo.client("secretsmanager").get_secret_value(SecretId="workerless-local/engine"),
            "Routes": lambda: topo.client("ssm").get_parameters_by_path(Path="/workerless/workerless-local/routes"),
        }
        with topo.as_function("PollerFunction"), pytest.raises(ClientError) as caught:
            calls[sid]()
        # Outside an invocation (the test's own client) the same call is not checked.
        calls[sid]()
    error = caught.value.response["Error"]
    assert error["Code"] == code
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    resource = {
        "HeartbeatTickets": f"arn:aws:sqs:us-east-1:{ACCOUNT}:workerless-local-HeartbeatQueue",
        "PollerState": f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/workerless-local-JobsTable",
        "EngineSecret": "workerless-local/engine",
        "Routes": f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/workerless/workerless-local/routes",
    }[sid]
    assert error["Message"] == (
        f"User: {principal} is not authorized to perform: {action} on resource: {resource} "
        f"because no identity-based policy allows the {action} action"
    )
    assert str(caught.value).startswith(f"An error occurred ({code}) when calling the ")


def test_the_dead_letter_drain_runs_on_its_schedule_and_only_within_its_role(
    tmp_path: Path, sheptra_env: tuple[Any, Path]
) -> None:
    """GIVEN template.yaml (the job dead-letter queue has no event source: DeadLetterFunction drains
    it on its Schedule) WHEN local mode runs it THEN the schedule invokes DeadLetterFunction, whose
    ReceiveMessage is checked against its role: with its DrainDeadLetters statement removed, the
    receive is refused with AWS's AccessDenied naming the queue, and nothing is drained."""
    _, env_file = sheptra_env
    text = TEMPLATE.read_text(encoding="utf-8")
    queue = f"arn:aws:sqs:us-east-1:{ACCOUNT}:workerless-local-JobDeadLetterQueue"
    for cut, refused in ((False, False), (True, True)):
        variant = without_statement(text, "DeadLetterFunctionRole", "DrainDeadLetters") if cut else text
        where = tmp_path / ("cut" if cut else "whole")
        where.mkdir()
        copy = template_copy(where, variant)
        with LocalTopology(
            copy, env_file, parameters=job_timings(10), route_settings=route_timings(10, copy), schedule_seconds=1
        ) as topo:
            function = next(f for f in topo.template.functions if f.logical_id == "DeadLetterFunction")
            assert not function.sqs_events and [s.expression for s in function.schedule_events] == ["rate(1 minute)"]
            assert topo.iam is not None
            iam = topo.iam
            ran = topo.run_until(lambda: topo.invocations.get("DeadLetterFunction", 0) >= 2, max_seconds=30)
            assert ran, topo.invocations
            refusals = [(r.function, r.action.lower(), r.resource) for r in iam.refusals]
        expected = [("DeadLetterFunction", "sqs:receivemessage", queue)] if refused else []
        assert sorted(set(refusals)) == expected, refusals


def test_a_role_that_cannot_poll_its_event_queue_is_refused_at_start(tmp_path: Path) -> None:
    """GIVEN the routes' handler role without its event source statement WHEN the topology starts THEN
    it is refused as Lambda's CreateEventSourceMapping refuses it, naming the first route's function,
    event and queue."""
    text = without_statement(TEMPLATE.read_text(encoding="utf-8"), '"${Route}FunctionRole"', "JobEventSource")
    first = stem(template_job_types(text)[0])
    topo = LocalTopology(template_copy(tmp_path, text), None)
    with pytest.raises(TemplateError) as caught:
        topo.start()
    message = str(caught.value)
    assert f"{first}Function.Events.Jobs" in message
    assert "does not have permissions to call ReceiveMessage on SQS" in message
    assert f"workerless-local-{first}Queue" in message
    assert topo.iam is None or not topo.invocations


def test_a_role_that_cannot_write_its_logs_is_warned_about_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """GIVEN a role without its log-group statement WHEN the topology starts THEN a warning says its
    logs would be silently dropped on AWS (Lambda runs the function anyway)."""
    text = without_statement(TEMPLATE.read_text(encoding="utf-8"), "HeartbeatFunctionRole", "OwnLogGroup")
    with caplog.at_level(logging.WARNING, logger="workerless_devkit.local"):
        topo = LocalTopology(template_copy(tmp_path, text), None, schedule_seconds=3600)
        with topo:
            pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "IAM" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert re.search(r"HeartbeatFunction: .*logs:CreateLogStream, logs:PutLogEvents.*silently dropped", warnings[0])


def test_a_failed_stagenext_lease_acquire_gives_the_claim_back_and_the_redelivery_claims_at_once(
    workerless_emulator: EmulatorFactory, events: Events
) -> None:
    """GIVEN every try of the first delivery's lease acquire answered 503 (issue 10, 2.1)
    WHEN the delivery gives up THEN giving the claim back is allowed by the handler's role (no
    AccessDenied: it expires the claim with an UpdateItem instead of a DeleteItem the role lacks),
    and the gateway's redelivery (its visibility timeout, 3 s here), pulled again as a new message,
    claims, acquires and runs the stage at once: it is started once, and never handed back as a
    delivery that could not claim (which it would be until the claim expired, the Lambda's remaining
    time + 30 s, had the claim not been given back)."""
    running = workerless_emulator("stagenext", lease_seconds=6, visibility_timeout=3)
    emulator, server, env_file = running.emulator, running.server, running.env_file
    assert env_file is not None
    stage_id = emulator.create_job("send-receipt", {"orderId": "r1"}, retries=3)
    httpx.post(
        f"{server.url}/_admin/faults",
        json={"method": "POST", "path": f"/stages/{stage_id}/lease/acquire", "status": 503, "times": 4},
    ).raise_for_status()
    with topology(env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        assert topo.iam is not None
        iam = topo.iam
        topo.run_until(lambda: emulator.job_state(stage_id)["state"] in FINAL or bool(iam.refusals), 60)
        refusals = iam.refusals
        state = emulator.job_state(stage_id)
    assert refusals == [], "\n".join(r.message for r in refusals)
    assert state["state"] == "completed", state["history"]
    started = [f for _, e, f in events if e == "started" and f.get("job_id") == stage_id]
    assert len(started) == 1, started
    assert [a for a in state["acks"] if a["requeue"]] == [], state["acks"]


def test_workerless_local_reports_each_refused_call_once(capsys: pytest.CaptureFixture[str]) -> None:
    """GIVEN a run in which a function was refused a call (twice) WHEN `workerless local` prints its
    report THEN the refusal is listed once, naming the function, the action and the resource."""
    from types import SimpleNamespace

    from workerless_devkit.cli.local import print_report
    from workerless_devkit.local.iam.enforce import Refusal
    from workerless_devkit.local.summary import Summary

    refusal = Refusal("PollerFunction", "sqs", "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q", "p", explicit=False)
    fake = SimpleNamespace(
        summary=Summary(), invocations={}, errors={}, stopped_loops=[], iam=SimpleNamespace(refusals=[refusal, refusal])
    )
    print_report(fake)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("IAM refused")]
    assert lines == [
        "IAM refused: PollerFunction sqs:SendMessage on arn:aws:sqs:us-east-1:1:q (its role does not allow it)"
    ]


def test_a_handler_role_reaches_only_its_own_routes_records_and_never_the_poller_lock(
    sheptra_env: tuple[Any, Path],
) -> None:
    """Isolation between routes (issue 26, 2.10). GIVEN template.yaml run under local mode's IAM check
    (the handler roles' JobRecords grant held by dynamodb:LeadingKeys to job#<type>#*, evaluated as
    IAM does) WHEN each function's role touches its own records, another route's and the poller's
    lock item THEN a handler reads and writes its own type's records only: another type's record and
    the lock (where a compromised handler would plant an intent batch) are AccessDenied, as are a
    Scan and a batch read; the heartbeat reaches every route's records but not the lock; the poller
    its state items, and of job records only the batch read and the fence's put (no get or update)."""
    _, env_file = sheptra_env
    own, other, lock = "job#charge-payment#sheptra#1", "job#send-receipt#sheptra#2", "state#poller-lock"
    with LocalTopology(
        TEMPLATE, env_file, parameters=job_timings(10), route_settings=route_timings(10), schedule_seconds=3600
    ) as topo:
        ddb, table = topo.client("dynamodb"), topo.environment["WORKERLESS_TABLE"]

        def item(key: str) -> dict[str, Any]:
            return {"pk": {"S": key}, "status": {"S": "reported"}}

        def calls(key: str) -> dict[str, Any]:
            return {
                "GetItem": lambda: ddb.get_item(TableName=table, Key={"pk": {"S": key}}),
                "PutItem": lambda: ddb.put_item(TableName=table, Item=item(key)),
                "UpdateItem": lambda: ddb.update_item(
                    TableName=table,
                    Key={"pk": {"S": key}},
                    UpdateExpression="SET #s = :s",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={":s": {"S": "lost"}},
                ),
            }

        def refused(call: Any) -> str:
            with pytest.raises(ClientError) as caught:
                call()
            assert caught.value.response["Error"]["Code"] == "AccessDeniedException"
            return str(caught.value.response["Error"]["Message"])

        with topo.as_function("chargepaymentFunction"):
            for call in calls(own).values():
                call()
            for key in (other, lock):
                for operation, call in calls(key).items():
                    message = refused(call)
                    assert f"perform: dynamodb:{operation} on resource: " in message
            refused(lambda: ddb.scan(TableName=table))
            refused(lambda: ddb.batch_get_item(RequestItems={table: {"Keys": [{"pk": {"S": own}}]}}))
        with topo.as_function("HeartbeatFunction"):
            ddb.batch_get_item(RequestItems={table: {"Keys": [{"pk": {"S": own}}, {"pk": {"S": other}}]}})
            calls(other)["UpdateItem"]()
            refused(calls(lock)["PutItem"])
            refused(
                lambda: ddb.batch_get_item(RequestItems={table: {"Keys": [{"pk": {"S": own}}, {"pk": {"S": lock}}]}})
            )
        with topo.as_function("DeadLetterFunction"):
            calls(other)["GetItem"]()
            refused(calls(lock)["PutItem"])
        with topo.as_function("PollerFunction"):
            calls(lock)["GetItem"]()
            # Its TrackedJobs grant: BatchGetItem and the fence's PutItem of job records, nothing else.
            refused(calls(own)["GetItem"])
            refused(calls(own)["UpdateItem"])
        assert topo.iam is not None
        functions = {r.function for r in topo.iam.refusals}
        assert functions == {"chargepaymentFunction", "HeartbeatFunction", "DeadLetterFunction", "PollerFunction"}
