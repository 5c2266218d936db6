"""moto-backed AWS for functional tests, created through the same boto3 calls as in AWS."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from moto import mock_aws

JOB_TYPES = ("charge-payment", "send-receipt", "generate-report")


@dataclass
class FakeContext:
    """Enough of a Lambda context for the handlers."""

    function_name: str = "test-function"
    remaining_ms: int = 60_000
    memory_limit_in_mb: int = 256
    aws_request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:test-function"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Aws:
    sqs: Any
    dynamodb: Any
    table: str
    queues: dict[str, str]
    heartbeat_queue: str
    ticker_queue: str
    dlqs: dict[str, str]

    def receive_event(self, queue_url: str, *, max_messages: int = 10, visibility: int = 30) -> dict[str, Any]:
        """Receive what the Lambda event source would, shaped as its SQS event."""
        answer = self.sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=max_messages,
            VisibilityTimeout=visibility,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        records = []
        for m in answer.get("Messages", []):
            records.append(
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": m.get("Attributes", {}),
                    "messageAttributes": {},
                    "md5OfBody": m["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue_url.rsplit('/', 1)[-1]}",
                    "awsRegion": "us-east-1",
                }
            )
        return {"Records": records}

    def settle(self, queue_url: str, event: dict[str, Any], response: dict[str, Any]) -> None:
        """Delete what the partial batch response says succeeded, as the event source does."""
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        for record in event["Records"]:
            if record["messageId"] not in failed:
                self.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=record["receiptHandle"])

    def depth(self, queue_url: str) -> int:
        attrs = self.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
        return sum(
            int(attrs[k])
            for k in (
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            )
        )

    def bodies(self, queue_url: str) -> list[dict[str, Any]]:
        """Peek at every visible message (made visible again at once)."""
        answer = self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        return [json.loads(m["Body"]) for m in answer.get("Messages", [])]


@contextmanager
def moto_aws(monkeypatch: Any, *, max_in_flight: int = 10, tick_seconds: int = 0) -> Iterator[Aws]:
    from workerless_devkit.local.provision import serialise_moto_dynamodb_writes

    serialise_moto_dynamodb_writes()  # DynamoDB's conditional writes are atomic; moto's, by this
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        table = "workerless-jobs-test"
        dynamodb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        dynamodb.update_time_to_live(
            TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"}
        )
        queues, dlqs = {}, {}
        for job_type in JOB_TYPES:
            dlq = sqs.create_queue(QueueName=f"{job_type}-dlq")["QueueUrl"]
            dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            queues[job_type] = sqs.create_queue(
                QueueName=job_type,
                Attributes={
                    "VisibilityTimeout": "30",
                    "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "3"}),
                },
            )["QueueUrl"]
            dlqs[job_type] = dlq
        heartbeat = sqs.create_queue(QueueName="heartbeat")["QueueUrl"]
        ticker = sqs.create_queue(QueueName="ticker")["QueueUrl"]
        routes = [{"type": t, "queue": queues[t], "max": max_in_flight} for t in JOB_TYPES]
        monkeypatch.setenv("WORKERLESS_TABLE", table)
        monkeypatch.setenv("WORKERLESS_ROUTES", json.dumps(routes))
        monkeypatch.setenv("WORKERLESS_HEARTBEAT_QUEUE_URL", heartbeat)
        monkeypatch.setenv("WORKERLESS_TICKER_QUEUE_URL", ticker)
        monkeypatch.setenv("WORKERLESS_TICK_SECONDS", str(tick_seconds))
        monkeypatch.setenv("WORKERLESS_POLL_BUDGET_SECONDS", "5")
        from workerless import runtime

        runtime.reset()
        yield Aws(sqs, dynamodb, table, queues, heartbeat, ticker, dlqs)
        runtime.reset()
