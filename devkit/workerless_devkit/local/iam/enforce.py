"""Hold every AWS call of a local invocation to its function's role, and refuse it as AWS does.

The runtime builds one :class:`IamEnforcer` per topology from the rendered roles
(:mod:`workerless_devkit.local.iam.roles`) and puts it in each invocation's scope
(:class:`workerless_devkit.local.loop.InvocationScope`). Two botocore hooks, registered with local mode's
others on every session:

- ``before-parameter-build`` (every service and operation): works out what AWS authorises for the
  call (:mod:`workerless_devkit.local.iam.calls`) and asks the role; a refusal is kept in the request
  context, an allowed call is recorded (:attr:`IamEnforcer.grants`);
- ``before-call``: answers a refused call with the HTTP response AWS sends, parsed by botocore's own
  parser, so the caller gets the very ``ClientError`` boto3 raises on AWS (SQS ``AccessDenied``
  HTTP 403, DynamoDB and Secrets Manager ``AccessDeniedException`` HTTP 400, the message naming the
  role session, the action and the resource). Nothing reaches the embedded AWS;
- ``after-call`` of S3's ``GetObject`` / ``HeadObject``: a key the embedded S3 does not have is
  answered 404 only to a role that may list it (``s3:ListBucket`` on the bucket, the key as
  ``s3:prefix``); any other role gets S3's 403 AccessDenied, as on AWS, and the refusal is recorded.

Outside an invocation (the test's own clients, the emulated event source mappings) nothing is
checked. The event source mappings' and the log writes' permissions are checked once, at start
(:meth:`IamEnforcer.check_platform`), as Lambda does when it creates the mapping.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import workerless

from workerless_devkit.local.iam.calls import Need, listing, needs
from workerless_devkit.local.iam.roles import FunctionRole
from workerless_devkit.local.template import LOCAL_PLACE, LocalTemplate, Place, TemplateError

#: What Lambda's SQS event source mapping calls with the function's role (CreateEventSourceMapping
#: refuses a role that lacks one of them).
EVENT_SOURCE_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
#: A log stream name as Lambda writes them, for the log-permission check.
_LOG_STREAM = "2025/01/01/[$LATEST]00000000000000000000000000000000"
_REFUSAL_KEY = "workerless_local_iam_refusal"
_CHECKED_KEY = "workerless_local_iam_checked"
_PARAMS_KEY = "workerless_local_iam_object"

_PACKAGE = Path(workerless.__file__).parent  # the runtime as imported: what code objects name their files by
#: Code that runs once per Lambda container, whichever function the container serves: building the
#: engine adapter (its engine values, the secret) and the adapter's shared state (tokens, sessions).
_CONTAINER_DIRS = (str(_PACKAGE / "engines") + os.sep,)
_CONTAINER_FILES = tuple(str(_PACKAGE / name) for name in ("runtime.py", "wiring.py", "_core/settings.py"))


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """One (function, action, resource) the check allowed while the topology ran.

    ``origin`` is ``"container"`` for a call made while building or using the per-container engine
    adapter (in Lambda every function's container makes it; in one local process only the first
    function to need it does), else ``"code"``.
    """

    function: str
    action: str
    resource: str
    origin: str = "code"
    #: The partition key values the call touched (``dynamodb:LeadingKeys``), for a DynamoDB item call.
    keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Refusal:
    """A call the role does not allow, and how AWS answers it."""

    function: str
    prefix: str
    action: str
    resource: str
    principal: str
    explicit: bool

    @property
    def message(self) -> str:
        # SQS names the action in lower case in this message (seen on AWS: "sqs:sendmessage").
        action = self.action.lower() if self.prefix == "sqs" else self.action
        head = f"User: {self.principal} is not authorized to perform: {action} on resource: {self.resource}"
        if self.explicit:
            return f"{head} with an explicit deny in an identity-based policy"
        return f"{head} because no identity-based policy allows the {action} action"

    def wire(self, protocol: str) -> tuple[int, dict[str, str], bytes]:
        """The status, headers and body AWS answers with."""
        request_id = str(uuid.uuid4())
        if self.prefix == "sqs":
            # SQS speaks JSON but keeps its Query-era error codes in x-amzn-query-error.
            body = {"__type": "com.amazon.coral.service#AccessDeniedException", "message": self.message}
            headers = {"x-amzn-query-error": "AccessDenied;Sender"}
            status = 403
        elif protocol in ("json", "rest-json", "smithy-rpc-v2-cbor"):
            body = {"__type": "AccessDeniedException", "Message": self.message}
            if self.prefix == "dynamodb":
                body["__type"] = "com.amazon.coral.service#AccessDeniedException"
            headers, status = {}, 400
        elif self.prefix == "s3":
            # S3's REST-XML error: an <Error> root, no <ErrorResponse> around it.
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
                f"<Message>{_xml_escape(self.message)}</Message><RequestId>{request_id}</RequestId></Error>"
            )
            return 403, {"x-amz-request-id": request_id, "content-type": "application/xml"}, xml.encode()
        else:
            xml = (
                "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
                f"<Message>{_xml_escape(self.message)}</Message></Error><RequestId>{request_id}</RequestId>"
                "</ErrorResponse>"
            )
            return 403, {"x-amzn-requestid": request_id, "content-type": "text/xml"}, xml.encode()
        content_type = (
            "application/x-amz-json-1.1" if self.prefix in ("secretsmanager", "ssm") else "application/x-amz-json-1.0"
        )
        return (
            status,
            {"x-amzn-requestid": request_id, "content-type": content_type, **headers},
            json.dumps(body).encode(),
        )


class IamEnforcer:
    """The roles of one topology's functions, the calls they were allowed, and the refusals."""

    def __init__(
        self,
        roles: Mapping[str, FunctionRole],
        *,
        secret_arn: Callable[[str], str | None] | None = None,
        place: Place = LOCAL_PLACE,
        partition_keys: Mapping[str, str] | None = None,
    ) -> None:
        self.roles = dict(roles)
        self._secret_arn = secret_arn
        #: Each table's partition key attribute, by table ARN: what a call's ``dynamodb:LeadingKeys`` are.
        self._partition_keys = dict(partition_keys or {})
        #: The account and region the functions run in: what a name in a call (a table's) stands for.
        self.place = place
        self._lock = threading.Lock()
        self._grants: set[Grant] = set()
        self._refusals: list[Refusal] = []
        self._unmodelled: set[str] = set()

    @property
    def grants(self) -> frozenset[Grant]:
        """Every (function, action, resource, origin) allowed so far."""
        with self._lock:
            return frozenset(self._grants)

    @property
    def refusals(self) -> list[Refusal]:
        """Every call refused so far, in order."""
        with self._lock:
            return list(self._refusals)

    def authorise(self, function_id: str, prefix: str, operation: str, params: Mapping[str, Any]) -> Refusal | None:
        """Check one call of ``function_id``; a :class:`Refusal` when its role does not allow it."""
        role = self.roles.get(function_id)
        if role is None:
            return None  # not a function of the template (a direct call in a test): nothing to hold it to
        wanted = needs(
            prefix,
            operation,
            params,
            secret_arn=self._secret_arn,
            place=self.place,
            partition_key=self._partition_keys.get,
        )
        for need in wanted:
            decision = role.decide(need.action, need.resource if need.modelled else None, need.condition_context)
            if not decision.allowed:
                refusal = Refusal(
                    function=function_id,
                    prefix=prefix,
                    action=need.action,
                    resource=need.shown or need.resource,
                    principal=role.principal,
                    explicit=decision.explicit_deny,
                )
                if self._record(refusal):
                    # Loud once per distinct refusal: the caller's own handling may only log a code.
                    _log().warning("IAM: %s: %s", function_id, refusal.message)
                return refusal
        origin = _origin()
        with self._lock:
            for need in wanted:
                self._grants.add(Grant(function_id, need.action, need.resource or "*", origin, need.leading_keys))
                if not need.modelled and prefix not in self._unmodelled:
                    self._unmodelled.add(prefix)
                    _log().warning(
                        "IAM check: %s calls are checked by action only (local mode does not model their resources)",
                        prefix,
                    )
        return None

    def authorise_missing(self, function_id: str, bucket: str, key: str) -> Refusal | None:
        """S3's check before it says ``key`` does not exist: a :class:`Refusal` (S3 then answers 403
        AccessDenied) when ``function_id``'s role may not list the key; else the listing grant is
        recorded as used (S3 answers 404 NoSuchKey)."""
        role = self.roles.get(function_id)
        if role is None:
            return None
        need = listing(bucket, key)
        decision = role.decide(need.action, need.resource, need.condition_context)
        if decision.allowed:
            with self._lock:
                self._grants.add(Grant(function_id, need.action, need.resource, _origin()))
            return None
        refusal = Refusal(
            function=function_id,
            prefix="s3",
            action=need.action,
            resource=need.resource,
            principal=role.principal,
            explicit=decision.explicit_deny,
        )
        if self._record(refusal):
            _log().warning("IAM: %s: a missing S3 object reads as AccessDenied: %s", function_id, refusal.message)
        return refusal

    def _record(self, refusal: Refusal) -> bool:
        """Keep ``refusal``; whether it is the first of its kind (the one to log)."""
        with self._lock:
            first = refusal not in self._refusals
            self._refusals.append(refusal)
        return first

    # -- what the platform does with the role ----------------------------------------------------
    def platform_needs(self, template: LocalTemplate) -> dict[str, list[tuple[str, Need]]]:
        """Per function, what Lambda itself does with its role: each SQS event source mapping polls
        its queue, and the runtime writes the function's logs. (what, need) pairs."""
        out: dict[str, list[tuple[str, Need]]] = {}
        for spec in template.functions:
            role = self.roles.get(spec.logical_id)
            if role is None:
                continue
            entries: list[tuple[str, Need]] = []
            for event in spec.sqs_events:
                if not event.enabled:
                    continue
                arn = template.queue(event.queue_id).arn
                entries += [(f"event source {event.name}", Need(action, arn, arn)) for action in EVENT_SOURCE_ACTIONS]
            group = template.place.log_group_arn(role.log_group)
            stream = f"{group}:log-stream:{_LOG_STREAM}"
            entries += [
                ("logs", Need(action, stream, stream)) for action in ("logs:CreateLogStream", "logs:PutLogEvents")
            ]
            if not role.log_group_in_template:
                # Lambda creates a log group the template does not: that needs the role too.
                entries.append(("logs", Need("logs:CreateLogGroup", group, group)))
            out[spec.logical_id] = entries
        return out

    def check_platform(self, template: LocalTemplate) -> list[str]:
        """Refuse what AWS refuses at deploy time, and say what it would silently lose.

        Raises :class:`TemplateError` for an SQS event whose queue the role cannot poll (Lambda's
        CreateEventSourceMapping fails: "The provided execution role does not have permissions to
        call ReceiveMessage on SQS"). Returns one warning per function whose role cannot write its
        logs: Lambda runs it and drops its logs without a word.
        """
        warnings: list[str] = []
        for function_id, entries in self.platform_needs(template).items():
            role = self.roles[function_id]
            missing_logs: list[str] = []
            for what, need in entries:
                if role.decide(need.action, need.resource).allowed:
                    continue
                if what == "logs":
                    missing_logs.append(need.action)
                    continue
                operation = need.action.split(":", 1)[1]
                raise TemplateError(
                    f"{function_id}.Events.{what.removeprefix('event source ')}: Lambda would refuse this event "
                    f"source mapping (InvalidParameterValueException: The provided execution role does not have "
                    f"permissions to call {operation} on SQS): role {role.role_id} does not allow {need.action} "
                    f"on {need.resource}"
                )
            if missing_logs:
                warnings.append(
                    f"{function_id}: role {role.role_id} does not allow {', '.join(missing_logs)} on log group "
                    f"{role.log_group}: on AWS this function's logs (and its EMF metrics) are silently dropped"
                )
        return warnings


def authorise_call(params: Any, model: Any, context: dict[str, Any]) -> Refusal | None:
    """Check the call being built (once per call; both hooks below may ask). The refusal, if any."""
    if _CHECKED_KEY in context:
        refusal: Refusal | None = context.get(_REFUSAL_KEY)
        return refusal
    context[_CHECKED_KEY] = True
    from workerless_devkit.local import loop

    scope = loop.current_scope()
    if scope is None or scope.iam is None or model is None or not isinstance(params, Mapping):
        return None
    service = model.service_model
    prefix = str(service.signing_name or service.endpoint_prefix)
    found = scope.iam.authorise(scope.function_id, prefix, model.name, params)
    if found is not None:
        context[_REFUSAL_KEY] = found
    return found


def _check(params: Any, model: Any = None, context: Any = None, **_: Any) -> None:
    if isinstance(context, dict):
        authorise_call(params, model, context)


def _answer(model: Any, context: Any = None, **_: Any) -> Any:
    """Short-circuit a refused call with AWS's answer (botocore then raises it as a ClientError)."""
    if not isinstance(context, dict):
        return None
    refusal: Refusal | None = context.get(_REFUSAL_KEY)
    if refusal is None:
        return None
    from botocore.awsrequest import AWSResponse, HTTPHeaders
    from botocore.endpoint import convert_to_response_dict
    from botocore.parsers import create_parser

    protocol = str(model.service_model.resolved_protocol)
    status, headers, body = refusal.wire(protocol)
    http = AWSResponse("https://local.workerless.invalid/", status, HTTPHeaders.from_dict(headers), _Raw(body))
    parsed = create_parser(protocol).parse(convert_to_response_dict(http, model), model.output_shape)
    parsed.setdefault("ResponseMetadata", {})["RetryAttempts"] = 0
    return http, parsed


def _missing_object(http_response: Any, parsed: Any, model: Any, context: Any = None, **_: Any) -> None:
    """An S3 GetObject/HeadObject the embedded S3 answered 404 (no such key): AWS says so only to a
    role that may list the key; to any other it answers 403 AccessDenied. Rewrites ``parsed`` in
    place (botocore raises its ClientError from it after this hook)."""
    if not isinstance(context, dict) or _CHECKED_KEY not in context or _REFUSAL_KEY in context:
        return
    if getattr(http_response, "status_code", None) != 404 or not isinstance(parsed, dict):
        return
    params = context.get(_PARAMS_KEY)
    if not isinstance(params, Mapping) or str(parsed.get("Error", {}).get("Code")) not in ("NoSuchKey", "404"):
        return  # NoSuchBucket, or a call whose parameters were not kept: not a missing key
    from workerless_devkit.local import loop

    scope = loop.current_scope()
    if scope is None or scope.iam is None:
        return
    refusal = scope.iam.authorise_missing(scope.function_id, str(params.get("Bucket")), str(params.get("Key")))
    if refusal is None:
        return
    # GetObject's 403 carries S3's XML error; HeadObject's has no body, so botocore names it by status.
    head = model.name == "HeadObject"
    parsed["Error"] = (
        {"Code": "403", "Message": "Forbidden"} if head else {"Code": "AccessDenied", "Message": refusal.message}
    )
    metadata = parsed.setdefault("ResponseMetadata", {})
    metadata["HTTPStatusCode"] = 403
    http_response.status_code = 403


def _keep_params(params: Any, model: Any = None, context: Any = None, **_: Any) -> None:
    """Keep an S3 object read's Bucket and Key for :func:`_missing_object` (the answer has neither)."""
    if isinstance(context, dict) and isinstance(params, Mapping):
        context[_PARAMS_KEY] = {"Bucket": params.get("Bucket"), "Key": params.get("Key")}


class _Raw:
    """The raw body botocore's AWSResponse reads."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("before-parameter-build", _check),
    ("before-parameter-build.s3.GetObject", _keep_params),
    ("before-parameter-build.s3.HeadObject", _keep_params),
    ("before-call", _answer),
    ("after-call.s3.GetObject", _missing_object),
    ("after-call.s3.HeadObject", _missing_object),
)


def _origin() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_CONTAINER_DIRS) or name in _CONTAINER_FILES:
            return "container"
        frame = frame.f_back  # type: ignore[assignment]
    return "code"


def _log() -> Any:
    import logging

    return logging.getLogger("workerless_devkit.local")


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
