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
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from workerless_devkit.emulators.core import EngineEmulator, JobRegistry, JobSpec, iso_millis, pick
from workerless_devkit.emulators.http import HTTPProblem, Request, Response, json_response

__all__ = ["WORKER_SCOPES", "NodeFlowEmulator", "create"]

#: The scopes the default worker credential gets: every queue, and report rights.
WORKER_SCOPES: tuple[str, ...] = ("queues:lease:*", "tasks:report")
LOG_LEVELS = frozenset({"debug", "info", "warn", "error"})
STATUSES = frozenset({"COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR"})
LEASE_SCOPE_PREFIX = "queues:lease:"
REPORT_SCOPE = "tasks:report"


#: Epoch seconds as the ISO 8601 UTC timestamp node-flow answers with (millisecond precision).
iso = iso_millis


def lease_scope_covers(scopes: Iterable[str], queue: str) -> bool:
    """Whether ``scopes`` allow leasing ``queue`` (``taskDefName`` or ``taskDefName:domain``).

    ``queues:lease:charge:*`` covers every *domain* of ``charge`` (``charge:eu-west``) but not the
    plain ``charge`` queue; ``queues:lease:charge`` covers only ``charge``.
    """
    for scope in scopes:
        if scope in ("*", "queues:lease:*", f"{LEASE_SCOPE_PREFIX}{queue}"):
            return True
        if scope.startswith(LEASE_SCOPE_PREFIX) and scope.endswith(":*"):
            task_def = scope[len(LEASE_SCOPE_PREFIX) : -2]
            if ":" in queue and queue.split(":", 1)[0] == task_def:
                return True
    return False


@dataclass
class _Principal:
    name: str
    kind: str  # "apiKey" | "serviceAccount"
    scopes: tuple[str, ...]
    expires_at: float | None = None


@dataclass
class _Task:
    task_id: str
    task_def_name: str
    domain: str | None
    workflow_id: str
    ref_name: str | None
    input: dict[str, Any]
    retries: int
    traceparent: str | None
    seq: int
    state: str = "ready"
    lease_token: str | None = None
    lease_expires_at: float | None = None
    worker_id: str | None = None
    attempts: int = 0
    output: dict[str, Any] | None = None
    error_message: str | None = None
    next_task_id: str | None = None
    previous_task_id: str | None = None
    logs: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def queue(self) -> str:
        return f"{self.task_def_name}:{self.domain}" if self.domain else self.task_def_name


def _problem(status: int, title: str, detail: str, code: str, **extra: Any) -> HTTPProblem:
    return HTTPProblem(status, title, detail, extra={"code": code, **extra})


def _lease_expired(task_id: str) -> HTTPProblem:
    # The detail never echoes the token: a stale token is still a credential for whoever holds it.
    return _problem(
        409, "Conflict", f"the lease on task {task_id} has expired or is held by another worker", "LEASE_EXPIRED"
    )


def _required_str(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise _problem(
            400, "Bad Request", f"{name} is required and must be a non-empty string", "VALIDATION_ERROR", field=name
        )
    return value


def _number(body: Mapping[str, Any], name: str, default: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _problem(400, "Bad Request", f"{name} must be a number", "VALIDATION_ERROR", field=name)
    return float(value)


class NodeFlowEmulator(EngineEmulator):
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
    #: The condition long polls wait on: the core's one (``_changed``), under node-flow's name.
    _cond = EngineEmulator._changed

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

    def create_api_key(
        self, scopes: Iterable[str] = WORKER_SCOPES, *, name: str = "key", expires_in: float | None = None
    ) -> str:
        """Create an API key with ``scopes`` (optionally expiring ``expires_in`` seconds from now)."""
        key = "nf_" + secrets.token_urlsafe(24)
        with self._cond:
            expires_at = self.now() + expires_in if expires_in is not None else None
            self._api_keys[key] = _Principal(name, "apiKey", tuple(scopes), expires_at)
        return key

    def create_service_account(
        self, scopes: Iterable[str] = WORKER_SCOPES, *, name: str = "account"
    ) -> tuple[str, str]:
        """Create a service account with ``scopes``; returns ``(keyId, secret)``."""
        key_id = "sa_" + secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        with self._cond:
            self._accounts[key_id] = (secret, _Principal(name, "serviceAccount", tuple(scopes)))
        return key_id, secret

    # ------------------------------------------------------------------ internals

    def _new_task_locked(
        self,
        task_def_name: str,
        variables: dict[str, Any],
        *,
        retries: int,
        domain: str | None,
        workflow_id: str,
        ref_name: str | None,
        traceparent: str | None,
        previous: str | None = None,
    ) -> _Task:
        task = _Task(
            task_id=str(uuid.uuid4()),
            task_def_name=task_def_name,
            domain=domain,
            workflow_id=workflow_id,
            ref_name=ref_name,
            input=variables,
            retries=retries,
            traceparent=traceparent,
            seq=self._tasks.next_seq(),
            previous_task_id=previous,
        )
        self._tasks.add(task.task_id, task)
        self._queues.setdefault(task.queue, []).append(task.task_id)
        self._event(task, "scheduled", queue=task.queue)
        return task

    def _event(self, task: _Task, event: str, **details: Any) -> None:
        self._tasks.record(task.history, event, **details)
        # Every change of a task's state is followed by its event: the watch hears of it here, by
        # the job (the retry chain's first task id) and with the latest attempt's state, as
        # job_state reports it.
        chain = self._chain_locked(task)
        self.watch.note(task.task_def_name, chain[0].task_id, chain[-1].state)

    def _expire_locked(self) -> None:
        """Put every task whose lease has lapsed back on its queue (same task id, token revoked)."""
        now = self.now()
        for task_id in sorted(self._leased, key=lambda i: self._tasks[i].seq):
            task = self._tasks[task_id]
            if task.lease_expires_at is not None and now >= task.lease_expires_at:
                self._leased.discard(task_id)
                task.state = "ready"
                task.lease_token = None
                task.lease_expires_at = None
                self._event(task, "lease_expired", worker_id=task.worker_id)
                task.worker_id = None
                queue = self._queues.setdefault(task.queue, [])
                # Back in creation order: a lapsed task is older than anything scheduled since.
                queue.append(task_id)
                queue.sort(key=lambda i: self._tasks[i].seq)

    def _chain_locked(self, task: _Task) -> list[_Task]:
        root = task
        while root.previous_task_id is not None:
            root = self._tasks[root.previous_task_id]
        chain = [root]
        while chain[-1].next_task_id is not None:
            chain.append(self._tasks[chain[-1].next_task_id])
        return chain

    def _job_view_locked(self, task: _Task) -> dict[str, Any]:
        chain = self._chain_locked(task)
        latest = chain[-1]
        view = self._state_locked(latest)
        reasons = [t.error_message for t in chain if t.error_message is not None]
        view.update(
            {
                "id": task.task_id,
                "current_task_id": latest.task_id,
                "task_state": task.state,
                "task_attempts": task.attempts,
                "attempts": sum(t.attempts for t in chain),
                "error_message": reasons[-1] if reasons and latest.state != "completed" else None,
                "logs": [entry["message"] for t in chain for entry in t.logs],
                "log_entries": [{**entry, "task_id": t.task_id} for t in chain for entry in t.logs],
                "history": [{**event, "task_id": t.task_id} for t in chain for event in t.history],
                "task_ids": [t.task_id for t in chain],
                "previous_task_id": task.previous_task_id,
            }
        )
        view.pop("next_task_id", None)
        if task.next_task_id is not None:
            view["next_task_id"] = task.next_task_id
        return view

    def _state_locked(self, task: _Task) -> dict[str, Any]:
        state: dict[str, Any] = {
            "id": task.task_id,
            "type": task.task_def_name,
            "queue": task.queue,
            "domain": task.domain,
            "workflow_id": task.workflow_id,
            "ref_name": task.ref_name,
            "state": task.state,
            "retries": task.retries,
            "input": dict(task.input),
            "output": task.output,
            "error_message": task.error_message,
            "attempts": task.attempts,
            "logs": [entry["message"] for entry in task.logs],
            "log_entries": [dict(entry) for entry in task.logs],
            "history": [dict(event) for event in task.history],
            "lease_expires_at": task.lease_expires_at,
            "worker_id": task.worker_id,
            "traceparent": task.traceparent,
            "previous_task_id": task.previous_task_id,
        }
        if task.next_task_id is not None:
            state["next_task_id"] = task.next_task_id
        return state

    def _check_ns(self, req: Request) -> None:
        if unquote(req.params["ns"]) != self.namespace:
            raise _problem(404, "Not Found", f"namespace {req.params['ns']!r} does not exist", "NAMESPACE_NOT_FOUND")

    def _authenticate(self, req: Request) -> _Principal:
        now = self.now()
        api_key = req.header("X-API-Key")
        authorization = req.header("Authorization")
        with self._cond:
            if api_key:
                principal = self._api_keys.get(api_key)
                if principal is None:
                    raise _problem(401, "Unauthorized", "the API key is not valid", "INVALID_API_KEY")
                if principal.expires_at is not None and now >= principal.expires_at:
                    raise _problem(401, "Unauthorized", "the API key has expired", "API_KEY_EXPIRED")
                return principal
            if authorization:
                scheme, _, token = authorization.partition(" ")
                principal = self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None
                if principal is None:
                    raise _problem(401, "Unauthorized", "the access token is not valid", "INVALID_TOKEN")
                if principal.expires_at is not None and now >= principal.expires_at:
                    raise _problem(401, "Unauthorized", "the access token has expired", "TOKEN_EXPIRED")
                return principal
        raise HTTPProblem(
            401,
            "Unauthorized",
            "send X-API-Key or Authorization: Bearer",
            headers={"WWW-Authenticate": 'Bearer realm="node-flow"'},
            extra={"code": "UNAUTHENTICATED"},
        )

    @staticmethod
    def _require_scope(principal: _Principal, scope: str) -> None:
        if scope.startswith(LEASE_SCOPE_PREFIX):
            granted = lease_scope_covers(principal.scopes, scope[len(LEASE_SCOPE_PREFIX) :])
        else:
            granted = scope in principal.scopes or "*" in principal.scopes
        if not granted:
            raise _problem(
                403, "Forbidden", f"this credential lacks the scope {scope}", "INSUFFICIENT_SCOPE", requiredScope=scope
            )

    def _clamp_lease(self, body: Mapping[str, Any]) -> float:
        asked = _number(body, "leaseSeconds", self.default_lease_seconds)
        return min(max(asked, self.lease_min_seconds), self.lease_max_seconds)

    def _fenced_task_locked(self, req: Request, body: Mapping[str, Any]) -> _Task:
        """The task named in the path, if ``body`` holds its live lease token (409 otherwise)."""
        self._expire_locked()
        task_id = unquote(req.params["task_id"])
        task = self._tasks.get(task_id)
        if task is None:
            raise _problem(404, "Not Found", f"task {task_id} does not exist", "TASK_NOT_FOUND")
        token = body["leaseToken"]
        if (
            task.state != "leased"
            or task.lease_token is None
            or not hmac.compare_digest(task.lease_token.encode(), token.encode())
        ):
            raise _lease_expired(task_id)
        return task

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

    def _token(self, req: Request) -> Response:
        body = req.json_object()
        key_id = _required_str(body, "keyId")
        secret = _required_str(body, "secret")
        with self._cond:
            account = self._accounts.get(key_id)
            if account is None or not hmac.compare_digest(account[0].encode(), secret.encode()):
                raise _problem(401, "Unauthorized", "unknown keyId or wrong secret", "INVALID_CREDENTIALS")
            principal = account[1]
            token = "nfat_" + secrets.token_urlsafe(32)
            self._tokens[token] = _Principal(
                principal.name, principal.kind, principal.scopes, self.now() + self.token_ttl_seconds
            )
        return json_response(
            {
                "accessToken": token,
                "tokenType": "Bearer",
                "expiresIn": self.token_ttl_seconds,
                "scopes": list(principal.scopes),
            }
        )

    def _whoami(self, req: Request) -> Response:
        principal = self._authenticate(req)
        return json_response(
            {
                "name": principal.name,
                "kind": principal.kind,
                "scopes": list(principal.scopes),
                "namespace": self.namespace,
                "expiresAt": iso(principal.expires_at) if principal.expires_at is not None else None,
            }
        )

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

    def _admin_credentials(self, req: Request) -> Response:
        body = req.json_object()
        scopes = body.get("scopes", list(WORKER_SCOPES))
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise HTTPProblem(400, "Bad Request", "scopes must be a list of strings")
        name = str(body.get("name", "admin-created"))
        kind = body.get("kind", "apiKey")
        if kind == "apiKey":
            expires_in = body.get("expiresIn")
            key = self.create_api_key(
                scopes, name=name, expires_in=float(expires_in) if expires_in is not None else None
            )
            return json_response({"apiKey": key, "scopes": scopes}, 201)
        if kind == "serviceAccount":
            key_id, secret = self.create_service_account(scopes, name=name)
            return json_response({"keyId": key_id, "secret": secret, "scopes": scopes}, 201)
        raise HTTPProblem(400, "Bad Request", "kind must be 'apiKey' or 'serviceAccount'")


def create(**options: Any) -> NodeFlowEmulator:
    """Create a node-flow emulator (options: see :class:`NodeFlowEmulator`)."""
    return NodeFlowEmulator(**options)
