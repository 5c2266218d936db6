"""The local runtime emulates Lambda around ordinary functions: SQS event sources (BatchSize,
MaximumConcurrency, partial batch responses, redelivery, DLQ), schedules, recursive-loop detection,
idle detection and the environment union — on a small fixture template written into tmp_path."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from workerless_devkit.local.runtime import IdleTimeout, LocalTopology
from workerless_devkit.local.template import TemplateError
from workerless_devkit.local.tracker import TopologyTracker

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  RecordDir:
    Type: String
  SecretArn:
    Type: String
  LoopSetting:
    Type: String
    Default: Terminate
    AllowedValues: [Allow, Terminate]
  BatchSize:
    Type: Number
    Default: 3
  EchoVisibility:
    Type: Number
    Default: 2
Globals:
  Function:
    Runtime: python3.12
    Timeout: 5
    Environment:
      Variables:
        RECORD_DIR: !Ref RecordDir
        WORKERLESS_ENGINE: nodeflow
        WORKERLESS_SECRET_ARN: !Ref SecretArn
        ECHO_QUEUE_URL: !Ref EchoQueue
Resources:
  EchoQueue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: !Ref EchoVisibility
      SqsManagedSseEnabled: true
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt EchoDeadLetterQueue.Arn
        maxReceiveCount: 2
  EchoDeadLetterQueue:
    Type: AWS::SQS::Queue
  EchoFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/echo/
      Handler: app.handler
      # At most its queue's visibility, as Lambda requires: a failed batch comes back in 2 s.
      Timeout: 2
      Environment:
        Variables:
          ECHO_ONLY: "yes"
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !GetAtt EchoQueue.Arn
            BatchSize: !Ref BatchSize
            ScalingConfig:
              MaximumConcurrency: 2
            FunctionResponseTypes: [ReportBatchItemFailures]
  LoopQueue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 30
  LoopFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/loop-back/
      Handler: app.handler
      RecursiveLoop: !Ref LoopSetting
      # SAM's generated role (local mode enforces it): a SAM policy template lets it send to its queue.
      Policies:
        - SQSSendMessagePolicy:
            QueueName: !GetAtt LoopQueue.QueueName
      Environment:
        Variables:
          LOOP_QUEUE_URL: !Sub "${LoopQueue}"
      Events:
        Again:
          Type: SQS
          Properties:
            Queue: !GetAtt LoopQueue.Arn
            BatchSize: 1
  TickFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/tick/
      Handler: app.handler
      Events:
        Watchdog:
          Type: Schedule
          Properties:
            Schedule: rate(1 minute)
"""

# Records what it saw, one JSON line per invocation; fails or sleeps as the message body asks.
ECHO = """\
import json, os, threading, time

_lock = threading.Lock()
_active = 0

def _write(entry):
    with _lock, open(os.path.join(os.environ["RECORD_DIR"], "echo.jsonl"), "a") as fh:
        fh.write(json.dumps(entry) + "\\n")

def handler(event, context):
    global _active
    with _lock:
        _active += 1
        active = _active
    try:
        records = event["Records"]
        _write({
            "active": active,
            "remaining_ms": context.get_remaining_time_in_millis(),
            "function_name": context.function_name,
            "records": [
                {"id": json.loads(r["body"])["id"], "count": int(r["attributes"]["ApproximateReceiveCount"]),
                 "source": r["eventSourceARN"], "md5": r["md5OfBody"], "attrs": r["messageAttributes"]}
                for r in records
            ],
            "env": {k: os.environ.get(k) for k in ("ECHO_ONLY", "LOOP_QUEUE_URL", "WORKERLESS_ENGINE",
                                                    "WORKERLESS_ENV_FILE", "WORKERLESS_SECRET_ARN")},
        })
        failures = []
        for r in records:
            body = json.loads(r["body"])
            time.sleep(body.get("sleep", 0))
            while body.get("until_file") and not os.path.exists(body["until_file"]):
                time.sleep(0.02)
            if body.get("raise"):
                raise RuntimeError("asked to raise")
            if int(r["attributes"]["ApproximateReceiveCount"]) <= body.get("fail_times", 0):
                failures.append({"itemIdentifier": r["messageId"]})
        return {"batchItemFailures": failures}
    finally:
        with _lock:
            _active -= 1
"""

# Sends the next hop of a chain to its own queue until hop == stop.
LOOP = """\
import json, os, time
import boto3

_sqs = None

def handler(event, context):
    global _sqs
    if _sqs is None:
        _sqs = boto3.client("sqs")
    # Read before any sleep: an invocation outliving its topology no longer has the environment.
    record_dir, url = os.environ["RECORD_DIR"], os.environ["LOOP_QUEUE_URL"]
    for record in event["Records"]:
        body = json.loads(record["body"])
        with open(os.path.join(record_dir, "loop.jsonl"), "a") as fh:
            fh.write(json.dumps(body) + "\\n")
        time.sleep(body.get("sleep", 0))
        if body["hop"] < body["stop"]:
            try:
                _sqs.send_message(QueueUrl=url,
                                  MessageBody=json.dumps({"hop": body["hop"] + 1, "stop": body["stop"]}))
            except Exception as exc:
                with open(os.path.join(record_dir, "late.txt"), "w") as fh:
                    fh.write(type(exc).__name__)
"""

TICK = """\
import json, os

def handler(event, context):
    with open(os.path.join(os.environ["RECORD_DIR"], "tick.jsonl"), "a") as fh:
        fh.write(json.dumps({"source": event.get("source"), "detail-type": event.get("detail-type")}) + "\\n")
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A template and its function directories (hyphenated, like the real ones) in tmp_path."""
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    for directory, code in (("echo", ECHO), ("loop-back", LOOP), ("tick", TICK)):
        (tmp_path / "functions" / directory).mkdir(parents=True)
        (tmp_path / "functions" / directory / "app.py").write_text(code)
    (tmp_path / "records").mkdir()
    (tmp_path / ".env").write_text("# engine values\nSHEPTRA_API_URL=http://127.0.0.1:1\nSHEPTRA_TOKEN_ENDPOINT=\n")
    return tmp_path


def topology(app: Path, **options: Any) -> LocalTopology:
    parameters = {"RecordDir": str(app / "records"), "SecretArn": "arn:aws:secretsmanager:us-east-1:1:secret:x"}
    parameters.update(options.pop("parameters", {}))
    return LocalTopology(app / "template.yaml", app / ".env", parameters=parameters, **options)


def lines(app: Path, name: str) -> list[dict[str, Any]]:
    path = app / "records" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def send(top: LocalTopology, queue: str, *bodies: dict[str, Any]) -> None:
    sqs = top.client("sqs")
    for body in bodies:
        sqs.send_message(QueueUrl=top.queue_url(queue), MessageBody=json.dumps(body))


#: How long a test waits for the event it needs: generous, since the wait ends as soon as the event
#: happens; only a run that never gets there waits it out (then the test fails, naming the event).
WAIT_SECONDS = 120


def echoed(app: Path) -> list[tuple[int, int]]:
    """(id, ApproximateReceiveCount) of every record the echo function was handed, in order."""
    return [(r["id"], r["count"]) for entry in lines(app, "echo.jsonl") for r in entry["records"]]


def emptied(top: LocalTopology, queue: str) -> bool:
    """No message left in the queue: every one was deleted (none visible, in flight or delayed)."""
    depth = top.queue_depths()[queue]
    return not depth.busy and depth.delayed == 0


def wait_for(top: LocalTopology, what: str, done: Any) -> None:
    """Run the topology until `done()` holds: the event itself, not a quiet spell after it."""
    assert top.run_until(done, max_seconds=WAIT_SECONDS, poll_seconds=0.05), f"never happened: {what}"


def test_batches_honour_batch_size_and_maximum_concurrency(app: Path) -> None:
    """GIVEN BatchSize 3 and MaximumConcurrency 2 WHEN 12 slow messages arrive THEN no batch holds more
    than 3 records, at most (and at some point exactly) 2 batches run at once, every message is
    processed once and deleted."""
    with topology(app) as top:
        send(top, "EchoQueue", *({"id": i, "sleep": 0.15} for i in range(12)))
        wait_for(top, "12 messages handled and deleted", lambda: len(echoed(app)) >= 12 and emptied(top, "EchoQueue"))
        depths = top.queue_depths()
    seen = lines(app, "echo.jsonl")
    assert max(len(entry["records"]) for entry in seen) <= 3
    assert max(entry["active"] for entry in seen) == 2
    assert sorted(r["id"] for entry in seen for r in entry["records"]) == list(range(12))
    assert depths["EchoQueue"].visible == depths["EchoQueue"].in_flight == 0
    first = seen[0]
    assert first["function_name"] == "workerless-local-EchoFunction"
    assert 0 < first["remaining_ms"] <= 2000
    assert first["records"][0]["source"] == "arn:aws:sqs:us-east-1:123456789012:workerless-local-EchoQueue"
    assert len(first["records"][0]["md5"]) == 32


def test_partial_batch_response_redelivers_only_failed_items(app: Path) -> None:
    """GIVEN one record of a batch reported in batchItemFailures WHEN the visibility timeout passes THEN
    only that record comes back, with ApproximateReceiveCount 2; the others were deleted."""
    with topology(app) as top:
        send(top, "EchoQueue", {"id": 1}, {"id": 2, "fail_times": 1}, {"id": 3})
        wait_for(
            top,
            "the failed record redelivered and deleted",
            lambda: (2, 2) in echoed(app) and emptied(top, "EchoQueue"),
        )
        assert top.invocations["EchoFunction"] >= 2
    deliveries = [(r["id"], r["count"]) for entry in lines(app, "echo.jsonl") for r in entry["records"]]
    assert sorted(deliveries) == [(1, 1), (2, 1), (2, 2), (3, 1)]


def test_a_raised_exception_returns_the_batch_and_redrive_moves_it_to_the_dlq(app: Path) -> None:
    """GIVEN a function that raises WHEN the message has been received maxReceiveCount (2) times THEN
    SQS moves it to the dead-letter queue; the function saw it exactly twice."""
    with topology(app) as top:
        send(top, "EchoQueue", {"id": 7, "raise": True})
        wait_for(
            top,
            "two failed invocations and the message in the DLQ",
            lambda: top.errors.get("EchoFunction", 0) >= 2 and top.queue_depths()["EchoDeadLetterQueue"].visible >= 1,
        )
        dlq = top.client("sqs").receive_message(
            QueueUrl=top.queue_url("EchoDeadLetterQueue"), MaxNumberOfMessages=10, WaitTimeSeconds=0
        )
        assert top.errors["EchoFunction"] == 2
    assert [json.loads(m["Body"])["id"] for m in dlq.get("Messages", [])] == [7]
    counts = [r["count"] for entry in lines(app, "echo.jsonl") for r in entry["records"]]
    assert counts == [1, 2]


@pytest.mark.parametrize(("setting", "expected_hops"), [("Allow", 20), ("Terminate", 16)])
def test_recursive_loop_is_stopped_after_16_rounds_unless_allowed(app: Path, setting: str, expected_hops: int) -> None:
    """GIVEN a function that re-sends to its own queue for 20 rounds WHEN RecursiveLoop is Allow THEN all
    20 rounds run; WHEN it is not THEN the 17th delivery is stopped (16 invocations) and recorded."""
    # The template's 30 s visibility: a slow hop on a loaded machine must not be redelivered.
    with topology(app, parameters={"LoopSetting": setting}) as top:
        send(top, "LoopQueue", {"hop": 1, "stop": 20})
        if setting == "Allow":
            wait_for(
                top,
                "20 hops, the last one deleted",
                lambda: len(lines(app, "loop.jsonl")) >= 20 and emptied(top, "LoopQueue"),
            )
        else:
            wait_for(top, "the loop stopped", lambda: bool(top.stopped_loops))
        stopped = top.stopped_loops
        assert top.invocations["LoopFunction"] == expected_hops
        assert top.queue_depths()["LoopQueue"].visible == 0
    assert [body["hop"] for body in lines(app, "loop.jsonl")] == list(range(1, expected_hops + 1))
    if setting == "Allow":
        assert stopped == []
    else:
        assert [(s.function, s.depth, s.moved_to) for s in stopped] == [("LoopFunction", 16, None)]


def test_a_loop_is_stopped_even_when_its_next_message_is_received_before_the_send_returns(
    app: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN the event source receives each re-sent message before SendMessage has returned to the
    function (a busy machine: the receiver's long poll wins the race) WHEN the chain passes the loop
    limit THEN it is still stopped at depth 16: a message's depth does not wait for its MessageId."""
    record_depth = TopologyTracker.record_depth

    def late_record_depth(self: TopologyTracker, message_id: str, function_id: str, depth: int) -> None:
        time.sleep(0.3)  # SendMessage's response reaches the function only after the delivery
        record_depth(self, message_id, function_id, depth)

    monkeypatch.setattr(TopologyTracker, "record_depth", late_record_depth)
    with topology(app) as top:
        send(top, "LoopQueue", {"hop": 1, "stop": 20})
        # Done when stopped, or when the chain has gone past the limit (then it was not stopped).
        wait_for(
            top, "the loop stopped or past 16", lambda: bool(top.stopped_loops) or len(lines(app, "loop.jsonl")) > 16
        )
        assert [(s.depth, s.moved_to) for s in top.stopped_loops] == [(16, None)]
        assert top.invocations["LoopFunction"] == 16
    assert [body["hop"] for body in lines(app, "loop.jsonl")] == list(range(1, 17))


def test_run_until_idle_times_out_while_work_is_running(app: Path) -> None:
    """GIVEN an invocation that runs longer than max_seconds WHEN run_until_idle is asked to finish THEN
    it raises IdleTimeout instead of declaring the topology idle."""
    release = app / "records" / "release"
    with topology(app) as top:
        # The invocation runs until the test releases it: run_until_idle can only return by timing out.
        send(top, "EchoQueue", {"id": 1, "until_file": str(release)})
        with pytest.raises(IdleTimeout):
            top.run_until_idle(idle_seconds=0.3, max_seconds=0.8)
        assert not release.exists()
        release.touch()
        wait_for(top, "the released message deleted", lambda: emptied(top, "EchoQueue"))


def test_environment_is_the_union_with_the_env_file_and_is_restored(app: Path) -> None:
    """GIVEN Globals and per-function variables and an env file with Sheptra keys WHEN functions run THEN
    they see every function's variables, WORKERLESS_ENV_FILE, the engine inferred from the file and no
    secret ARN; after stop the process environment is as before."""
    before = dict(os.environ)
    with topology(app, schedule_seconds=0.2) as top:
        send(top, "EchoQueue", {"id": 1})
        wait_for(top, "an echo and a tick", lambda: bool(lines(app, "echo.jsonl")) and bool(lines(app, "tick.jsonl")))
        assert top.invocations.get("TickFunction", 0) >= 1
    env = lines(app, "echo.jsonl")[0]["env"]
    assert env == {
        "ECHO_ONLY": "yes",
        "LOOP_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/workerless-local-LoopQueue",
        "WORKERLESS_ENGINE": "sheptra",
        "WORKERLESS_ENV_FILE": str((app / ".env").resolve()),
        "WORKERLESS_SECRET_ARN": None,
    }
    assert lines(app, "tick.jsonl")[0] == {"source": "aws.events", "detail-type": "Scheduled Event"}
    assert dict(os.environ) == before


def test_conflicting_environment_and_missing_handler_fail_before_start(app: Path) -> None:
    """GIVEN two functions that set one key differently, or a handler file that does not exist THEN the
    topology refuses to start with an error naming the key / the function."""
    template = app / "template.yaml"
    template.write_text(TEMPLATE.replace('ECHO_ONLY: "yes"', 'ECHO_ONLY: "yes"\n          RECORD_DIR: elsewhere'))
    with pytest.raises(TemplateError, match=r"RECORD_DIR is set differently by EchoFunction and LoopFunction"):
        topology(app)
    template.write_text(TEMPLATE.replace("CodeUri: functions/tick/", "CodeUri: functions/missing/"))
    with pytest.raises(Exception, match=r"TickFunction: handler file .* not found"):
        topology(app).start()
    assert "WORKERLESS_ENV_FILE" not in os.environ


def test_a_stopped_loop_message_goes_to_the_source_queues_dlq(app: Path) -> None:
    """GIVEN the looping function's queue has a redrive policy WHEN the loop limit stops a delivery THEN
    the message is moved to that DLQ instead of being dropped."""
    template = app / "template.yaml"
    template.write_text(
        TEMPLATE.replace(
            "      VisibilityTimeout: 30\n",
            "      VisibilityTimeout: 30\n"
            "      RedrivePolicy: {deadLetterTargetArn: !GetAtt LoopDeadLetterQueue.Arn, maxReceiveCount: 3}\n"
            "  LoopDeadLetterQueue:\n    Type: AWS::SQS::Queue\n",
        )
    )
    with topology(app) as top:
        send(top, "LoopQueue", {"hop": 1, "stop": 18})
        wait_for(
            top,
            "the stopped delivery in the DLQ",
            lambda: bool(top.stopped_loops) and top.queue_depths()["LoopDeadLetterQueue"].visible >= 1,
        )
        dlq = top.client("sqs").receive_message(QueueUrl=top.queue_url("LoopDeadLetterQueue"), WaitTimeSeconds=0)
        assert [(s.depth, s.moved_to) for s in top.stopped_loops] == [(16, "LoopDeadLetterQueue")]
    assert [json.loads(m["Body"])["hop"] for m in dlq["Messages"]] == [17]


def test_an_invocation_outliving_the_drain_cannot_reach_aws(app: Path) -> None:
    """GIVEN an invocation still running when stop() gives up draining WHEN it then calls SQS THEN the
    call is refused (TopologyStoppedError) instead of going past the torn-down mock."""
    with topology(app, drain_seconds=0.2) as top:
        # Sleeps well past the drain (stop() joins each event source for at least 0.1 s as well).
        send(top, "LoopQueue", {"hop": 1, "stop": 2, "sleep": 3})
        wait_for(top, "the first hop running", lambda: bool(lines(app, "loop.jsonl")))
    late = app / "records" / "late.txt"
    deadline = time.monotonic() + WAIT_SECONDS
    # The function opens the file and then writes it: wait for the write, not for the file.
    while not (late.exists() and late.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert late.read_text() == "TopologyStoppedError"
