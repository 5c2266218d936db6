"""AWS's per-call limits, enforced in local mode where moto is more lenient than AWS.

moto 5.2.5 already refuses most of what AWS refuses (a body over the queue's MaximumMessageSize
counted in characters, DelaySeconds > 900, more than 10 SendMessageBatch entries, ReceiveMessage's
MaxNumberOfMessages > 10, a visibility past 12 hours from the send, BatchGetItem > 100 keys of one
table, TransactWriteItems > 100, an item over 405,000 bytes by its own measure). What it lets
through, and AWS refuses, is refused here, with the ``ClientError`` AWS returns (code, message,
HTTP 400; per-entry ``Failed`` where AWS reports a batch entry on its own):

- SQS message size in **UTF-8 bytes of the body plus every message attribute's name, data type and
  value** (moto counts the body's characters and ignores attributes), against the queue's
  MaximumMessageSize; a SendMessageBatch's total the same way (1 MiB);
- at most 10 message attributes a message;
- DeleteMessageBatch / ChangeMessageVisibilityBatch with more than 10 entries;
- CreateQueue / SetQueueAttributes values outside SQS's ranges (moto accepts a visibility of 13 h);
- DynamoDB item size as AWS computes it (names + values, numbers by significant digits, 3 bytes
  per list or map plus 1 per element) up to 400 KB, for PutItem, BatchWriteItem and
  TransactWriteItems puts, and (see :func:`check_update_item_size`) the item an UpdateItem leaves;
- BatchWriteItem at most 25 requests, BatchGetItem at most 100 keys over all tables.

The checks are botocore event hooks, registered on every session like :mod:`workerless_devkit.local.loop`'s,
active only while a :class:`LimitState` is activated (a running topology): ``before-parameter-build``
decides, ``before-call`` answers with AWS's error instead of sending the request, and for a batch
whose entries fail one by one the failing entries are taken out of the request and put back into
the answer's ``Failed`` list in ``after-call``. The library's code knows nothing of this.
"""

from __future__ import annotations

import base64
import copy
import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from workerless_devkit import sdk_hooks

#: SQS: the largest message (and SendMessageBatch total) since 2025, and every queue's default.
SQS_MAX_MESSAGE_BYTES = 1_048_576
SQS_MIN_MESSAGE_SIZE_SETTING = 1_024
SQS_MAX_BATCH_ENTRIES = 10
SQS_MAX_MESSAGE_ATTRIBUTES = 10
SQS_MAX_VISIBILITY_SECONDS = 43_200
#: DynamoDB's item size limit (400 KB), names and values included.
DYNAMODB_MAX_ITEM_BYTES = 400 * 1024
DYNAMODB_MAX_BATCH_WRITE = 25
DYNAMODB_MAX_BATCH_GET = 100
DYNAMODB_MAX_TRANSACT_ITEMS = 100

#: SQS queue attributes and the ranges CreateQueue / SetQueueAttributes accept.
SQS_ATTRIBUTE_RANGES: Mapping[str, tuple[int, int]] = {
    "DelaySeconds": (0, 900),
    "MaximumMessageSize": (SQS_MIN_MESSAGE_SIZE_SETTING, SQS_MAX_MESSAGE_BYTES),
    "MessageRetentionPeriod": (60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, SQS_MAX_VISIBILITY_SECONDS),
}
#: RedrivePolicy maxReceiveCount.
SQS_MAX_RECEIVE_COUNT_RANGE = (1, 1_000)

_CONTEXT_KEY = "workerless_local_limits"
_SQS_PREFIX = "AWS.SimpleQueueService."


@dataclass(frozen=True, slots=True)
class Refusal:
    """The error AWS answers a call with: ``code`` as botocore reports it, and its message."""

    code: str
    message: str
    #: SQS's JSON protocol also carries the query-protocol code (botocore maps the exception by it).
    query_code: str | None = None

    def parsed(self) -> dict[str, Any]:
        error: dict[str, Any] = {"Code": self.code, "Message": self.message}
        if self.query_code is not None:
            error.update(QueryErrorCode=self.query_code, Type="Sender")
        return {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": {}, "RetryAttempts": 0}}


def _sqs_refusal(code: str, message: str) -> Refusal:
    """SQS's errors: ``InvalidParameterValue``-style codes bare, the batch ones with SQS's prefix."""
    if code in ("InvalidParameterValue", "InvalidAttributeValue", "InvalidAttributeName"):
        return Refusal(code, message, query_code=code)
    return Refusal(_SQS_PREFIX + code, message, query_code=code)


def _validation(message: str) -> Refusal:
    return Refusal("ValidationException", message)


class LimitState:
    """What the hooks need from the running topology: each queue's MaximumMessageSize, by queue name
    (as CreateQueue / SetQueueAttributes set it; SQS's default for any other queue)."""

    def __init__(self, maximum_message_sizes: Mapping[str, int] | None = None) -> None:
        self._sizes = dict(maximum_message_sizes or {})
        self._lock = threading.Lock()

    def maximum_message_size(self, queue_name: str) -> int:
        with self._lock:
            return self._sizes.get(queue_name, SQS_MAX_MESSAGE_BYTES)

    def set_maximum_message_size(self, queue_name: str, size: int) -> None:
        with self._lock:
            self._sizes[queue_name] = size


_active: list[LimitState] = []
_active_lock = threading.Lock()


def activate(state: LimitState) -> None:
    """Enforce the limits (for ``state``'s queues) until :func:`deactivate`."""
    with _active_lock:
        _active.append(state)


def deactivate(state: LimitState) -> None:
    with _active_lock:
        if state in _active:
            _active.remove(state)


def _current() -> LimitState | None:
    with _active_lock:
        return _active[-1] if _active else None


# --------------------------------------------------------------------------------------------------
# Sizes, as AWS measures them


def _utf8(value: Any) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    return len(str(value).encode("utf-8"))


def message_size(body: Any, attributes: Mapping[str, Any] | None) -> int:
    """An SQS message's size: the body's UTF-8 bytes plus each attribute's name, data type and value
    (binary values by their raw bytes), which is what counts toward MaximumMessageSize."""
    size = _utf8(body if body is not None else "")
    for name, value in (attributes or {}).items():
        size += _utf8(name)
        if not isinstance(value, Mapping):
            continue
        size += _utf8(value.get("DataType", ""))
        if "StringValue" in value:
            size += _utf8(value["StringValue"])
        if "BinaryValue" in value:
            size += _utf8(value["BinaryValue"])
    return size


def _number_size(text: str) -> int:
    """A number's size: 1 byte per two significant digits, plus 1 (leading and trailing zeroes trimmed)."""
    try:
        digits = "".join(str(d) for d in Decimal(text.strip()).normalize().as_tuple().digits)
    except InvalidOperation:
        digits = "".join(ch for ch in text if ch.isdigit())
    significant = digits.strip("0") or "0"
    return (len(significant) + 1) // 2 + 1


def _binary_size(value: Any, *, base64_text: bool) -> int:
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if base64_text:
        try:
            return len(base64.b64decode(str(value), validate=False))
        except ValueError:
            return _utf8(value)
    return _utf8(value)


def attribute_value_size(value: Mapping[str, Any], *, base64_text: bool = False) -> int:
    """The size of one DynamoDB attribute value (without its name), by AWS's rules (see :func:`item_size`)."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return _utf8(value)
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return _utf8(inner)
    if kind == "N":
        return _number_size(str(inner))
    if kind == "B":
        return _binary_size(inner, base64_text=base64_text)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(_utf8(v) for v in inner)
    if kind == "NS":
        return sum(_number_size(str(v)) for v in inner)
    if kind == "BS":
        return sum(_binary_size(v, base64_text=base64_text) for v in inner)
    if kind == "L":
        return 3 + sum(1 + attribute_value_size(v, base64_text=base64_text) for v in inner)
    if kind == "M":
        return 3 + sum(
            1 + _utf8(name) + attribute_value_size(v, base64_text=base64_text) for name, v in dict(inner).items()
        )
    return _utf8(inner)


def item_size(item: Mapping[str, Any], *, base64_text: bool = False) -> int:
    """A DynamoDB item's size as AWS computes it against its 400 KB limit: each attribute's name in
    UTF-8 bytes plus its value (strings in UTF-8 bytes, numbers 1 byte per two significant digits + 1,
    binary by raw bytes, BOOL/NULL 1 byte, a list or map 3 bytes plus 1 byte per element plus its
    elements). ``base64_text``: binary values given as text are base64 (as moto stores them)."""
    return sum(_utf8(name) + attribute_value_size(value, base64_text=base64_text) for name, value in item.items())


def _item_refusal(item: Any) -> Refusal | None:
    if isinstance(item, Mapping) and item_size(item) > DYNAMODB_MAX_ITEM_BYTES:
        return _validation("Item size has exceeded the maximum allowed size")
    return None


# --------------------------------------------------------------------------------------------------
# The checks, one per operation: a Refusal for the whole call, or per-entry failures


@dataclass(slots=True)
class _Verdict:
    refusal: Refusal | None = None
    #: Batch entries AWS fails one by one (BatchResultErrorEntry shape), taken out of the request.
    failed: list[dict[str, Any]] | None = None
    #: Every entry failed: nothing is left to send.
    nothing_left: bool = False


def _queue_name(params: Mapping[str, Any]) -> str:
    return str(params.get("QueueUrl", "")).rstrip("/").rsplit("/", 1)[-1]


def _too_long(limit: int) -> Refusal:
    return _sqs_refusal(
        "InvalidParameterValue",
        f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes.",
    )


def _attribute_count_refusal(attributes: Any) -> Refusal | None:
    count = len(attributes) if isinstance(attributes, Mapping) else 0
    if count > SQS_MAX_MESSAGE_ATTRIBUTES:
        return _sqs_refusal(
            "InvalidParameterValue",
            f"Number of message attributes [{count}] exceeds the allowed maximum [{SQS_MAX_MESSAGE_ATTRIBUTES}].",
        )
    return None


def _send_message(params: dict[str, Any], state: LimitState) -> _Verdict:
    limit = state.maximum_message_size(_queue_name(params))
    refusal = _attribute_count_refusal(params.get("MessageAttributes"))
    if refusal is None:
        size = message_size(params.get("MessageBody"), params.get("MessageAttributes"))
        if size > limit:
            refusal = _too_long(limit)
    return _Verdict(refusal=refusal)


def _too_many_entries(entries: Any) -> Refusal | None:
    if isinstance(entries, list) and len(entries) > SQS_MAX_BATCH_ENTRIES:
        return _sqs_refusal(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {SQS_MAX_BATCH_ENTRIES}. You have sent {len(entries)}.",
        )
    return None


def _send_message_batch(params: dict[str, Any], state: LimitState) -> _Verdict:
    entries = params.get("Entries")
    refusal = _too_many_entries(entries)
    if refusal is not None or not isinstance(entries, list):
        return _Verdict(refusal=refusal)
    sizes = [message_size(e.get("MessageBody"), e.get("MessageAttributes")) for e in entries if isinstance(e, Mapping)]
    total = sum(sizes)
    if total > SQS_MAX_MESSAGE_BYTES:
        return _Verdict(
            refusal=_sqs_refusal(
                "BatchRequestTooLong",
                f"Batch requests cannot be longer than {SQS_MAX_MESSAGE_BYTES} bytes. You have sent {total} bytes.",
            )
        )
    limit = state.maximum_message_size(_queue_name(params))
    failed: list[dict[str, Any]] = []
    for entry, size in zip([e for e in entries if isinstance(e, Mapping)], sizes, strict=True):
        problem = _attribute_count_refusal(entry.get("MessageAttributes"))
        if problem is None and size > limit:
            problem = _too_long(limit)
        if problem is not None:
            failed.append(
                {
                    "Id": entry.get("Id"),
                    "SenderFault": True,
                    "Code": "InvalidParameterValue",
                    "Message": problem.message,
                }
            )
    return _Verdict(failed=failed or None)


def _too_many_batch_entries(params: dict[str, Any], state: LimitState) -> _Verdict:
    return _Verdict(refusal=_too_many_entries(params.get("Entries")))


def queue_attribute_problem(name: str, value: Any) -> str | None:
    """Why SQS refuses a queue attribute value (None: it accepts it); AWS's wording."""
    import json

    if name in SQS_ATTRIBUTE_RANGES:
        low, high = SQS_ATTRIBUTE_RANGES[name]
        try:
            number = int(str(value).strip())
        except ValueError:
            return f"Invalid value for the parameter {name}."
        return None if low <= number <= high else f"Invalid value for the parameter {name}."
    if name == "RedrivePolicy":
        try:
            policy = json.loads(value) if isinstance(value, str) else dict(value)
            count = int(policy.get("maxReceiveCount", 10))
        except (TypeError, ValueError):
            return "Invalid value for the parameter RedrivePolicy."
        low, high = SQS_MAX_RECEIVE_COUNT_RANGE
        if not low <= count <= high:
            return (
                "Value "
                f"{value} for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: "
                f"{count}, valid values are from {low} to {high} both inclusive."
            )
    return None


def _queue_attributes(params: dict[str, Any], state: LimitState) -> _Verdict:
    attributes = params.get("Attributes")
    if not isinstance(attributes, Mapping):
        return _Verdict()
    for name, value in attributes.items():
        problem = queue_attribute_problem(str(name), value)
        if problem is not None:
            return _Verdict(refusal=_sqs_refusal("InvalidAttributeValue", problem))
    return _Verdict()


def _put_item(params: dict[str, Any], state: LimitState) -> _Verdict:
    return _Verdict(refusal=_item_refusal(params.get("Item")))


def _batch_write_item(params: dict[str, Any], state: LimitState) -> _Verdict:
    requests = params.get("RequestItems")
    if not isinstance(requests, Mapping):
        return _Verdict()
    every = [r for table in requests.values() if isinstance(table, list) for r in table]
    if len(every) > DYNAMODB_MAX_BATCH_WRITE:
        return _Verdict(refusal=_validation("Too many items requested for the BatchWriteItem call"))
    for request in every:
        put = request.get("PutRequest") if isinstance(request, Mapping) else None
        refusal = _item_refusal(put.get("Item")) if isinstance(put, Mapping) else None
        if refusal is not None:
            return _Verdict(refusal=refusal)
    return _Verdict()


def _batch_get_item(params: dict[str, Any], state: LimitState) -> _Verdict:
    requests = params.get("RequestItems")
    if not isinstance(requests, Mapping):
        return _Verdict()
    keys = sum(len(t.get("Keys") or []) for t in requests.values() if isinstance(t, Mapping))
    if keys > DYNAMODB_MAX_BATCH_GET:
        return _Verdict(refusal=_validation("Too many items requested for the BatchGetItem call"))
    return _Verdict()


def _transact_write_items(params: dict[str, Any], state: LimitState) -> _Verdict:
    items = params.get("TransactItems")
    if not isinstance(items, list):
        return _Verdict()
    if len(items) > DYNAMODB_MAX_TRANSACT_ITEMS:
        return _Verdict(
            refusal=_validation(
                "1 validation error detected at 'transactItems' failed to satisfy constraint: "
                f"Member must have length less than or equal to {DYNAMODB_MAX_TRANSACT_ITEMS}"
            )
        )
    for entry in items:
        put = entry.get("Put") if isinstance(entry, Mapping) else None
        refusal = _item_refusal(put.get("Item")) if isinstance(put, Mapping) else None
        if refusal is not None:
            return _Verdict(refusal=refusal)
    return _Verdict()


_CHECKS: Mapping[tuple[str, str], Callable[[dict[str, Any], LimitState], _Verdict]] = {
    ("sqs", "SendMessage"): _send_message,
    ("sqs", "SendMessageBatch"): _send_message_batch,
    ("sqs", "ChangeMessageVisibilityBatch"): _too_many_batch_entries,
    ("sqs", "DeleteMessageBatch"): _too_many_batch_entries,
    ("sqs", "CreateQueue"): _queue_attributes,
    ("sqs", "SetQueueAttributes"): _queue_attributes,
    ("dynamodb", "PutItem"): _put_item,
    ("dynamodb", "BatchWriteItem"): _batch_write_item,
    ("dynamodb", "BatchGetItem"): _batch_get_item,
    ("dynamodb", "TransactWriteItems"): _transact_write_items,
}


# --------------------------------------------------------------------------------------------------
# The botocore hooks


def _operation(model: Any) -> tuple[str, str]:
    service = getattr(getattr(model, "service_model", None), "service_name", "")
    return str(service), str(getattr(model, "name", ""))


def _before_parameter_build(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    state = _current()
    if state is None or not isinstance(params, dict):
        return
    service, operation = _operation(model)
    if service == "sqs":
        _follow_sqs(operation, params, state)
    check = _CHECKS.get((service, operation))
    if check is None:
        return
    verdict = check(params, state)
    if verdict.refusal is None and not verdict.failed:
        return
    if verdict.refusal is None and verdict.failed:
        failing = {entry["Id"] for entry in verdict.failed}
        params["Entries"] = [e for e in params["Entries"] if not (isinstance(e, Mapping) and e.get("Id") in failing)]
        verdict.nothing_left = not params["Entries"]
    context[_CONTEXT_KEY] = verdict


def _follow_sqs(operation: str, params: dict[str, Any], state: LimitState) -> None:
    """Keep the state in step with the queues' MaximumMessageSize as CreateQueue / SetQueueAttributes set it."""
    attributes = params.get("Attributes")
    size = attributes.get("MaximumMessageSize") if isinstance(attributes, Mapping) else None
    if operation in ("CreateQueue", "SetQueueAttributes") and size is not None:
        name = str(params.get("QueueName") or _queue_name(params))
        if queue_attribute_problem("MaximumMessageSize", size) is None:
            state.set_maximum_message_size(name, int(str(size).strip()))


def _before_call(model: Any, context: dict[str, Any], **_: Any) -> Any:
    """Answer instead of AWS: its error for a refused call; for a batch whose every entry failed on
    its own, 200 with them all in ``Failed`` (nothing is left to send: an empty batch would be
    EmptyBatchRequest)."""
    verdict = context.get(_CONTEXT_KEY)
    if not isinstance(verdict, _Verdict):
        return None
    if verdict.refusal is not None:
        context.pop(_CONTEXT_KEY, None)
        return _http_response(400), verdict.refusal.parsed()
    if verdict.failed and verdict.nothing_left:
        context.pop(_CONTEXT_KEY, None)
        answer = {
            "Successful": [],
            "Failed": list(verdict.failed),
            "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0},
        }
        return _http_response(200), answer
    return None


def _http_response(status: int) -> Any:
    """The HTTP side of an answer local mode gives instead of AWS (as botocore's Stubber builds it)."""
    from botocore.awsrequest import AWSResponse

    headers: Any = {}
    return AWSResponse("", status, headers, None)


def _after_call(parsed: Any, model: Any, context: dict[str, Any], **_: Any) -> None:
    verdict = context.pop(_CONTEXT_KEY, None)
    if not isinstance(parsed, dict):
        return
    if isinstance(verdict, _Verdict) and verdict.failed:
        parsed["Failed"] = [*(parsed.get("Failed") or []), *verdict.failed]


HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("before-parameter-build.sqs", _before_parameter_build),
    ("before-parameter-build.dynamodb", _before_parameter_build),
    ("before-call.sqs", _before_call),
    ("before-call.dynamodb", _before_call),
    ("after-call.sqs", _after_call),
    ("after-call.dynamodb", _after_call),
)


def install_hooks() -> None:
    """Register the hooks for every botocore session created from now on (idempotent); they do
    nothing until a :class:`LimitState` is activated."""
    sdk_hooks.install("local.limits", HOOKS)


# --------------------------------------------------------------------------------------------------
# UpdateItem: the item it leaves behind


def check_update_item_size(lock: Any) -> None:
    """Refuse, as DynamoDB does, an UpdateItem whose resulting item is over 400 KB by AWS's measure.

    The resulting item is not in the request, so this is checked in moto's backend (in process):
    under ``lock`` (local mode's lock serialising moto's writes) the update is applied, the item it
    leaves is measured, and an oversized one is put back as it was before ValidationException
    "Item size to update has exceeded the maximum allowed size" is raised. Idempotent; only while
    a :class:`LimitState` is active.
    """
    from moto.dynamodb.exceptions import ItemSizeToUpdateTooLarge
    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "_workerless_update_size_checked", False):
        return
    original = DynamoDBBackend.update_item

    @functools.wraps(original)
    def update_item(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if _current() is None:
            return original(self, table_name, key, *args, **kwargs)
        with lock:
            try:
                before = self.get_item(table_name, key)
            except Exception:  # noqa: BLE001 - no such table or a bad key: the update itself says so
                return original(self, table_name, key, *args, **kwargs)
            saved = copy.deepcopy(before.to_json()["Attributes"]) if before is not None else None
            result = original(self, table_name, key, *args, **kwargs)
            after = self.get_item(table_name, key)
            if after is None or item_size(after.to_json()["Attributes"], base64_text=True) <= DYNAMODB_MAX_ITEM_BYTES:
                return result
            if saved is None:
                self.delete_item(table_name, key)
            else:
                self.put_item(table_name, saved)
            raise ItemSizeToUpdateTooLarge()

    DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]
    DynamoDBBackend._workerless_update_size_checked = True  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------------
# ReceiveMessage: a long poll answers as soon as a delayed message becomes visible


#: How often a held long poll looks again for a message that became visible on its own.
LONG_POLL_RECHECK_SECONDS = 0.05


def precise_long_polls() -> None:
    """SQS answers a long poll as soon as a message is available, a delayed one included (its
    DelaySeconds over); moto's long poll waits for a *new* message to be added and looks again only
    at the end of each one-second wait, so a message whose delay ran out meanwhile waits up to a
    second more than on AWS (the poller's 1 s relays: up to 2 s a cycle instead of 1). Patched to look
    again every LONG_POLL_RECHECK_SECONDS while it waits. Idempotent."""
    import time

    from moto.sqs.models import Queue

    if getattr(Queue, "_workerless_precise_long_polls", False):
        return

    def wait_for_messages(self: Any, timeout: int) -> None:
        deadline = time.monotonic() + timeout
        lock: threading.Condition = self._messages_lock
        with lock:
            while not self.messages:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                lock.wait(min(left, LONG_POLL_RECHECK_SECONDS))

    Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]
    Queue._workerless_precise_long_polls = True  # type: ignore[attr-defined]
