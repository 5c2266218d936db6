"""The node-flow adapter: SIMPLE tasks leased from a queue, fenced by a lease token (seed 002).

Mapping (details in docs/engines/nodeflow.md):

- activate → ``POST /v1/ns/{ns}/queues/{queue}/lease`` once per demand, ``count`` = capacity,
  ``waitSeconds`` 0 (a Lambda must not pay to sit in a long poll).
- extend → ``POST /v1/ns/{ns}/tasks/{taskId}/heartbeat`` with queueName + leaseToken.
- report → ``POST /v1/ns/{ns}/tasks/{taskId}/report``: COMPLETED / FAILED /
  FAILED_WITH_TERMINAL_ERROR; a failure's stack goes to the task log first.
- release → report FAILED (node-flow has no release call; a retry starts at once as a new task).
- 409 ``LEASE_EXPIRED`` → :class:`LeaseLostError`; 403 → :class:`ConfigurationError` naming the
  scope; everything else through the kit's :class:`~workerless.engines.kit.translate.Translator`.

The lease token, API key, secret and access token are credentials: none of them is ever logged or
put in an exception message.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from workerless._core.lease import ACTIVATION_LEASE, LeasePolicy
from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
from workerless._core.retry import LOG_SEND_SECONDS, LOG_SENDS, ambient_deadline
from workerless.engines.base import SharedState, TaskLogs
from workerless.engines.kit.joinurl import engine_url
from workerless.engines.kit.resend import Recovery, send_recovering
from workerless.engines.kit.skim import Skimmer, answer_skimmer, job_variables, post_skimmed
from workerless.engines.kit.times import parse_timestamp
from workerless.engines.kit.translate import Translator, parse_problem
from workerless.engines.nodeflow.auth import Credentials
from workerless.engines.nodeflow.config import ENGINE, NodeFlowConfig
from workerless.errors import (
    ConfigurationError,
    EngineError,
    LeaseLostError,
    MessageFormatError,
    PayloadTooLargeError,
    RateLimitedError,
    ResponseShapeError,
    RetryableEngineError,
)

__all__ = ["NodeFlowEngine", "from_values", "parse_timestamp", "workflow_key"]

REPORT_SCOPE = "tasks:report"
#: Longest ``reason`` sent on a report; the whole text (a stack) goes to the task log instead.
REASON_CAP_CHARS = 4096
#: Longest log line and most lines per logs call (the emulator's caps; see docs/assumptions.md).
LOG_MESSAGE_CAP_CHARS = 32768
LOG_BATCH = 100
#: The lease a release asks for (a heartbeat): node-flow clamps it up to its minimum lease, after
#: which the task lapses back onto its queue with its task id (docs/assumptions.md, node-flow).
RELEASE_LEASE_SECONDS = 1
#: Log levels as node-flow names them.
_LEVELS = {"info": "info", **dict.fromkeys(("debug", "trace"), "debug"), **dict.fromkeys(("warn", "warning"), "warn")}
_LEVELS |= dict.fromkeys(("error", "exception", "critical", "fatal"), "error")

logger = logging.getLogger("workerless.engines.nodeflow")


def workflow_key(job: ActivatedJob) -> str:
    """A downstream idempotency key that is the same for every attempt of one workflow step:
    ``{workflowId}:{refName or task type}`` ("charge once, however many attempts we make"):
    :attr:`~workerless._core.model.ActivatedJob.workflow_key`, the one rule for every engine.

    The task id (``job.ref.job_id``) is the other choice: stable for one attempt, new per retry.
    """
    return job.workflow_key


class NodeFlowEngine:
    """node-flow behind the :class:`~workerless.engines.base.Engine` protocol.

    Example (an illustration: it needs a running engine or AWS, which tests/functional provide)::

        engine = from_values({"NF_URL": "http://127.0.0.1:3000", "NF_API_KEY": "nf_..."}, client)
        jobs = engine.activate([Demand("charge", 8)], lease_seconds=60)
    """

    name: ClassVar[str] = ENGINE
    #: Leased at activation (:mod:`workerless._core.lease`).
    lease: ClassVar[LeasePolicy] = ACTIVATION_LEASE
    #: Optional capabilities (:class:`~workerless.engines.base.Engine`): node-flow's lease starts at
    #: activation (nothing to acquire or acknowledge) and it records pollers itself
    #: (``/queues/workers``): no liveness report. Its task log is :attr:`task_logs`.
    lease_acquire: ClassVar[None] = None
    liveness: ClassVar[None] = None

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
        #: No lease call before this ``clock()`` value (a lease's Retry-After, across demands and polls).
        self._lease_hold_until = 0.0
        self._ns_url = f"{self.base_url}/v1/ns/{quote(namespace, safe='')}"
        self._translate = Translator(ENGINE, refine=_refine, secrets=lambda: self._credentials.secrets())
        self._credentials = Credentials(
            client,
            f"{self.base_url}/v1/auth/token",
            api_key=api_key,
            key_id=key_id,
            key_secret=key_secret,
            clock=clock,
            translate=self._translate,
        )

    # ------------------------------------------------------------------ plumbing

    def queue_for(self, demand: Demand) -> str:
        """The node-flow queue of a demand: ``Demand.queue`` if given, else the job type, with the
        deployment's NF_DOMAIN (if any) as ``taskDefName:domain``."""
        if demand.queue:
            return demand.queue
        return f"{demand.job_type}:{self.domain}" if self.domain else demand.job_type

    def _post(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        what: str,
        job_id: str | None,
        scope: str,
        skim: Skimmer | None = None,
    ) -> httpx.Response:
        """POST with credentials; a 401 on a Bearer token re-mints once (the kit's
        :func:`~workerless.engines.kit.resend.send_recovering`). Returns 2xx answers (read through
        ``skim`` when given: :mod:`workerless.engines.kit.skim`) and raises the translated error for anything else."""
        url = engine_url(self._ns_url, path)

        def send() -> tuple[httpx.Response, dict[str, str]]:
            headers = self._credentials.headers()
            try:
                if skim is not None:
                    return post_skimmed(self._client, url, json_body=dict(body), headers=headers, skim=skim), headers
                return self._client.post(url, json=dict(body), headers=headers), headers
            except httpx.HTTPError as exc:
                raise self._translate.transport(exc, job_id=job_id, what=what) from exc

        def recover(answer: tuple[httpx.Response, dict[str, str]]) -> Recovery | None:
            response, headers = answer
            if response.status_code != 401:
                return None
            if not self._credentials.service_account:
                raise ConfigurationError(
                    f"node-flow refused the API key in NF_API_KEY on {what} (401"
                    f"{self._code_suffix(response)}): it is unknown, revoked or expired",
                    key="NF_API_KEY",
                )

            def reauthenticate() -> None:
                self._credentials.invalidate(headers)

            return "reauthenticate", reauthenticate

        response, _ = send_recovering(send, recover)
        if response.status_code < 300:
            return response
        if response.status_code == 403:
            problem = parse_problem(response)
            needed = problem.get("requiredScope") if isinstance(problem.get("requiredScope"), str) else scope
            raise ConfigurationError(
                f"node-flow refused {what} (403): the credential in {self._credentials.key_name} lacks the scope "
                f"{needed!r}; grant it to that key or service account",
                key=self._credentials.key_name,
            )
        raise self._translate.response(response, what=what, job_id=job_id)

    @staticmethod
    def _code_suffix(response: httpx.Response) -> str:
        code = parse_problem(response).get("code")
        return f", {code}" if isinstance(code, str) and code else ""

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
            wait = self._lease_hold_until - self._clock()
            if wait > 0:
                # The engine said when to come back (Retry-After): no queue is leased before then.
                if first_error is None:
                    hold = f"node-flow asked workerless to wait {wait:.1f} s more before leasing (Retry-After)"
                    first_error = RateLimitedError(hold, engine=ENGINE, retry_after=wait)
                break
            try:
                jobs.extend(self._lease(demand, lease_seconds))
            except (EngineError, ConfigurationError) as exc:
                if first_error is None:
                    first_error = exc
                if isinstance(exc, RetryableEngineError) and exc.retry_after:
                    self._lease_hold_until = self._clock() + exc.retry_after
                logger.error("node-flow lease failed for queue %s: %s", self.queue_for(demand), exc)
        if first_error is not None and not jobs:
            raise first_error
        return jobs

    def _lease(self, demand: Demand, lease_seconds: int) -> list[ActivatedJob]:
        queue = self.queue_for(demand)
        what = f"lease on queue {queue}"
        skim = answer_skimmer([demand], "input", 3, engine=ENGINE)  # no input decoded, none past the limit held
        self._post(  # the answer is read through ``skim``
            f"/queues/{quote(queue, safe=':')}/lease",
            {"workerId": self.worker_id, "count": demand.capacity, "waitSeconds": 0, "leaseSeconds": lease_seconds},
            what=what,
            job_id=None,
            scope=f"queues:lease:{queue}",
            skim=skim,
        )
        try:
            body = json.loads(skim.skeleton())
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
                jobs.append(self._job(raw, demand, queue, now, skim))
            except _MalformedTask as exc:
                self._refuse(raw, queue, str(exc))
        return jobs

    def _job(self, raw: object, demand: Demand, queue: str, now: float, skim: Skimmer | None = None) -> ActivatedJob:
        if not isinstance(raw, dict):
            raise _MalformedTask("task is not an object")
        for name in ("taskId", "leaseToken", "workflowId"):
            if not isinstance(raw.get(name), str) or not raw[name]:
                raise _MalformedTask(f"field {name!r} is missing or not a non-empty string")
        task_def = raw.get("taskDefName")
        if task_def is not None and task_def != demand.job_type:
            raise _MalformedTask(f"field 'taskDefName' is {task_def!r}, not the leased type {demand.job_type!r}")
        variables, raw_variables, unread = job_variables(skim, {} if raw.get("input") is None else raw["input"])
        if variables is None:
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
            raw_variables=raw_variables,
            unread_bytes=unread,
        )

    def _refuse(self, raw: object, queue: str, reason: str) -> None:
        """A leased task workerless cannot dispatch: never dropped silently. With a usable id, token
        and workflow it is reported FAILED naming the problem; otherwise it is left to lease expiry."""
        task_id = raw.get("taskId") if isinstance(raw, dict) else None
        usable = isinstance(raw, dict) and all(
            isinstance(raw.get(n), str) and raw[n] for n in ("taskId", "leaseToken", "workflowId")
        )
        if not usable:
            unread = (
                "node-flow queue %s leased a task workerless cannot read (%s); it returns to the queue at lease expiry"
            )
            logger.error(unread, queue, reason, extra={"task_id": task_id if isinstance(task_id, str) else None})
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
            bad = f"{what} answered without a leaseExpiresAt timestamp"
            raise ResponseShapeError(bad, engine=ENGINE, field="leaseExpiresAt", job_id=ref.job_id) from exc

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        """COMPLETED / FAILED / FAILED_WITH_TERMINAL_ERROR. A stack goes to the task log first, so
        the lines explaining a failure are there when someone opens the failed task.

        Raises LeaseLostError on 409 (the pipeline treats it as "someone else has it": swallow).
        """
        queue, token, workflow_id = self._handle(ref)
        explanation = outcome.stack or (outcome.message if outcome.kind != "complete" else None)
        if explanation:
            # Every failure is explained in the task's log before it is reported: the stack when the
            # handler raised, else the reason (a typed handler's refused input names each bad field).
            self.send_logs(ref, [{"message": explanation, "level": "error"}])
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
        """No release call: a heartbeat asking :data:`RELEASE_LEASE_SECONDS` (clamped to node-flow's
        minimum lease) lets the task lapse back with its task id, place and retries; a FAILED report
        would re-queue it as a new task behind the backlog (issue 26, 2.12). 409: nothing to release."""
        logger.info("handing node-flow task %s back (its lease ends now): %s", job.ref.job_id, reason)
        try:
            self.extend(job.ref, RELEASE_LEASE_SECONDS)
        except LeaseLostError:
            logger.info("node-flow task %s was already gone when released", job.ref.job_id)

    @property
    def task_logs(self) -> TaskLogs:
        """node-flow keeps a log per task: :meth:`send_logs`."""
        return self

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
            # A batch refused for a retryable reason (429, 502, 503, a dropped connection) is sent
            # again within LOG_SENDS's bounds, honouring Retry-After, before it is dropped.
            deadline = min(ambient_deadline(), time.monotonic() + LOG_SEND_SECONDS)
            path = self._task_path(ref, "logs")
            for start in range(0, len(entries), LOG_BATCH):
                batch = {"workflowId": workflow_id, "leaseToken": token, "logs": entries[start : start + LOG_BATCH]}
                what = f"logs of task {ref.job_id}"
                send = functools.partial(self._post, path, batch, what=what, job_id=ref.job_id, scope=REPORT_SCOPE)
                LOG_SENDS.call(send, deadline=deadline)
        except Exception as exc:  # noqa: BLE001 - by contract a log send never raises
            logger.warning("dropped %d log line(s) of node-flow task %s: %s", len(lines), ref.job_id, exc)

    def close(self) -> None:
        """Nothing held: the HTTP client belongs to the caller."""


class _MalformedTask(Exception):
    pass


def _refine(response: httpx.Response, problem: dict[str, Any], what: str, job_id: str | None) -> EngineError | None:
    """node-flow's refinement of the shared mapping: its 409 and 413 bodies say what happened."""
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
    return None


def from_values(
    values: Mapping[str, str],
    client: httpx.Client,
    *,
    worker_id: str | None = None,
    state: SharedState | None = None,
) -> NodeFlowEngine:
    """Validate node-flow's connection values (:class:`~workerless.engines.nodeflow.config.NodeFlowConfig`)
    and build the adapter. ``state`` is unused: node-flow holds no engine-side session."""
    del state
    config = NodeFlowConfig.from_values(values)
    return NodeFlowEngine(
        client,
        base_url=config.base_url,
        namespace=config.namespace,
        api_key=config.api_key,
        key_id=config.key_id,
        key_secret=config.key_secret,
        domain=config.domain,
        worker_id=worker_id,
    )
