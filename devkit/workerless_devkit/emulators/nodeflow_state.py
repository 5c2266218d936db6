"""node-flow's state, the base of :class:`~workerless_devkit.emulators.nodeflow.NodeFlowEmulator`: its tasks and
queues (creation, lease expiry, retry chains, the job view), its credentials (API keys, service
accounts, tokens, scopes) and the checks every worker call makes (namespace, credential, scope,
lease token). The emulator's constructor sets the attributes; its routes and Python API are there."""

from __future__ import annotations

import hmac
import secrets
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from workerless_devkit.emulators.core import EngineEmulator, JobRegistry, iso_millis
from workerless_devkit.emulators.http import HTTPProblem, Request, Response, json_response

#: Epoch seconds as the ISO 8601 UTC timestamp node-flow answers with (millisecond precision).
iso = iso_millis

#: The scopes the default worker credential gets: every queue, and report rights.
WORKER_SCOPES: tuple[str, ...] = ("queues:lease:*", "tasks:report")
LOG_LEVELS = frozenset({"debug", "info", "warn", "error"})
STATUSES = frozenset({"COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR"})
LEASE_SCOPE_PREFIX = "queues:lease:"
REPORT_SCOPE = "tasks:report"


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


class NodeFlowState(EngineEmulator):
    """Tasks, queues and credentials; the emulator's constructor sets these attributes."""

    #: The condition long polls wait on: the core's one (``_changed``), under node-flow's name.
    _cond = EngineEmulator._changed

    namespace: str
    auth: str
    token_ttl_seconds: int
    default_lease_seconds: float
    lease_min_seconds: float
    lease_max_seconds: float
    max_wait_seconds: float
    max_count: int
    worker_ttl_seconds: float
    output_cap_bytes: int | None
    reason_cap_chars: int
    log_message_cap_chars: int
    log_batch_cap: int
    _tasks: JobRegistry[_Task]
    _queues: dict[str, list[str]]
    _leased: set[str]
    _workers: dict[tuple[str, str], float]
    _api_keys: dict[str, _Principal]
    _accounts: dict[str, tuple[str, _Principal]]
    _tokens: dict[str, _Principal]

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
