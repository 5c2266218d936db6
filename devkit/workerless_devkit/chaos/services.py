"""AWS service faults where they hurt most, after the SDK's retries (issue 26, section 1).

botocore event hooks, registered beside :mod:`workerless_devkit.chaos.inject`'s (same rules: they act
only while a chaos run is active, only inside a local-mode invocation, never on the harness's own
calls). Each fault is seeded by the run's :class:`~workerless_devkit.chaos.plan.FaultPlan` and counted
by its recorder, with the jobs it hit where the call names them:

- ``dynamodb_write_lost`` (``after-call.dynamodb``): a conditional write (PutItem, UpdateItem,
  DeleteItem with a ConditionExpression; TransactWriteItems) *took effect* in moto, and the caller
  sees InternalServerError (500): the answer was lost and the SDK's retries gave up.
- ``sqs_batch_error`` (``before-call.sqs.SendMessageBatch``, a job queue): the whole call refused,
  500 InternalError, nothing sent.
- ``sqs_batch_partial`` (``before-parameter-build`` / ``after-call``): every second entry is taken
  out of the request (never sent) and answered in ``Failed`` (InternalError, not the sender's
  fault), the others sent: a partial batch failure as SQS reports one.
- ``sqs_batch_lost`` (``after-call.sqs.SendMessageBatch``): the messages were sent, the caller sees
  a read timeout (the answer was lost).
- ``s3_error``, ``ssm_error``, ``secrets_error`` (``before-call``): S3 (the claim check) answers 500
  InternalError; SSM Parameter Store (the routes) throttles (ThrottlingException); Secrets Manager
  (the engine secret) answers 500 InternalServiceError.

"After the SDK's retries": a ``before-call`` or ``after-call`` hook runs outside botocore's retry
loop, so what it raises reaches the caller as the last attempt's error would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workerless_devkit.chaos import inject
from workerless_devkit.chaos.plan import Fault

_PARTIAL_KEY = "workerless_chaos_partial"
_CONDITIONAL = frozenset({"PutItem", "UpdateItem", "DeleteItem"})


def _active(context: Any = None) -> tuple[inject.ChaosState, str] | None:
    """The run and the calling function, when a hook may act here."""
    state = inject._ACTIVE
    if state is None or inject._suppress.get():
        return None
    function = inject._scope_function()
    if function is None:
        return None
    return state, function


def _params(context: Any) -> dict[str, Any]:
    params = context.get(inject._PARAMS_KEY) if isinstance(context, dict) else None
    return params if isinstance(params, dict) else {}


def dynamodb_job_ids(params: Any) -> list[str]:
    """The job ids a DynamoDB call names: its Key or Item, a BatchGetItem's keys, a transaction's
    items (records are keyed ``<type>#<job id>#...``; ``state#...`` records name no job)."""
    if not isinstance(params, dict):
        return []
    holders: list[Any] = [params]
    for request in (params.get("RequestItems") or {}).values():
        if isinstance(request, dict):
            holders.extend({"Key": key} for key in request.get("Keys") or [])
    for item in params.get("TransactItems") or []:
        if isinstance(item, dict):
            holders.extend(v for v in item.values() if isinstance(v, dict))
    found: list[str] = []
    for holder in holders:
        for key in inject._keys_in(holder):
            job_id = inject._job_id_of_key(key)
            if job_id and job_id not in found:
                found.append(job_id)
    return found


def sqs_job_ids(params: Any) -> list[str]:
    """The job ids an SQS send names: a job batch's messages, or a heartbeat ticket's entries."""
    if not isinstance(params, dict):
        return []
    if "Entries" in params:
        return inject._batch_jobs(params)
    return inject._ticket_jobs(params)


def _is_job_batch(state: inject.ChaosState, function: str, params: dict[str, Any]) -> bool:
    return function in state.poller_ids and inject._queue_name(params) in state.job_queues


def _before_build_batch(params: Any, context: Any = None, **_: Any) -> None:
    """A partial batch failure: every second entry out of the request, answered Failed later."""
    found = _active(context)
    if found is None or not isinstance(params, dict) or not isinstance(context, dict):
        return
    state, function = found
    entries = params.get("Entries")
    if not _is_job_batch(state, function, params) or not isinstance(entries, list) or len(entries) < 2:
        return
    dropped = entries[1::2]
    job_ids = inject._batch_jobs({"Entries": dropped})
    if not state.roll(Fault.SQS_BATCH_PARTIAL, job_ids):
        return
    params["Entries"] = entries[0::2]
    context[_PARTIAL_KEY] = [str(entry.get("Id")) for entry in dropped]
    state.recorder.note(Fault.SQS_BATCH_PARTIAL, job_ids=job_ids, where=f"{function}:SendMessageBatch")


def _before_call(model: Any, context: Any = None, **_: Any) -> None:
    found = _active(context)
    if found is None:
        return
    state, function = found
    service, operation = model.service_model.service_name, model.name
    where = f"{function}:{operation}"
    if service == "sqs" and operation == "SendMessageBatch":
        params = _params(context)
        if _is_job_batch(state, function, params):
            job_ids = inject._batch_jobs(params)
            if state.roll(Fault.SQS_BATCH_ERROR, job_ids):
                state.recorder.note(Fault.SQS_BATCH_ERROR, job_ids=job_ids, where=where)
                raise inject._client_error("InternalError", 500, operation)
    elif service == "s3" and state.plan.roll(Fault.S3_ERROR):
        state.recorder.note(Fault.S3_ERROR, where=where)
        raise inject._client_error("InternalError", 500, operation)
    elif service == "ssm" and state.plan.roll(Fault.SSM_ERROR):
        state.recorder.note(Fault.SSM_ERROR, where=where)
        raise inject._client_error("ThrottlingException", 400, operation)
    elif service == "secretsmanager" and state.plan.roll(Fault.SECRETS_ERROR):
        state.recorder.note(Fault.SECRETS_ERROR, where=where)
        raise inject._client_error("InternalServiceError", 500, operation)


def _took_effect(http_response: Any) -> bool:
    status = getattr(http_response, "status_code", None)
    return isinstance(status, int) and status < 300


def _after_dynamodb(http_response: Any = None, model: Any = None, context: Any = None, **_: Any) -> None:
    """A conditional write that took effect, its answer lost."""
    found = _active(context)
    if found is None or model is None or not _took_effect(http_response):
        return
    state, function = found
    operation = model.name
    params = _params(context)
    conditional = operation == "TransactWriteItems" or (operation in _CONDITIONAL and "ConditionExpression" in params)
    if not conditional:
        return
    job_ids = dynamodb_job_ids(params)
    if state.roll(Fault.DYNAMODB_WRITE_LOST, job_ids):
        state.recorder.note(Fault.DYNAMODB_WRITE_LOST, job_ids=job_ids, where=f"{function}:{operation}")
        raise inject._client_error("InternalServerError", 500, operation)


def _after_batch(http_response: Any = None, parsed: Any = None, context: Any = None, **_: Any) -> None:
    """The partial failure's Failed entries; a batch sent whose answer is lost."""
    found = _active(context)
    if found is None or not isinstance(parsed, dict) or not _took_effect(http_response):
        return
    state, function = found
    dropped = context.pop(_PARTIAL_KEY, None) if isinstance(context, dict) else None
    if dropped:
        failed = parsed.setdefault("Failed", [])
        failed.extend(
            {"Id": entry_id, "SenderFault": False, "Code": "InternalError", "Message": "injected by chaos"}
            for entry_id in dropped
        )
    params = _params(context)
    if not _is_job_batch(state, function, params):
        return
    sent = {str(s.get("Id")) for s in parsed.get("Successful") or [] if isinstance(s, dict)}
    entries = [e for e in params.get("Entries") or [] if str(e.get("Id")) in sent]
    job_ids = inject._batch_jobs({"Entries": entries})
    if entries and state.roll(Fault.SQS_BATCH_LOST, job_ids):
        from botocore.exceptions import ReadTimeoutError

        state.recorder.note(Fault.SQS_BATCH_LOST, job_ids=job_ids, where=f"{function}:SendMessageBatch")
        raise ReadTimeoutError(endpoint_url=f"sqs:{inject._queue_name(params)} (answer lost, injected)")


HOOKS: tuple[tuple[str, Callable[..., None]], ...] = (
    ("before-parameter-build.sqs.SendMessageBatch", _before_build_batch),
    ("before-call.sqs.SendMessageBatch", _before_call),
    ("before-call.s3", _before_call),
    ("before-call.ssm", _before_call),
    ("before-call.secrets-manager", _before_call),  # events name a service by its hyphenated id
    ("after-call.dynamodb", _after_dynamodb),
    ("after-call.sqs.SendMessageBatch", _after_batch),
)


def job_ids_of_call(service: str, params: Any) -> list[str]:
    """The jobs a DynamoDB or SQS call names (for the recorder: a fault on a batch or a ticket is
    then traced to the jobs it hit)."""
    if service == "dynamodb":
        return dynamodb_job_ids(params)
    if service == "sqs":
        return sqs_job_ids(params)
    return []
