"""A faithful emulator of node-flow's native worker protocol (seed 002), served on loopback.

What it implements, and where the seed is silent what it chooses (each choice is recorded under
"## node-flow" in docs/assumptions.md):

- Credentials: API keys (``X-API-Key``) and service accounts (``POST /v1/auth/token`` → a Bearer
  access token whose lifetime runs on the emulator's clock). Scopes: ``queues:lease:{queue}``,
  ``queues:lease:{taskDefName}:*`` (every domain of one task), ``queues:lease:*`` (every queue),
  ``tasks:report`` (heartbeat, logs, report) and ``*`` (everything). A domain is an access
  boundary: ``queues:lease:charge`` does not cover ``charge:eu-west``. A missing scope is a 403
  problem naming the scope (``requiredScope``).
- Leases: ``POST /v1/ns/{ns}/queues/{queue}/lease`` parks up to ``waitSeconds`` (bounded) on a
  condition variable; ``leaseSeconds`` is clamped to ``[lease_min_seconds, lease_max_seconds]``.
  A lapsed lease puts the same task id back on its queue; the next lease gets a new token.
- Fencing: heartbeat, logs and report carry the lease token; a stale one is 409 problem+json with
  ``code: LEASE_EXPIRED``.
- Report: ``COMPLETED``; ``FAILED`` (a retry is a NEW task id while attempts remain);
  ``FAILED_WITH_TERMINAL_ERROR`` (never retried).
- Operations: queue depth, who is polling (recorded before the poll waits), every queue, whoami.
- Admin API under ``/_admin/``: tasks (create, read), the clock, credentials.

Example:
    >>> emulator = create()
    >>> task_id = emulator.create_job("charge", {"amount": 100})
    >>> emulator.job_state(task_id)["state"]
    'ready'

The state behind the routes (tasks, queues, credentials and the checks every worker call makes) is
:class:`~workerless_devkit.emulators.nodeflow_state.NodeFlowState`, this emulator's base.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

from workerless_devkit.emulators.core import JobRegistry, JobSpec, pick
from workerless_devkit.emulators.http import HTTPProblem, Request, Response, json_response
from workerless_devkit.emulators.nodeflow_state import (
    LEASE_SCOPE_PREFIX,
    LOG_LEVELS,
    REPORT_SCOPE,
    STATUSES,
    WORKER_SCOPES,
    NodeFlowState,
    _number,
    _Principal,
    _problem,
    _required_str,
    _Task,
    iso,
    lease_scope_covers,
)

__all__ = ["WORKER_SCOPES", "NodeFlowEmulator", "create", "lease_scope_covers"]


class NodeFlowEmulator(NodeFlowState):
    """node-flow's worker API in memory, with a clock that tests can move (:meth:`advance`).

    Options (all keyword): ``namespace`` ("default"); ``auth`` ("api_key" or "service_account":
    which credential :meth:`engine_values` hands out); ``scopes`` (of that credential, default
    :data:`WORKER_SCOPES`); ``token_ttl_seconds`` (3600); ``default_lease_seconds`` (60),
    ``lease_min_seconds`` (5), ``lease_max_seconds`` (600); ``max_wait_seconds`` (20, the long-poll
    bound); ``max_count`` (100 tasks per lease call); ``worker_ttl_seconds`` (60: how long a poller
    counts as listening); ``output_cap_bytes`` (None: the seed names no cap on a report's output; a
    test sets one); ``reason_cap_chars`` (4096); ``log_message_cap_chars`` (32768); ``log_batch_cap``
    (500 lines per call).
    """

    name = "nodeflow"

    def __init__(
        self,
        *,
        namespace: str = "default",
        auth: str = "api_key",
        scopes: Iterable[str] = WORKER_SCOPES,
        token_ttl_seconds: int = 3600,
        default_lease_seconds: float = 60,
        lease_min_seconds: float = 5,
        lease_max_seconds: float = 600,
        max_wait_seconds: float = 20,
        max_count: int = 100,
        worker_ttl_seconds: float = 60,
        output_cap_bytes: int | None = None,
        reason_cap_chars: int = 4096,
        log_message_cap_chars: int = 32768,
        log_batch_cap: int = 500,
    ) -> None:
        if auth not in ("api_key", "service_account"):
            raise ValueError(f"auth must be 'api_key' or 'service_account', got {auth!r}")
        self.namespace = namespace
        self.auth = auth
        self.token_ttl_seconds = token_ttl_seconds
        self.default_lease_seconds = default_lease_seconds
        self.lease_min_seconds = lease_min_seconds
        self.lease_max_seconds = lease_max_seconds
        self.max_wait_seconds = max_wait_seconds
        self.max_count = max_count
        self.worker_ttl_seconds = worker_ttl_seconds
        self.output_cap_bytes = output_cap_bytes
        self.reason_cap_chars = reason_cap_chars
        self.log_message_cap_chars = log_message_cap_chars
        self.log_batch_cap = log_batch_cap

        super().__init__()
        # The registry holds tasks; the watch hears of jobs (a retry chain, by its first task id).
        self._tasks: JobRegistry[_Task] = self.registry
        self.clock.on_advance(self._expire_locked)
        self._queues: dict[str, list[str]] = {}
        self._leased: set[str] = set()
        self._workers: dict[tuple[str, str], float] = {}
        self._api_keys: dict[str, _Principal] = {}
        self._accounts: dict[str, tuple[str, _Principal]] = {}
        self._tokens: dict[str, _Principal] = {}

        worker_scopes = tuple(scopes)
        if auth == "api_key":
            self.api_key: str | None = self.create_api_key(worker_scopes, name="worker")
            self.key_id: str | None = None
            self.key_secret: str | None = None
        else:
            self.api_key = None
            self.key_id, self.key_secret = self.create_service_account(worker_scopes, name="worker")

        self._routes()

    # ------------------------------------------------------------------ common emulator shape

    def engine_values(self, base_url: str) -> dict[str, str]:
        """The env-file keys a worker needs to reach this emulator, credentials included."""
        values = {"NF_URL": base_url.rstrip("/"), "NF_NAMESPACE": self.namespace}
        if self.api_key is not None:
            values["NF_API_KEY"] = self.api_key
        else:
            values["NF_KEY_ID"] = self.key_id or ""
            values["NF_KEY_SECRET"] = self.key_secret or ""
        return values

    def create_job(
        self,
        job_type: str,
        variables: Mapping[str, Any] | None = None,
        *,
        retries: int = 3,
        domain: str | None = None,
        workflow_id: str | None = None,
        ref_name: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        """Schedule a SIMPLE task of ``job_type`` (its taskDefName); return its task id.

        ``retries`` counts the attempts left including the first (as in the other emulators): 3
        means a FAILED report is retried twice, as a new task id each time.
        """
        if not job_type or ":" in job_type:
            raise ValueError(f"job_type must be a non-empty taskDefName without ':', got {job_type!r}")
        if domain is not None and (not domain or ":" in domain):
            raise ValueError(f"domain must be non-empty and without ':', got {domain!r}")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        with self._cond:
            task = self._new_task_locked(
                job_type,
                dict(variables or {}),
                retries=retries,
                domain=domain,
                workflow_id=workflow_id or str(uuid.uuid4()),
                ref_name=ref_name,
                traceparent=traceparent,
            )
            self._cond.notify_all()
            return task.task_id

    def job_state(self, task_id: str) -> dict[str, Any]:
        """The job (workflow step) that task ``task_id`` is an attempt of (``KeyError`` if unknown).

        node-flow gives every retry a new task id; the common emulator shape describes the *job*
        that ``create_job`` returned, so this follows the retry chain: ``state``, ``retries``,
        ``output`` and ``error_message`` are the latest attempt's, ``attempts``, ``logs`` and
        ``history`` cover every attempt. ``task_state`` / ``task_attempts`` are this task's own
        (``retried`` when a FAILED report scheduled ``next_task_id``); ``current_task_id`` is the
        latest attempt's task id. :meth:`task_state` is the single task's view.
        """
        with self._cond:
            self._expire_locked()
            return self._job_view_locked(self._tasks[task_id])

    def task_state(self, task_id: str) -> dict[str, Any]:
        """One task on its own, as ``GET /_admin/tasks/{taskId}`` answers it."""
        with self._cond:
            self._expire_locked()
            return self._state_locked(self._tasks[task_id])

    def jobs(self) -> list[dict[str, Any]]:
        """Every job (one entry per retry chain, by its first task id), oldest first."""
        with self._cond:
            self._expire_locked()
            roots = [t for t in self._tasks.values() if t.previous_task_id is None]
            return [self._job_view_locked(t) for t in roots]

    def create_from_spec(self, spec: JobSpec) -> str:
        """A job of a jobs file or ``POST /_admin/jobs``: ``domain``, ``workflowId``, ``refName`` and
        ``traceparent`` are node-flow's own keys (``taskDefName`` / ``input`` name type / variables)."""
        extra = spec.extra
        return self.create_job(
            spec.type,
            spec.variables,
            retries=spec.retries,
            domain=pick(extra, "domain"),
            workflow_id=pick(extra, "workflowId", "workflow_id"),
            ref_name=pick(extra, "refName", "ref_name"),
            traceparent=pick(extra, "traceparent"),
        )

    # ------------------------------------------------------------------ credentials

    # ------------------------------------------------------------------ internals

    # ------------------------------------------------------------------ routes

    def _routes(self) -> None:
        r = self.router
        r.route("POST", "/v1/auth/token")(self._token)
        r.route("GET", "/v1/auth/whoami")(self._whoami)
        r.route("GET", "/v1/ns/{ns}/queues")(self._list_queues)
        r.route("GET", "/v1/ns/{ns}/queues/workers")(self._workers_route)
        r.route("GET", "/v1/ns/{ns}/queues/{queue}/depth")(self._depth)
        r.route("POST", "/v1/ns/{ns}/queues/{queue}/lease")(self._lease)
        r.route("POST", "/v1/ns/{ns}/tasks/{task_id}/heartbeat")(self._heartbeat)
        r.route("POST", "/v1/ns/{ns}/tasks/{task_id}/logs")(self._logs)
        r.route("POST", "/v1/ns/{ns}/tasks/{task_id}/report")(self._report)
        r.route("POST", "/_admin/tasks")(self._admin_create_task)
        r.route("GET", "/_admin/tasks")(self._admin_tasks)
        r.route("GET", "/_admin/tasks/{task_id}")(self._admin_task)
        r.route("POST", "/_admin/credentials")(self._admin_credentials)

    def _queue_counts_locked(self, queue: str) -> dict[str, Any]:
        ready = len(self._queues.get(queue, []))
        leased = sum(1 for i in self._leased if self._tasks[i].queue == queue)
        return {"queue": queue, "depth": ready, "ready": ready, "leased": leased}

    def _list_queues(self, req: Request) -> Response:
        self._check_ns(req)
        self._authenticate(req)
        with self._cond:
            self._expire_locked()
            names = sorted(set(self._queues) | {self._tasks[i].queue for i in self._leased})
            rows = [self._queue_counts_locked(q) for q in names]
        return json_response({"queues": [row for row in rows if row["ready"] or row["leased"]]})

    def _workers_route(self, req: Request) -> Response:
        self._check_ns(req)
        self._authenticate(req)
        with self._cond:
            now = self.now()
            rows = [
                {"workerId": worker_id, "queue": queue, "lastPollAt": iso(at)}
                for (queue, worker_id), at in sorted(self._workers.items())
                if now - at <= self.worker_ttl_seconds
            ]
        return json_response({"workers": rows})

    def _depth(self, req: Request) -> Response:
        self._check_ns(req)
        self._authenticate(req)
        with self._cond:
            self._expire_locked()
            return json_response(self._queue_counts_locked(unquote(req.params["queue"])))

    def _lease(self, req: Request) -> Response:
        self._check_ns(req)
        principal = self._authenticate(req)
        queue = unquote(req.params["queue"])
        self._require_scope(principal, f"{LEASE_SCOPE_PREFIX}{queue}")
        body = req.json_object()
        worker_id = _required_str(body, "workerId")
        count = body.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise _problem(400, "Bad Request", "count must be an integer >= 1", "VALIDATION_ERROR", field="count")
        count = min(count, self.max_count)
        wait = min(max(_number(body, "waitSeconds", 0.0), 0.0), self.max_wait_seconds)
        lease = self._clamp_lease(body)
        deadline = time.monotonic() + wait
        leased: list[_Task] = []
        with self._cond:
            # Recorded before waiting: a worker parked on an empty queue still counts as listening.
            self._workers[(queue, worker_id)] = self.now()
            while True:
                self._expire_locked()
                ready = self._queues.get(queue, [])
                while ready and len(leased) < count:
                    task = self._tasks[ready.pop(0)]
                    task.state = "leased"
                    task.lease_token = "lt_" + secrets.token_urlsafe(24)
                    task.lease_expires_at = self.now() + lease
                    task.worker_id = worker_id
                    task.attempts += 1
                    self._leased.add(task.task_id)
                    self._event(task, "leased", worker_id=worker_id, lease_seconds=lease)
                    leased.append(task)
                remaining = deadline - time.monotonic()
                if leased or remaining <= 0 or self._closed:
                    break
                # Woken by a new task or a clock advance; the short cap also catches leases that
                # lapse in real time while parked.
                self._cond.wait(timeout=min(remaining, 0.25))
            tasks = [self._leased_view(task, lease) for task in leased]
        return json_response({"tasks": tasks})

    def _leased_view(self, task: _Task, lease: float) -> dict[str, Any]:
        assert task.lease_expires_at is not None
        view: dict[str, Any] = {
            "taskId": task.task_id,
            "workflowId": task.workflow_id,
            "taskDefName": task.task_def_name,
            "refName": task.ref_name or task.task_def_name,
            "queueName": task.queue,
            "domain": task.domain,
            "leaseToken": task.lease_token,
            "leaseExpiresAt": iso(task.lease_expires_at),
            "leaseSeconds": lease,
            "input": task.input,
        }
        if task.traceparent:
            view["traceparent"] = task.traceparent
        return view

    def _heartbeat(self, req: Request) -> Response:
        self._check_ns(req)
        principal = self._authenticate(req)
        self._require_scope(principal, REPORT_SCOPE)
        body = req.json_object()
        queue = _required_str(body, "queueName")
        _required_str(body, "leaseToken")
        lease = self._clamp_lease(body)
        with self._cond:
            task = self._fenced_task_locked(req, body)
            self._check_queue(task, queue)
            task.lease_expires_at = self.now() + lease
            self._event(task, "heartbeat", lease_seconds=lease)
            return json_response(
                {"taskId": task.task_id, "leaseExpiresAt": iso(task.lease_expires_at), "leaseSeconds": lease}
            )

    @staticmethod
    def _check_queue(task: _Task, queue: str) -> None:
        # The queue table is partitioned on queueName: a task looked up in the wrong partition is
        # simply not there.
        if queue != task.queue:
            raise _problem(404, "Not Found", f"task {task.task_id} is not in queue {queue}", "TASK_NOT_FOUND")

    def _logs(self, req: Request) -> Response:
        self._check_ns(req)
        principal = self._authenticate(req)
        self._require_scope(principal, REPORT_SCOPE)
        body = req.json_object()
        workflow_id = _required_str(body, "workflowId")
        _required_str(body, "leaseToken")
        entries = body.get("logs")
        if not isinstance(entries, list):
            raise _problem(400, "Bad Request", "logs must be a list", "VALIDATION_ERROR", field="logs")
        if len(entries) > self.log_batch_cap:
            raise _problem(
                413, "Content Too Large", f"at most {self.log_batch_cap} log lines per call", "PAYLOAD_TOO_LARGE"
            )
        lines: list[dict[str, Any]] = []
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("message"), str):
                raise _problem(400, "Bad Request", f"logs[{index}].message must be a string", "VALIDATION_ERROR")
            level = entry.get("level", "info")
            if level not in LOG_LEVELS:
                raise _problem(
                    400, "Bad Request", f"logs[{index}].level must be one of {sorted(LOG_LEVELS)}", "VALIDATION_ERROR"
                )
            if len(entry["message"]) > self.log_message_cap_chars:
                raise _problem(
                    413,
                    "Content Too Large",
                    f"logs[{index}].message is over {self.log_message_cap_chars} characters",
                    "PAYLOAD_TOO_LARGE",
                )
            lines.append({"message": entry["message"], "level": level})
        with self._cond:
            task = self._fenced_task_locked(req, body)
            if workflow_id != task.workflow_id:
                raise _problem(
                    404, "Not Found", f"task {task.task_id} is not in workflow {workflow_id}", "TASK_NOT_FOUND"
                )
            at = self.now()
            task.logs.extend({**line, "at": at} for line in lines)
        return Response(204)

    def _report(self, req: Request) -> Response:
        self._check_ns(req)
        principal = self._authenticate(req)
        self._require_scope(principal, REPORT_SCOPE)
        body = req.json_object()
        queue = _required_str(body, "queueName")
        workflow_id = _required_str(body, "workflowId")
        _required_str(body, "leaseToken")
        status = body.get("status")
        if status not in STATUSES:
            raise _problem(
                400, "Bad Request", f"status must be one of {sorted(STATUSES)}", "VALIDATION_ERROR", field="status"
            )
        output = body.get("output")
        if output is not None and not isinstance(output, dict):
            raise _problem(400, "Bad Request", "output must be an object", "VALIDATION_ERROR", field="output")
        size = len(json.dumps(output, separators=(",", ":")).encode()) if output is not None else 0
        if self.output_cap_bytes is not None and size > self.output_cap_bytes:
            raise _problem(
                413,
                "Content Too Large",
                f"output is {size} bytes, over the {self.output_cap_bytes}-byte cap",
                "PAYLOAD_TOO_LARGE",
                maxBytes=self.output_cap_bytes,
            )
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise _problem(400, "Bad Request", "reason must be a string", "VALIDATION_ERROR", field="reason")
        if reason is not None:
            reason = reason[: self.reason_cap_chars]
        with self._cond:
            task = self._fenced_task_locked(req, body)
            self._check_queue(task, queue)
            if workflow_id != task.workflow_id:
                raise _problem(
                    404, "Not Found", f"task {task.task_id} is not in workflow {workflow_id}", "TASK_NOT_FOUND"
                )
            self._leased.discard(task.task_id)
            task.lease_token = None
            task.lease_expires_at = None
            task.output = output if output is not None else ({} if status == "COMPLETED" else None)
            task.error_message = reason if status != "COMPLETED" else None
            if status == "COMPLETED":
                task.state = "completed"
                self._event(task, "completed")
            elif status == "FAILED" and task.retries > 1:
                # A retry is a new attempt, and a new attempt is a new task id.
                retry = self._new_task_locked(
                    task.task_def_name,
                    dict(task.input),
                    retries=task.retries - 1,
                    domain=task.domain,
                    workflow_id=task.workflow_id,
                    ref_name=task.ref_name,
                    traceparent=task.traceparent,
                    previous=task.task_id,
                )
                task.state = "retried"
                task.next_task_id = retry.task_id
                self._event(task, "failed", reason=reason, next_task_id=retry.task_id)
                self._cond.notify_all()
            else:
                task.state = "failed"
                self._event(
                    task, "failed_terminal" if status == "FAILED_WITH_TERMINAL_ERROR" else "failed", reason=reason
                )
            return json_response({"taskId": task.task_id, "status": status})

    # ------------------------------------------------------------------ admin

    def _admin_create_task(self, req: Request) -> Response:
        """``POST /_admin/tasks``: one job in the jobs-file format (``taskDefName`` / ``input`` too)."""
        try:
            task_id = self.create_from_spec(JobSpec.from_object(req.json_object(), where="the task"))
        except (TypeError, ValueError) as exc:
            raise HTTPProblem(400, "Bad Request", str(exc)) from None
        return json_response({"taskId": task_id}, 201)

    def _admin_tasks(self, req: Request) -> Response:
        with self._cond:
            self._expire_locked()
            tasks = [self._state_locked(t) for t in self._tasks.values()]
        return json_response({"tasks": tasks})

    def _admin_task(self, req: Request) -> Response:
        try:
            return json_response(self.task_state(unquote(req.params["task_id"])))
        except KeyError:
            raise HTTPProblem(404, "Not Found", "no such task") from None


def create(**options: Any) -> NodeFlowEmulator:
    """Create a node-flow emulator (options: see :class:`NodeFlowEmulator`)."""
    return NodeFlowEmulator(**options)
