"""What a StageNext delivery carries: the pull answer read into an :class:`ActivatedJob` (its ack
token, affinity cookies and execution identity in the handle), and the result body built from the
stored outcome and that handle alone, so a retried report sends the same identity and result."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
from workerless.engines.kit.skim import CHECKED_BYTES, Skimmer
from workerless.engines.stagenext.config import ENGINE, ERROR_MESSAGE_CAP, RESULT_BODY_CAP, RESULT_STRING_CAP
from workerless.errors import GarbledResponseError, MessageFormatError, PayloadTooLargeError, ResponseShapeError

__all__ = [
    "Remembered",
    "cookie_header",
    "delivery",
    "encode_result",
    "handle_value",
    "lease_body",
    "pulled_input",
    "pulled_variables",
    "result_body",
]


def handle_value(ref: JobRef, name: str) -> object:
    """A value the pull put in the job's handle; MessageFormatError when it is missing."""
    value = ref.handle.get(name)
    if value is None or value == "":
        raise MessageFormatError(f"StageNext job reference handle is missing {name!r}", field=f"handle.{name}")
    return value


def cookie_header(ref: JobRef) -> dict[str, str]:
    """The pull's affinity cookies, for the ack that must reach the same gateway replica."""
    cookies = ref.handle.get("cookies") or {}
    if not isinstance(cookies, Mapping) or not cookies:
        return {}
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}


def lease_body(ref: JobRef, worker_id: str) -> dict[str, Any]:
    """The lease acquire / renew body: the execution's identity under our worker record."""
    body: dict[str, Any] = {"executionId": handle_value(ref, "executionId"), "workerId": worker_id}
    if ref.handle.get("attempt") is not None:
        body["attempt"] = ref.handle["attempt"]
    return body


def delivery(
    data: Mapping[str, Any],
    demand: Demand,
    queue: str,
    cookies: dict[str, str],
    *,
    pulled_at: float,
    lease_expires_at: float,
    skim: Skimmer | None = None,
) -> ActivatedJob:
    """The job a 200 pull answered (ResponseShapeError when it has no stageId or ackToken). ``skim``:
    the skimmer the answer was read through (its ``input`` may be cut: :func:`pulled_input`)."""
    token, stage_id = data.get("ackToken"), data.get("stageId")
    if not isinstance(stage_id, str) or not stage_id:
        raise ResponseShapeError("pull answered without stageId", engine=ENGINE, field="stageId", status=200)
    if not isinstance(token, str) or not token:
        raise ResponseShapeError(
            "pull answered without ackToken", engine=ENGINE, field="ackToken", job_id=stage_id, status=200
        )
    execution_id = data.get("executionId")
    execution_id = execution_id if isinstance(execution_id, str) and execution_id else None
    attempt = data.get("attempt")
    attempt = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None
    retries = data.get("retries")
    retries = retries if isinstance(retries, int) and not isinstance(retries, bool) else None
    handle: dict[str, Any] = {
        "stageId": stage_id,
        "queue": queue,
        "ackToken": token,
        "cookies": cookies,
        "executionId": execution_id,
        "attempt": attempt,
        "pulledAt": pulled_at,
    }
    ref = JobRef(
        engine=ENGINE,
        job_id=stage_id,
        job_type=demand.job_type,
        attempt=execution_id or (str(attempt) if attempt is not None else ""),
        handle=handle,
    )
    delivery_count = data.get("deliveryCount")
    variables, raw_variables, unread = pulled_input(skim, data.get("input"), job_id=stage_id)
    return ActivatedJob(
        ref=ref,
        variables=variables,
        lease_expires_at=lease_expires_at,
        activated_at=pulled_at,
        retries=retries,
        custom_headers={"deliveryCount": delivery_count} if isinstance(delivery_count, int) else {},
        raw_variables=raw_variables,
        unread_bytes=unread,
    )


def pulled_input(
    skim: Skimmer | None, value: object, *, job_id: str | None = None
) -> tuple[dict[str, Any], bytes | None, int | None]:
    """A pull's ``input`` as (variables, raw_variables, unread_bytes) for :class:`ActivatedJob`, with
    :func:`pulled_variables`' meaning. A value the skimmer cut is passed on as JSON text, never
    decoded into objects: an object as is; a JSON string (the input's JSON text) unquoted, wrapped
    under ``input`` unless it is an object's text; any other value wrapped under ``input``. Not read
    (over the limit or the cycle's budget): only its size (``unread_bytes``)."""
    cut = skim.resolve(value) if skim is not None else None
    if cut is None:
        return pulled_variables(value), None, None
    if cut.raw is None:
        return {}, None, cut.size
    if cut.malformed:  # the skeleton parsed, the value inside it did not: lost in transit
        raise GarbledResponseError(
            "pull answered an input that is not JSON", engine=ENGINE, field="input", job_id=job_id
        )
    if cut.is_object:
        return {}, cut.raw, None
    raw = cut.raw
    if raw[:1] == b'"':
        text = json.loads(raw)  # one string: about its size in memory (not ~8x, as objects would be)
        if len(raw) <= CHECKED_BYTES:
            return pulled_variables(text), None, None  # small: decoded as the inline path does
        inner = text.lstrip()[:1]
        if inner == "{":
            return {}, text.encode(), None  # the handler reads (and, if it is not JSON, refuses) it
        if inner != "[":
            return {}, b'{"input":' + raw + b"}", None  # not JSON text: the string itself
        raw = text.encode()
    return {}, b'{"input":' + raw + b"}", None


def pulled_variables(raw: object) -> dict[str, Any]:
    """A pull's ``input``: a JSON object (or its JSON text) as is, anything else under ``input``."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw else {}
        except ValueError:
            return {"input": raw}
    if raw is None:
        return {}
    return dict(raw) if isinstance(raw, dict) else {"input": raw}


def result_body(ref: JobRef, outcome: Outcome, worker_id: str) -> tuple[dict[str, Any], str]:
    """The StageResultSubmit body for ``outcome`` and its result string. Built only from the
    stored outcome and the handle, so a retry sends the same execution identity and result."""
    body: dict[str, Any] = {"executionId": handle_value(ref, "executionId"), "workerId": worker_id}
    if ref.handle.get("attempt") is not None:
        body["attempt"] = ref.handle["attempt"]
    if outcome.kind == "complete":
        result = json.dumps(outcome.variables or {}, separators=(",", ":"), ensure_ascii=False)
        body.update(status="succeeded", result=result)
        return body, result
    message = _truncate(outcome.message or outcome.kind, ERROR_MESSAGE_CAP)
    if outcome.kind == "throw":
        # StageNext has no business-error channel: a thrown error is a definitive failure whose
        # code and variables travel in the result string.
        payload = {"errorCode": outcome.error_code, "variables": outcome.variables or {}}
        result = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
        body.update(status="failed", result=result, errorMessage=message, errorCode=outcome.error_code, retryable=False)
        return body, result
    retryable = not outcome.terminal and (outcome.retries is None or outcome.retries > 0)
    body.update(
        status="failed",
        result="",
        errorMessage=message,
        retryable=retryable,
        backoffSeconds=max(0, outcome.backoff_seconds),
    )
    return body, ""


def encode_result(ref: JobRef, outcome: Outcome, worker_id: str) -> bytes:
    """The result request's bytes, checked against the seed's caps before sending
    (PayloadTooLargeError naming the cap)."""
    body, result = result_body(ref, outcome, worker_id)
    result_size = len(result.encode())
    if result_size > RESULT_STRING_CAP:
        raise PayloadTooLargeError(
            f"result string is {result_size} bytes, over StageNext's {RESULT_STRING_CAP}-byte cap",
            engine=ENGINE,
            cap=RESULT_STRING_CAP,
            job_id=ref.job_id,
        )
    content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    if len(content) > RESULT_BODY_CAP:
        raise PayloadTooLargeError(
            f"result request body is {len(content)} bytes, over StageNext's {RESULT_BODY_CAP}-byte cap",
            engine=ENGINE,
            cap=RESULT_BODY_CAP,
            job_id=ref.job_id,
        )
    return content


def _truncate(text: str, cap: int) -> str:
    data = text.encode()
    if len(data) <= cap:
        return text
    return data[: cap - 3].decode(errors="ignore") + "..."


class Remembered:
    """Deliveries (by ack token) remembered between a retried call and its retry, with a count;
    bounded, oldest forgotten first (thread-safe)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, token: object) -> bool:
        with self._lock:
            return token in self._items

    def get(self, token: str) -> int | None:
        with self._lock:
            return self._items.get(token)

    def remember(self, token: str, value: int = 0) -> None:
        with self._lock:
            self._items[token] = value
            self._items.move_to_end(token)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def forget(self, token: str) -> None:
        with self._lock:
            self._items.pop(token, None)
