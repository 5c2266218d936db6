"""Lambda's bad days in local mode: an invocation past its MemorySize is killed, a function past its
concurrency is throttled (an SQS batch stays in flight until its visibility timeout; a scheduled
event is retried with Lambda's backoff).

Each handler waits on events the test controls (files appearing), never on a wall-clock bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from workerless_devkit.local.memory import OutOfMemory
from workerless_devkit.local.runtime import LocalTopology

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  RecordDir:
    Type: String
  # As template.yaml's poller: "false" sets no MaximumConcurrency, the reservation alone caps it.
  Capped:
    Type: String
    Default: "true"
Conditions:
  IsCapped: !Equals [!Ref Capped, "true"]
Resources:
  WorkQueue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 3
  OutQueue:
    Type: AWS::SQS::Queue
  WorkFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/work/
      Handler: app.handler
      Runtime: python3.12
      Timeout: 3
      MemorySize: 128
      ReservedConcurrentExecutions: 1
      Environment:
        Variables:
          RECORD_DIR: !Ref RecordDir
          OUT_QUEUE_URL: !Ref OutQueue
      Policies:
        - SQSSendMessagePolicy: {QueueName: !GetAtt OutQueue.QueueName}
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !GetAtt WorkQueue.Arn
            BatchSize: 1
            # Over the reservation, as AWS warns against (or none at all: up to local mode's default
            # of 10): the second concurrent batch is throttled.
            ScalingConfig: !If [IsCapped, {MaximumConcurrency: 2}, !Ref AWS::NoValue]
  TickFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/tick/
      Handler: app.handler
      Runtime: python3.12
      Timeout: 3
      EventInvokeConfig: {MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60}
      Environment:
        Variables:
          RECORD_DIR: !Ref RecordDir
      Events:
        Tick:
          Type: Schedule
          Properties:
            Schedule: rate(1 hour)
"""

# One message: {"id", "mb": MB to allocate, "block": wait for a "release-<id>" file first}. It
# records its delivery, allocates, then sends {"id"} to OutQueue and records whether it could.
WORK = """\
import json, os, time
import boto3

def _write(name, entry):
    with open(os.path.join(os.environ["RECORD_DIR"], name), "a") as fh:
        fh.write(json.dumps(entry) + "\\n")

def handler(event, context):
    record_dir = os.environ["RECORD_DIR"]
    for record in event["Records"]:
        body = json.loads(record["body"])
        count = int(record["attributes"]["ApproximateReceiveCount"])
        _write("deliveries.jsonl", {"id": body["id"], "count": count})
        if body.get("block"):
            for _ in range(3000):
                if os.path.exists(os.path.join(record_dir, f"release-{body['id']}")):
                    break
                time.sleep(0.02)
        held = bytearray(body.get("mb", 0) * 1024 * 1024) if count == 1 else b""
        try:
            boto3.client("sqs").send_message(QueueUrl=os.environ["OUT_QUEUE_URL"], MessageBody=json.dumps(
                {"id": body["id"], "count": count, "held": len(held)}))
            _write("sent.jsonl", {"id": body["id"], "count": count, "sent": True})
        except Exception as exc:
            _write("sent.jsonl", {"id": body["id"], "count": count, "sent": type(exc).__name__})
"""

TICK = """\
import json, os, time

def handler(event, context):
    with open(os.path.join(os.environ["RECORD_DIR"], "ticks.jsonl"), "a") as fh:
        fh.write(json.dumps({"at": time.monotonic()}) + "\\n")
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    for name, code in (("work", WORK), ("tick", TICK)):
        (tmp_path / "functions" / name).mkdir(parents=True)
        (tmp_path / "functions" / name / "app.py").write_text(code)
    (tmp_path / "records").mkdir()
    return tmp_path


def lines(app: Path, name: str) -> list[dict[str, Any]]:
    path = app / "records" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def out_messages(top: LocalTopology) -> list[dict[str, Any]]:
    sqs = top.client("sqs")
    found: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(QueueUrl=top.queue_url("OutQueue"), MaxNumberOfMessages=10).get("Messages") or []
        if not got:
            return found
        found.extend(json.loads(m["Body"]) for m in got)


def send(top: LocalTopology, body: dict[str, Any]) -> None:
    top.client("sqs").send_message(QueueUrl=top.queue_url("WorkQueue"), MessageBody=json.dumps(body))


def test_an_invocation_past_its_memory_size_is_killed_and_its_batch_comes_back(app: Path) -> None:
    """GIVEN MemorySize 128 and the runtime's 66 MB baseline
    WHEN a handler allocates 100 MB, and another 20 MB
    THEN the first invocation is killed (Runtime.OutOfMemory) before its next AWS call: its send is
    refused and never reaches OutQueue, its message was not deleted and comes back after the
    visibility timeout (receive count 2), when it completes; the 20 MB one is not killed."""
    with LocalTopology(
        app / "template.yaml", parameters={"RecordDir": str(app / "records")}, memory_limits=True
    ) as top:
        send(top, {"id": "big", "mb": 100})

        def redelivered() -> bool:
            return any(s["id"] == "big" and s["count"] == 2 and s["sent"] is True for s in lines(app, "sent.jsonl"))

        assert top.run_until(redelivered, max_seconds=60, poll_seconds=0.05), lines(app, "sent.jsonl")
        send(top, {"id": "small", "mb": 20})
        assert top.run_until(lambda: any(s["id"] == "small" for s in lines(app, "sent.jsonl")), max_seconds=60)
        assert top.run_until(lambda: not top.queue_depths()["WorkQueue"].busy, max_seconds=30, poll_seconds=0.05)
        memory = top.memory
        assert memory is not None
        killed = list(memory.killed)
        errors = top.errors
        delivered = out_messages(top)

    assert [type(k) for k in killed] == [OutOfMemory]
    assert killed[0].function_id == "WorkFunction" and killed[0].used_mb > 128
    assert errors == {"WorkFunction": 1}
    sent = lines(app, "sent.jsonl")
    assert {"id": "big", "count": 1, "sent": "InvocationAbandonedError"} in sent, sent
    assert sorted((m["id"], m["count"]) for m in delivered) == [("big", 2), ("small", 1)], delivered
    assert sorted((d["id"], d["count"]) for d in lines(app, "deliveries.jsonl")) == [
        ("big", 1),
        ("big", 2),
        ("small", 1),
    ]


@pytest.mark.parametrize("capped", ["true", "false"], ids=["maximum-concurrency-2", "no-maximum-concurrency"])
def test_a_throttled_sqs_batch_stays_in_flight_until_its_visibility_timeout(app: Path, capped: str) -> None:
    """GIVEN ReservedConcurrentExecutions 1 under a MaximumConcurrency of 2, or under none (the
    ticker's event source in template.yaml while ReserveConcurrency is true: the reservation alone
    caps the poller)
    WHEN one invocation holds the reservation and a second message arrives
    THEN the second batch is throttled: the function never sees its first receive; it comes back
    after the visibility timeout (receive count 2 or more) and runs once the first one ends."""
    parameters = {"RecordDir": str(app / "records"), "Capped": capped}
    with LocalTopology(app / "template.yaml", parameters=parameters) as top:
        (event,) = next(f for f in top.template.functions if f.logical_id == "WorkFunction").sqs_events
        assert event.maximum_concurrency == (2 if capped == "true" else None)
        send(top, {"id": "first", "block": True})
        assert top.run_until(lambda: bool(lines(app, "deliveries.jsonl")), max_seconds=60, poll_seconds=0.05)
        send(top, {"id": "second"})
        assert top.run_until(lambda: top.throttles.get("WorkFunction", 0) >= 1, max_seconds=60, poll_seconds=0.05)
        (app / "records" / "release-first").write_text("")
        done = top.run_until(lambda: {s["id"] for s in lines(app, "sent.jsonl")} == {"first", "second"}, max_seconds=60)
        assert done, lines(app, "sent.jsonl")
        throttles, errors = top.throttles, top.errors

    assert throttles["WorkFunction"] >= 1
    assert "WorkFunction" not in errors, "a throttle is not a function error"
    second = [d["count"] for d in lines(app, "deliveries.jsonl") if d["id"] == "second"]
    assert second and min(second) >= 2, f"the throttled receive reached the function: {second}"


def test_a_throttled_scheduled_event_is_retried_with_lambdas_backoff(app: Path) -> None:
    """GIVEN the account's unreserved concurrency in use by other functions (a burst)
    WHEN the schedule fires TickFunction (no reservation)
    THEN it is throttled and retried after 1 s, 2 s, ... (not dropped: under its 60 s maximum age),
    and runs once the burst is over."""
    top = LocalTopology(app / "template.yaml", parameters={"RecordDir": str(app / "records")}, account_concurrency=200)
    top.concurrency.occupy(top.concurrency.unreserved)
    with top:
        assert top.run_until(lambda: top.throttles.get("TickFunction", 0) >= 3, max_seconds=60, poll_seconds=0.05)
        assert lines(app, "ticks.jsonl") == []
        top.concurrency.occupy(0)
        assert top.run_until(lambda: bool(top.async_outcomes), max_seconds=60, poll_seconds=0.05)
        (function, outcome), *_ = top.async_outcomes
        ticks = lines(app, "ticks.jsonl")

    assert function == "TickFunction" and outcome.ran
    assert outcome.throttles >= 3
    assert outcome.delays[:3] == (1.0, 2.0, 4.0)
    assert len(ticks) == 1
