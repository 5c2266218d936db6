"""The Sheptra adapter: the worker side of seed 000 behind :class:`~workerless.engines.base.Engine`.

What it does, and why:

- **Configuration**: :mod:`~workerless.engines.sheptra.config` (the Worker environment block).
- **Credentials**: OAuth2 client credentials (:mod:`~workerless.engines.sheptra.auth`), cached in
  the adapter (one adapter lives per Lambda container) and renewed a minute before ``expires_in``
  runs out. A 401 from the engine drops the token, mints again and retries that call once. An empty
  ``SHEPTRA_TOKEN_ENDPOINT`` means authentication is off: no Authorization header at all.
- **Discovery**: :mod:`~workerless.engines.sheptra.discovery` (the ``baseUrl``, cached; resolved
  again on a 421 or a run of connection failures).
- **Errors**: every non-2xx answer and transport failure goes through the kit's
  :class:`~workerless.engines.kit.translate.Translator`. The adapter never sleeps or loops on
  429/503: it raises, and the pipeline's single retry policy decides. No secret (client secret,
  access token) ever appears in a log line or an exception message.

Example (an illustration: it needs a running engine or AWS, which tests/functional provide)::

    engine = from_values(parse_env_text(block), httpx.Client(timeout=10))
    jobs = engine.activate([Demand("charge-payment", 10)], lease_seconds=60)
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from workerless._core.lease import ACTIVATION_LEASE, LeasePolicy
from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
from workerless.engines.base import SharedState
from workerless.engines.kit.answers import json_object, json_size
from workerless.engines.kit.joinurl import engine_url
from workerless.engines.kit.resend import Recovery, send_recovering
from workerless.engines.kit.skim import Skimmer, answer_skimmer, job_variables, post_skimmed
from workerless.engines.kit.times import timestamp_or_none
from workerless.engines.kit.tokens import TokenCache
from workerless.engines.kit.translate import Translator, error_for_response
from workerless.engines.sheptra.auth import TokenEndpoint
from workerless.engines.sheptra.config import ENGINE, PAYLOAD_CAP, RENEW_EARLY_SECONDS, SheptraConfig
from workerless.engines.sheptra.discovery import Locator
from workerless.errors import (
    ConfigurationError,
    EngineError,
    PayloadTooLargeError,
    ResponseShapeError,
)

__all__ = ["SheptraEngine", "from_values"]

logger = logging.getLogger("workerless.engines.sheptra")


class _Malformed(Exception):
    """One job in an activation answer is not the documented shape; ``field`` names what."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"field {field!r} {why}")
        self.field = field


class SheptraEngine:
    """Sheptra behind the :class:`~workerless.engines.base.Engine` Protocol.

    Build it with :func:`from_values`. The paths are class attributes so a deployment whose
    engine differs (the throw-error path is not in the contract) can subclass and override them.
    """

    name: ClassVar[str] = ENGINE
    #: Sheptra's lease starts at activation: the heartbeat extends jobs still waiting in SQS.
    lease: ClassVar[LeasePolicy] = ACTIVATION_LEASE
    #: Optional capabilities (:class:`~workerless.engines.base.Engine`): Sheptra's lease starts at
    #: activation (nothing to acquire or acknowledge), it keeps no task logs and has no worker
    #: liveness report.
    lease_acquire: ClassVar[None] = None
    task_logs: ClassVar[None] = None
    liveness: ClassVar[None] = None

    activate_path: ClassVar[str] = "/v1/jobs/activate"
    extend_path: ClassVar[str] = "/v1/jobs/{id}/extend-lease"
    complete_path: ClassVar[str] = "/v1/jobs/{id}/complete"
    fail_path: ClassVar[str] = "/v1/jobs/{id}/fail"
    throw_path: ClassVar[str] = "/v1/jobs/{id}/throw-error"

    def __init__(
        self,
        config: SheptraConfig,
        client: httpx.Client,
        *,
        worker_id: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._client = client
        self._worker_id = worker_id
        self._clock = clock
        self._lock = threading.RLock()
        self._translate = Translator(ENGINE, refine=_refine, secrets=self._secrets)
        self._endpoint = TokenEndpoint(config, client, self._translate)
        self._tokens = TokenCache(self._endpoint.mint, early=RENEW_EARLY_SECONDS, clock=clock, lock=self._lock)
        self._locator = Locator(
            config,
            client,
            self._translate,
            auth_headers=self._auth_headers,
            drop_token=self._tokens.invalidate,
            lock=self._lock,
        )

    def __repr__(self) -> str:
        return f"SheptraEngine(mode={self.config.mode!r}, base_url={self._locator.base_url!r}, auth={self.config.auth})"

    def _secrets(self) -> Sequence[str]:
        # The tokens held and the client secret: redacted from every error an engine body fed.
        secret = self._endpoint.secret()
        return (*self._tokens.held(), *((secret,) if secret else ()))

    def _auth_headers(self) -> dict[str, str]:
        if not self.config.auth:
            return {}
        return {"Authorization": f"Bearer {self._tokens.get()}"}

    # ---- the one request path -------------------------------------------------------------

    def _call(
        self,
        path: str,
        body: Mapping[str, Any] | bytes,
        *,
        what: str,
        job_id: str | None = None,
        skim: Skimmer | None = None,
    ) -> httpx.Response:
        """POST ``body`` to the engine; a 2xx response, or the translated error. ``skim``: a 2xx
        answer is read through it as it streams in (:mod:`workerless.engines.kit.skim`).

        At most three sends (the kit's :func:`~workerless.engines.kit.resend.send_recovering`): the
        first, one after re-minting on a 401, one after re-resolving on a 421 (discovery mode).
        Nothing here sleeps: 429/503 raise with ``retry_after``.
        """
        sent: dict[str, str] = {}

        def send() -> tuple[httpx.Response, str]:
            base = self._locator.base()
            sent.clear()
            sent.update(self._auth_headers())
            try:
                headers = {"Accept": "application/json", **sent}
                url = engine_url(base, path)
                if isinstance(body, bytes):  # JSON already encoded (a report's variables: see report)
                    headers["Content-Type"] = "application/json"
                    response = self._client.post(url, content=body, headers=headers)
                elif skim is None:
                    response = self._client.post(url, json=body, headers=headers)
                else:
                    response = post_skimmed(self._client, url, json_body=body, headers=headers, skim=skim)
            except httpx.HTTPError as exc:
                if isinstance(exc, httpx.TransportError):
                    self._locator.transport_failed()
                raise self._translate.transport(exc, job_id=job_id, what=what) from exc
            self._locator.answered()
            return response, base

        def recover(answer: tuple[httpx.Response, str]) -> Recovery | None:
            response, base = answer
            if response.status_code == 401:
                if not self.config.auth:
                    raise ConfigurationError(
                        f"{what} answered 401 but SHEPTRA_TOKEN_ENDPOINT is empty (authentication off): this "
                        "deployment requires a token; paste the block Drive prints for it",
                        key="SHEPTRA_TOKEN_ENDPOINT",
                    )
                # The token expired early or the signing key rotated: mint a new one, retry once.
                token = sent.get("Authorization", "").removeprefix("Bearer ") or None
                return "reauthenticate", lambda: self._tokens.invalidate(token)
            if response.status_code == 421:
                if self.config.mode == "config":
                    raise ConfigurationError(
                        f"{what} answered 421 Misdirected Request: SHEPTRA_API_URL ({self.config.api_url}) does not "
                        "serve this environment (it may have moved cells); fix SHEPTRA_API_URL or use "
                        "SHEPTRA_MODE=discovery",
                        key="SHEPTRA_API_URL",
                    )

                def resolve_again() -> None:
                    # The environment moved to another cell: the cached baseUrl is wrong.
                    logger.info("sheptra %s answered 421 at %s; resolving the environment again", what, base)
                    self._locator.forget()

                return "resolve", resolve_again
            return None

        response, _ = send_recovering(send, recover)
        if response.is_success:
            return response
        raise self._translate.response(response, job_id=job_id, what=what, cap=PAYLOAD_CAP)

    # ---- Engine -------------------------------------------------------------------------------

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        """One short-poll ``POST /v1/jobs/activate`` for every demanded type with capacity.

        ``maxJobs`` is the batch size across *all* types, and the engine hands jobs out oldest
        first across the whole set, so any one type may receive the whole batch. Asking for the
        smallest capacity among the demands is the only way no route is handed more than it can
        start; the poller calls again while work keeps coming, so a large route is filled over a
        few calls instead of being overrun in one.
        """
        capacity: dict[str, int] = {}
        for demand in demands:
            if demand.capacity > 0:
                capacity[demand.job_type] = min(capacity.get(demand.job_type, demand.capacity), demand.capacity)
        if not capacity:
            return []
        body: dict[str, Any] = {
            "types": list(capacity),  # never "type": both together is a 400
            # The batch is shared by every type: the smallest room is the most any route can take
            # (see the docstring); the poller polls again while work keeps coming.
            "maxJobs": min(capacity.values()),
            "leaseSeconds": lease_seconds,
            "waitSeconds": 0,  # a Lambda must not pay to sit in a long poll
        }
        label = self._activation_label()
        if label:
            body["workerId"] = label
        if self.config.tenant_ids:
            body["tenantIds"] = list(self.config.tenant_ids)
        # Read as it streams in: no job's variables are decoded here, and none past the payload limit
        # or the answer's budget is held (the poller fails or hands back those jobs).
        skim = answer_skimmer(demands, "variables", 3, engine=ENGINE)
        response = self._call(self.activate_path, body, what="activate", skim=skim)
        envelope = json_object(response, engine=ENGINE, what="activate", field="jobs", content=skim.skeleton())
        raw_jobs = envelope.get("jobs")
        if not isinstance(raw_jobs, list):
            raise ResponseShapeError("activate answered without a 'jobs' list", engine=ENGINE, field="jobs")

        now = self._clock()
        taken: dict[str, int] = {}
        jobs: list[ActivatedJob] = []
        for raw in raw_jobs:
            try:
                job = self._parse_job(raw, now, label, skim)
            except _Malformed as bad:
                self._hand_back_malformed(raw, bad, label)
                continue
            job_type = job.ref.job_type
            if job_type not in capacity:
                self._hand_back(job.ref, job.retries, f"job type {job_type!r} was not asked for by this worker")
                continue
            if taken.get(job_type, 0) >= capacity[job_type]:
                self._hand_back(job.ref, job.retries, f"more {job_type!r} jobs than this worker asked for")
                continue
            taken[job_type] = taken.get(job_type, 0) + 1
            jobs.append(job)
        return jobs

    def _activation_label(self) -> str | None:
        """The workerId this activation's jobs are held under.

        Every Lambda of a deployment mints with the same client, so without a label they are ONE
        worker to Sheptra: a handler whose lease lapsed and was re-activated by the next poll could
        still complete the job over the new holder (same identity, so no 409) — a stale write. A
        fresh label per activation (carried in the job's handle to every later call) makes each
        activation its own holder, and the engine fences the old one with 409. A fixed
        WORKERLESS_WORKER_ID keeps its exact label instead (and with it, the shared identity).
        """
        if self._worker_id:
            return self._worker_id
        return f"wl-{secrets.token_hex(6)}"

    def _parse_job(
        self, raw: object, now: float, label: str | None = None, skim: Skimmer | None = None
    ) -> ActivatedJob:
        if not isinstance(raw, dict):
            raise _Malformed("job", "is not a JSON object")
        job_id = raw.get("id")
        if not isinstance(job_id, str) or not job_id:
            raise _Malformed("id", "is missing or not a non-empty string")
        job_type = raw.get("type")
        if not isinstance(job_type, str) or not job_type:
            raise _Malformed("type", "is missing or not a non-empty string")
        retries = raw.get("retries")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise _Malformed("retries", "is missing or not a non-negative integer")
        lease_expires_at = timestamp_or_none(raw.get("lockExpiresAt"))
        if lease_expires_at is None:
            raise _Malformed("lockExpiresAt", "is missing or not an RFC 3339 timestamp with a zone")
        variables, raw_variables, unread = job_variables(skim, raw.get("variables"))
        if variables is None:
            raise _Malformed("variables", "is missing or not a JSON object")
        optional: dict[str, str | None] = {}
        for name in ("instanceId", "elementId", "traceparent"):
            value = raw.get(name)
            if value is not None and not isinstance(value, str):
                raise _Malformed(name, "is not a string")
            optional[name] = value
        return ActivatedJob(
            # Sheptra keeps the job id across retries; the retries count tells the attempts apart.
            ref=JobRef(ENGINE, job_id, job_type, attempt=f"r{retries}", handle=_label_handle(label)),
            variables=variables,
            lease_expires_at=lease_expires_at,
            activated_at=now,
            retries=retries,
            instance_id=optional["instanceId"],
            element_id=optional["elementId"],
            traceparent=optional["traceparent"],
            raw_variables=raw_variables,
            unread_bytes=unread,
        )

    def _hand_back_malformed(self, raw: object, bad: _Malformed, label: str | None = None) -> None:
        job_id = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(job_id, str) or not job_id:
            # Nothing to address it by: the engine's lease returns it to the queue on its own.
            logger.error("sheptra activate answered a malformed job without a usable id (%s); left to its lease", bad)
            return
        retries = raw.get("retries") if isinstance(raw, dict) else None
        usable_retries = (
            retries if isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0 else None
        )
        job_type = raw.get("type") if isinstance(raw, dict) else None
        ref = JobRef(
            ENGINE, job_id, job_type if isinstance(job_type, str) and job_type else "?", handle=_label_handle(label)
        )
        logger.error("sheptra activate answered malformed job %s (%s); handing it back", job_id, bad)
        self._hand_back(ref, usable_retries, f"workerless could not read this job: {bad}")

    def _hand_back(self, ref: JobRef, retries: int | None, message: str) -> None:
        """Fail with retries unchanged and no backoff, so the job is not stuck for a whole lease.
        Best effort: if this fails too, the engine's lease hands the job out again later."""
        logger.warning("sheptra handing back job %s: %s", ref.job_id, message)
        try:
            self._fail(ref, message, retries=retries, backoff_seconds=0)
        except (EngineError, ConfigurationError) as exc:
            logger.warning("sheptra could not hand back job %s (%s); it returns when its lease lapses", ref.job_id, exc)

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        """Re-anchor the lease to now + ``lease_seconds``; the granted expiry (epoch seconds)."""
        response = self._call(
            _job_path(self.extend_path, ref.job_id),
            self._labelled({"leaseSeconds": lease_seconds}, ref),
            what="extend-lease",
            job_id=ref.job_id,
        )
        body = json_object(response, engine=ENGINE, what="extend-lease", field="lockExpiresAt")
        expires = timestamp_or_none(body.get("lockExpiresAt"))
        if expires is None:
            raise ResponseShapeError(
                "extend-lease answered without a valid lockExpiresAt",
                engine=ENGINE,
                field="lockExpiresAt",
                job_id=ref.job_id,
            )
        return expires

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        """Complete, fail or throw. LeaseLostError (409) means someone else finished this job."""
        if outcome.kind == "complete":
            # The variables as the wrapper encoded them (or encoded now, a stored result re-reported),
            # compact UTF-8 JSON as httpx's json= would send them: measured and sent as those bytes.
            encoded = outcome.encode_variables()
            self._check_size(ref, len(encoded), "complete")
            label = self._label(ref)
            tail = b',"workerId":' + json.dumps(label, ensure_ascii=False).encode() if label else b""
            completion = b'{"variables":' + encoded + tail + b"}"
            self._call(_job_path(self.complete_path, ref.job_id), completion, what="complete", job_id=ref.job_id)
        elif outcome.kind == "fail":
            self._fail(
                ref,
                outcome.message or "job failed",
                retries=0 if outcome.terminal else outcome.retries,
                backoff_seconds=outcome.backoff_seconds,
            )
        else:
            variables = outcome.variables or {}
            self._check_cap(ref, variables, "throw-error")
            body = {
                "errorCode": outcome.error_code or "",
                "errorMessage": outcome.message or outcome.error_code or "",
                "variables": variables,
            }
            self._call(
                _job_path(self.throw_path, ref.job_id), self._labelled(body, ref), what="throw-error", job_id=ref.job_id
            )

    def _fail(self, ref: JobRef, message: str, *, retries: int | None, backoff_seconds: int) -> None:
        body: dict[str, Any] = {"errorMessage": message, "retryBackoffSeconds": max(0, backoff_seconds)}
        if retries is not None:
            body["retries"] = max(0, retries)
        self._call(_job_path(self.fail_path, ref.job_id), self._labelled(body, ref), what="fail", job_id=ref.job_id)

    def _label(self, ref: JobRef) -> str | None:
        # The engine identifies the holder as {sub}/{workerId} when activation carried the label,
        # so every call on a job carries the activation's label or the engine sees another worker (409).
        label = ref.handle.get("workerId")
        return label if isinstance(label, str) else self._worker_id

    def _labelled(self, body: dict[str, Any], ref: JobRef) -> dict[str, Any]:
        label = self._label(ref)
        if label:
            body["workerId"] = label
        return body

    def _check_cap(self, ref: JobRef, variables: Mapping[str, Any], what: str) -> None:
        self._check_size(ref, json_size(variables), what)

    def _check_size(self, ref: JobRef, size: int, what: str) -> None:
        if size > PAYLOAD_CAP:
            raise PayloadTooLargeError(
                f"{what} variables are {size} bytes of JSON, over Sheptra's cap of {PAYLOAD_CAP} bytes",
                engine=ENGINE,
                cap=PAYLOAD_CAP,
                job_id=ref.job_id,
            )

    def release(self, job: ActivatedJob, reason: str) -> None:
        """Hand the job back at once: fail with its retries unchanged and no backoff."""
        self._fail(job.ref, f"released by workerless: {reason}", retries=job.retries, backoff_seconds=0)

    def close(self) -> None:
        """Nothing is held engine-side; the injected client belongs to the caller."""


def _refine(response: httpx.Response, problem: dict[str, Any], what: str, job_id: str | None) -> EngineError | None:
    """Sheptra's refinement of the shared mapping: a 409 says what it means for the worker."""
    if response.status_code != 409:
        return None
    error = error_for_response(ENGINE, response, job_id=job_id, what=what)
    error.args = (
        f"{error.args[0]}; the lease is gone — someone else finished this job, or it is back in the "
        "queue: stop working on it",
    )
    return error


def _label_handle(label: str | None) -> dict[str, Any]:
    return {"workerId": label} if label else {}


def from_values(
    values: Mapping[str, str],
    client: httpx.Client,
    *,
    worker_id: str | None = None,
    state: SharedState | None = None,
    clock: Callable[[], float] = time.time,
) -> SheptraEngine:
    """Build the adapter from the environment block's values (see :class:`SheptraConfig`).

    ``state`` is unused: the token lives in the adapter, one per Lambda container. ``clock`` is
    injectable so tests can check the one-minute-early renewal without sleeping.
    """
    del state
    return SheptraEngine(SheptraConfig.from_values(values), client, worker_id=worker_id, clock=clock)


def _job_path(template: str, job_id: str) -> str:
    # Job ids come from the engine's answer: quote them so an odd id can never change the path.
    return template.replace("{id}", quote(job_id, safe=""))
