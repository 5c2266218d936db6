"""The local template reader: short tags, intrinsic functions, parameters, Globals, conditions, the
environment union and the errors a developer sees — on small inline templates (no files, no AWS)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from workerless_devkit.local.template import (
    LocalTemplate,
    TemplateError,
    parse_template_text,
    rate_seconds,
    resolve_template,
)

BASE = Path("/app")
URL = "https://sqs.us-east-1.amazonaws.com/123456789012/"
ARN = "arn:aws:sqs:us-east-1:123456789012:"


def load(text: str, **parameters: str) -> LocalTemplate:
    data = parse_template_text(textwrap.dedent(text))
    return resolve_template(data, base_dir=BASE, parameters=parameters)


APP = """
Parameters:
  EngineName: {Type: String, Default: sheptra, AllowedValues: [sheptra, nodeflow, stagenext]}
  MaxInFlight: {Type: Number, Default: 10}
  HandlerTimeout: {Type: Number, Default: 120}
  EngineSecretArn: {Type: String}
  AlarmTopicArn: {Type: String, Default: ""}
Mappings:
  Sizes:
    small: {memory: 256}
Conditions:
  HasAlarms: !Not [!Equals [!Ref AlarmTopicArn, ""]]
  IsSheptra: !Equals [!Ref EngineName, sheptra]
Globals:
  Function:
    Timeout: !Ref HandlerTimeout
    MemorySize: !FindInMap [Sizes, small, memory]
    Layers: [!Ref WorkerlessLayer]
    Environment:
      Variables:
        WORKERLESS_ENGINE: !Ref EngineName
        WORKERLESS_TABLE: !Ref JobsTable
        WORKERLESS_SECRET_ARN: !Ref EngineSecretArn
        WORKERLESS_ROUTES: !Sub '[{"type":"charge-payment","queue":"${ChargePaymentQueue}","max":${MaxInFlight}}]'
        QUEUE_ARN: !Sub "${ChargePaymentQueue.Arn}"
        LITERAL: !Sub "${!NotAVariable}-${AWS::Region}"
        JOINED: !Join ["-", [a, !Select [1, [x, y, z]], !If [IsSheptra, s, n]]]
        LOG_LEVEL: INFO
Resources:
  WorkerlessLayer:
    Type: AWS::Serverless::LayerVersion
    Properties: {ContentUri: layers/workerless/}
  JobsTable:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      TimeToLiveSpecification: {AttributeName: expires_at, Enabled: true}
  ChargePaymentDeadLetterQueue:
    Type: AWS::SQS::Queue
    Properties: {SqsManagedSseEnabled: true}
  ChargePaymentQueue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 720
      DelaySeconds: 0
      SqsManagedSseEnabled: true
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt ChargePaymentDeadLetterQueue.Arn
        maxReceiveCount: 5
  AlarmQueue:
    Type: AWS::SQS::Queue
    Condition: HasAlarms
  ChargePaymentFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/charge-payment/
      Handler: app.handler
      Policies:
        - SQSSendMessagePolicy: {QueueName: !GetAtt SomethingSamGenerates.QueueName}
      Environment:
        Variables:
          OWN: !GetAtt ChargePaymentQueue.QueueName
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !GetAtt ChargePaymentQueue.Arn
            BatchSize: 5
            MaximumBatchingWindowInSeconds: 1
            ScalingConfig: {MaximumConcurrency: 10}
            FunctionResponseTypes: [ReportBatchItemFailures]
  PollerFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/poller/
      Handler: app.handler
      Timeout: 60
      RecursiveLoop: Allow
      Events:
        Watchdog:
          Type: Schedule
          Properties: {Schedule: rate(1 minute)}
        Api:
          Type: Api
          Properties: {Path: /, Method: get}
"""


def test_intrinsics_parameters_and_globals_resolve_as_in_aws() -> None:
    """GIVEN the template's shapes WHEN resolved THEN !Ref queue is its URL, !GetAtt .Arn its ARN,
    !Ref table its name, !Sub expands ${Name}, ${Name.Attr}, parameters and pseudo parameters, and
    Globals merge into each function (the function's own keys winning)."""
    template = load(APP, MaxInFlight="7")
    charge = template.function("ChargePaymentFunction")
    env = charge.environment
    assert env["WORKERLESS_ENGINE"] == "sheptra"
    assert env["WORKERLESS_TABLE"] == "workerless-local-JobsTable"
    assert env["WORKERLESS_ROUTES"] == (
        f'[{{"type":"charge-payment","queue":"{URL}workerless-local-ChargePaymentQueue","max":7}}]'
    )
    assert env["QUEUE_ARN"] == f"{ARN}workerless-local-ChargePaymentQueue"
    assert env["LITERAL"] == "${NotAVariable}-us-east-1"
    assert env["JOINED"] == "a-y-s"
    assert env["OWN"] == "workerless-local-ChargePaymentQueue"
    assert env["WORKERLESS_SECRET_ARN"] == ""  # no default, no override: empty locally
    assert template.unset_parameters == ("EngineSecretArn",)
    assert (charge.timeout, charge.memory_size, charge.recursive_loop) == (120, 256, "Terminate")
    assert charge.code_dir == (BASE / "functions/charge-payment").resolve()
    assert charge.handler == "app.handler"
    (event,) = charge.sqs_events
    assert (event.queue_id, event.batch_size, event.batching_window_seconds) == ("ChargePaymentQueue", 5, 1.0)
    assert (event.maximum_concurrency, event.report_batch_item_failures) == (10, True)

    poller = template.function("PollerFunction")
    assert (poller.timeout, poller.allows_recursion, poller.sqs_events) == (60, True, ())
    (schedule,) = poller.schedule_events
    assert (schedule.expression, schedule.seconds) == ("rate(1 minute)", 60.0)
    assert poller.ignored_events == ("Api (Api)",)


def test_queues_tables_and_conditions() -> None:
    """GIVEN queues with a redrive policy, a table with TTL and a resource behind a false condition THEN
    the queue knows its DLQ and maxReceiveCount, the table its key and TTL, the conditional resource
    is absent."""
    template = load(APP)
    queue = template.queue("ChargePaymentQueue")
    assert (queue.visibility_timeout, queue.dead_letter_queue_id, queue.max_receive_count) == (
        720,
        "ChargePaymentDeadLetterQueue",
        5,
    )
    assert queue.url == f"{URL}workerless-local-ChargePaymentQueue"
    assert template.queue("ChargePaymentDeadLetterQueue").visibility_timeout == 30
    assert [q.logical_id for q in template.queues] == ["ChargePaymentDeadLetterQueue", "ChargePaymentQueue"]
    (table,) = template.tables
    assert (table.name, table.key_schema, table.ttl_attribute) == (
        "workerless-local-JobsTable",
        ({"AttributeName": "pk", "KeyType": "HASH"},),
        "expires_at",
    )
    with_alarms = load(APP, AlarmTopicArn="arn:aws:sns:us-east-1:1:t")
    assert "AlarmQueue" in [q.logical_id for q in with_alarms.queues]


def test_environment_union_and_conflict() -> None:
    """GIVEN two functions WHEN their variables agree THEN the union has both; WHEN one key differs THEN
    a TemplateError names the key and both functions, not the values."""
    template = load(APP)
    union = template.environment()
    assert union["OWN"] == "workerless-local-ChargePaymentQueue"
    assert union["LOG_LEVEL"] == "INFO"
    conflicting = APP.replace(
        "RecursiveLoop: Allow", "RecursiveLoop: Allow\n      Environment: {Variables: {LOG_LEVEL: DEBUG}}"
    )
    with pytest.raises(TemplateError) as caught:
        load(conflicting).environment()
    message = str(caught.value)
    assert "LOG_LEVEL is set differently by ChargePaymentFunction and PollerFunction" in message
    assert "DEBUG" not in message


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("!ImportValue shared-queue", r"ChargePaymentFunction\.Environment\.Variables\.X: .*Fn::ImportValue"),
        ("!GetAZs ''", r"Fn::GetAZs \(!GetAZs\) is not supported"),
        ("!Ref Nowhere", r"!Ref Nowhere names neither a parameter nor a resource"),
        ("!GetAtt WorkerlessLayer.Arn", r"WorkerlessLayer\.Arn is not supported .*AWS::Serverless::LayerVersion"),
        ("!If [NoSuchCondition, a, b]", r"condition NoSuchCondition is not defined"),
    ],
)
def test_unsupported_intrinsics_name_the_function_and_the_resource(snippet: str, expected: str) -> None:
    text = APP.replace("OWN: !GetAtt ChargePaymentQueue.QueueName", f"X: {snippet}")
    with pytest.raises(TemplateError, match=expected):
        load(text)


def test_parameter_overrides_are_checked() -> None:
    with pytest.raises(TemplateError, match=r"EngineName: 'zeebe' is not one of sheptra, nodeflow, stagenext"):
        load(APP, EngineName="zeebe")
    with pytest.raises(TemplateError, match=r"parameter override for Nope"):
        load(APP, Nope="1")
    assert load(APP, EngineName="nodeflow").function("PollerFunction").environment["WORKERLESS_ENGINE"] == "nodeflow"


def test_unused_properties_are_not_resolved_and_json_templates_work() -> None:
    """Policies reference a resource SAM generates: local mode never resolves them. A JSON template with
    long-form intrinsics reads the same as YAML."""
    assert load(APP).function("ChargePaymentFunction")  # Policies' !GetAtt SomethingSamGenerates ignored
    text = """
    {"Resources": {
      "Q": {"Type": "AWS::SQS::Queue"},
      "F": {"Type": "AWS::Serverless::Function", "Properties": {
        "CodeUri": "f/", "Handler": "app.handler",
        "Environment": {"Variables": {"U": {"Ref": "Q"}, "A": {"Fn::GetAtt": ["Q", "Arn"]}, "N": 3, "B": true}},
        "Events": {"E": {"Type": "SQS", "Properties": {"Queue": {"Fn::GetAtt": "Q.Arn"}}}}}}}}
    """
    template = load(text)
    function = template.function("F")
    assert function.environment == {
        "U": f"{URL}workerless-local-Q",
        "A": f"{ARN}workerless-local-Q",
        "N": "3",
        "B": "true",
    }
    assert function.sqs_events[0].batch_size == 10


def test_errors_for_unreadable_templates() -> None:
    with pytest.raises(TemplateError, match="not valid YAML"):
        parse_template_text("Resources: [unclosed")
    with pytest.raises(TemplateError, match="has no Resources"):
        load("Parameters: {}")
    assert rate_seconds("rate(5 minutes)") == 300.0
    assert rate_seconds("cron(0 12 * * ? *)") is None


def test_logging_config_merges_from_globals_and_keeps_lambdas_levels() -> None:
    """GIVEN Globals' LoggingConfig (format, levels) and a function's own (its LogGroup) WHEN read
    THEN the function has both, as SAM merges them; without one a function logs Text, unfiltered."""
    text = (
        APP.replace(
            "    Layers: [!Ref WorkerlessLayer]\n",
            "    Layers: [!Ref WorkerlessLayer]\n"
            "    LoggingConfig: {LogFormat: JSON, SystemLogLevel: WARN,\n"
            "      ApplicationLogLevel: !FindInMap [Levels, !Ref Level, App]}\n",
        )
        .replace("Mappings:\n", "Mappings:\n  Levels:\n    WARNING: {App: INFO}\n")
        .replace("Parameters:\n", "Parameters:\n  Level: {Type: String, Default: WARNING}\n")
        .replace(
            "      RecursiveLoop: Allow\n", "      RecursiveLoop: Allow\n      LoggingConfig: {LogGroup: poller-logs}\n"
        )
    )
    poller = load(text).function("PollerFunction")
    assert (poller.log_format, poller.application_log_level, poller.system_log_level) == ("JSON", "INFO", "WARN")
    charge = load(APP).function("ChargePaymentFunction")
    assert (charge.log_format, charge.application_log_level, charge.system_log_level) == ("Text", None, None)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("{ApplicationLogLevel: DEBUG}", r"PollerFunction\.LoggingConfig\.ApplicationLogLevel needs LogFormat JSON"),
        ("{LogFormat: Text, SystemLogLevel: WARN}", r"SystemLogLevel needs LogFormat JSON"),
        ("{LogFormat: JSON, SystemLogLevel: ERROR}", r"SystemLogLevel must be one of DEBUG, INFO, WARN, got 'ERROR'"),
        ("{LogFormat: JSON, ApplicationLogLevel: WARNING}", r"ApplicationLogLevel must be one of TRACE, .*'WARNING'"),
        ("{LogFormat: json}", r"LogFormat must be Text or JSON, got 'json'"),
        ("{LogFormat: JSON, LogLevel: INFO}", r"unknown key\(s\) LogLevel"),
    ],
)
def test_logging_config_is_refused_where_lambda_refuses_it(config: str, expected: str) -> None:
    text = APP.replace("      RecursiveLoop: Allow\n", f"      RecursiveLoop: Allow\n      LoggingConfig: {config}\n")
    with pytest.raises(TemplateError, match=expected):
        load(text)
