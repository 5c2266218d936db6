"""A function's Timeout in local mode is Lambda's: an invocation that outlives it is abandoned at it.

The caller stops waiting at the Timeout (the invocation failed, its concurrency slot is free, its
batch is not deleted and comes back after the visibility timeout), and the abandoned code can reach
neither AWS nor the engine afterwards, as Lambda would have stopped it. The handler below blocks on
a file appearing (an event the test controls, never a wall-clock bound) well past its 4 s Timeout;
a redelivery only writes a line and returns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from workerless_devkit.local.runtime import LocalTopology

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  RecordDir:
    Type: String
Resources:
  SlowQueue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 4
  SlowFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/slow/
      Handler: app.handler
      Runtime: python3.12
      Timeout: 4
      Environment:
        Variables:
          RECORD_DIR: !Ref RecordDir
          SLOW_QUEUE_URL: !Ref SlowQueue
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !GetAtt SlowQueue.Arn
            BatchSize: 1
            ScalingConfig:
              MaximumConcurrency: 2
"""

# First delivery of a message: record it, block until the test creates "release" (far past the
# Timeout), then try an SQS call and an engine-client HTTP call (a client with the container wiring's
# engine hooks, as the wiring builds its engine's) and record what each raised. A redelivery records
# itself and returns at once.
SLOW = """\
import json, os, time
import boto3
from workerless import runtime
from workerless.engines import new_http_client

def _write(name, entry):
    with open(os.path.join(os.environ["RECORD_DIR"], name), "a") as fh:
        fh.write(json.dumps(entry) + "\\n")

def handler(event, context):
    record_dir, url = os.environ["RECORD_DIR"], os.environ["SLOW_QUEUE_URL"]
    for record in event["Records"]:
        body = json.loads(record["body"])
        count = int(record["attributes"]["ApproximateReceiveCount"])
        released = os.path.exists(os.path.join(record_dir, "release"))
        _write("deliveries.jsonl", {"id": body["id"], "count": count, "released": released})
        if count > 1:
            continue
        for _ in range(3000):  # 60 s at most: the test releases it long before
            if os.path.exists(os.path.join(record_dir, "release")):
                break
            time.sleep(0.02)
        late = {"id": body["id"]}
        try:
            sqs = boto3.client("sqs")  # building a client calls nothing; sending does
            sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"id": "late"}))
            late["sqs"] = "sent"
        except Exception as exc:
            late["sqs"] = type(exc).__name__
        client = new_http_client(1.0, hooks.engine() if (hooks := runtime.current().hooks) is not None else None)
        try:
            client.get("http://127.0.0.1:9/")
            late["http"] = "answered"
        except Exception as exc:
            late["http"] = type(exc).__name__
        finally:
            client.close()
        _write("late.jsonl", late)
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    (tmp_path / "functions" / "slow").mkdir(parents=True)
    (tmp_path / "functions" / "slow" / "app.py").write_text(SLOW)
    (tmp_path / "records").mkdir()
    return tmp_path


def lines(app: Path, name: str) -> list[dict[str, Any]]:
    path = app / "records" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_invocation_past_its_timeout_is_abandoned_and_its_late_calls_are_refused(app: Path) -> None:
    """GIVEN two messages whose handlers block far past their 4 s Timeout, MaximumConcurrency 2
    WHEN the Timeout passes
    THEN both invocations count as failed (timed out) while the handlers still block, both slots are
    free again, the messages were not deleted and come back after the 4 s visibility (receive count
    2) and complete; once released, the abandoned handlers' SQS call and engine HTTP call are both
    refused (InvocationAbandonedError), so nothing they do reaches AWS or the engine."""
    with LocalTopology(app / "template.yaml", parameters={"RecordDir": str(app / "records")}) as top:
        sqs = top.client("sqs")
        for i in (1, 2):
            sqs.send_message(QueueUrl=top.queue_url("SlowQueue"), MessageBody=json.dumps({"id": i}))

        def redelivered() -> bool:
            return {(d["id"], d["count"]) for d in lines(app, "deliveries.jsonl")} >= {(1, 2), (2, 2)}

        # Both handlers still block (nothing released yet): the redeliveries needed both slots back.
        assert top.run_until(redelivered, max_seconds=60, poll_seconds=0.05), lines(app, "deliveries.jsonl")
        assert top.errors.get("SlowFunction") == 2, top.errors
        assert lines(app, "late.jsonl") == [], "an abandoned handler returned on its own"
        assert top.run_until(lambda: not top.queue_depths()["SlowQueue"].busy, max_seconds=30, poll_seconds=0.05)

        (app / "records" / "release").write_text("")
        assert top.run_until(lambda: len(lines(app, "late.jsonl")) == 2, max_seconds=30, poll_seconds=0.05)
        depth = top.queue_depths()["SlowQueue"]
        invocations, errors = top.invocations, top.errors

    deliveries = lines(app, "deliveries.jsonl")
    assert sorted((d["id"], d["count"]) for d in deliveries) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(not d["released"] for d in deliveries), "every delivery ran while the first runs still blocked"
    assert sorted(lines(app, "late.jsonl"), key=lambda late: late["id"]) == [
        {"id": 1, "sqs": "InvocationAbandonedError", "http": "InvocationAbandonedError"},
        {"id": 2, "sqs": "InvocationAbandonedError", "http": "InvocationAbandonedError"},
    ]
    assert depth.visible == depth.in_flight == 0, "no late message reached the queue"
    assert invocations == {"SlowFunction": 4}
    assert errors == {"SlowFunction": 2}, "the redeliveries succeeded; the abandoned results counted as failures"


def test_a_direct_invoke_past_the_timeout_raises_lambdas_timeout_error(app: Path) -> None:
    """``invoke()`` (like ``sam local invoke``) returns at the Timeout with Lambda's error."""
    event = {
        "Records": [{"body": json.dumps({"id": 9}), "attributes": {"ApproximateReceiveCount": "1"}, "messageId": "m"}]
    }
    with LocalTopology(app / "template.yaml", parameters={"RecordDir": str(app / "records")}) as top:
        with pytest.raises(TimeoutError, match=r"^Task timed out after 4\.00 seconds$"):
            top.invoke("SlowFunction", event)
        (app / "records" / "release").write_text("")
        assert top.run_until(lambda: len(lines(app, "late.jsonl")) == 1, max_seconds=30, poll_seconds=0.05)
    assert lines(app, "late.jsonl") == [
        {"id": 9, "sqs": "InvocationAbandonedError", "http": "InvocationAbandonedError"}
    ]
