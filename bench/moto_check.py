"""Cross-check of the in-memory meters against real boto3 calls on moto.

The same in-process pipeline (bench.pipeline) runs a few hundred jobs twice: once on the in-memory
fakes, once on moto's SQS and DynamoDB through real boto3 clients, where a botocore event hook
counts every call (SQS requests in 64 KiB units) and adds ``ReturnConsumedCapacity=TOTAL`` to every
DynamoDB call so that moto reports the capacity it consumed. The per-job figures of both runs are
put side by side in RESULTS.md.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

SQS_UNIT = 64 * 1024


class BillingHook:
    """botocore event handlers that meter SQS requests and DynamoDB consumed capacity."""

    def __init__(self) -> None:
        self.sqs_requests: Counter[str] = Counter()
        self.ddb_units: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def register(self, client: Any) -> None:
        service = client.meta.service_model.service_name
        client.meta.events.register(f"provide-client-params.{service}.*", self._params)
        client.meta.events.register(f"after-call.{service}.*", self._after)

    def _params(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.service_model.service_name == "dynamodb" and model.name in (
            "PutItem",
            "UpdateItem",
            "GetItem",
            "BatchGetItem",
            "DeleteItem",
        ):
            params.setdefault("ReturnConsumedCapacity", "TOTAL")
        if model.service_model.service_name == "sqs":
            payload = 0
            if model.name == "SendMessage":
                payload = len(str(params.get("MessageBody", "")).encode())
            elif model.name == "SendMessageBatch":
                payload = sum(len(str(e.get("MessageBody", "")).encode()) for e in params.get("Entries", []))
            if model.name not in ("ReceiveMessage",):
                self.sqs_requests[model.name] += max(1, math.ceil(payload / SQS_UNIT))

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        service = model.service_model.service_name
        self.calls[f"{service}.{model.name}"] += 1
        if service == "sqs" and model.name == "ReceiveMessage":
            messages = parsed.get("Messages") or []
            payload = sum(len(m.get("Body", "").encode()) for m in messages)
            key = "ReceiveMessage" if messages else "ReceiveMessageEmpty"
            self.sqs_requests[key] += max(1, math.ceil(payload / SQS_UNIT))
        if service == "dynamodb":
            consumed = parsed.get("ConsumedCapacity")
            items = consumed if isinstance(consumed, list) else [consumed] if consumed else []
            for item in items:
                self.ddb_units[model.name] += float(item.get("CapacityUnits", 0.0))


def moto_vs_fakes(jobs: int = 300) -> dict[str, Any]:
    import boto3
    from moto import mock_aws

    from bench.measure import TEMPLATE_TYPES, _ok, run_until_done
    from bench.pipeline import HEARTBEAT_URL, TABLE, TICKER_URL, Pipeline, queue_url, quiet_logs

    handlers = {t: _ok for t in TEMPLATE_TYPES}

    def drive(p: Pipeline, real: bool) -> None:
        for i in range(jobs):
            p.emulator.create_job(TEMPLATE_TYPES[i % 3], {"orderId": f"order-{i:05d}", "amount": 10})
        run_until_done(p)
        if real:
            time.sleep(1.6)  # the 5 s lease puts each ticket ~1 s out, in moto's real time
        else:
            p.clock.advance(120)
        p.pump_heartbeat()

    # -- fakes
    with quiet_logs(), Pipeline("sheptra", handlers, lease_seconds=5) as p:
        drive(p, real=False)
        fakes = {
            "sqs_requests": sum(v for k, v in p.meter.sqs_requests.items() if not k.endswith("Empty")) / jobs,
            "ddb_units": (sum(p.meter.ddb_write_units.values()) + sum(p.meter.ddb_read_units.values())) / jobs,
            "calls": {k: v / jobs for k, v in sorted(p.meter.calls.items())},
        }
    # -- moto
    env = {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with mock_aws():
            session = boto3.session.Session(region_name="us-east-1")
            sqs, ddb = session.client("sqs"), session.client("dynamodb")
            ddb.create_table(
                TableName=TABLE,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            for url in [queue_url(t) for t in TEMPLATE_TYPES] + [HEARTBEAT_URL, TICKER_URL]:
                created = sqs.create_queue(QueueName=url.rsplit("/", 1)[-1], Attributes={"VisibilityTimeout": "720"})
                assert created["QueueUrl"].endswith(url.rsplit("/", 1)[-1])
            hook = BillingHook()
            hook.register(sqs)
            hook.register(ddb)
            with quiet_logs(), Pipeline("sheptra", handlers, lease_seconds=5, sqs_client=sqs, dynamodb_client=ddb) as p:
                drive(p, real=True)
                states = Counter(j["state"] for j in p.emulator.jobs())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    moto = {
        "sqs_requests": sum(v for k, v in hook.sqs_requests.items() if not k.endswith("Empty")) / jobs,
        "ddb_units": sum(hook.ddb_units.values()) / jobs,
        "calls": {k: v / jobs for k, v in sorted(hook.calls.items())},
        "states": dict(states),
    }
    return {"jobs": jobs, "fakes": fakes, "moto": moto}
