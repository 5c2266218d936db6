"""In-memory fakes of the boto3 SQS and DynamoDB clients, with billing meters.

They stand in for *botocore* only: workerless's own adapters (``aws.sqs.Queues``,
``aws.dynamo.JobStore``, ``DynamoState``) run unchanged on top of them, so a CPU measurement sees
workerless's code and not botocore's or moto's. Every call is metered the way AWS bills it:

- SQS: one request per started 64 KiB of payload (send, send batch, receive), else one per call;
- DynamoDB on-demand: write units = started KiB of the larger of the item before and after the
  write (a refused conditional write still costs its units); strongly consistent read units =
  started 4 KiB per item returned (a miss costs one).

The conditional and update expressions the job store uses are evaluated for real (a tiny parser:
``attribute_exists``, ``attribute_not_exists``, ``if_not_exists``, comparisons, AND/OR, parens),
so a refused claim is refused here exactly as DynamoDB would refuse it.
"""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

SQS_UNIT = 64 * 1024


#: DynamoDB keeps a table key it decrypted for a principal this long (bench/cost.py, KMS).
KMS_WINDOW_SECONDS = 300


@dataclass
class Meter:
    """Billable units, per service operation and per (calling function, operation)."""

    calls: Counter[str] = field(default_factory=Counter)
    sqs_requests: Counter[str] = field(default_factory=Counter)
    ddb_write_units: Counter[str] = field(default_factory=Counter)
    ddb_read_units: Counter[str] = field(default_factory=Counter)
    #: DynamoDB calls per (caller, operation): write units per call tell an item's size from a count
    ddb_calls: Counter[str] = field(default_factory=Counter)
    #: who is calling: the driver sets it to the Lambda function (or "esm" for the event source)
    caller: str = "?"
    #: seconds of CPU spent inside the fakes themselves (subtracted from adapter CPU)
    fake_cpu: float = 0.0
    #: (caller, 5-minute window of time.time()) pairs with a DynamoDB call: what the KMS model prices
    #: (DynamoDB decrypts the table key with the AWS managed key once per principal and window)
    ddb_windows: set[tuple[str, int]] = field(default_factory=set)

    def reset(self) -> None:
        self.calls.clear()
        self.sqs_requests.clear()
        self.ddb_write_units.clear()
        self.ddb_read_units.clear()
        self.ddb_calls.clear()
        self.calls_by_caller.clear()
        self.ddb_windows.clear()
        self.fake_cpu = 0.0

    #: calls per (caller, service): the billed-duration model adds each call's latency to its caller
    calls_by_caller: Counter[str] = field(default_factory=Counter)

    def sqs(self, op: str, payload: int = 0, *, queue: str | None = None) -> None:
        self.calls[f"sqs.{op}"] += 1
        self.calls_by_caller[f"{self.caller}:sqs"] += 1
        # Single sends are told apart by queue (a heartbeat ticket, a poller relay or tick) in the requests.
        label = f"{op}({queue})" if queue else op
        self.sqs_requests[f"{self.caller}:{label}"] += max(1, math.ceil(payload / SQS_UNIT))

    def ddb(self, op: str, *, write: int = 0, read: int = 0) -> None:
        self.calls[f"dynamodb.{op}"] += 1
        self.calls_by_caller[f"{self.caller}:dynamodb"] += 1
        self.ddb_calls[f"{self.caller}:{op}"] += 1
        self.ddb_windows.add((self.caller, int(time.time() // KMS_WINDOW_SECONDS)))
        if write:
            self.ddb_write_units[f"{self.caller}:{op}"] += write
        if read:
            self.ddb_read_units[f"{self.caller}:{op}"] += read

    def totals(self) -> dict[str, float]:
        return {
            "sqs_requests": float(sum(self.sqs_requests.values())),
            "ddb_write_units": float(sum(self.ddb_write_units.values())),
            "ddb_read_units": float(sum(self.ddb_read_units.values())),
        }


def _timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return fn(self, *args, **kwargs)
        finally:
            self.meter.fake_cpu += time.thread_time() - start

    wrapper.__name__ = fn.__name__
    return wrapper


# ---------------------------------------------------------------------------------------- SQS


@dataclass
class _Message:
    id: str
    body: str
    visible_at: float
    receive_count: int = 0
    receipt: str = ""
    sent_at: float = 0.0


class FakeSqs:
    """The SQS client calls workerless makes, plus what Lambda's event source does (receive, delete).

    ``clock`` drives DelaySeconds and visibility timeouts (the driver may use a virtual clock).
    Queues spring into existence on first use of their URL.
    """

    def __init__(
        self,
        meter: Meter,
        *,
        clock: Callable[[], float] = time.time,
        visibility: float = 30.0,
        max_message_bytes: int = 1_048_576,
    ) -> None:
        self.meter = meter
        self.clock = clock
        self.visibility = visibility
        #: Every queue's MaximumMessageSize (the template's queues: 1 MiB). GetQueueAttributes answers
        #: it as SQS does; without it the wrapper asks again before every SendMessageBatch.
        self.max_message_bytes = max_message_bytes
        self.queues: dict[str, list[_Message]] = {}
        self._lock = threading.Lock()

    def _q(self, url: str) -> list[_Message]:
        return self.queues.setdefault(url, [])

    @_timed
    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        self.meter.sqs("GetQueueAttributes")
        now = self.clock()
        with self._lock:
            msgs = self._q(QueueUrl)
            delayed = sum(1 for m in msgs if m.receive_count == 0 and m.visible_at > now)
            invisible = sum(1 for m in msgs if m.receive_count > 0 and m.visible_at > now)
            visible = len(msgs) - delayed - invisible
        values = {
            "ApproximateNumberOfMessages": visible,
            "ApproximateNumberOfMessagesNotVisible": invisible,
            "ApproximateNumberOfMessagesDelayed": delayed,
            "MaximumMessageSize": self.max_message_bytes,
        }
        wanted = values if "All" in AttributeNames else {k: v for k, v in values.items() if k in AttributeNames}
        return {"Attributes": {k: str(v) for k, v in wanted.items()}}

    def _put(self, url: str, body: str, delay: int) -> str:
        now = self.clock()
        message = _Message(uuid.uuid4().hex, body, now + delay, sent_at=now)
        self._q(url).append(message)
        return message.id

    @_timed
    def send_message(self, QueueUrl: str, MessageBody: str, DelaySeconds: int = 0) -> dict[str, Any]:
        self.meter.sqs("SendMessage", len(MessageBody.encode()), queue=QueueUrl.rsplit("/", 1)[-1])
        with self._lock:
            return {"MessageId": self._put(QueueUrl, MessageBody, DelaySeconds)}

    @_timed
    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.meter.sqs("SendMessageBatch", sum(len(e["MessageBody"].encode()) for e in Entries))
        with self._lock:
            ok = [
                {"Id": e["Id"], "MessageId": self._put(QueueUrl, e["MessageBody"], int(e.get("DelaySeconds", 0)))}
                for e in Entries
            ]
        return {"Successful": ok, "Failed": []}

    @_timed
    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int = 1, **_: Any) -> dict[str, Any]:
        now = self.clock()
        out = []
        with self._lock:
            for m in self._q(QueueUrl):
                if len(out) >= MaxNumberOfMessages:
                    break
                if m.visible_at <= now:
                    m.receive_count += 1
                    m.visible_at = now + self.visibility
                    m.receipt = uuid.uuid4().hex
                    out.append(m)
        # An empty receive by the event source is one of its idle long polls: priced in the idle cost.
        self.meter.sqs("ReceiveMessage" if out else "ReceiveMessageEmpty", sum(len(m.body.encode()) for m in out))
        return {
            "Messages": [
                {
                    "MessageId": m.id,
                    "ReceiptHandle": m.receipt,
                    "Body": m.body,
                    "Attributes": {
                        "ApproximateReceiveCount": str(m.receive_count),
                        "SentTimestamp": str(int(m.sent_at * 1000)),
                    },
                }
                for m in out
            ]
        }

    @_timed
    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.meter.sqs("DeleteMessageBatch")
        handles = {e["ReceiptHandle"] for e in Entries}
        with self._lock:
            self.queues[QueueUrl] = [m for m in self._q(QueueUrl) if m.receipt not in handles]
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def depth(self, url: str) -> int:
        with self._lock:
            return len(self._q(url))

    def next_visible(self, url: str) -> float | None:
        with self._lock:
            times = [m.visible_at for m in self._q(url)]
        return min(times) if times else None


# ----------------------------------------------------------------------------------- DynamoDB


def _value_size(value: dict[str, Any]) -> int:
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(raw.encode())
    if kind == "N":
        digits = len(raw.lstrip("-").replace(".", "").lstrip("0")) or 1
        return math.ceil(digits / 2) + 1
    if kind == "B":
        return len(raw)
    if kind == "BOOL" or kind == "NULL":
        return 1
    return len(str(raw))


def item_size(item: dict[str, Any] | None) -> int:
    """DynamoDB's item size: attribute names plus values (numbers ~1 byte per 2 digits + 1)."""
    if not item:
        return 0
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def write_units(before: dict[str, Any] | None, after: dict[str, Any] | None) -> int:
    return max(1, math.ceil(max(item_size(before), item_size(after)) / 1024))


def read_units(item: dict[str, Any] | None) -> int:
    return max(1, math.ceil(item_size(item) / 4096))


_TOKEN = re.compile(r"\s*(\(|\)|,|<>|<=|>=|=|<|>|[#:]?[A-Za-z_][A-Za-z0-9_]*)")


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        found = _TOKEN.match(text, pos)
        if found is None:
            raise ValueError(f"cannot parse expression at {text[pos:]!r}")
        out.append(found.group(1))
        pos = found.end()
    return out


class _Expr:
    """Evaluates DynamoDB condition expressions over an item (None: no item)."""

    def __init__(self, text: str, names: dict[str, str], values: dict[str, Any]) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.names = names
        self.values = values

    def _peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _take(self) -> str:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def _name(self, tok: str) -> str:
        return self.names.get(tok, tok)

    def evaluate(self, item: dict[str, Any] | None) -> bool:
        self.i = 0
        result = self._or(item or {})
        if self._peek() is not None:
            raise ValueError(f"trailing tokens {self.toks[self.i :]}")
        return result

    def _or(self, item: dict[str, Any]) -> bool:
        left = self._and(item)
        while self._peek() and self._peek().upper() == "OR":  # type: ignore[union-attr]
            self._take()
            right = self._and(item)
            left = left or right
        return left

    def _and(self, item: dict[str, Any]) -> bool:
        left = self._not(item)
        while self._peek() and self._peek().upper() == "AND":  # type: ignore[union-attr]
            self._take()
            right = self._not(item)
            left = left and right
        return left

    def _not(self, item: dict[str, Any]) -> bool:
        if self._peek() and self._peek().upper() == "NOT":  # type: ignore[union-attr]
            self._take()
            return not self._not(item)
        return self._atom(item)

    def _atom(self, item: dict[str, Any]) -> bool:
        tok = self._take()
        if tok == "(":
            result = self._or(item)
            assert self._take() == ")"
            return result
        if tok in ("attribute_exists", "attribute_not_exists"):
            assert self._take() == "("
            name = self._name(self._take())
            assert self._take() == ")"
            return (name in item) == (tok == "attribute_exists")
        left = self._operand(tok, item)
        op = self._take()
        right = self._operand(self._take(), item)
        if left is None or right is None:
            return op == "<>" and left != right
        return {
            "=": lambda: left == right,
            "<>": lambda: left != right,
            "<": lambda: left < right,
            "<=": lambda: left <= right,
            ">": lambda: left > right,
            ">=": lambda: left >= right,
        }[op]()

    def _operand(self, tok: str, item: dict[str, Any]) -> Any:
        value = self.values.get(tok) if tok.startswith(":") else item.get(self._name(tok))
        if value is None:
            return None
        ((kind, raw),) = value.items()
        return float(raw) if kind == "N" else raw


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def apply_update(item: dict[str, Any], update: str, names: dict[str, str], values: dict[str, Any]) -> dict[str, Any]:
    """``SET a = :x, b = if_not_exists(b, :y) REMOVE c`` applied to a copy of ``item``."""
    out = dict(item)
    sections = re.split(r"\b(SET|REMOVE)\b", update)
    action = None
    for part in sections:
        if part in ("SET", "REMOVE"):
            action = part
            continue
        if not part.strip():
            continue
        for clause in _split_top(part):
            clause = clause.strip()
            if action == "REMOVE":
                out.pop(names.get(clause, clause), None)
                continue
            target, _, expr = clause.partition("=")
            name = names.get(target.strip(), target.strip())
            expr = expr.strip()
            found = re.fullmatch(r"if_not_exists\(\s*([#\w]+)\s*,\s*(:\w+)\s*\)", expr)
            if found:
                existing = names.get(found.group(1), found.group(1))
                out[name] = out.get(existing, values[found.group(2)])
            else:
                out[name] = values[expr]
    return out


class FakeDynamo:
    """The low-level DynamoDB client calls of ``JobStore`` / ``DynamoState``, one table, key ``pk``."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.items: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _refused(op: str, old: dict[str, Any] | None, kwargs: dict[str, Any]) -> ClientError:
        error: dict[str, Any] = {"Error": {"Code": "ConditionalCheckFailedException", "Message": "refused"}}
        if kwargs.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and old:
            error["Item"] = old
        return ClientError(error, op)

    def _check(self, kwargs: dict[str, Any], old: dict[str, Any] | None) -> bool:
        condition = kwargs.get("ConditionExpression")
        if not condition:
            return True
        return _Expr(
            condition, kwargs.get("ExpressionAttributeNames") or {}, kwargs.get("ExpressionAttributeValues") or {}
        ).evaluate(old)

    @_timed
    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        item = kwargs["Item"]
        key = item["pk"]["S"]
        with self._lock:
            old = self.items.get(key)
            self.meter.ddb("PutItem", write=write_units(old, item))
            if not self._check(kwargs, old):
                raise self._refused("PutItem", old, kwargs)
            self.items[key] = dict(item)
        return {}

    @_timed
    def update_item(self, **kwargs: Any) -> dict[str, Any]:
        key = kwargs["Key"]["pk"]["S"]
        with self._lock:
            old = self.items.get(key)
            if not self._check(kwargs, old):
                self.meter.ddb("UpdateItem", write=write_units(old, None))
                raise self._refused("UpdateItem", old, kwargs)
            new = apply_update(
                old or dict(kwargs["Key"]),
                kwargs["UpdateExpression"],
                kwargs.get("ExpressionAttributeNames") or {},
                kwargs.get("ExpressionAttributeValues") or {},
            )
            self.meter.ddb("UpdateItem", write=write_units(old, new))
            self.items[key] = new
        return {}

    @_timed
    def delete_item(self, **kwargs: Any) -> dict[str, Any]:
        key = kwargs["Key"]["pk"]["S"]
        with self._lock:
            old = self.items.get(key)
            self.meter.ddb("DeleteItem", write=write_units(old, None))
            if not self._check(kwargs, old):
                raise self._refused("DeleteItem", old, kwargs)
            self.items.pop(key, None)
        return {}

    @_timed
    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        key = kwargs["Key"]["pk"]["S"]
        with self._lock:
            item = self.items.get(key)
        units = read_units(item)
        self.meter.ddb("GetItem", read=units if kwargs.get("ConsistentRead") else math.ceil(units / 2))
        return {"Item": dict(item)} if item else {}

    @_timed
    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        responses: dict[str, list[dict[str, Any]]] = {}
        units = 0
        for table, request in RequestItems.items():
            found = []
            for key in request["Keys"]:
                with self._lock:
                    item = self.items.get(key["pk"]["S"])
                units += read_units(item)
                if item:
                    found.append(dict(item))
            responses[table] = found
        self.meter.ddb("BatchGetItem", read=units)
        return {"Responses": responses, "UnprocessedKeys": {}}
