"""Engine-neutral records that travel through the pipeline.

An engine adapter turns the engine's activation answer into :class:`ActivatedJob` values; the
poller writes each one to SQS as JSON (:meth:`ActivatedJob.to_message`); the handler wrapper reads
it back (:meth:`ActivatedJob.from_message`); the heartbeat ticket carries only :class:`JobRef`
values, which is all an adapter needs to extend a lease or report.

``JobRef.handle`` is the engine's own opaque data needed for later calls (node-flow's leaseToken
and queueName, StageNext's ack token and routing cookies, ...). It is a credential in some engines:
never log it. SQS queues and the DynamoDB table are encrypted at rest.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from workerless._core.claimcheck import PayloadRef
from workerless.errors import MessageFormatError

MESSAGE_VERSION = 1

OutcomeKind = Literal["complete", "fail", "throw"]

#: Every job record's partition key starts with this; the table's other items (the poller lock, the
#: tick chain, engine sessions) start with ``state#``, so no job type's prefix can name one of them.
RECORD_PREFIX = "job#"
#: What a job type must not hold: IAM's wildcards (``*``, ``?``), the start of a policy variable
#: (``$``) and the key's separator (``#``). Each route's role may touch only the records under
#: ``job#<its type>#`` (template.yaml, ``dynamodb:LeadingKeys``); with any of these in a type, that
#: pattern would also match another type's records.
RECORD_TYPE_FORBIDDEN = "#*?$"


def record_key(job_type: str, key: str) -> str:
    """The job record's partition key: ``job#{job type}#{job key}``, the job key being
    :attr:`JobRef.key` (``{engine}#{job id}[#{attempt}]``).

    The type leads so that IAM can hold each route's role to its own type's records
    (``dynamodb:LeadingKeys`` ``job#<type>#*``: docs/assumptions.md, "Job records").

    Example:
        >>> record_key("charge-payment", "sheptra#42#r3")
        'job#charge-payment#sheptra#42#r3'
    """
    return f"{RECORD_PREFIX}{job_type}#{key}"


@dataclass(frozen=True, slots=True)
class JobRef:
    """What identifies one engine attempt of one job, and what the adapter needs to act on it.

    ``attempt`` distinguishes engine attempts where the engine reuses the job id across retries
    (Sheptra keeps the id and decrements ``retries``); it is ``""`` where every attempt already has
    its own id (node-flow).
    """

    engine: str
    job_id: str
    job_type: str
    attempt: str = ""
    #: Engine-specific data for later calls; may hold credentials (ack and lease tokens), so it is
    #: kept out of repr() and therefore out of any log line that prints a JobRef.
    handle: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        """The DynamoDB key of this attempt's job record: ``{engine}#{job id}[#{attempt}]``."""
        base = f"{self.engine}#{self.job_id}"
        return f"{base}#{self.attempt}" if self.attempt else base

    @property
    def record_key(self) -> str:
        """The partition key of this attempt's job record: :func:`record_key` of its type and key."""
        return record_key(self.job_type, self.key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "job_id": self.job_id,
            "job_type": self.job_type,
            "attempt": self.attempt,
            "handle": dict(self.handle),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobRef:
        try:
            engine, job_id, job_type = data["engine"], data["job_id"], data["job_type"]
            attempt = data.get("attempt", "")
            handle = data.get("handle", {})
        except (KeyError, TypeError, AttributeError) as exc:
            raise MessageFormatError(f"job reference is missing {exc}", field=str(exc)) from exc
        for name, value in (("engine", engine), ("job_id", job_id), ("job_type", job_type)):
            if not isinstance(value, str) or not value:
                raise MessageFormatError(f"job reference field {name!r} must be a non-empty string", field=name)
        if not isinstance(attempt, str):
            raise MessageFormatError("job reference field 'attempt' must be a string", field="attempt")
        if not isinstance(handle, dict):
            raise MessageFormatError("job reference field 'handle' must be an object", field="handle")
        return cls(engine=engine, job_id=job_id, job_type=job_type, attempt=attempt, handle=handle)


@dataclass(frozen=True, slots=True)
class ActivatedJob:
    """One job as the engine handed it over, in the engine-neutral shape.

    ``lease_expires_at`` is the expiry the engine actually granted (epoch seconds): engines clamp
    the lease asked for, so heartbeat timing is computed from this, never from the request.

    ``payload`` points at the variables in the claim check's bucket when they were too large for the
    job message (:mod:`workerless._core.claimcheck`): ``variables`` is then empty until the handler reads
    them (:meth:`with_variables`). Everything else stays in the message.

    ``raw_variables``: the variables as the engine sent them (JSON text), not decoded: a large value
    the poller cut from the engine's answer (:mod:`workerless.engines.kit.skim`) and passes on as is.
    ``unread_bytes``: the variables were not read at all (over the payload limit, or no room was left
    in the answer's budget): their size; the poller fails or hands back such a job.
    """

    ref: JobRef
    variables: dict[str, Any] = field(repr=False)
    lease_expires_at: float
    activated_at: float
    retries: int | None = None
    instance_id: str | None = None
    element_id: str | None = None
    traceparent: str | None = None
    custom_headers: dict[str, Any] = field(default_factory=dict)
    payload: PayloadRef | None = None
    raw_variables: bytes | None = field(default=None, repr=False)
    unread_bytes: int | None = None

    @property
    def key(self) -> str:
        return self.ref.key

    @property
    def record_key(self) -> str:
        return self.ref.record_key

    @property
    def workflow_key(self) -> str:
        """A downstream idempotency key that is the same for every attempt of one workflow step
        ("charge once, however many attempts we make", node-flow's seed): ``{instance id}:{element
        id or job type}``. A job without an instance (no workflow to be stable across) falls back
        to its job id, so two unrelated jobs of one type never share a key. The one rule for every
        engine and for :attr:`workerless._core.job.Job.workflow_key` (docs/assumptions.md).

        Example:
            >>> ref = JobRef("nodeflow", "task-1", "charge")
            >>> ActivatedJob(ref, {}, 0, 0, instance_id="wf-1").workflow_key
            'wf-1:charge'
            >>> ActivatedJob(ref, {}, 0, 0).workflow_key
            'task-1:charge'
        """
        return f"{self.instance_id or self.ref.job_id}:{self.element_id or self.ref.job_type}"

    def variables_json(self) -> bytes:
        """The variables as the message carries them (compact JSON): what a claim check stores."""
        if self.raw_variables is not None:
            return self.raw_variables
        return json.dumps(self.variables, separators=(",", ":")).encode()

    def variables_size(self) -> int | None:
        """The variables' size in bytes when known without serialising them (cut or unread)."""
        return self.unread_bytes if self.raw_variables is None else len(self.raw_variables)

    def with_variables(self, variables: dict[str, Any]) -> ActivatedJob:
        """This job with its variables read back from the claim check."""
        return dataclasses.replace(self, variables=variables, payload=None, raw_variables=None)

    def to_message(self, *, payload: PayloadRef | None = None) -> str:
        """Serialise for one SQS message body; with ``payload``, the variables are in that object."""
        raw = self.raw_variables if payload is None else None
        carried: dict[str, Any] = (
            {"payload": payload.to_dict()} if payload is not None else {"variables": {} if raw else self.variables}
        )
        body = json.dumps(
            {
                **carried,  # first: where raw variables are put in (below)
                "v": MESSAGE_VERSION,
                "ref": self.ref.to_dict(),
                "lease_expires_at": self.lease_expires_at,
                "activated_at": self.activated_at,
                "retries": self.retries,
                "instance_id": self.instance_id,
                "element_id": self.element_id,
                "traceparent": self.traceparent,
                "custom_headers": self.custom_headers,
            },
            separators=(",", ":"),
        )
        if raw is None:
            return body
        # Passed on as the engine sent it (checked as JSON when it was cut, see raw_variables).
        return '{"variables":' + raw.decode() + body.removeprefix('{"variables":{}')

    @classmethod
    def from_message(cls, body: str) -> ActivatedJob:
        """Parse an SQS message body written by :meth:`to_message`.

        Raises :class:`MessageFormatError` naming the field that is wrong.
        """
        try:
            data = json.loads(body)
        except (ValueError, TypeError) as exc:
            raise MessageFormatError(f"message body is not JSON: {exc}", field="body") from exc
        if not isinstance(data, dict):
            raise MessageFormatError("message body is not a JSON object", field="body")
        if data.get("v") != MESSAGE_VERSION:
            raise MessageFormatError(f"unsupported message version {data.get('v')!r}", field="v")
        ref = JobRef.from_dict(_require(data, "ref", dict))
        payload = PayloadRef.from_dict(data["payload"]) if "payload" in data else None
        variables = {} if payload is not None else _require(data, "variables", dict)
        lease = _require(data, "lease_expires_at", (int, float))
        activated = _require(data, "activated_at", (int, float))
        retries = data.get("retries")
        if retries is not None and (not isinstance(retries, int) or isinstance(retries, bool)):
            raise MessageFormatError("field 'retries' must be an integer or null", field="retries")
        optional: dict[str, str | None] = {}
        for name in ("instance_id", "element_id", "traceparent"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise MessageFormatError(f"field {name!r} must be a string or null", field=name)
            optional[name] = value
        headers = data.get("custom_headers") or {}
        if not isinstance(headers, dict):
            raise MessageFormatError("field 'custom_headers' must be an object", field="custom_headers")
        return cls(
            ref=ref,
            variables=variables,
            lease_expires_at=float(lease),
            activated_at=float(activated),
            retries=retries,
            instance_id=optional["instance_id"],
            element_id=optional["element_id"],
            traceparent=optional["traceparent"],
            custom_headers=headers,
            payload=payload,
        )


def _require(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in data:
        raise MessageFormatError(f"message is missing field {name!r}", field=name)
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise MessageFormatError(f"message field {name!r} has the wrong type", field=name)
    return value


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a handler run decided, stored in the job record before it is reported.

    - ``complete``: ``variables`` completes the job.
    - ``fail``: ``message``, ``retries`` left and ``backoff_seconds``; ``terminal`` when the handler
      raised TerminalError (retries 0; node-flow reports FAILED_WITH_TERMINAL_ERROR).
    - ``throw``: a business error ``error_code`` with ``message`` and ``variables``.
    """

    kind: OutcomeKind
    variables: dict[str, Any] | None = None
    message: str | None = None
    retries: int | None = None
    backoff_seconds: int = 0
    error_code: str | None = None
    terminal: bool = False
    stack: str | None = None
    #: The variables as compact UTF-8 JSON once :meth:`encode_variables` has checked them (the
    #: handler wrapper does for a completion): the store and the engine's report reuse the bytes
    #: instead of encoding the handler's result again each (issue 29). Not a constructor argument,
    #: so ``dataclasses.replace`` with other variables never carries stale bytes.
    encoded_variables: bytes | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def complete(cls, variables: dict[str, Any]) -> Outcome:
        return cls(kind="complete", variables=variables)

    def encode_variables(self) -> bytes:
        """The variables (``{}`` when none) as compact UTF-8 JSON, as an engine is sent them: no NaN
        or infinity, no unpaired surrogate. Encoded once and kept (:attr:`encoded_variables`).
        Raises TypeError or ValueError when they are not JSON.

        Example:
            >>> outcome = Outcome.complete({"city": "Zürich"})
            >>> outcome.encode_variables(), outcome.encoded_variables is not None
            (b'{"city":"Z\\xc3\\xbcrich"}', True)
        """
        encoded = self.encoded_variables
        if encoded is None:
            text = json.dumps(self.variables or {}, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            encoded = text.encode()
            object.__setattr__(self, "encoded_variables", encoded)  # frozen: a cache, not state
        return encoded

    def to_json(self) -> bytes:
        """:meth:`to_dict` as compact JSON (what the job record stores), the variables' bytes reused
        when :meth:`encode_variables` has made them.

        Example:
            >>> outcome = Outcome.complete({"ok": True})
            >>> outcome.to_json() == json.dumps(outcome.to_dict(), separators=(",", ":")).encode()
            True
            >>> outcome.encode_variables()
            b'{"ok":true}'
            >>> json.loads(outcome.to_json()) == outcome.to_dict()
            True
        """
        data = self.to_dict()
        encoded = self.encoded_variables
        if encoded is None or self.variables is None:
            return json.dumps(data, separators=(",", ":")).encode()
        del data["variables"]
        rest = json.dumps(data, separators=(",", ":"))  # never empty: "kind" is always there
        return b'{"variables":' + encoded + b"," + rest[1:].encode()

    @classmethod
    def fail(
        cls,
        message: str,
        *,
        retries: int | None,
        backoff_seconds: int = 0,
        terminal: bool = False,
        stack: str | None = None,
    ) -> Outcome:
        return cls(
            kind="fail",
            message=message,
            retries=retries,
            backoff_seconds=backoff_seconds,
            terminal=terminal,
            stack=stack,
        )

    @classmethod
    def throw(cls, error_code: str, message: str, variables: dict[str, Any] | None = None) -> Outcome:
        return cls(kind="throw", error_code=error_code, message=message, variables=variables or {})

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "variables": self.variables,
            "message": self.message,
            "retries": self.retries,
            "backoff_seconds": self.backoff_seconds,
            "error_code": self.error_code,
            "terminal": self.terminal,
            "stack": self.stack,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outcome:
        kind = data.get("kind")
        if kind not in ("complete", "fail", "throw"):
            raise MessageFormatError(f"stored outcome has unknown kind {kind!r}", field="kind")
        return cls(
            kind=kind,
            variables=data.get("variables"),
            message=data.get("message"),
            retries=data.get("retries"),
            backoff_seconds=int(data.get("backoff_seconds") or 0),
            error_code=data.get("error_code"),
            terminal=bool(data.get("terminal")),
            stack=data.get("stack"),
        )


@dataclass(frozen=True, slots=True)
class Demand:
    """The poller's request for one route: up to ``capacity`` jobs of ``job_type``.

    ``queue`` is the engine-side queue name where it differs from the type (node-flow domains:
    ``charge:eu-west``); None means the job type itself.
    """

    job_type: str
    capacity: int
    queue: str | None = None
    #: WORKERLESS_MAX_PAYLOAD_BYTES and the most job variables one answer may bring (bytes): what the
    #: adapter reads an answer within (:mod:`workerless.engines.kit.skim`); None: the template's defaults.
    payload_limit: int | None = None
    answer_budget: int | None = None

    @property
    def engine_queue(self) -> str:
        return self.queue or self.job_type
