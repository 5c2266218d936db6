"""Which (action, resource) authorisations AWS makes for one API call, from its parameters.

AWS authorises an API call as one or more IAM actions on resource ARNs, not always the call's own
name on one resource. What is modelled (the services the pipeline calls, precisely):

- **SQS**: the queue of ``QueueUrl`` (or ``QueueName``); ``SendMessageBatch``,
  ``DeleteMessageBatch`` and ``ChangeMessageVisibilityBatch`` are authorised as ``sqs:SendMessage``,
  ``sqs:DeleteMessage`` and ``sqs:ChangeMessageVisibility`` (there are no ``...Batch`` actions);
- **DynamoDB**: the table of ``TableName`` (a name or an ARN); ``Query``/``Scan`` with ``IndexName``
  the index ARN; ``BatchGetItem``/``BatchWriteItem`` once per table of ``RequestItems``;
  ``TransactGetItems`` as ``dynamodb:GetItem`` and ``TransactWriteItems`` as ``PutItem`` /
  ``UpdateItem`` / ``DeleteItem`` / ``ConditionCheckItem``, per contained action and table. Each
  carries the condition key ``dynamodb:LeadingKeys``: the partition key values the call touches
  (``Key``'s or ``Item``'s; every key of a table in a batch; a Query's partition key equality),
  none for a call that names no item (``Scan``, ``DescribeTable``: where ``ForAllValues:`` holds,
  so a Scan is never to be granted beside a LeadingKeys condition). Where the partition key's value
  cannot be told (an unknown table's two-attribute key, a Query on an index, PartiQL), the context
  is unknown and a condition on it never allows;
- **S3** (the claim check's objects): ``GetObject`` / ``PutObject`` / ``DeleteObject`` and their
  kin on the object ``arn:aws:s3:::<Bucket>/<Key>``; bucket calls (``ListObjectsV2``,
  ``CreateBucket`` ...) on ``arn:aws:s3:::<Bucket>``, ``ListObjects*`` as ``s3:ListBucket`` with the
  condition key ``s3:prefix`` (the listing's ``Prefix``; absent when it has none). A GetObject of a
  missing key is answered by S3 after a second, implicit check of ``s3:ListBucket`` (:func:`listing`);
- **Secrets Manager**: the secret of ``SecretId``, by name or ARN, evaluated against the secret's
  full ARN (with its 6-character suffix) where it exists;
- **SSM Parameter Store**: ``GetParametersByPath`` on the ARN of the *path* asked for (Parameter
  Store authorises it against the path, not the parameters it returns: "How Parameter Store
  authorizes parameter retrieval"), ``GetParameter`` / ``PutParameter`` / ``DeleteParameter`` and
  their kin on the parameter of ``Name``, ``GetParameters`` / ``DeleteParameters`` once per name;
- **STS** ``GetCallerIdentity`` needs no permission.

Any other call is checked by its action alone (``service:Operation`` against every statement's
actions, resources not compared) and flagged as such: see docs/assumptions.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from workerless_devkit.local.template import LOCAL_PLACE, Place

#: Resource of a call whose resource local mode does not model: every statement's resources match.
UNMODELLED = ""

_SQS_BATCH = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
_TRANSACT_WRITE = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
_NO_PERMISSION = {("sts", "GetCallerIdentity")}


#: The condition key of a DynamoDB item call's partition key values (lower case, as compared).
LEADING_KEYS = "dynamodb:leadingkeys"


@dataclass(frozen=True, slots=True)
class Need:
    """One authorisation AWS makes for a call: ``action`` on ``resource``."""

    action: str
    resource: str
    #: The resource as AWS names it in an AccessDenied message (Secrets Manager: the SecretId given).
    shown: str = ""
    #: The request's condition keys local mode models, as (lower-case key, values) pairs; None when
    #: it cannot tell them (a condition on them is then unknown).
    context: tuple[tuple[str, tuple[str, ...]], ...] | None = None

    @property
    def modelled(self) -> bool:
        return self.resource != UNMODELLED

    @property
    def condition_context(self) -> dict[str, tuple[str, ...]] | None:
        """:attr:`context` as the mapping :func:`~workerless_devkit.local.iam.policy.evaluate` takes."""
        return None if self.context is None else dict(self.context)

    @property
    def leading_keys(self) -> tuple[str, ...]:
        """The partition key values the call touches (none known: empty)."""
        return dict(self.context or ()).get(LEADING_KEYS, ())


def needs(
    prefix: str,
    operation: str,
    params: Mapping[str, Any],
    *,
    secret_arn: Callable[[str], str | None] | None = None,
    place: Place = LOCAL_PLACE,
    partition_key: Callable[[str], str | None] | None = None,
) -> list[Need]:
    """The authorisations of ``operation`` of the service whose IAM prefix is ``prefix``.

    ``secret_arn`` maps a SecretId (name or ARN) to the secret's full ARN, or None if unknown.
    ``place``: the account and region of the caller, whose ARNs a name (a table's, a parameter's)
    stands for. ``partition_key`` maps a table's ARN to its partition key's attribute name (None:
    unknown table).
    """
    if (prefix, operation) in _NO_PERMISSION:
        return []
    if prefix == "sqs":
        return [_sqs(operation, params, place)]
    if prefix == "dynamodb":
        return _dynamodb(operation, params, place, partition_key or _no_schema)
    if prefix == "secretsmanager":
        return [_secret(operation, params, secret_arn, place)]
    if prefix == "s3":
        return [_s3(operation, params)]
    if prefix == "ssm" and operation in _SSM_BY_NAME | _SSM_BY_NAMES | {"GetParametersByPath"}:
        return _ssm(operation, params, place)
    return [Need(f"{prefix}:{operation}", UNMODELLED, "*")]


# -- SQS --------------------------------------------------------------------------------------------


def sqs_queue_arn(queue_url: str, place: Place = LOCAL_PLACE) -> str:
    """The ARN of the queue at ``queue_url`` (``https://sqs.<region>.amazonaws.com/<account>/<name>``;
    what the URL does not say is ``place``'s)."""
    parsed = urlparse(queue_url)
    parts = [p for p in parsed.path.split("/") if p]
    name = parts[-1] if parts else queue_url.rstrip("/").rsplit("/", 1)[-1]
    account = parts[-2] if len(parts) >= 2 and parts[-2].isdigit() else place.account_id
    host = (parsed.hostname or "").split(".")
    region = host[1] if len(host) > 2 and host[0] == "sqs" else place.region
    return f"arn:aws:sqs:{region}:{account}:{name}"


def _sqs(operation: str, params: Mapping[str, Any], place: Place) -> Need:
    action = f"sqs:{_SQS_BATCH.get(operation, operation)}"
    url = params.get("QueueUrl")
    if isinstance(url, str) and url:
        arn = sqs_queue_arn(url, place)
    elif isinstance(params.get("QueueName"), str):
        account = params.get("QueueOwnerAWSAccountId") or place.account_id
        arn = Place(place.region, str(account)).queue_arn(params["QueueName"])
    else:
        arn = "*"  # ListQueues and the like: no resource-level permission
    return Need(action, arn, arn)


# -- DynamoDB ---------------------------------------------------------------------------------------


def dynamodb_table_arn(table: str, place: Place = LOCAL_PLACE) -> str:
    return table if table.startswith("arn:") else place.table_arn(table)


def _table_need(
    action: str,
    table: Any,
    place: Place,
    index: Any = None,
    keys: tuple[str, ...] | None = (),
) -> Need:
    """``action`` on ``table`` (its ``index``); ``keys`` the partition key values the call touches
    (empty: none, as for a Scan; None: not known)."""
    context = None if keys is None else ((LEADING_KEYS, keys),) if keys else ()
    if not isinstance(table, str) or not table:
        return Need(action, "*", "*", context)
    arn = dynamodb_table_arn(table, place)
    if isinstance(index, str) and index:
        arn = f"{arn}/index/{index}"
    return Need(action, arn, arn, context)


def _no_schema(_: str) -> str | None:
    return None


#: Item operations: where each names its item (the others name none: no leading key).
_ITEM_KEY = {"GetItem": "Key", "UpdateItem": "Key", "DeleteItem": "Key", "ConditionCheckItem": "Key", "PutItem": "Item"}
#: Operations whose leading keys local mode cannot tell (PartiQL names items in its statement).
_UNKNOWN_KEYS = frozenset({"ExecuteStatement", "BatchExecuteStatement", "ExecuteTransaction"})


def _dynamodb(
    operation: str, params: Mapping[str, Any], place: Place, partition_key: Callable[[str], str | None]
) -> list[Need]:
    def leading(table: Any, items: list[Any]) -> tuple[str, ...] | None:
        """The partition key values of ``items`` (each a Key or an Item) of ``table``; None if unknown."""
        name = partition_key(dynamodb_table_arn(table, place)) if isinstance(table, str) and table else None
        values: list[str] = []
        for item in items:
            value = _partition_value(item, name)
            if value is None:
                return None
            values.append(value)
        return tuple(dict.fromkeys(values))

    if operation == "BatchGetItem":
        tables = params.get("RequestItems") or {}
        return [
            _table_need(
                f"dynamodb:{operation}", table, place, keys=leading(table, list((spec or {}).get("Keys") or []))
            )
            for table, spec in tables.items()
        ]
    if operation == "BatchWriteItem":
        out: list[Need] = []
        for table, writes in (params.get("RequestItems") or {}).items():
            items = [
                (w.get("PutRequest") or {}).get("Item")
                if "PutRequest" in w
                else (w.get("DeleteRequest") or {}).get("Key")
                for w in writes or []
                if isinstance(w, Mapping)
            ]
            out.append(_table_need(f"dynamodb:{operation}", table, place, keys=leading(table, items)))
        return out
    if operation == "TransactGetItems":
        out = []
        for item in params.get("TransactItems") or []:
            if isinstance(item, Mapping):
                get = item.get("Get") or {}
                out.append(
                    _table_need(
                        "dynamodb:GetItem",
                        get.get("TableName"),
                        place,
                        keys=leading(get.get("TableName"), [get.get("Key")]),
                    )
                )
        return out
    if operation == "TransactWriteItems":
        out = []
        for item in params.get("TransactItems") or []:
            if not isinstance(item, Mapping):
                continue
            for kind, action in _TRANSACT_WRITE.items():
                if kind in item:
                    spec = item[kind] or {}
                    named = spec.get("Item") if kind == "Put" else spec.get("Key")
                    table = spec.get("TableName")
                    out.append(_table_need(f"dynamodb:{action}", table, place, keys=leading(table, [named])))
        return out
    table = params.get("TableName")
    index = params.get("IndexName") if operation in ("Query", "Scan") else None
    keys: tuple[str, ...] | None = ()
    if operation in _ITEM_KEY:
        keys = leading(table, [params.get(_ITEM_KEY[operation])])
    elif operation == "Query":
        keys = (
            None
            if index
            else _query_partition(
                params, partition_key(dynamodb_table_arn(table, place)) if isinstance(table, str) and table else None
            )
        )
    elif operation in _UNKNOWN_KEYS:
        keys = None
    return [_table_need(f"dynamodb:{operation}", table, place, index, keys=keys)]


def _attribute_text(value: Any) -> str | None:
    """A key attribute's value as IAM compares it (a string or a number's text); None otherwise."""
    if isinstance(value, Mapping):
        for kind in ("S", "N"):
            if isinstance(value.get(kind), str):
                return str(value[kind])
    return None


def _partition_value(item: Any, name: str | None) -> str | None:
    """The partition key value of a Key or Item: its attribute ``name``; without a known name, the
    one attribute of a one-attribute Key. None when it cannot be told."""
    if not isinstance(item, Mapping):
        return None
    if name is None:
        return _attribute_text(next(iter(item.values()))) if len(item) == 1 else None
    return _attribute_text(item.get(name))


def _query_partition(params: Mapping[str, Any], name: str | None) -> tuple[str, ...] | None:
    """A Query's partition key value: from ``KeyConditionExpression`` (``<key> = :value``, with
    ``#alias`` names) or the legacy ``KeyConditions``. None when it cannot be told."""
    if name is None:
        return None
    legacy = params.get("KeyConditions")
    if isinstance(legacy, Mapping) and isinstance(legacy.get(name), Mapping):
        values = legacy[name].get("AttributeValueList") or []
        text = _attribute_text(values[0]) if values else None
        return None if text is None else (text,)
    expression = params.get("KeyConditionExpression")
    if not isinstance(expression, str):
        return None
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    for left, right in re.findall(r"([#\w.]+)\s*=\s*([:#\w.]+)", expression):
        for attribute, placeholder in ((left, right), (right, left)):
            if names.get(attribute, attribute) == name and placeholder.startswith(":"):
                text = _attribute_text(values.get(placeholder))
                return None if text is None else (text,)
    return None


# -- S3 ---------------------------------------------------------------------------------------------

#: Object operations whose IAM action differs from the operation's name.
_S3_ACTIONS = {
    "HeadObject": "GetObject",
    "ListObjects": "ListBucket",
    "ListObjectsV2": "ListBucket",
    "HeadBucket": "ListBucket",
    "DeleteObjects": "DeleteObject",
    "CopyObject": "PutObject",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
}


#: The condition key of a listing's prefix (lower case, as compared).
S3_PREFIX = "s3:prefix"


def _s3(operation: str, params: Mapping[str, Any]) -> Need:
    action = f"s3:{_S3_ACTIONS.get(operation, operation)}"
    bucket = params.get("Bucket")
    if not isinstance(bucket, str) or not bucket:
        return Need(action, "*", "*")  # ListBuckets: no resource-level permission
    key = params.get("Key")
    arn = f"arn:aws:s3:::{bucket}/{key}" if isinstance(key, str) and key else f"arn:aws:s3:::{bucket}"
    prefix = params.get("Prefix")
    # s3:prefix is in the context of a listing that names a prefix; every other S3 call lacks it.
    context = ((S3_PREFIX, (prefix,)),) if action == "s3:ListBucket" and isinstance(prefix, str) and prefix else ()
    return Need(action, arn, arn, context)


def listing(bucket: str, key: str) -> Need:
    """The check S3 makes before it tells a caller that ``key`` does not exist: ``s3:ListBucket`` on
    the bucket, with the key as ``s3:prefix``. AWS documents the first half (GetObject, HeadObject:
    "If you have the s3:ListBucket permission on the bucket, Amazon S3 returns an HTTP status code 404
    Not Found error. If you don't have the s3:ListBucket permission, Amazon S3 returns an HTTP status
    code 403 Access Denied error."); the key as ``s3:prefix`` is how a listing grant held to a prefix
    is honoured there (Ceph RGW matched AWS so: docs/assumptions.md, "Claim check")."""
    arn = f"arn:aws:s3:::{bucket}"
    return Need("s3:ListBucket", arn, arn, ((S3_PREFIX, (key,)),))


# -- SSM Parameter Store ---------------------------------------------------------------------------

#: Parameter Store operations on the one parameter of ``Name`` / on each of ``Names``.
_SSM_BY_NAME = frozenset(
    {"GetParameter", "PutParameter", "DeleteParameter", "GetParameterHistory", "LabelParameterVersion"}
)
_SSM_BY_NAMES = frozenset({"GetParameters", "DeleteParameters"})


def _ssm(operation: str, params: Mapping[str, Any], place: Place) -> list[Need]:
    action = f"ssm:{operation}"
    if operation == "GetParametersByPath":
        path = params.get("Path")
        names = [path] if isinstance(path, str) and path else []
    elif operation in _SSM_BY_NAMES:
        names = [n for n in params.get("Names") or [] if isinstance(n, str) and n]
    else:
        name = params.get("Name")
        names = [name] if isinstance(name, str) and name else []
    if not names:
        return [Need(action, "*", "*")]
    # A trailing slash of a path is not part of what IAM compares (the ARN names the path).
    arns = [place.parameter_arn(n.rstrip("/") or n) for n in names]
    return [Need(action, arn, arn) for arn in arns]


# -- Secrets Manager --------------------------------------------------------------------------------


def _secret(
    operation: str, params: Mapping[str, Any], secret_arn: Callable[[str], str | None] | None, place: Place
) -> Need:
    action = f"secretsmanager:{operation}"
    secret_id = params.get("SecretId")
    if not isinstance(secret_id, str) or not secret_id:
        return Need(action, "*", "*")
    full = secret_arn(secret_id) if secret_arn is not None else None
    if full is None:
        # Not a secret local mode knows: an ARN is evaluated as given; a bare name as the ARN a secret
        # of that name would have, its random suffix unknown (only patterns ending in * match it).
        full = secret_id if secret_id.startswith("arn:") else place.secret_arn(secret_id)
    return Need(action, full, secret_id)
