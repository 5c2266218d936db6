"""``workerless new-handler TYPE``: a new job type's files, and its wiring in template.yaml.

Files (each refused if it exists)::

    functions/<type>/app.py                 the handler (``from workerless import Job, job_handler``)
    tests/unit/test_handler_<type_>.py      its test, on the workerless.testing kit
    events/sqs-<type>.json                  an SQS event of one job, like events/sqs-charge-payment.json

template.yaml gets what its header comment lists under "Adding a job type": the Queue,
DeadLetterQueue, their two QueuePolicies, LogGroup, Role and Function (after the last job type's
function), the route in WORKERLESS_ROUTES, the queue in PollerFunctionRole's FanOut statement and in
HeartbeatFunctionRole's SettleOwedReports statement, the dead-letter queue as an event of
DeadLetterFunction and in DeadLetterFunctionRole; plus its dead-letter and queue-age alarms and its
Outputs. The edit is a ruamel.yaml round trip (comments, order, quoting
and CloudFormation short tags survive byte for byte; the template round-trips unchanged), so the
diff is only the additions. Nothing is written unless every check passed.

Example:
    >>> camel("charge-payment")
    'ChargePayment'
    >>> validate_job_type("ship-parcel")
    'ship-parcel'
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workerless.errors import ConfigurationError

#: Job types: lowercase letters, digits and single hyphens, starting with a letter.
JOB_TYPE_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
MAX_JOB_TYPE_LENGTH = 48
#: Names taken by the library's own functions and queues (their directories and logical ids).
RESERVED = frozenset(
    {"poller", "heartbeat", "deadletter", "dead-letter", "ticker", "workerless", "jobs", "layer", "layers"}
)


#: The section rule of template.yaml's Resources ("# ---...--- job type charge-payment").
SECTION_RULE = "-" * 64


class ScaffoldError(ConfigurationError):
    """new-handler refused: the type is malformed, reserved, or already exists."""


@dataclass(frozen=True)
class Scaffold:
    """What :func:`scaffold_handler` wrote."""

    job_type: str
    files: list[Path]
    resources: list[str]
    template: Path
    notes: list[str] = field(default_factory=list)


def camel(job_type: str) -> str:
    """The logical-ID stem of a job type, as template.yaml spells them (``send-receipt`` -> ``SendReceipt``)."""
    return "".join(part[:1].upper() + part[1:] for part in job_type.split("-"))


def validate_job_type(job_type: str) -> str:
    """Return ``job_type`` if it can name a function directory, a route and logical IDs; else raise."""
    if not JOB_TYPE_RE.fullmatch(job_type):
        raise ScaffoldError(
            f"job type {job_type!r} is not valid: use lowercase letters, digits and single hyphens, "
            "starting with a letter (e.g. charge-payment)",
            key="TYPE",
        )
    if len(job_type) > MAX_JOB_TYPE_LENGTH:
        raise ScaffoldError(f"job type {job_type!r} is longer than {MAX_JOB_TYPE_LENGTH} characters", key="TYPE")
    if job_type in RESERVED:
        raise ScaffoldError(f"job type {job_type!r} is reserved (a workerless function or queue)", key="TYPE")
    return job_type


def resource_ids(job_type: str) -> list[str]:
    """The logical IDs new-handler adds to Resources, in template order."""
    c = camel(job_type)
    return [
        f"{c}Queue",
        f"{c}QueuePolicy",
        f"{c}DeadLetterQueue",
        f"{c}DeadLetterQueuePolicy",
        f"{c}FunctionLogGroup",
        f"{c}FunctionRole",
        f"{c}Function",
    ]


# ------------------------------------------------------------------------------------------------
# template.yaml


def _yaml() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML()  # round-trip: comments, key order, quotes and unknown (!Ref, !Sub...) tags kept
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap the long lines (the dashboard body, the routes)
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _dump(yaml: Any, data: Any) -> str:
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


_RESOURCES = """\
Resources:
  {c}Queue:
    Type: AWS::SQS::Queue
    Properties:
      SqsManagedSseEnabled: true
      MaximumMessageSize: 1048576
      VisibilityTimeout: !Ref JobQueueVisibilityTimeout
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt {c}DeadLetterQueue.Arn
        maxReceiveCount: !Ref MaxReceiveCount

  {c}QueuePolicy:
    Type: AWS::SQS::QueuePolicy
    Properties:
      Queues: [!Ref {c}Queue]
      PolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Sid: DenyInsecureTransport
            Effect: Deny
            Principal: "*"
            Action: "sqs:*"
            Resource: !GetAtt {c}Queue.Arn
            Condition:
              Bool:
                aws:SecureTransport: "false"

  # {t} jobs that failed MaxReceiveCount deliveries: DeadLetterFunction fails them at the engine.
  {c}DeadLetterQueue:
    Type: AWS::SQS::Queue
    # Kept when the stack is deleted or the queue replaced: it may hold the only trace of a job.
    DeletionPolicy: Retain
    UpdateReplacePolicy: Retain
    Properties:
      SqsManagedSseEnabled: true
      MaximumMessageSize: 1048576
      VisibilityTimeout: 360
      MessageRetentionPeriod: 1209600

  {c}DeadLetterQueuePolicy:
    Type: AWS::SQS::QueuePolicy
    Properties:
      Queues: [!Ref {c}DeadLetterQueue]
      PolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Sid: DenyInsecureTransport
            Effect: Deny
            Principal: "*"
            Action: "sqs:*"
            Resource: !GetAtt {c}DeadLetterQueue.Arn
            Condition:
              Bool:
                aws:SecureTransport: "false"

  {c}FunctionLogGroup:
    Type: AWS::Logs::LogGroup
    Properties:
      RetentionInDays: !Ref LogRetentionDays

  {c}FunctionRole:
    Type: AWS::IAM::Role
    Properties:
      Description: workerless handler {t} - consume its queue, claim and record jobs
      AssumeRolePolicyDocument:
        Version: "2012-10-17"
        Statement:
          - Effect: Allow
            Principal:
              Service: lambda.amazonaws.com
            Action: sts:AssumeRole
      Policies:
        - PolicyName: workerless
          PolicyDocument:
            Version: "2012-10-17"
            Statement:
              # Its own log group only (LoggingConfig.LogGroup; the ARN's trailing :* is that group's
              # streams), instead of AWSLambdaBasicExecutionRole's logs on "*".
              - Sid: OwnLogGroup
                Effect: Allow
                Action:
                  - logs:CreateLogStream
                  - logs:PutLogEvents
                Resource: !GetAtt {c}FunctionLogGroup.Arn
              # What the SQS event source mapping needs, on the one queue it reads.
              - Sid: JobEventSource
                Effect: Allow
                Action:
                  - sqs:ReceiveMessage
                  - sqs:DeleteMessage
                  - sqs:GetQueueAttributes
                Resource: !GetAtt {c}Queue.Arn
              # Claim check (PayloadBucket), this job type's prefixes only: reads the variables of a job
              # too large for its queue; writes, and reads again to re-report, a result too large for
              # its job record.
              - Sid: ClaimCheckJobs
                Effect: Allow
                Action: s3:GetObject
                Resource: !Sub "${PayloadBucket.Arn}/jobs/{t}/*"
              - Sid: ClaimCheckResults
                Effect: Allow
                Action:
                  - s3:PutObject
                  - s3:GetObject
                Resource: !Sub "${PayloadBucket.Arn}/results/{t}/*"
              # Claims (conditional PutItem), the result, the lease stamp, giving a claim back and the
              # reported mark (conditional UpdateItem), the lease check (GetItem); the engines' shared
              # state (tokens, sessions) is in the same table. Exactly what the code calls
              # (tests/functional/test_iam_drift.py): no batch reads, no Scan, Query or DeleteItem.
              - Sid: JobRecords
                Effect: Allow
                Action:
                  - dynamodb:GetItem
                  - dynamodb:PutItem
                  - dynamodb:UpdateItem
                Resource: !GetAtt JobsTable.Arn
              # The engine's connection values. A secret encrypted with a customer managed KMS key also
              # needs kms:Decrypt on that key here (the AWS managed aws/secretsmanager key needs nothing).
              - Sid: EngineSecret
                Effect: Allow
                Action: secretsmanager:GetSecretValue
                Resource: !Ref EngineSecretArn

  {c}Function:
    Type: AWS::Serverless::Function
    Properties:
      Description: workerless handler for {t} jobs
      CodeUri: functions/{t}/
      Handler: app.handler
      Role: !GetAtt {c}FunctionRole.Arn
      LoggingConfig:
        LogGroup: !Ref {c}FunctionLogGroup
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !GetAtt {c}Queue.Arn
            BatchSize: !Ref HandlerBatchSize
            ScalingConfig:
              MaximumConcurrency: !Ref HandlerMaximumConcurrency
            # Only the items whose report is still owed are redelivered.
            FunctionResponseTypes: [ReportBatchItemFailures]
"""

_ALARM = """\
Resources:
  {c}DeadLetterQueueAlarm:
    Type: AWS::CloudWatch::Alarm
    Condition: HasAlarmTopic
    Properties:
      AlarmDescription: workerless - {t} jobs were dead-lettered (DeadLetterFunction received them)
      Namespace: AWS/SQS
      MetricName: NumberOfMessagesReceived
      Dimensions:
        - Name: QueueName
          Value: !GetAtt {c}DeadLetterQueue.QueueName
      Statistic: Sum
      Period: 300
      EvaluationPeriods: 1
      Threshold: 0
      ComparisonOperator: GreaterThanThreshold
      TreatMissingData: notBreaching
      AlarmActions: [!Ref AlarmTopicArn]
"""

_AGE_ALARM = """\
Resources:
  {c}QueueAgeAlarm:
    Type: AWS::CloudWatch::Alarm
    Condition: HasAlarmTopic
    Properties:
      AlarmDescription: >-
        workerless - a {t} job message is over 720 s old (HandlerTimeout's maximum of 120 s
        plus 10 minutes) for 5 minutes running: handlers throttled at HandlerMaximumConcurrency,
        failing, or a backlog. The engine's lease is extended meanwhile, up to WORKERLESS_MAX_HOLD_SECONDS.
      Namespace: AWS/SQS
      MetricName: ApproximateAgeOfOldestMessage
      Dimensions:
        - Name: QueueName
          Value: !GetAtt {c}Queue.QueueName
      Statistic: Maximum
      Period: 60
      EvaluationPeriods: 5
      Threshold: 720
      ComparisonOperator: GreaterThanThreshold
      TreatMissingData: notBreaching
      AlarmActions: [!Ref AlarmTopicArn]
"""

_DEAD_LETTER_EVENT = """\
{c}DeadLetters:
  Type: SQS
  Properties:
    Queue: !GetAtt {c}DeadLetterQueue.Arn
    BatchSize: 10
    FunctionResponseTypes: [ReportBatchItemFailures]
"""

_OUTPUTS = """\
{c}QueueUrl:
  Description: {t} job queue
  Value: !Ref {c}Queue
{c}DeadLetterQueueUrl:
  Description: {t} dead-lettered jobs
  Value: !Ref {c}DeadLetterQueue
{c}FunctionName:
  Description: {t} handler function
  Value: !Ref {c}Function
"""

_GETATT_LIST = "- !GetAtt {c}{suffix}.Arn\n"


def _snippet(yaml: Any, text: str, job_type: str) -> Any:
    return yaml.load(text.replace("{t}", job_type).replace("{c}", camel(job_type)))


def _insert_after(target: Any, after: str | None, source: Any, *, lead: str) -> None:
    """Insert ``source``'s keys into ``target`` after key ``after`` (at the end when None), with the
    comment ``lead`` (lines without ``#``; a leading blank line is "\n...") above the first one.

    ruamel keeps the comment lines above a key in its parent's comment table under that key (the
    snippet's later keys carry theirs along), but a snippet's first comment belongs to the snippet
    mapping itself, so the first key's is set here, the way ruamel's own API writes one.
    """
    keys = list(target)
    position = len(keys) if after is None else keys.index(after) + 1
    first = None
    for key, value in source.items():
        first = key if first is None else first
        target.insert(position, key, value)
        if key in source.ca.items:
            target.ca.items[key] = source.ca.items[key]
        position += 1
    if first is not None:
        target.ca.items.pop(first, None)
        target.yaml_set_comment_before_after_key(first, before=lead, indent=2)


def _routes_node(data: Any) -> Any:
    try:
        return data["Globals"]["Function"]["Environment"]["Variables"]["WORKERLESS_ROUTES"]
    except (KeyError, TypeError):
        raise ScaffoldError(
            "template has no Globals.Function.Environment.Variables.WORKERLESS_ROUTES to add the route to",
            key="WORKERLESS_ROUTES",
        ) from None


def route_types(data: Any) -> list[tuple[str, str]]:
    """(job type, queue logical id) of each route in WORKERLESS_ROUTES, in order."""
    node = _routes_node(data)
    text = str(getattr(node, "value", node))
    # ${X} inside quotes is a reference (a queue URL); bare, a number (${MaxInFlight}).
    text = re.sub(r'"\$\{([A-Za-z0-9:.]+)\}"', r'"@\1"', text)
    text = re.sub(r"\$\{[A-Za-z0-9:.]+\}", "0", text)
    try:
        routes = json.loads(text)
    except ValueError as exc:
        raise ScaffoldError(f"WORKERLESS_ROUTES is not a JSON list: {exc}", key="WORKERLESS_ROUTES") from None
    if not isinstance(routes, list):
        raise ScaffoldError("WORKERLESS_ROUTES is not a JSON list", key="WORKERLESS_ROUTES")
    out: list[tuple[str, str]] = []
    for route in routes:
        queue = str(route.get("queue", "")) if isinstance(route, dict) else ""
        out.append((str(route.get("type")) if isinstance(route, dict) else "", queue.removeprefix("@")))
    return out


def _statement(role: Any, sid: str, role_id: str) -> Any:
    try:
        for policy in role["Properties"]["Policies"]:
            for statement in policy["PolicyDocument"]["Statement"]:
                if statement.get("Sid") == sid:
                    return statement
    except (KeyError, TypeError):
        pass
    raise ScaffoldError(f"template: {role_id} has no statement with Sid {sid!r} to add the queue to", key=role_id)


def add_job_type(text: str, job_type: str) -> tuple[str, list[str]]:
    """template.yaml's text with job type ``job_type`` wired in; returns (new text, logical IDs added).

    Raises :class:`ScaffoldError` when the type is malformed or reserved, when any of its logical IDs
    or its route already exists, or when the template lacks a place the wiring goes.
    """
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import FoldedScalarString

    validate_job_type(job_type)
    yaml = _yaml()
    data = yaml.load(text)
    if not isinstance(data, CommentedMap) or not isinstance(data.get("Resources"), CommentedMap):
        raise ScaffoldError("template has no Resources mapping", key="Resources")
    resources: CommentedMap = data["Resources"]
    c = camel(job_type)
    routes = route_types(data)
    if any(t == job_type for t, _ in routes):
        raise ScaffoldError(f"job type {job_type!r} already exists: WORKERLESS_ROUTES routes it", key="TYPE")
    alarm_ids = [f"{c}DeadLetterQueueAlarm", f"{c}QueueAgeAlarm"]
    added = [*resource_ids(job_type), *alarm_ids]
    taken = [rid for rid in added if rid in resources]
    if taken:
        raise ScaffoldError(f"job type {job_type!r} already exists: template.yaml has {', '.join(taken)}", key="TYPE")

    # 1. Resources, after the last routed job type's function (the job-type section of the file).
    last_function = next(
        (f"{q[: -len('Queue')]}Function" for _, q in reversed(routes) if f"{q[: -len('Queue')]}Function" in resources),
        None,
    )
    lead = (
        f"\n{SECTION_RULE} job type {job_type}\n\n"
        f"Jobs of type {job_type}, one message per job (ActivatedJob.to_message).\n"
        "Visibility 720 = 6 x HandlerTimeout's maximum (120 s): JobQueueVisibilityTimeout."
    )
    _insert_after(resources, last_function, _snippet(yaml, _RESOURCES, job_type)["Resources"], lead=lead)

    # 2. The route: one more entry in the !Sub JSON list, in the same style (folded, one line).
    node = _routes_node(data)
    value = str(getattr(node, "value", node)).rstrip()
    if not value.endswith("]"):
        raise ScaffoldError("WORKERLESS_ROUTES is not a JSON list", key="WORKERLESS_ROUTES")
    entry = f'{{"type":"{job_type}","queue":"${{{c}Queue}}","max":${{MaxInFlight}}}}'
    new_value = f"{value[:-1]},{entry}]" if value[:-1].strip().endswith("}") else f"{value[:-1]}{entry}]"
    if hasattr(node, "value"):
        node.value = FoldedScalarString(new_value) if isinstance(node.value, FoldedScalarString) else new_value
    else:  # pragma: no cover - the shipped template uses !Sub
        data["Globals"]["Function"]["Environment"]["Variables"]["WORKERLESS_ROUTES"] = new_value

    # 3. The poller may send to (and read the depth of) the new queue; the heartbeat may delete a
    #    job message whose owed report it settled.
    for role_id, sid, suffix in (
        ("PollerFunctionRole", "FanOut", "Queue"),
        ("HeartbeatFunctionRole", "SettleOwedReports", "Queue"),
        ("DeadLetterFunctionRole", "DeadLetterEventSources", "DeadLetterQueue"),
    ):
        if role_id not in resources:
            raise ScaffoldError(f"template has no {role_id}", key=role_id)
        statement = _statement(resources[role_id], sid, role_id)
        item = yaml.load(_GETATT_LIST.replace("{c}", c).replace("{suffix}", suffix))[0]
        if not isinstance(statement["Resource"], CommentedSeq):
            statement["Resource"] = CommentedSeq([statement["Resource"]])
        statement["Resource"].append(item)

    # 4. The dead-letter function consumes the new dead-letter queue.
    try:
        events = resources["DeadLetterFunction"]["Properties"]["Events"]
    except KeyError:
        raise ScaffoldError("template has no DeadLetterFunction with Events", key="DeadLetterFunction") from None
    for key, value in yaml.load(_DEAD_LETTER_EVENT.replace("{c}", c)).items():
        events[key] = value

    # 5. Its alarms, each after the other job types' alarms of its kind (where the template has them).
    placed = []
    for suffix, snippet in (("DeadLetterQueueAlarm", _ALARM), ("QueueAgeAlarm", _AGE_ALARM)):
        alarms = [f"{q[: -len('Queue')]}{suffix}" for _, q in routes]
        last_alarm = next((a for a in reversed(alarms) if a in resources), None)
        if last_alarm is not None:
            _insert_after(resources, last_alarm, _snippet(yaml, snippet, job_type)["Resources"], lead="\n")
            placed.append(f"{c}{suffix}")

    # 6. Outputs: its queues and function, like the example types'.
    outputs = data.get("Outputs")
    if isinstance(outputs, CommentedMap):
        for key, value in _snippet(yaml, _OUTPUTS, job_type).items():
            if key not in outputs:
                outputs[key] = value
    return _dump(yaml, data), [rid for rid in added if rid not in alarm_ids or rid in placed]


# ------------------------------------------------------------------------------------------------
# Files


def handler_source(job_type: str) -> str:
    return f'''"""{job_type}: TODO say what a {job_type} job does."""

from workerless import Job, job_handler


@job_handler("{job_type}")
def handler(job: Job) -> dict:
    # job.variables: the job's input; job.key: an idempotency key, stable across redeliveries.
    # Return the variables to complete the job with. Raise workerless.TerminalError for input that
    # can never succeed (failed, no retries), workerless.ThrowError for a business error the
    # workflow handles, anything else to fail with a retry.
    job.log(f"handling {job_type} job {{job.id}}")
    return {{"handled": True}}
'''


def test_source(job_type: str) -> str:
    return f'''"""The {job_type} handler, run through the wrapper's outcome mapping (no AWS, no engine)."""

from pathlib import Path

from workerless.testing import assert_completed, load_handler, run_handler

handler = load_handler(Path(__file__).resolve().parents[2] / "functions" / "{job_type}" / "app.py")


def test_a_{job_type.replace("-", "_")}_job_completes() -> None:
    outcome = run_handler(handler, {{"orderId": "7"}})
    assert_completed(outcome, handled=True)
'''


def event_json(job_type: str, *, region: str = "us-east-1", account: str = "123456789012") -> str:
    """An SQS event of one job of ``job_type``, in the shape events/sqs-charge-payment.json has."""
    from workerless.model import ActivatedJob, JobRef

    activated_at = 1789041600.0
    job = ActivatedJob(
        ref=JobRef("sheptra", "2251799813690001", job_type, attempt="r3"),
        variables={"orderId": "2481"},
        lease_expires_at=activated_at + 60,
        activated_at=activated_at,
        retries=3,
        instance_id="2251799813690000",
        element_id=camel(job_type),
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    body = job.to_message()
    event = {
        "Records": [
            {
                "messageId": "059f36b4-87a3-44ab-83d2-661975900001",
                "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a0001...",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1789041600150",
                    "SenderId": "AROAEXAMPLEPOLLERROLE:workerless-PollerFunction-1a2b3c4d5e6f",
                    "ApproximateFirstReceiveTimestamp": "1789041600190",
                },
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{region}:{account}:workerless-{camel(job_type)}Queue-Q4H0Z6L3K2PA",
                "awsRegion": region,
            }
        ]
    }
    return json.dumps(event, indent=2) + "\n"


def planned_files(project: Path, job_type: str) -> dict[Path, str]:
    return {
        project / "functions" / job_type / "app.py": handler_source(job_type),
        project / "tests" / "unit" / f"test_handler_{job_type.replace('-', '_')}.py": test_source(job_type),
        project / "events" / f"sqs-{job_type}.json": event_json(job_type),
    }


def scaffold_handler(job_type: str, *, template: str | Path = "template.yaml") -> Scaffold:
    """Create the job type's files next to ``template`` and wire it into the template.

    Every check runs before anything is written: a malformed or reserved type, an existing
    ``functions/<type>/`` (or test or event file), existing logical IDs or route all refuse with a
    :class:`ScaffoldError` that names what exists.
    """
    validate_job_type(job_type)
    template_path = Path(template)
    try:
        text = template_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScaffoldError(f"cannot read template {str(template_path)!r}: {exc.strerror}", key="template") from None
    project = template_path.absolute().parent
    function_dir = project / "functions" / job_type
    if function_dir.exists():
        raise ScaffoldError(f"job type {job_type!r} already exists: {function_dir} is there", key="TYPE")
    files = planned_files(project, job_type)
    existing = [str(path) for path in files if path.exists()]
    if existing:
        raise ScaffoldError(f"job type {job_type!r}: {', '.join(existing)} already exists", key="TYPE")
    new_text, added = add_job_type(text, job_type)
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    template_path.write_text(new_text, encoding="utf-8")
    notes = [
        "not added: the dashboard's widgets list the example types by name; "
        "add the new type's queue there by hand if you want it on them",
    ]
    return Scaffold(job_type, list(files), added, template_path, notes)
