"""Local mode runs a template only if AWS would accept it, at the timings it declares.

Each rule here is one CloudFormation, Lambda, SQS or EventBridge applies when the stack is
deployed (see workerless_devkit/local/rules.py); a topology that breaks one is refused when it is built,
before anything starts. With no options, local mode runs the template's own timings.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from workerless_devkit import cli
from workerless_devkit.cli.demo import demo_route_settings
from workerless_devkit.local.runtime import LocalTopology
from workerless_devkit.local.scheduler import schedule_interval
from workerless_devkit.local.template import ScheduleEventSpec, TemplateError, load_template

from tests.functional.pipeline import TEMPLATE, job_timings, route_timings

BASE = """\
Resources:
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: {visibility}
  F:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: f/
      Handler: app.handler
      Timeout: {timeout}
      MemorySize: {memory}
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !GetAtt Queue.Arn
            BatchSize: {batch}
            MaximumBatchingWindowInSeconds: {window}
            ScalingConfig: {{MaximumConcurrency: {concurrency}}}
        Tick:
          Type: Schedule
          Properties: {{Schedule: "{schedule}"}}
"""
GOOD = {
    "visibility": 30,
    "timeout": 30,
    "memory": 128,
    "batch": 10,
    "window": 0,
    "concurrency": 2,
    "schedule": "rate(1 minute)",
}


def build(tmp_path: Path, **changes: object) -> LocalTopology:
    path = tmp_path / "template.yaml"
    path.write_text(BASE.format(**{**GOOD, **changes}))
    return LocalTopology(path)


def test_a_template_within_aws_rules_is_accepted(tmp_path: Path) -> None:
    assert build(tmp_path).template.function("F").timeout == 30
    assert build(tmp_path, batch=11, window=1, concurrency=1000, schedule="rate(5 minutes)")
    assert build(tmp_path, batch=10_000, window=300, schedule="cron(0 12 * * ? *)")
    assert build(tmp_path, timeout=900, visibility=43_200, memory=10_240, schedule="rate(1 day)")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"visibility": 29},
            r"F\.Events\.Jobs: Invalid request provided: Queue visibility timeout: 29 seconds is less than "
            r"Function timeout: 30 seconds \(Queue feeds F\)",
        ),
        (
            {"batch": 11},
            r"F\.Events\.Jobs: Maximum batch window in seconds must be greater than 0 if maximum batch size",
        ),
        ({"batch": 10_001, "window": 1}, r"F\.Events\.Jobs\.BatchSize: Lambda accepts 1 to 10000"),
        ({"batch": 0}, r"BatchSize: Lambda accepts 1 to 10000 for Queue, got 0"),
        ({"window": 301}, r"MaximumBatchingWindowInSeconds: Lambda accepts whole seconds from 0 to 300, got 301"),
        ({"concurrency": 1}, r"ScalingConfig\.MaximumConcurrency: Lambda accepts 2 to 1000, got 1"),
        ({"concurrency": 1001}, r"ScalingConfig\.MaximumConcurrency: Lambda accepts 2 to 1000, got 1001"),
        ({"timeout": 901, "visibility": 1000}, r"F\.Timeout: Lambda accepts 1 to 900 seconds, got 901"),
        ({"memory": 127}, r"F\.MemorySize: Lambda accepts 128 to 10240 MB, got 127"),
        ({"visibility": 43_201, "timeout": 30}, r"Queue\.VisibilityTimeout: SQS refuses 43201"),
        ({"schedule": "rate(30 seconds)"}, r"F\.Events\.Tick: .*a schedule fires at most once a minute"),
        ({"schedule": "rate(0 minutes)"}, r"the value must be a positive whole number"),
        ({"schedule": "rate(1 minutes)"}, r"1 takes a singular unit"),
        ({"schedule": "rate(5 minute)"}, r"1 takes a singular unit"),
        ({"schedule": "cron(0 12 * * ?)"}, r"cron needs six fields"),
    ],
)
def test_what_aws_refuses_does_not_run_locally(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        build(tmp_path, **changes)


def test_a_dead_letter_queue_of_several_sources_must_be_the_kind_of_each(tmp_path: Path) -> None:
    """SQS: a standard queue's dead-letter queue is a standard queue, a FIFO queue's a FIFO queue. Two
    standard sources may share one; a FIFO source cannot join them."""
    shared = """\
Resources:
  A: {Type: AWS::SQS::Queue, Properties: {RedrivePolicy: {deadLetterTargetArn: !GetAtt Dead.Arn, maxReceiveCount: 3}}}
  B: {Type: AWS::SQS::Queue, Properties: {RedrivePolicy: {deadLetterTargetArn: !GetAtt Dead.Arn, maxReceiveCount: 3}}}
  Dead: {Type: AWS::SQS::Queue}
"""
    path = tmp_path / "template.yaml"
    path.write_text(shared)
    topology = LocalTopology(path)
    assert {q.logical_id: q.dead_letter_queue_id for q in topology.template.queues} == {
        "A": "Dead",
        "B": "Dead",
        "Dead": None,
    }
    path.write_text(
        shared.replace(
            "  B: {Type: AWS::SQS::Queue, Properties: {", "  B: {Type: AWS::SQS::Queue, Properties: {FifoQueue: true, "
        )
    )
    with pytest.raises(
        TemplateError, match=r"B\.RedrivePolicy: the dead-letter queue must be the same kind as its source"
    ):
        LocalTopology(path)


def test_the_real_templates_timings_hold_at_defaults_and_at_the_test_and_demo_values() -> None:
    as_written = LocalTopology(TEMPLATE).template
    assert as_written.queue("chargepaymentQueue").visibility_timeout == 720
    assert as_written.function("chargepaymentFunction").timeout == 120
    assert as_written.queue("generatereportQueue").visibility_timeout == 5400
    assert as_written.function("generatereportFunction").timeout == 900
    assert as_written.queue("HeartbeatQueue").visibility_timeout == 30
    assert as_written.function("HeartbeatFunction").timeout == 20
    assert {q.maximum_message_size for q in as_written.queues} == {1_048_576}
    scaled = LocalTopology(TEMPLATE, parameters=job_timings(10), route_settings=route_timings(10)).template
    assert scaled.function("generatereportFunction").timeout == scaled.function("chargepaymentFunction").timeout == 10
    assert scaled.queue("generatereportQueue").visibility_timeout == 10
    demo = {name: value for pair in cli.DEMO_TIMINGS for name, value in pair}
    with_demo = LocalTopology(TEMPLATE, parameters=demo, route_settings=demo_route_settings(TEMPLATE)).template
    assert with_demo.queue("HeartbeatQueue").visibility_timeout == 10
    assert with_demo.queue("generatereportQueue").visibility_timeout == cli.DEMO_ROUTE_SECONDS
    # A handler timeout longer than its queue's visibility is what Lambda refuses.
    with pytest.raises(TemplateError, match=r"chargepaymentFunction\.Events\.Jobs: .*Queue visibility timeout: 100"):
        LocalTopology(TEMPLATE, parameters={"JobQueueVisibilityTimeout": "100"})


def test_a_long_route_takes_its_timings_from_its_own_route_line() -> None:
    """generatereport's Timeout, queue visibility and batch size are its Mappings.Routes line's (no
    parameter named after it): the handler parameters leave it as written, its own line's values
    (route_settings) change it, and a route line whose Timeout outruns its queue's visibility is
    refused as Lambda refuses it."""
    scaled = LocalTopology(TEMPLATE, parameters=job_timings(30)).template
    assert scaled.function("generatereportFunction").timeout == 900
    assert scaled.queue("generatereportQueue").visibility_timeout == 5400
    (jobs,) = scaled.function("generatereportFunction").sqs_events
    assert jobs.batch_size == 1
    (charge,) = scaled.function("chargepaymentFunction").sqs_events
    assert charge.batch_size == 5
    assert route_timings(30) == {"generatereport": {"Timeout": 30, "VisibilityTimeout": 30}}
    own = LocalTopology(TEMPLATE, route_settings={"generatereport": {"BatchSize": 3, "Timeout": 60}}).template
    assert own.function("generatereportFunction").timeout == 60
    assert own.function("generatereportFunction").sqs_events[0].batch_size == 3
    assert own.queue("generatereportQueue").visibility_timeout == 5400
    with pytest.raises(TemplateError, match=r"generatereportFunction\.Events\.Jobs: .*Queue visibility timeout: 100"):
        LocalTopology(TEMPLATE, route_settings={"generatereport": {"VisibilityTimeout": 100}})
    with pytest.raises(TemplateError, match=r"route settings for nosuchroute: Mappings\.Routes has no such route"):
        LocalTopology(TEMPLATE, route_settings={"nosuchroute": {"Timeout": 10}})


def test_with_no_options_schedules_fire_at_the_templates_rate() -> None:
    """The poller's ``rate(1 minute)`` watchdog fires every 60 s locally, as deployed; a test may
    still ask for faster (a stated departure), and a cron schedule fires only when asked."""
    poller = load_template(TEMPLATE).function("PollerFunction")
    (watchdog,) = poller.schedule_events
    assert LocalTopology(TEMPLATE).schedule_seconds is None
    assert schedule_interval(watchdog, None) == 60.0
    assert schedule_interval(watchdog, 1.0) == 1.0
    cron = ScheduleEventSpec(name="Nightly", expression="cron(0 3 * * ? *)", seconds=None)
    assert schedule_interval(cron, None) is None
    assert schedule_interval(cron, 5.0) == 5.0


def test_the_cli_has_no_timing_defaults_of_its_own() -> None:
    """`workerless local` with no options runs the template as written: no visibility cap, no
    schedule speed-up. Timings are template parameters (--parameter-overrides)."""
    parser = cli.build_parser()
    local = parser.parse_args(["local"])
    assert local.schedule_seconds is None
    assert not hasattr(local, "visibility_seconds")
    with pytest.raises(SystemExit):
        parser.parse_args(["local", "--visibility-seconds", "5"])
    assert parser.parse_args(["demo"]).schedule_seconds == 2.0
