"""The DynamoDB job table: job records (see :mod:`workerless._core.record`) and shared engine state.

Low-level client with hand-marshalled attributes: the resource layer costs import time at cold
start and hides the conditional-write answers this module depends on. Every write is conditional;
every item carries a TTL (``expires_at``).

Outcomes are stored as JSON, zlib-compressed past 32 KiB. A DynamoDB item is capped at 400 KB
(names included), so an outcome still over :data:`~workerless._core.claimcheck.OUTCOME_INLINE_BYTES` after
compression goes to the claim check's bucket (``results/<job type>/``) and the record keeps a pointer
(``outcome_ref``); without a bucket, or past WORKERLESS_MAX_PAYLOAD_BYTES, it cannot be stored and
the handler fails the job with that reason instead (docs/assumptions.md).
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from workerless._core.claimcheck import (
    DEFAULT_MEMORY_MB,
    OUTCOME_INLINE_BYTES,
    RESULTS_PREFIX,
    PayloadRef,
    object_key,
    payload_limit,
)
from workerless._core.model import Outcome
from workerless._core.record import JobRecord, Status
from workerless._core.retry import UNPROCESSED, ambient_deadline
from workerless.aws.items import STATE_ATTRIBUTES, decode_outcome, encode_inline, inline_bytes, to_record
from workerless.errors import OutcomeTooLargeError, StoreError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from workerless._core.ports import PayloadStore
    from workerless.aws.clients import Clients

#: DynamoDB error codes that the same call will meet again however often it is retried: retrying
#: them only burns the invocation's time. Every other failure (throttles, 5xx, transport errors,
#: codes not listed here) counts as retryable.
FINAL_ERROR_CODES = frozenset(
    {
        "AccessDeniedException",
        "AccessDenied",
        "ValidationException",
        "ResourceNotFoundException",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "MissingAuthenticationTokenException",
        "SerializationException",
        "ItemCollectionSizeLimitExceededException",
    }
)


#: "Still this delivery's claim": the condition of every write a claim's holder makes to its record
#: (:func:`_ours` gives the names and values it uses).
OURS = "#s = :claimed AND #owner = :owner"


def _ours(owner: str, values: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """The attribute names and values of :data:`OURS` for ``owner``, with a write's own ``values``."""
    names = {"#s": "status", "#owner": "owner"}
    return names, {":claimed": {"S": Status.CLAIMED.value}, ":owner": {"S": owner}, **values}


class JobStore:
    """Conditional reads and writes of job records.

    Example:
        An illustration (it needs the table; tests/functional run it on moto)::

            store = JobStore("workerless-jobs", ttl_seconds=7 * 86400)
            claimed, found = store.claim("sheptra#42#r3", owner="req-1", claim_seconds=60, job_type="charge")
    """

    def __init__(
        self,
        table: str,
        *,
        ttl_seconds: int,
        client: DynamoDBClient | None = None,
        clients: Clients | None = None,
        clock: Callable[[], float] = time.time,
        payloads: PayloadStore | None = None,
        max_outcome_bytes: int = payload_limit(DEFAULT_MEMORY_MB),
    ) -> None:
        self.table = table
        self.ttl_seconds = ttl_seconds
        self._client, self._clients = client, clients  # the client, else whose to build on first use
        self._clock = clock
        #: workerless.aws.payloads.Payloads: the claim check for outcomes too large for a record.
        self.payloads = payloads
        self.max_outcome_bytes = max_outcome_bytes

    def _outcome_attribute(self, outcome: Outcome, job_type: str) -> tuple[str, dict[str, Any]]:
        """(attribute name, value) that stores ``outcome``: ``outcome`` in the record when it fits the
        item limit less the margin, else ``outcome_ref`` pointing at the compressed JSON in the claim
        check's bucket. Raises OutcomeTooLargeError when neither can take it."""
        raw = outcome.to_json()
        if len(raw) > self.max_outcome_bytes:
            raise OutcomeTooLargeError(
                len(raw), self.max_outcome_bytes, "workerless carries (WORKERLESS_MAX_PAYLOAD_BYTES)"
            )
        value = encode_inline(raw)
        if inline_bytes(value) <= OUTCOME_INLINE_BYTES:
            return "outcome", value
        packed = value["B"]
        if self.payloads is None or not self.payloads.enabled:
            raise OutcomeTooLargeError(
                len(packed), OUTCOME_INLINE_BYTES, "compressed, with no claim-check bucket the job table stores"
            )
        ref: PayloadRef = self.payloads.put(object_key(RESULTS_PREFIX, job_type), packed)
        return "outcome_ref", {"S": json.dumps(ref.to_dict(), separators=(",", ":"))}

    def load_outcome(self, record: JobRecord) -> Outcome | None:
        """The record's stored outcome, read from the claim check's bucket when it was offloaded."""
        if record.outcome is not None or record.outcome_ref is None:
            return record.outcome
        payloads = self.payloads
        if payloads is None:
            from workerless.aws.payloads import Payloads

            payloads = self.payloads = Payloads(record.outcome_ref.bucket, clients=self._clients)
        data = payloads.get(record.outcome_ref)
        try:
            return decode_outcome({"B": data})
        except (zlib.error, ValueError) as exc:
            raise StoreError(f"stored outcome {record.outcome_ref.key} is unreadable: {exc}", retryable=False) from exc

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            from workerless.aws.clients import Clients

            # Not given one (a test's store on moto): a client of its own, on the default endpoint.
            self._client = (self._clients or Clients()).dynamodb
        return self._client

    def _ttl(self, now: float) -> dict[str, str]:
        return {"N": str(int(now + self.ttl_seconds))}

    def _call(self, operation: str, **kwargs: object) -> dict[str, Any]:
        from workerless.aws.clients import DeadlineReachedError, call_aws, error_code

        def translate(exc: Exception) -> NoReturn:
            code, what = error_code(exc), f"DynamoDB {operation} on {self.table}"
            if code == "ConditionalCheckFailedException":
                raise _ConditionFailed(getattr(exc, "response", {}).get("Item")) from None
            if isinstance(exc, DeadlineReachedError):
                raise StoreError(f"{what} not sent: the invocation's deadline has passed", retryable=False) from exc
            if code:
                raise StoreError(f"{what} failed: {code}", code=code, retryable=code not in FINAL_ERROR_CODES) from exc
            raise StoreError(f"{what} failed: {type(exc).__name__}") from exc

        return call_aws(self.client, operation, kwargs, translate)

    def _update_if(self, key: str, update: str, condition: str, names: dict[str, str], values: dict[str, Any]) -> bool:
        """One conditional UpdateItem on ``key``'s record; False (nothing written) when the
        condition refused it. Every other failure is a :class:`StoreError`, as from :meth:`_call`."""
        try:
            self._call(
                "update_item",
                TableName=self.table,
                Key={"pk": {"S": key}},
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except _ConditionFailed:
            return False
        return True

    def get(self, key: str) -> JobRecord | None:
        answer = self._call("get_item", TableName=self.table, Key={"pk": {"S": key}}, ConsistentRead=True)
        item = answer.get("Item")
        return to_record(item) if item else None

    def get_many(self, keys: Sequence[str]) -> dict[str, JobRecord]:
        """Records for ``keys`` (missing keys are absent from the answer), strongly consistent, each
        without its stored outcome's body (``outcome`` is None; a claim check pointer is kept): the
        heartbeat reads a ticket's records every round and needs their state, not results of up to
        ~384 KB each (100 of them would be 38 MB through a 256 MB function). :meth:`get` reads a
        whole record."""
        found: dict[str, JobRecord] = {}
        unique = list(dict.fromkeys(keys))
        names = {f"#{n}": n for n in STATE_ATTRIBUTES}  # several are DynamoDB reserved words (status, owner)
        for start in range(0, len(unique), 100):
            request: dict[str, Any] = {
                self.table: {
                    "Keys": [{"pk": {"S": k}} for k in unique[start : start + 100]],
                    "ConsistentRead": True,
                    "ProjectionExpression": ", ".join(names),
                    "ExpressionAttributeNames": names,
                }
            }
            # UnprocessedKeys come back under throttling: asked for again under their policy, within
            # the invocation's AWS deadline.
            for _ in UNPROCESSED.tries(deadline=ambient_deadline()):
                answer = self._call("batch_get_item", RequestItems=request)
                for item in answer.get("Responses", {}).get(self.table, []):
                    record = to_record(item)
                    found[record.key] = record
                request = answer.get("UnprocessedKeys") or {}
                if not request:
                    break
            if request:
                raise StoreError(f"DynamoDB batch_get_item on {self.table} left keys unprocessed")
        return found

    def claim(
        self, key: str, *, owner: str, claim_seconds: float, job_type: str, lease: str = ""
    ) -> tuple[bool, JobRecord | None]:
        """Try to claim ``key`` for this delivery. Returns (claimed, the record found if not).

        Succeeds when no record exists, or when the existing claim has expired (its container died),
        or when the record is LOST under another lease than ``lease``
        (:meth:`~workerless._core.lease.LeasePolicy.fingerprint`: the engine leased the same job id
        again after the lost lease lapsed).
        """
        now = self._clock()
        item: dict[str, Any] = {
            "pk": {"S": key},
            "status": {"S": Status.CLAIMED.value},
            "owner": {"S": owner},
            "claim_expires_at": {"N": repr(now + claim_seconds)},
            "job_type": {"S": job_type},
            "claimed_at": {"N": repr(now)},
            "expires_at": self._ttl(now),
        }
        condition = "attribute_not_exists(pk) OR (#s = :claimed AND claim_expires_at <= :now)"
        names = {"#s": "status"}
        values: dict[str, Any] = {":claimed": {"S": Status.CLAIMED.value}, ":now": {"N": repr(now)}}
        if lease:
            item["lease"] = {"S": lease}
            condition += " OR (#s = :lost AND attribute_exists(#lease) AND #lease <> :lease)"
            names["#lease"] = "lease"
            values.update({":lost": {"S": Status.LOST.value}, ":lease": {"S": lease}})
        try:
            self._call(
                "put_item",
                TableName=self.table,
                Item=item,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except _ConditionFailed as refused:
            found = to_record(refused.item) if refused.item else self.get(key)
            if found is not None and found.status is Status.CLAIMED and found.owner == owner:
                # Our own write landed and its answer was lost (botocore retried the call, and the
                # retry met the claim we had already made): the claim is ours.
                return True, None
            return False, found
        return True, None

    def fence(self, key: str, *, reason: str, job_type: str, lease: str) -> bool:
        """Mark ``key`` LOST under ``lease`` only if no delivery has touched it (no record): what the
        poller's recovery writes before handing back a job that may have been queued after all. True
        when written (a queued delivery of that lease now finds LOST and does not run; a later lease
        of the job, another fingerprint, claims it); False when a record exists (a handler has it).
        One conditional PutItem (the poller's IAM already allows PutItem on the table)."""
        now = self._clock()
        item: dict[str, Any] = {
            "pk": {"S": key},
            "status": {"S": Status.LOST.value},
            "lost_reason": {"S": reason},
            "job_type": {"S": job_type},
            "lease": {"S": lease},
            "expires_at": self._ttl(now),
        }
        try:
            self._call(
                "put_item",
                TableName=self.table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except _ConditionFailed as refused:
            found = to_record(refused.item) if refused.item else self.get(key)
            # Our own write landed and its answer was lost (botocore's retry met it): fenced all the same.
            return (
                found is not None
                and found.status is Status.LOST
                and found.lease == lease
                and found.lost_reason == reason
            )
        return True

    def mark_begun(self, key: str, *, owner: str) -> bool:
        """Stamp this delivery's claim with when its engine lease began (StageNext lease acquire).

        The heartbeat renews a begin-leased job only once this is set. False when the claim is no
        longer this delivery's (nothing is written then).
        """
        names, values = _ours(owner, {":now": {"N": repr(self._clock())}})
        return self._update_if(key, "SET begun_at = :now", OURS, names, values)

    def release(self, key: str, *, owner: str) -> bool:
        """Give up this delivery's claim before its engine lease began (a failed lease acquire), so
        the redelivery need not wait for the claim to expire. False when it was not ours to give up.

        The claim is expired rather than the record deleted: the claim condition (:meth:`claim`)
        takes over an expired claim at once, and the handlers' roles need no DeleteItem (an
        UpdateItem, which they already hold; one write unit either way).
        """
        # Epoch 0: expired for any clock, so no container's skew can keep the claim alive.
        names, values = _ours(owner, {":expired": {"N": "0"}, ":now": {"N": repr(self._clock())}})
        update = "SET claim_expires_at = :expired, released_at = :now"
        return self._update_if(key, update, f"{OURS} AND attribute_not_exists(begun_at)", names, values)

    def store_outcome(self, key: str, *, owner: str, outcome: Outcome, job_type: str = "job") -> JobRecord | None:
        """Store the result, only while this delivery still holds the claim (an outcome too large for
        the record goes to the claim check first, under ``results/<job_type>/``).

        Returns None when stored, or the record found otherwise (LOST: the heartbeat saw the lease go).
        """
        attribute, value = self._outcome_attribute(outcome, job_type)
        names, values = _ours(
            owner, {":stored": {"S": Status.STORED.value}, ":o": value, ":now": {"N": repr(self._clock())}}
        )
        try:
            self._call(
                "update_item",
                TableName=self.table,
                Key={"pk": {"S": key}},
                UpdateExpression=f"SET #s = :stored, {attribute} = :o, stored_at = :now REMOVE claim_expires_at",
                ConditionExpression=OURS,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except _ConditionFailed as refused:
            return to_record(refused.item) if refused.item else self.get(key)
        return None

    def replace_outcome(self, key: str, outcome: Outcome, *, job_type: str = "job") -> None:
        """Swap a stored outcome the engine refused as too large for a failure naming the cap."""
        attribute, value = self._outcome_attribute(outcome, job_type)
        other = "outcome_ref" if attribute == "outcome" else "outcome"
        self._call(
            "update_item",
            TableName=self.table,
            Key={"pk": {"S": key}},
            UpdateExpression=f"SET {attribute} = :o REMOVE {other}",
            ConditionExpression="#s = :stored",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":o": value, ":stored": {"S": Status.STORED.value}},
        )

    def mark_reported(self, key: str, *, note: str | None = None, lease: str = "") -> None:
        """Record that the report landed (or was refused with 409: ``note``), under ``lease``."""
        now = self._clock()
        values: dict[str, Any] = {":reported": {"S": Status.REPORTED.value}, ":now": {"N": repr(now)}}
        update = "SET #s = :reported, reported_at = :now"
        if note:
            update += ", report_note = :note"
            values[":note"] = {"S": note}
        names = {"#s": "status"}
        if lease:
            update += ", #lease = :lease"
            names["#lease"] = "lease"
            values[":lease"] = {"S": lease}
        # Nothing is owed any more: the heartbeat stops re-reporting, and the receipt handle goes.
        update += " REMOVE report_owed_at, receipt, receipt_queue"
        if not self._update_if(key, update, "attribute_exists(pk)", names, values):
            # No record (the dead-letter path for a job never claimed): write one so a later
            # redelivery finds the job done.
            self._call(
                "put_item",
                TableName=self.table,
                Item={
                    "pk": {"S": key},
                    "status": {"S": Status.REPORTED.value},
                    "reported_at": {"N": repr(now)},
                    "expires_at": self._ttl(now),
                    **({"report_note": {"S": note}} if note else {}),
                    **({"lease": {"S": lease}} if lease else {}),
                },
            )

    def mark_owed(self, key: str, *, receipt: str | None, queue_url: str | None = None) -> bool:
        """Note that the stored result's report is owed (the engine has not accepted it yet), and
        the SQS receipt handle of the job message kept in flight for it and its queue's URL: the
        heartbeat re-reports it and then deletes that message. Only a STORED record is marked;
        False otherwise (it was reported meanwhile). ``report_owed_at`` keeps the first time it was
        owed."""
        values: dict[str, Any] = {":stored": {"S": Status.STORED.value}, ":now": {"N": repr(self._clock())}}
        update = "SET report_owed_at = if_not_exists(report_owed_at, :now)"
        removed: list[str] = []
        if receipt:
            update += ", receipt = :receipt"
            values[":receipt"] = {"S": receipt}
        else:
            removed.append("receipt")
        if receipt and queue_url:
            update += ", receipt_queue = :queue"
            values[":queue"] = {"S": queue_url}
        else:
            removed.append("receipt_queue")
        if removed:
            update += " REMOVE " + ", ".join(removed)
        return self._update_if(key, update, "#s = :stored", {"#s": "status"}, values)

    def clear_owed(self, key: str) -> None:
        """Stop the heartbeat re-reporting a stored result (the engine refused it for good: the SQS
        redelivery and the dead-letter path settle it, as before the report was owed)."""
        self._update_if(
            key,
            "REMOVE report_owed_at, receipt, receipt_queue",
            "#s = :stored",
            {"#s": "status"},
            {":stored": {"S": Status.STORED.value}},
        )

    def mark(self, key: str, status: Status, *, reason: str, job_type: str, lease: str = "") -> bool:
        """Mark LOST or SKIPPED, unless a result is already stored or reported. True if written.

        With ``lease``, only a claim taken under that lease (or under an unknown one) is marked: the
        heartbeat of a lapsed lease must not stop the run of the lease that replaced it.
        """
        now = self._clock()
        update = (
            "SET #s = :status, lost_reason = :reason, job_type = if_not_exists(job_type, :type), "
            "expires_at = if_not_exists(expires_at, :ttl)"
        )
        condition = "attribute_not_exists(pk) OR #s = :claimed"
        names = {"#s": "status"}
        values: dict[str, Any] = {
            ":status": {"S": status.value},
            ":reason": {"S": reason},
            ":claimed": {"S": Status.CLAIMED.value},
            ":type": {"S": job_type},
            ":ttl": self._ttl(now),
        }
        if lease:
            update += ", #lease = if_not_exists(#lease, :lease)"
            condition = (
                "attribute_not_exists(pk) OR (#s = :claimed AND (attribute_not_exists(#lease) OR #lease = :lease))"
            )
            names["#lease"] = "lease"
            values[":lease"] = {"S": lease}
        return self._update_if(key, update, condition, names, values)


class _ConditionFailed(Exception):
    def __init__(self, item: dict[str, Any] | None) -> None:
        super().__init__("condition failed")
        self.item = item


class DynamoState:
    """:class:`~workerless.engines.base.SharedState` on the job table (``pk`` = ``state#{key}``)."""

    def __init__(self, store: JobStore) -> None:
        self._store = store

    def get(self, key: str) -> dict[str, Any] | None:
        answer = self._store._call(
            "get_item", TableName=self._store.table, Key={"pk": {"S": f"state#{key}"}}, ConsistentRead=True
        )
        item = answer.get("Item")
        if not item:
            return None
        value: dict[str, Any] = json.loads(item["value"]["S"])
        value["version"] = int(item["version"]["N"])
        return value

    def put(self, key: str, value: dict[str, Any], *, expected_version: int | None) -> bool:
        body = {k: v for k, v in value.items() if k != "version"}
        new_version = (expected_version or 0) + 1
        now = time.time()
        kwargs: dict[str, Any] = {
            "TableName": self._store.table,
            "Item": {
                "pk": {"S": f"state#{key}"},
                "value": {"S": json.dumps(body, separators=(",", ":"))},
                "version": {"N": str(new_version)},
                "expires_at": self._store._ttl(now),
            },
        }
        if expected_version is None:
            kwargs["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            kwargs["ConditionExpression"] = "version = :v"
            kwargs["ExpressionAttributeValues"] = {":v": {"N": str(expected_version)}}
        try:
            self._store._call("put_item", **kwargs)
        except _ConditionFailed:
            return False
        return True
