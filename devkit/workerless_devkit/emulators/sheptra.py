"""A faithful, in-process emulator of Sheptra's worker API (seed 000), served on 127.0.0.1.

What it serves (``{base}`` is the server's URL, ``{cell}`` the environment's current cell):

- ``POST {base}/oauth2/token``: OAuth2 client credentials (form-encoded, or HTTP Basic) → an RS256
  JWT with ``sub``, ``org_id``, ``aud``, ``iss``, ``iat``, ``exp``. Absent when auth is off.
- ``GET {base}/v1/discovery/auth``: the audience, issuer and token endpoint the engine verifies.
- ``GET {base}/v1/discovery/cell?cluster=X``: ``{baseUrl, cluster, name, environment, status}``
  (bearer token required when auth is on; unknown cluster → 404).
- ``{base}/cells/{cell}/v1/jobs/...``: the engine — ``activate``, ``{id}/extend-lease``,
  ``{id}/complete``, ``{id}/fail``, ``{id}/throw-error``. ``SHEPTRA_API_URL`` is
  ``{base}/cells/{cell}``; after :meth:`SheptraEmulator.move_cell` the old prefix answers 421.
- ``/_admin/...``: cell move, token invalidation, client revocation, plus the jobs, clock, stats and
  fault injection of :mod:`workerless_devkit.emulators.core`. Fault and stats keys use the route pattern,
  e.g. ``{"path": "/cells/{cell}/v1/jobs/activate", "status": 503, ...}``, or a concrete path.

The identity side (cells, tokens, discovery, the env block) is
:class:`~workerless_devkit.emulators.sheptra_identity.SheptraIdentity`, this emulator's base; the job
loop is here.

Every time-based rule (lease lapse, retry backoff, token expiry) reads :meth:`SheptraEmulator.now`,
the wall clock plus whatever :meth:`SheptraEmulator.advance` added, so tests lapse leases without
sleeping while a running pipeline (the demo) still sees time pass.

Example:
    >>> emulator = create()
    >>> server = emulator.serve()                           # doctest: +SKIP
    >>> job_id = emulator.create_job("charge-payment", {"orderId": "2481"})
    >>> emulator.engine_values(server.url)["SHEPTRA_API_URL"]  # doctest: +SKIP
    'http://127.0.0.1:54321/cells/cell-a'
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric import rsa

from workerless_devkit.emulators.core import JobRegistry, JobSpec, iso_millis, pick
from workerless_devkit.emulators.http import Request, Response, json_response
from workerless_devkit.emulators.sheptra_identity import (
    SheptraIdentity,
    _bad_request,
    _problem,
)

__all__ = ["MAX_VARIABLES_BYTES", "SheptraEmulator", "create", "variables_size"]

#: The seed's cap on every variables-bearing request: 1 MB of names plus JSON values.
MAX_VARIABLES_BYTES = 1_048_576
#: The partition a job belongs to when it was created without a tenant, and the one an activation
#: without ``tenantIds`` polls.
DEFAULT_TENANT = "<default>"
DEFAULT_MAX_JOBS = 10

JobStatus = Literal["ready", "leased", "completed", "failed", "thrown"]


_CELL_PREFIX = "/cells/{cell}"
# Long polls wake at least this often to re-check the clock: a job whose backoff ends or whose lease
# lapses becomes available without anyone notifying the condition.
_MAX_WAIT_SLICE = 1.0


#: ISO 8601 UTC with milliseconds and a ``Z`` suffix, the shape of ``lockExpiresAt``.
_iso = iso_millis


def _element_id(job_type: str) -> str:
    """A BPMN-style element id for a job type (``charge-payment`` → ``ChargePayment``)."""
    parts = [p for p in re.split(r"[^0-9A-Za-z]+", job_type) if p]
    return "".join(p[:1].upper() + p[1:] for p in parts) or "ServiceTask"


def _traceparent() -> str:
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def variables_size(variables: Mapping[str, Any]) -> int:
    """Bytes of names plus compact UTF-8 JSON values — what the seed's 1 MB cap is measured on."""
    total = 0
    for name, value in variables.items():
        total += len(str(name).encode())
        total += len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    return total


@dataclass
class _Job:
    id: str
    seq: int
    type: str
    variables: dict[str, Any]
    retries: int
    instance_id: str
    element_id: str
    traceparent: str
    tenant_id: str
    created_at: float
    state: JobStatus = "ready"
    available_at: float = 0.0
    holder: str | None = None
    lock_expires_at: float | None = None
    attempts: int = 0
    output: dict[str, Any] | None = None
    error_message: str | None = None
    error_code: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    def lapsed(self, now: float) -> bool:
        return self.state == "leased" and self.lock_expires_at is not None and self.lock_expires_at <= now

    def snapshot(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "state": self.state,
            "retries": self.retries,
            "variables": dict(self.variables),
            "output": None if self.output is None else dict(self.output),
            "error_message": self.error_message,
            "error_code": self.error_code,
            "attempts": self.attempts,
            "holder": self.holder,
            "lock_expires_at": self.lock_expires_at,
            "lapsed": self.lapsed(now),
            "available_at": self.available_at,
            "instance_id": self.instance_id,
            "element_id": self.element_id,
            "tenant_id": self.tenant_id,
            "traceparent": self.traceparent,
            "created_at": self.created_at,
            "history": [dict(event) for event in self.history],
        }


def _lease_field(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad_request(f"{name} must be a number of seconds")
    return float(value)


class SheptraEmulator(SheptraIdentity):
    """Sheptra's worker API over real HTTP, with a controllable clock. Build it with :func:`create`."""

    name = "sheptra"

    def __init__(
        self,
        *,
        auth: bool = True,
        token_ttl: int = 3600,
        max_lease_seconds: int = 600,
        default_lease_seconds: int = 60,
        long_poll_cap: float = 30.0,
        client_id: str = "client_demo",
        client_secret: str | None = None,
        cluster: str = "cell-a-env",
        rate_limit: float | None = None,
        org_id: str = "org_demo",
        audience: str = "https://engine.sheptra.emulator",
        issuer: str = "https://authkit.sheptra.emulator/",
        max_variables_bytes: int = MAX_VARIABLES_BYTES,
    ) -> None:
        if token_ttl < 1 or max_lease_seconds < 1 or not 1 <= default_lease_seconds <= max_lease_seconds:
            raise ValueError("token_ttl, max_lease_seconds must be >= 1 and default_lease_seconds in [1, max]")
        if long_poll_cap < 0:
            raise ValueError("long_poll_cap must be >= 0")
        if rate_limit is not None and rate_limit <= 0:
            raise ValueError("rate_limit must be a positive number of requests per second")
        self.auth = auth
        self.token_ttl = int(token_ttl)
        self.max_lease_seconds = max_lease_seconds
        self.default_lease_seconds = default_lease_seconds
        self.long_poll_cap = float(long_poll_cap)
        self.client_id = client_id
        self.client_secret = client_secret if client_secret is not None else "secret_" + secrets.token_urlsafe(24)
        self.cluster = cluster
        self.org_id = org_id
        self.audience = audience
        self.issuer = issuer
        self.max_variables_bytes = max_variables_bytes
        self.rate_limit = rate_limit
        super().__init__()
        self._jobs: JobRegistry[_Job] = self.registry
        self._cell_index = 0
        self._revoked = False
        self._tokens_minted = 0
        self._key_id = ""
        self._private_key: rsa.RSAPrivateKey = self._new_key()
        self._bucket = float(max(1.0, rate_limit or 1.0))
        self._bucket_at = self.now()
        self._register_routes()

    # ------------------------------------------------------------------ clock, cells, credentials

    # ------------------------------------------------------------------ serving and configuration

    # ------------------------------------------------------------------ jobs (Python API)

    def create_job(
        self,
        job_type: str,
        variables: Mapping[str, Any] | None = None,
        *,
        retries: int = 3,
        instance_id: str | None = None,
        element_id: str | None = None,
        traceparent: str | None = None,
        tenant_id: str | None = None,
    ) -> str:
        """Queue a job (as if a process reached a service task of this type); return its id."""
        if not isinstance(job_type, str) or not job_type:
            raise ValueError("job_type must be a non-empty string")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            raise ValueError("retries must be an integer >= 1")
        variables = dict(variables or {})
        json.dumps(variables)  # fail here, not in a worker's activation, if the values are not JSON
        with self._changed:
            now = self.now()
            job = _Job(
                id=str(uuid.uuid4()),
                seq=self._jobs.next_seq(),
                type=job_type,
                variables=variables,
                retries=retries,
                instance_id=instance_id or str(uuid.uuid4()),
                element_id=element_id or _element_id(job_type),
                traceparent=traceparent or _traceparent(),
                tenant_id=tenant_id or DEFAULT_TENANT,
                created_at=now,
                available_at=now,
            )
            job.history.append({"at": now, "event": "created", "retries": retries})
            self._jobs.add(job.id, job)
            self._note(job)
            self._changed.notify_all()
            return job.id

    def create_from_spec(self, spec: JobSpec) -> str:
        """A job of a jobs file or ``POST /_admin/jobs``: ``tenantId``, ``instanceId``, ``elementId``
        and ``traceparent`` (or their snake_case twins) are Sheptra's own keys."""
        extra = spec.extra
        return self.create_job(
            spec.type,
            spec.variables,
            retries=spec.retries,
            instance_id=pick(extra, "instance_id", "instanceId"),
            element_id=pick(extra, "element_id", "elementId"),
            traceparent=pick(extra, "traceparent"),
            tenant_id=pick(extra, "tenant_id", "tenantId"),
        )

    def check_spec(self, spec: JobSpec) -> None:
        """The same 400 / 413 as any variables-bearing request, before any job of a batch exists."""
        self._variables({"variables": spec.variables})

    def job_state(self, job_id: str) -> dict[str, Any]:
        """One job's state; KeyError when there is no such job."""
        with self._lock:
            return self._jobs[job_id].snapshot(self.now())

    def jobs(self) -> list[dict[str, Any]]:
        """Every job's state, oldest first."""
        with self._lock:
            now = self.now()
            return [job.snapshot(now) for job in self._jobs.values()]

    # ------------------------------------------------------------------ HTTP: auth

    def _register_routes(self) -> None:
        r = self.router
        if self.auth:
            r.route("POST", "/oauth2/token")(self._token)
            r.route("GET", "/.well-known/jwks.json")(self._jwks)
        r.route("GET", "/v1/discovery/auth")(self._discovery_auth)
        r.route("GET", "/v1/discovery/cell")(self._discovery_cell)
        r.route("POST", _CELL_PREFIX + "/v1/jobs/activate")(self._activate)
        r.route("POST", _CELL_PREFIX + "/v1/jobs/{id}/extend-lease")(self._extend)
        r.route("POST", _CELL_PREFIX + "/v1/jobs/{id}/complete")(self._complete)
        r.route("POST", _CELL_PREFIX + "/v1/jobs/{id}/fail")(self._fail)
        r.route("POST", _CELL_PREFIX + "/v1/jobs/{id}/throw-error")(self._throw)
        r.route("POST", "/_admin/cell/move")(self._admin_move)
        r.route("POST", "/_admin/tokens/invalidate")(self._admin_invalidate)
        r.route("POST", "/_admin/client/revoke")(self._admin_revoke)

    # ------------------------------------------------------------------ HTTP: the job loop

    def _lease_seconds(self, body: Mapping[str, Any]) -> float:
        lease = _lease_field(body, "leaseSeconds")
        if lease is None:
            return float(self.default_lease_seconds)
        if lease < 1:
            raise _bad_request("leaseSeconds must be at least 1")
        return min(lease, float(self.max_lease_seconds))

    @staticmethod
    def _identity(subject: str, body: Mapping[str, Any]) -> str:
        worker_id = body.get("workerId")
        if worker_id is None:
            return subject
        if not isinstance(worker_id, str) or not worker_id:
            raise _bad_request("workerId must be a non-empty string")
        return f"{subject}/{worker_id}"

    def _activate(self, req: Request) -> Response:
        subject = self._engine_call(req)
        body = req.json_object()
        if "type" in body and "types" in body:
            raise _bad_request("supply either type or types, not both")
        if "type" in body:
            if not isinstance(body["type"], str) or not body["type"]:
                raise _bad_request("type must be a non-empty string")
            types = [body["type"]]
        elif "types" in body:
            types = body["types"]
            if not isinstance(types, list) or not types or not all(isinstance(t, str) and t for t in types):
                raise _bad_request("types must be a non-empty list of job type names")
        else:
            raise _bad_request("one of type or types is required")
        max_jobs = body.get("maxJobs", DEFAULT_MAX_JOBS)
        if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
            raise _bad_request("maxJobs must be an integer of at least 1")
        lease = self._lease_seconds(body)
        wait = _lease_field(body, "waitSeconds") or 0.0
        if wait < 0:
            raise _bad_request("waitSeconds must not be negative")
        wait = min(wait, self.long_poll_cap)
        tenants = body.get("tenantIds")
        if tenants is None:
            tenants = [DEFAULT_TENANT]
        elif not isinstance(tenants, list) or not tenants or not all(isinstance(t, str) and t for t in tenants):
            raise _bad_request("tenantIds must be a non-empty list of tenant ids")
        identity = self._identity(subject, body)
        cell = self.cell

        deadline = time.monotonic() + wait
        with self._changed:
            while True:
                taken = self._take(set(types), set(tenants), max_jobs, lease, identity)
                remaining = deadline - time.monotonic()
                if taken or remaining <= 0 or self._closed or self.cell != cell:
                    break
                # Wake for a notify (new job, fail, clock move) or when the next backoff ends or
                # lease lapses, whichever is first — never past the long-poll window.
                self._changed.wait(min(remaining, self._next_change(set(types)), _MAX_WAIT_SLICE))
        if self.cell != cell and not taken:
            raise _problem(421, "Misdirected Request", f"the environment moved away from {cell} during the poll")
        return json_response({"jobs": taken})

    def _next_change(self, types: set[str]) -> float:
        """Seconds until the next job of these types becomes available by the clock alone."""
        now = self.now()
        soonest = math.inf
        for job in self._jobs.values():
            if job.type not in types:
                continue
            if job.state == "ready" and job.available_at > now:
                soonest = min(soonest, job.available_at - now)
            elif job.state == "leased" and job.lock_expires_at is not None and job.lock_expires_at > now:
                soonest = min(soonest, job.lock_expires_at - now)
        return max(0.001, soonest)

    def _take(
        self, types: set[str], tenants: set[str], max_jobs: int, lease: float, identity: str
    ) -> list[dict[str, Any]]:
        """Lease up to ``max_jobs`` available jobs, oldest first across every type (lock held)."""
        now = self.now()
        taken: list[dict[str, Any]] = []
        for job in self._jobs.values():
            if len(taken) >= max_jobs:
                break
            if job.type not in types or job.tenant_id not in tenants:
                continue
            if job.state == "ready":
                if job.available_at > now:
                    continue
            elif job.lapsed(now):
                # The lease ran out and this activation takes the job over: that costs a retry.
                job.retries -= 1
                job.history.append({"at": now, "event": "lease-lapsed", "holder": job.holder, "retries": job.retries})
                if job.retries <= 0:
                    job.state, job.holder, job.lock_expires_at = "failed", None, None
                    job.error_message = "job lease expired with no retries left"
                    job.history.append({"at": now, "event": "incident", "reason": "lease lapsed, no retries left"})
                    self._note(job)
                    continue
            else:
                continue
            job.state = "leased"
            job.holder = identity
            job.lock_expires_at = round(now + lease, 3)
            job.attempts += 1
            job.history.append(
                {"at": now, "event": "activated", "holder": identity, "lock_expires_at": job.lock_expires_at}
            )
            self._note(job)
            taken.append(
                {
                    "id": job.id,
                    "instanceId": job.instance_id,
                    "elementId": job.element_id,
                    "type": job.type,
                    "retries": job.retries,
                    "lockExpiresAt": _iso(job.lock_expires_at),
                    "variables": dict(job.variables),
                    "traceparent": job.traceparent,
                }
            )
        return taken

    def _note(self, job: _Job) -> None:
        """Tell the watch the job's state now (lock held, right after the change)."""
        self.watch.note(job.type, job.id, job.state)

    def _held_job(self, req: Request, identity: str, action: str) -> _Job:
        """The job named in the path, if the caller holds it (lock held): 404 unknown, 409 otherwise.

        A lapsed lease nobody has taken over yet is still the holder's: taking over happens only
        in an activation, which changes the holder.
        """
        job = self._jobs.get(req.params["id"])
        if job is None:
            raise _problem(404, "Not Found", f"no job with id {req.params['id']}")
        if job.state != "leased":
            where = "back in the queue" if job.state == "ready" else f"already {job.state}"
            raise _problem(409, "Conflict", f"cannot {action}: the job is {where}")
        if job.holder != identity:
            raise _problem(409, "Conflict", f"cannot {action}: the job is held by another worker")
        return job

    def _variables(self, body: Mapping[str, Any], name: str = "variables") -> dict[str, Any]:
        variables = body.get(name)
        if variables is None:
            return {}
        if not isinstance(variables, dict):
            raise _bad_request(f"{name} must be a JSON object")
        size = variables_size(variables)
        if size > self.max_variables_bytes:
            raise _problem(
                413, "Content Too Large", f"{name} take {size} bytes; the cap is {self.max_variables_bytes} bytes"
            )
        return variables

    def _extend(self, req: Request) -> Response:
        subject = self._engine_call(req)
        body = req.json_object() if req.body.strip() else {}
        lease = self._lease_seconds(body)
        identity = self._identity(subject, body)
        with self._changed:
            job = self._held_job(req, identity, "extend the lease")
            now = self.now()
            # Re-anchored at now: a heartbeat that stops lets the job lapse on its normal schedule.
            job.lock_expires_at = round(now + lease, 3)
            job.history.append({"at": now, "event": "lease-extended", "lock_expires_at": job.lock_expires_at})
            expires = job.lock_expires_at
        return json_response({"lockExpiresAt": _iso(expires)})

    def _complete(self, req: Request) -> Response:
        subject = self._engine_call(req)
        body = req.json_object() if req.body.strip() else {}
        variables = self._variables(body)
        identity = self._identity(subject, body)
        with self._changed:
            job = self._held_job(req, identity, "complete")
            job.state, job.holder, job.lock_expires_at = "completed", None, None
            job.output = variables
            job.history.append({"at": self.now(), "event": "completed", "by": identity})
            self._note(job)
        return Response(204)

    def _fail(self, req: Request) -> Response:
        subject = self._engine_call(req)
        body = req.json_object() if req.body.strip() else {}
        message = body.get("errorMessage")
        if message is not None and not isinstance(message, str):
            raise _bad_request("errorMessage must be a string")
        retries = body.get("retries")
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise _bad_request("retries must be an integer of at least 0")
        backoff = _lease_field(body, "retryBackoffSeconds") or 0.0
        if backoff < 0:
            raise _bad_request("retryBackoffSeconds must not be negative")
        identity = self._identity(subject, body)
        with self._changed:
            job = self._held_job(req, identity, "fail")
            now = self.now()
            # Omitted retries: one attempt is used up (the seed's minimal worker fails without them).
            job.retries = job.retries - 1 if retries is None else retries
            job.error_message = message
            job.holder, job.lock_expires_at = None, None
            if job.retries <= 0:
                job.retries = 0
                job.state = "failed"
                job.history.append({"at": now, "event": "incident", "by": identity, "error_message": message})
            else:
                job.state = "ready"
                job.available_at = now + backoff
                job.history.append(
                    {
                        "at": now,
                        "event": "failed",
                        "by": identity,
                        "error_message": message,
                        "retries": job.retries,
                        "backoff": backoff,
                    }
                )
            self._note(job)
            self._changed.notify_all()
        return Response(204)

    def _throw(self, req: Request) -> Response:
        subject = self._engine_call(req)
        body = req.json_object() if req.body.strip() else {}
        code = body.get("errorCode")
        if not isinstance(code, str) or not code:
            raise _bad_request("errorCode must be a non-empty string")
        message = body.get("errorMessage")
        if message is not None and not isinstance(message, str):
            raise _bad_request("errorMessage must be a string")
        variables = self._variables(body)
        identity = self._identity(subject, body)
        with self._changed:
            job = self._held_job(req, identity, "throw an error")
            job.state, job.holder, job.lock_expires_at = "thrown", None, None
            job.error_code, job.error_message, job.output = code, message, variables
            job.history.append({"at": self.now(), "event": "thrown", "by": identity, "error_code": code})
            self._note(job)
        return Response(204)

    # ------------------------------------------------------------------ HTTP: admin


def create(**options: Any) -> SheptraEmulator:
    """A Sheptra emulator (not yet serving: call :meth:`SheptraEmulator.serve`); options: see
    :class:`SheptraEmulator`.

    ``client_secret=None`` draws a random secret; ``rate_limit`` (requests per second across every
    engine call, burst of the same size) answers 429 with Retry-After past it.
    """
    return SheptraEmulator(**options)
