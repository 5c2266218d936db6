"""The node-flow adapter: SIMPLE tasks leased from a queue, fenced by a lease token (seed 002).

Mapping (details in docs/engines/nodeflow.md):

- activate → ``POST /v1/ns/{ns}/queues/{queue}/lease`` once per demand, ``count`` = capacity,
  ``waitSeconds`` 0 (a Lambda must not pay to sit in a long poll).
- extend → ``POST /v1/ns/{ns}/tasks/{taskId}/heartbeat`` with queueName + leaseToken.
- report → ``POST /v1/ns/{ns}/tasks/{taskId}/report``: COMPLETED / FAILED /
  FAILED_WITH_TERMINAL_ERROR; a failure's stack goes to the task log first.
- release → report FAILED (node-flow has no release call; a retry starts at once as a new task).
- 409 ``LEASE_EXPIRED`` → :class:`LeaseLostError`; 403 → :class:`ConfigurationError` naming the
  scope; everything else through :func:`error_for_response` / :func:`error_for_transport`.

The lease token, API key, secret and access token are credentials: none of them is ever logged or
put in an exception message.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

import httpx

from workerless.engines.base import (
    SharedState,
    error_for_response,
    error_for_transport,
    is_loopback,
    parse_problem,
)
from workerless.errors import (
    ConfigurationError,
    EngineError,
    LeaseLostError,
    MessageFormatError,
    PayloadTooLargeError,
    ResponseShapeError,
)
from workerless.lease import ACTIVATION_LEASE, LeaseModel
from workerless.model import ActivatedJob, Demand, JobRef, Outcome

__all__ = ["NodeFlowEngine", "from_values", "workflow_key"]

ENGINE = "nodeflow"
REPORT_SCOPE = "tasks:report"
#: Refresh a service-account token this long before it expires (the SDK's rule).
REFRESH_MARGIN_SECONDS = 60.0
#: Longest ``reason`` sent on a report; the whole text (a stack) goes to the task log instead.
REASON_CAP_CHARS = 4096
#: Longest log line and most lines per logs call (the emulator's caps; see docs/assumptions.md).
LOG_MESSAGE_CAP_CHARS = 32768
LOG_BATCH = 100
_LEVELS = {
    "debug": "debug",
    "trace": "debug",
    "info": "info",
    "warn": "warn",
    "warning": "warn",
    "error": "error",
    "exception": "error",
    "critical": "error",
    "fatal": "error",
}
_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_DOMAIN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_TOKENISH_RE = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII, no spaces: safe in a header

logger = logging.getLogger(__name__)


def workflow_key(job: ActivatedJob) -> str:
    """A downstream idempotency key that is the same for every attempt of one workflow step:
    ``{workflowId}:{refName or task type}`` ("charge once, however many attempts we make").

    The task id (``job.ref.job_id``) is the other choice: stable for one attempt, new per retry.
    """
    return f"{job.instance_id or ''}:{job.element_id or job.ref.job_type}"


def parse_timestamp(value: Any) -> float:
    """``leaseExpiresAt`` as epoch seconds: ISO 8601 (``...Z`` or an offset), or a number (epoch
    milliseconds when over 1e11, else seconds). ValueError when it is neither."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a timestamp")
    if isinstance(value, int | float):
        return float(value) / 1000.0 if value > 1e11 else float(value)
    if isinstance(value, str) and value:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError("timestamp has no time zone")
        return parsed.timestamp()
    raise ValueError("not a timestamp")


class _Credentials:
    """Builds the auth header: a fixed X-API-Key, or a Bearer token minted from a service account,
    cached, refreshed 60 s before expiry. Concurrent callers share one refresh (one lock), so a
    poller working eight queues does not mint eight tokens the moment one expires."""

    def __init__(
        self,
        client: httpx.Client,
        token_url: str,
        *,
        api_key: str | None,
        key_id: str | None,
        key_secret: str | None,
        clock: Callable[[], float],
    ) -> None:
        self._client = client
        self._token_url = token_url
        self._api_key = api_key
        self._key_id = key_id
        self._key_secret = key_secret
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0
        self._refresh_at = 0.0

    @property
    def service_account(self) -> bool:
        return self._api_key is None

    @property
    def key_name(self) -> str:
        """The configuration key a refused credential should be looked for under."""
        return "NF_API_KEY" if self._api_key is not None else "NF_KEY_ID"

    def headers(self) -> dict[str, str]:
        if self._api_key is not None:
            return {"X-API-Key": self._api_key}
        return {"Authorization": f"Bearer {self._bearer()}"}

    def invalidate(self, headers: Mapping[str, str]) -> bool:
        """Forget the token used for ``headers`` (a 401). False if there is nothing to re-mint."""
        if self._api_key is not None:
            return False
        with self._lock:
            # Only drop it if nobody has refreshed it since this request was sent.
            if self._token is not None and headers.get("Authorization") == f"Bearer {self._token}":
                self._token = None
        return True

    def _bearer(self) -> str:
        token = self._token
        if token is not None and self._clock() < self._refresh_at:
            return token
        with self._lock:
            # Double-checked: whoever waited on the lock finds the token the first caller minted.
            if self._token is None or self._clock() >= self._refresh_at:
                self._mint()
            assert self._token is not None
            return self._token

    def _mint(self) -> None:
        what = "service-account token exchange"
        try:
            response = self._client.post(self._token_url, json={"keyId": self._key_id, "secret": self._key_secret})
        except httpx.HTTPError as exc:
            raise error_for_transport(ENGINE, exc, what=what) from exc
        if response.status_code in (400, 401, 403):
            problem = parse_problem(response)
            raise ConfigurationError(
                f"node-flow refused the service account in NF_KEY_ID / NF_KEY_SECRET ({response.status_code}"
                f"{', ' + str(problem['code']) if problem.get('code') else ''}): check both values",
                key="NF_KEY_SECRET",
            )
        if response.status_code >= 300:
            raise error_for_response(ENGINE, response, what=what)
        try:
            body = response.json()
            token = body["accessToken"]
            expires_in = float(body["expiresIn"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ResponseShapeError(
                f"{what} answered without accessToken/expiresIn", engine=ENGINE, field="accessToken"
            ) from exc
        if not isinstance(token, str) or not token:
            raise ResponseShapeError(f"{what} answered an empty accessToken", engine=ENGINE, field="accessToken")
        now = self._clock()
        self._token = token
        self._expires_at = now + expires_in
        # A token shorter-lived than twice the margin would be refreshed on every call: refresh at
        # half its life instead.
        self._refresh_at = self._expires_at - min(REFRESH_MARGIN_SECONDS, expires_in / 2)


class NodeFlowEngine:
    """node-flow behind the :class:`~workerless.engines.base.Engine` protocol.

    Example:
        >>> engine = from_values({"NF_URL": "http://127.0.0.1:3000", "NF_API_KEY": "nf_..."}, client)  # doctest: +SKIP
        >>> jobs = engine.activate([Demand("charge", 8)], lease_seconds=60)  # doctest: +SKIP
    """

    name: ClassVar[str] = ENGINE
    #: Leased at activation (:mod:`workerless.lease`).
    lease: ClassVar[LeaseModel] = ACTIVATION_LEASE

    def __init__(
        self,
        client: httpx.Client,
        *,
        base_url: str,
        namespace: str = "default",
        api_key: str | None = None,
        key_id: str | None = None,
        key_secret: str | None = None,
        domain: str | None = None,
        worker_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self.base_url = base_url.rstrip("/")
        self.namespace = namespace
        self.domain = domain
        self.worker_id = worker_id or f"workerless-{socket.gethostname()}-{os.getpid()}"
        self._clock = clock
        self._ns_url = f"{self.base_url}/v1/ns/{quote(namespace, safe='')}"
        self._credentials = _Credentials(
            client,
            f"{self.base_url}/v1/auth/token",
            api_key=api_key,
            key_id=key_id,
            key_secret=key_secret,
            clock=clock,
        )

    # ------------------------------------------------------------------ plumbing

    def queue_for(self, demand: Demand) -> str:
        """The node-flow queue of a demand: ``Demand.queue`` if given, else the job type, with the
        deployment's NF_DOMAIN (if any) as ``taskDefName:domain``."""
        if demand.queue:
            return demand.queue
        return f"{demand.job_type}:{self.domain}" if self.domain else demand.job_type

    def _post(self, path: str, body: Mapping[str, Any], *, what: str, job_id: str | None, scope: str) -> httpx.Response:
        """POST with credentials; a 401 on a Bearer token re-mints once. Returns 2xx answers and
        raises the translated error for anything else."""
        url = f"{self._ns_url}{path}"
        for attempt in (1, 2):
            headers = self._credentials.headers()
            try:
                response = self._client.post(url, json=dict(body), headers=headers)
            except httpx.HTTPError as exc:
                raise error_for_transport(ENGINE, exc, job_id=job_id, what=what) from exc
            if response.status_code < 300:
                return response
            if response.status_code == 401:
                if not self._credentials.service_account:
                    raise ConfigurationError(
                        f"node-flow refused the API key in NF_API_KEY on {what} (401"
                        f"{self._code_suffix(response)}): it is unknown, revoked or expired",
                        key="NF_API_KEY",
                    )
                if attempt == 1 and self._credentials.invalidate(headers):
                    continue
            raise self._error(response, what=what, job_id=job_id, scope=scope)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _code_suffix(response: httpx.Response) -> str:
        code = parse_problem(response).get("code")
        return f", {code}" if isinstance(code, str) and code else ""

    def _error(self, response: httpx.Response, *, what: str, job_id: str | None, scope: str) -> Exception:
        problem = parse_problem(response)
        if response.status_code == 403:
            needed = problem.get("requiredScope") if isinstance(problem.get("requiredScope"), str) else scope
            return ConfigurationError(
                f"node-flow refused {what} (403): the credential in {self._credentials.key_name} lacks the scope "
                f"{needed!r}; grant it to that key or service account",
                key=self._credentials.key_name,
            )
        if response.status_code == 409:
            code = problem.get("code")
            return LeaseLostError(
                f"{what} refused: the lease is gone ({code if isinstance(code, str) else 'conflict'}); another "
                "worker holds the task or it is finished",
                engine=ENGINE,
                job_id=job_id,
                status=409,
                problem=problem,
            )
        if response.status_code == 413:
            cap = problem.get("maxBytes")
            return PayloadTooLargeError(
                f"{what} answered 413: {problem.get('detail') or 'payload too large'}",
                engine=ENGINE,
                cap=cap if isinstance(cap, int) else 0,
                job_id=job_id,
                status=413,
                problem=problem,
            )
        return error_for_response(ENGINE, response, job_id=job_id, what=what)

    @staticmethod
    def _handle(ref: JobRef) -> tuple[str, str, str]:
        values: list[str] = []
        for name in ("queueName", "leaseToken", "workflowId"):
            value = ref.handle.get(name)
            if not isinstance(value, str) or not value:
                raise MessageFormatError(f"node-flow job {ref.job_id} has no {name} in its handle", field=name)
            values.append(value)
        return values[0], values[1], values[2]

    def _task_path(self, ref_or_id: JobRef | str, action: str) -> str:
        task_id = ref_or_id.job_id if isinstance(ref_or_id, JobRef) else ref_or_id
        return f"/tasks/{quote(task_id, safe='')}/{action}"

    # ------------------------------------------------------------------ Engine

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        """One short-poll lease per demand with capacity; never asks for more than the capacity.

        If a later demand fails after earlier ones leased tasks, the leased tasks are returned (they
        are held; dropping them would strand them for a whole lease) and the error is logged; the
        error is raised only when nothing was leased.
        """
        jobs: list[ActivatedJob] = []
        first_error: Exception | None = None
        for demand in demands:
            if demand.capacity <= 0:
                continue
            try:
                jobs.extend(self._lease(demand, lease_seconds))
            except (EngineError, ConfigurationError) as exc:
                if first_error is None:
                    first_error = exc
                logger.error("node-flow lease failed for queue %s: %s", self.queue_for(demand), exc)
        if first_error is not None and not jobs:
            raise first_error
        return jobs

    def _lease(self, demand: Demand, lease_seconds: int) -> list[ActivatedJob]:
        queue = self.queue_for(demand)
        what = f"lease on queue {queue}"
        response = self._post(
            f"/queues/{quote(queue, safe=':')}/lease",
            {"workerId": self.worker_id, "count": demand.capacity, "waitSeconds": 0, "leaseSeconds": lease_seconds},
            what=what,
            job_id=None,
            scope=f"queues:lease:{queue}",
        )
        try:
            body = response.json()
        except ValueError as exc:
            raise ResponseShapeError(f"{what} answered a body that is not JSON", engine=ENGINE, field="tasks") from exc
        tasks = body.get("tasks") if isinstance(body, dict) else None
        if not isinstance(tasks, list):
            raise ResponseShapeError(f"{what} answered without a tasks list", engine=ENGINE, field="tasks")
        now = self._clock()
        jobs: list[ActivatedJob] = []
        for raw in tasks:
            if len(jobs) >= demand.capacity:
                # Never hold more than the pipeline can start: hand the surplus straight back.
                self._refuse(raw, queue, "leased beyond the requested count")
                continue
            try:
                jobs.append(self._job(raw, demand, queue, now))
            except _MalformedTask as exc:
                self._refuse(raw, queue, str(exc))
        return jobs

    def _job(self, raw: Any, demand: Demand, queue: str, now: float) -> ActivatedJob:
        if not isinstance(raw, dict):
            raise _MalformedTask("task is not an object")
        for name in ("taskId", "leaseToken", "workflowId"):
            if not isinstance(raw.get(name), str) or not raw[name]:
                raise _MalformedTask(f"field {name!r} is missing or not a non-empty string")
        task_def = raw.get("taskDefName")
        if task_def is not None and task_def != demand.job_type:
            raise _MalformedTask(f"field 'taskDefName' is {task_def!r}, not the leased type {demand.job_type!r}")
        variables = raw.get("input")
        if variables is None:
            variables = {}
        if not isinstance(variables, dict):
            raise _MalformedTask("field 'input' is not an object")
        try:
            expires = parse_timestamp(raw.get("leaseExpiresAt"))
        except ValueError as exc:
            raise _MalformedTask(f"field 'leaseExpiresAt' is missing or not a timestamp ({exc})") from None
        ref_name = raw.get("refName")
        traceparent = raw.get("traceparent")
        queue_name = raw.get("queueName") if isinstance(raw.get("queueName"), str) and raw.get("queueName") else queue
        return ActivatedJob(
            ref=JobRef(
                engine=ENGINE,
                job_id=raw["taskId"],
                job_type=demand.job_type,
                attempt="",  # node-flow issues a new task id per attempt
                handle={"queueName": queue_name, "leaseToken": raw["leaseToken"], "workflowId": raw["workflowId"]},
            ),
            variables=variables,
            lease_expires_at=expires,
            activated_at=now,
            retries=None,  # node-flow owns the retry budget
            instance_id=raw["workflowId"],
            element_id=ref_name if isinstance(ref_name, str) and ref_name else None,
            traceparent=traceparent if isinstance(traceparent, str) and traceparent else None,
        )

    def _refuse(self, raw: Any, queue: str, reason: str) -> None:
        """A leased task workerless cannot dispatch: never dropped silently. With a usable id, token
        and workflow it is reported FAILED naming the problem; otherwise it is left to lease expiry."""
        task_id = raw.get("taskId") if isinstance(raw, dict) else None
        usable = isinstance(raw, dict) and all(
            isinstance(raw.get(n), str) and raw[n] for n in ("taskId", "leaseToken", "workflowId")
        )
        if not usable:
            logger.error(
                "node-flow queue %s leased a task workerless cannot read (%s); it returns to the queue when "
                "its lease expires",
                queue,
                reason,
                extra={"task_id": task_id if isinstance(task_id, str) else None},
            )
            return
        assert isinstance(raw, dict)
        logger.error(
            "node-flow task %s on queue %s is malformed (%s); reporting it FAILED", raw["taskId"], queue, reason
        )
        body = {
            "queueName": queue,
            "workflowId": raw["workflowId"],
            "leaseToken": raw["leaseToken"],
            "status": "FAILED",
            "reason": f"workerless could not dispatch the leased task: {reason}"[:REASON_CAP_CHARS],
        }
        try:
            self._post(
                self._task_path(raw["taskId"], "report"),
                body,
                what="report of a malformed task",
                job_id=raw["taskId"],
                scope=REPORT_SCOPE,
            )
        except (EngineError, ConfigurationError) as exc:
            logger.error("could not report malformed node-flow task %s: %s", raw["taskId"], exc)

    def begin(self, job: ActivatedJob) -> bool:
        """node-flow's lease starts at activation: every delivery may run."""
        return True

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        """Heartbeat; returns the expiry node-flow granted (it clamps ``leaseSeconds``)."""
        queue, token, _ = self._handle(ref)
        what = f"heartbeat of task {ref.job_id}"
        response = self._post(
            self._task_path(ref, "heartbeat"),
            {"queueName": queue, "leaseToken": token, "leaseSeconds": lease_seconds},
            what=what,
            job_id=ref.job_id,
            scope=REPORT_SCOPE,
        )
        try:
            return parse_timestamp(response.json().get("leaseExpiresAt"))
        except (ValueError, AttributeError) as exc:
            raise ResponseShapeError(
                f"{what} answered without a leaseExpiresAt timestamp",
                engine=ENGINE,
                field="leaseExpiresAt",
                job_id=ref.job_id,
            ) from exc

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        """COMPLETED / FAILED / FAILED_WITH_TERMINAL_ERROR. A stack goes to the task log first, so
        the lines explaining a failure are there when someone opens the failed task.

        Raises LeaseLostError on 409 (the pipeline treats it as "someone else has it": swallow).
        """
        queue, token, workflow_id = self._handle(ref)
        if outcome.stack:
            self.send_logs(ref, [{"message": outcome.stack, "level": "error"}])
        body: dict[str, Any] = {"queueName": queue, "workflowId": workflow_id, "leaseToken": token}
        if outcome.kind == "complete":
            body["status"] = "COMPLETED"
            body["output"] = outcome.variables if outcome.variables is not None else {}
        elif outcome.kind == "fail":
            body["status"] = "FAILED_WITH_TERMINAL_ERROR" if outcome.terminal else "FAILED"
            body["reason"] = (outcome.message or "failed")[:REASON_CAP_CHARS]
        else:
            # A business error has no node-flow equivalent: the step will not succeed on this input,
            # which is exactly FAILED_WITH_TERMINAL_ERROR; the code leads the reason so a workflow's
            # failure handling can switch on it, and the variables travel as the output.
            body["status"] = "FAILED_WITH_TERMINAL_ERROR"
            body["reason"] = f"{outcome.error_code}: {outcome.message or outcome.error_code}"[:REASON_CAP_CHARS]
            if outcome.variables:
                body["output"] = outcome.variables
        self._post(
            self._task_path(ref, "report"),
            body,
            what=f"report {body['status']} of task {ref.job_id}",
            job_id=ref.job_id,
            scope=REPORT_SCOPE,
        )

    def release(self, job: ActivatedJob, reason: str) -> None:
        """node-flow has no release call: report FAILED with the reason. The retry is scheduled at
        once as a new task, instead of the task sitting leased by nobody for a whole lease.
        A 409 (the lease is already gone) is nothing left to release."""
        try:
            self.report(job.ref, Outcome.fail(f"released by workerless: {reason}", retries=None))
        except LeaseLostError:
            logger.info("node-flow task %s was already gone when released", job.ref.job_id)

    def skip(self, ref: JobRef) -> None:
        """No acknowledgement step in node-flow."""

    def send_logs(self, ref: JobRef, lines: Sequence[Mapping[str, Any]]) -> None:
        """Append lines to the task's log, in order, in batches. Never raises: a lost log line must
        not fail the task it describes (the failure is logged, without the lease token)."""
        if not lines:
            return
        try:
            _, token, workflow_id = self._handle(ref)
            entries = [
                {
                    "message": str(line.get("message", ""))[:LOG_MESSAGE_CAP_CHARS],
                    "level": _LEVELS.get(str(line.get("level", "info")).lower(), "info"),
                }
                for line in lines
            ]
            for start in range(0, len(entries), LOG_BATCH):
                self._post(
                    self._task_path(ref, "logs"),
                    {"workflowId": workflow_id, "leaseToken": token, "logs": entries[start : start + LOG_BATCH]},
                    what=f"logs of task {ref.job_id}",
                    job_id=ref.job_id,
                    scope=REPORT_SCOPE,
                )
        except Exception as exc:  # noqa: BLE001 - by contract a log send never raises
            logger.warning("dropped %d log line(s) of node-flow task %s: %s", len(lines), ref.job_id, exc)

    def after_cycle(self, counters: Mapping[str, int]) -> None:
        """Nothing to report: node-flow records pollers itself (``/queues/workers``)."""

    def close(self) -> None:
        """Nothing held: the HTTP client belongs to the caller."""


class _MalformedTask(Exception):
    pass


def _value(values: Mapping[str, str], key: str) -> str | None:
    value = values.get(key)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _secret(values: Mapping[str, str], key: str) -> str | None:
    value = _value(values, key)
    if value is not None and not _TOKENISH_RE.match(value):
        # Never echo the value: it is a credential.
        raise ConfigurationError(f"{key} is malformed: it must be visible ASCII with no spaces", key=key)
    return value


def from_values(
    values: Mapping[str, str],
    client: httpx.Client,
    *,
    worker_id: str | None = None,
    state: SharedState | None = None,
) -> NodeFlowEngine:
    """Validate node-flow's connection values and build the adapter.

    Keys: NF_URL (the origin; the client appends /v1; https unless loopback), NF_NAMESPACE
    (default ``default``), NF_API_KEY or NF_KEY_ID + NF_KEY_SECRET, NF_DOMAIN (optional default
    domain for routes without an explicit engine queue). ``state`` is unused: node-flow holds no
    engine-side session.
    """
    url = _value(values, "NF_URL")
    if url is None:
        raise ConfigurationError(
            "NF_URL is required (the node-flow origin, e.g. https://nodeflow.example.com)", key="NF_URL"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"NF_URL must be an http(s) URL with a host, got {url!r}", key="NF_URL")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigurationError("NF_URL must be a plain origin: no credentials, query or fragment", key="NF_URL")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ConfigurationError(
            f"NF_URL must use https (plain http is allowed only for loopback), got {parts.scheme}://{parts.hostname}",
            key="NF_URL",
        )
    if parts.path.rstrip("/").endswith("/v1"):
        raise ConfigurationError("NF_URL is the origin: drop the trailing /v1 (the client appends it)", key="NF_URL")

    namespace = _value(values, "NF_NAMESPACE") or "default"
    if not _NAMESPACE_RE.match(namespace):
        raise ConfigurationError(
            f"NF_NAMESPACE {namespace!r} is malformed: letters, digits, '_', '.', '-'", key="NF_NAMESPACE"
        )
    domain = _value(values, "NF_DOMAIN")
    if domain is not None and not _DOMAIN_RE.match(domain):
        raise ConfigurationError(f"NF_DOMAIN {domain!r} is malformed: letters, digits, '_', '.', '-'", key="NF_DOMAIN")

    api_key = _secret(values, "NF_API_KEY")
    key_id = _secret(values, "NF_KEY_ID")
    key_secret = _secret(values, "NF_KEY_SECRET")
    if api_key is not None and (key_id is not None or key_secret is not None):
        raise ConfigurationError("set either NF_API_KEY or NF_KEY_ID + NF_KEY_SECRET, not both", key="NF_API_KEY")
    if api_key is None:
        if key_id is None and key_secret is None:
            raise ConfigurationError(
                "node-flow needs credentials: NF_API_KEY, or NF_KEY_ID + NF_KEY_SECRET (a service account)",
                key="NF_API_KEY",
            )
        if key_id is None:
            raise ConfigurationError("NF_KEY_ID is required with NF_KEY_SECRET", key="NF_KEY_ID")
        if key_secret is None:
            raise ConfigurationError("NF_KEY_SECRET is required with NF_KEY_ID", key="NF_KEY_SECRET")

    return NodeFlowEngine(
        client,
        base_url=url,
        namespace=namespace,
        api_key=api_key,
        key_id=key_id,
        key_secret=key_secret,
        domain=domain,
        worker_id=worker_id,
    )
