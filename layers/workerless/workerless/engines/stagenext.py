"""StageNext adapter (seed 001): pull/ack gateway, worker sessions, stage leases and results.

How the pipeline uses it (a begin lease: :data:`workerless.lease.BEGIN_LEASE`):

- The poller calls :meth:`StageNextEngine.activate`: one ``POST /jobs/pull`` (waitSeconds 0, API key
  only) per job, per queue. A pulled delivery is *not* leased yet: it only has a gateway visibility
  timeout (60 s) after which the gateway requeues it. Its ack token and routing cookies travel in
  ``JobRef.handle``.
- The handler calls :meth:`~StageNextEngine.begin` (lease acquire) before user code; False means
  "do not execute" and the handler calls :meth:`~StageNextEngine.skip` (ack requeue:false).
- The heartbeat Lambda calls :meth:`~StageNextEngine.extend` (lease renew, 60 s per the seed) for jobs
  whose handler has begun. It runs in a different container from the handler that acquired the lease, so
  both must present the *same* worker record: see "Worker session" below.
- :meth:`~StageNextEngine.report` posts the result (202 = accepted by the broker), then acks the
  delivery. An unknown outcome raises a retryable error and the pipeline reports the same stored
  outcome again: the body carries the same executionId/attempt, so StageNext's fencing applies it once.

Worker session. A deployment holds ONE worker session: one instanceId (STAGENEXT_INSTANCE_ID, else the
worker id, else ``workerless``), one worker record, one token, kept in :class:`SharedState` under
``stagenext-session#{instanceId}``. Leases belong to the worker record, so a lease acquired by a
handler container is renewed by the heartbeat container with the same record. Rotation is a
rebootstrap of the same instanceId: StageNext keeps the workerId (leases in flight stay ours) and
replaces the token (every container holding the old one gets 401 from then on). So rotation is done
by exactly one container — whoever first sees the session due takes a short claim with
compare-and-set, bootstraps, and writes the new token — and every other container answers a 401 by
re-reading the shared record and retrying once. Without ``state`` the session is process-local and
the instance id gets a random suffix (two processes never share an instance id).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx

from workerless.engines.base import (
    SharedState,
    error_for_response,
    error_for_transport,
    is_loopback,
    parse_problem,
)
from workerless.errors import (
    AuthExpiredError,
    ConfigurationError,
    EngineUnavailableError,
    GarbledResponseError,
    LeaseLostError,
    MessageFormatError,
    PayloadTooLargeError,
    ResponseShapeError,
    RetryableEngineError,
)
from workerless.lease import BEGIN_LEASE, LeaseModel
from workerless.model import ActivatedJob, Demand, JobRef, Outcome

__all__ = [
    "RESULT_BODY_CAP",
    "RESULT_STRING_CAP",
    "StageNextConfig",
    "StageNextEngine",
    "WorkerSession",
    "from_values",
]

ENGINE = "stagenext"
DEFAULT_API_URL = "http://localhost:8081"
#: The seed's caps on POST /stages/{id}/result: the result string, and the whole JSON body.
RESULT_STRING_CAP = 262_144
RESULT_BODY_CAP = 327_680
#: StageNext's execution lease (the seed's 60 s) unless STAGENEXT_LEASE_SECONDS says otherwise; acquire
#: and renew answer with it (``leaseSeconds``), and the adapter takes the engine's word when it gives one.
LEASE_SECONDS = 60
#: A failure message longer than this is cut (a stack trace must not push the body over its cap).
ERROR_MESSAGE_CAP = 16_384
#: How long a container may hold the rotation claim before another may take it over.
CLAIM_SECONDS = 30
#: Bounded wait while another container rotates the shared session (tries x interval ~= 3 s).
CLAIM_WAIT_TRIES = 12
CLAIM_WAIT_INTERVAL = 0.25
SESSION_KEY_PREFIX = "stagenext-session#"
#: Liveness (POST /workers/heartbeat) is reported at most this often per container.
LIVENESS_INTERVAL_SECONDS = 30.0
DEFAULT_SESSION_TTL = 24 * 3600
#: Deliveries remembered per container between a retried call and its retry: results accepted whose
#: ack is still owed, and lease acquires whose answer was lost. Bounded: an entry lives for one
#: report's or one acquire's retries, and an evicted one only costs a duplicate result (discarded by
#: StageNext's fencing) or a lease left to lapse.
REMEMBERED_DELIVERIES = 1024
#: Tries at the ack after an accepted result (each a call of :meth:`StageNextEngine.report` by the
#: caller's retry policy), after which the report ends without it: the result stands, the gateway
#: requeues the unacknowledged delivery after its visibility timeout, and that delivery is refused at
#: acquire and acknowledged. Fewer than the retry policy's attempts, so a handler whose result was
#: accepted does not turn it into a report still owed for want of an ack.
ACK_TRIES = 3

log = logging.getLogger(__name__)


def _positive(values: Mapping[str, str], key: str, default: float, *, integer: bool = False) -> float:
    raw = values.get(key)
    if raw is None or not raw.strip():
        return default
    try:
        number = int(raw) if integer else float(raw)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigurationError(f"{key} must be {kind}, got {raw!r}", key=key) from None
    if number <= 0:
        raise ConfigurationError(f"{key} must be greater than 0, got {raw!r}", key=key)
    return number


@dataclass(frozen=True, slots=True)
class StageNextConfig:
    """StageNext connection values, validated.

    Keys: STAGENEXT_API_URL (default http://localhost:8081; https required except on loopback),
    STAGENEXT_API_KEY (required), STAGENEXT_INSTANCE_ID, STAGENEXT_VISIBILITY_SECONDS (60),
    STAGENEXT_LEASE_SECONDS (60: the execution lease until an acquire or renew answer states it),
    STAGENEXT_SESSION_REFRESH_SECONDS (3600: rotate this long before the session expires, at most
    half its TTL), STAGENEXT_EVENTS_MAX_BATCH (100), STAGENEXT_EVENTS_FLUSH_SECONDS (10).
    """

    api_url: str
    api_key: str = field(repr=False)
    instance_id: str | None = None
    visibility_seconds: float = 60.0
    lease_seconds: float = float(LEASE_SECONDS)
    session_refresh_seconds: float = 3600.0
    events_max_batch: int = 100
    events_flush_seconds: float = 10.0

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> StageNextConfig:
        """Validate; a missing or malformed value raises ConfigurationError naming the key."""
        url = (values.get("STAGENEXT_API_URL") or DEFAULT_API_URL).strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"STAGENEXT_API_URL must be an http(s) URL with a host, got {url!r}", key="STAGENEXT_API_URL"
            )
        if parts.scheme == "http" and not is_loopback(parts.hostname):
            raise ConfigurationError(
                "STAGENEXT_API_URL must use https (plain http is allowed only on loopback): the API key "
                "and session tokens travel in headers",
                key="STAGENEXT_API_URL",
            )
        api_key = (values.get("STAGENEXT_API_KEY") or "").strip()
        if not api_key:
            raise ConfigurationError("STAGENEXT_API_KEY is required", key="STAGENEXT_API_KEY")
        instance_id = (values.get("STAGENEXT_INSTANCE_ID") or "").strip() or None
        return cls(
            api_url=url,
            api_key=api_key,
            instance_id=instance_id,
            visibility_seconds=_positive(values, "STAGENEXT_VISIBILITY_SECONDS", 60.0),
            lease_seconds=_positive(values, "STAGENEXT_LEASE_SECONDS", float(LEASE_SECONDS)),
            session_refresh_seconds=_positive(values, "STAGENEXT_SESSION_REFRESH_SECONDS", 3600.0),
            events_max_batch=int(_positive(values, "STAGENEXT_EVENTS_MAX_BATCH", 100, integer=True)),
            events_flush_seconds=_positive(values, "STAGENEXT_EVENTS_FLUSH_SECONDS", 10.0),
        )


@dataclass(frozen=True, slots=True)
class WorkerSession:
    """One worker session: the worker record's id and its current token (a credential)."""

    worker_id: str
    token: str = field(repr=False)
    instance_id: str
    issued_at: float
    expires_at: float
    refresh_at: float

    def to_record(self) -> dict[str, Any]:
        # Whole seconds: the record lives in DynamoDB, where floats need Decimal conversions.
        return {
            "workerId": self.worker_id,
            "token": self.token,
            "instanceId": self.instance_id,
            "issuedAt": int(self.issued_at),
            "expiresAt": int(self.expires_at),
            "refreshAt": int(self.refresh_at),
            "claim": None,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> WorkerSession | None:
        if not record:
            return None
        try:
            worker_id, token = record["workerId"], record["token"]
            if not isinstance(worker_id, str) or not isinstance(token, str) or not worker_id or not token:
                return None
            return cls(
                worker_id=worker_id,
                token=token,
                instance_id=str(record.get("instanceId") or ""),
                issued_at=float(record["issuedAt"]),
                expires_at=float(record["expiresAt"]),
                refresh_at=float(record["refreshAt"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


def _claim_of(record: Mapping[str, Any] | None) -> tuple[str, float] | None:
    claim = record.get("claim") if record else None
    if not isinstance(claim, Mapping):
        return None
    try:
        return str(claim["owner"]), float(claim["until"])
    except (KeyError, TypeError, ValueError):
        return None


class StageNextEngine:
    """The StageNext adapter. Build it with :func:`from_values`.

    Example:
        >>> engine = from_values({"STAGENEXT_API_KEY": "..."}, httpx.Client(timeout=10))  # doctest: +SKIP
        >>> jobs = engine.activate([Demand("billing-charge", 5)], lease_seconds=60)
        >>> if engine.begin(jobs[0]):
        ...     engine.report(jobs[0].ref, Outcome.complete({"ok": True}))
        ... else:
        ...     engine.skip(jobs[0].ref)
    """

    name: ClassVar[str] = ENGINE

    def __init__(
        self,
        config: StageNextConfig,
        client: httpx.Client,
        *,
        worker_id: str | None = None,
        state: SharedState | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.config = config
        self._client = client
        self._state = state
        self._clock = clock or time.time
        self._sleep = sleep or time.sleep
        base = config.instance_id or worker_id or "workerless"
        if state is None and config.instance_id is None:
            # Process-local sessions: concurrent processes must use different instance IDs.
            base = f"{base}-{uuid.uuid4().hex[:8]}"
        self.instance_id = base
        self.state_key = SESSION_KEY_PREFIX + base
        self._owner = uuid.uuid4().hex
        self._session: WorkerSession | None = None
        self._lock = threading.RLock()
        self._events: list[dict[str, Any]] = []
        self._events_since: float | None = None
        self._counters: dict[str, int] = {}
        self._liveness_at: float | None = None
        #: The execution lease length: configured, then what the engine last said (acquire, renew).
        self.lease_seconds = config.lease_seconds
        #: Ack tokens of deliveries whose result StageNext accepted (202) while the ack is still owed,
        #: with the acks failed so far: a retried report acks again without posting the result twice.
        self._accepted: OrderedDict[str, int] = OrderedDict()
        #: Ack tokens of deliveries whose lease acquire may have landed unanswered (5xx, a dropped
        #: connection, a garbled 200): their retry's lease_held is checked with a renew.
        self._uncertain: OrderedDict[str, int] = OrderedDict()

    @property
    def lease(self) -> LeaseModel:
        """A begin lease (lease acquire in the handler) of the length StageNext last stated."""
        return BEGIN_LEASE.granting(self.lease_seconds)

    # ------------------------------------------------------------------------------- HTTP basics

    def _url(self, path: str) -> str:
        return self.config.api_url + path

    def _post(
        self,
        path: str,
        *,
        what: str,
        job_id: str | None = None,
        json_body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        all_headers = dict(headers or {})
        if content is not None:
            all_headers["Content-Type"] = "application/json"
        try:
            if content is not None:
                return self._client.post(self._url(path), content=content, headers=all_headers)
            return self._client.post(self._url(path), json=json_body, headers=all_headers)
        except httpx.HTTPError as exc:
            raise error_for_transport(ENGINE, exc, job_id=job_id, what=what) from exc

    def _json(self, response: httpx.Response, *, what: str, job_id: str | None = None) -> dict[str, Any]:
        """The answer's JSON object. An unreadable body (truncated, empty, not JSON: what a proxy or a
        dropped connection leaves) is a GarbledResponseError, retryable: it says nothing about what
        StageNext answered, and every call that parses an answer (pull, lease acquire and renew,
        bootstrap) may be repeated under the seed. Readable JSON that is not an object is the wrong
        contract: ResponseShapeError, final."""
        try:
            data = response.json()
        except (ValueError, UnicodeDecodeError):
            raise GarbledResponseError(
                f"{what} answered {response.status_code} with a body that is not readable JSON "
                f"({len(response.content)} bytes)",
                engine=ENGINE,
                field="body",
                job_id=job_id,
                status=response.status_code,
            ) from None
        if not isinstance(data, dict):
            raise ResponseShapeError(
                f"{what} answered {response.status_code} without a JSON object",
                engine=ENGINE,
                field="body",
                job_id=job_id,
                status=response.status_code,
            )
        return data

    # --------------------------------------------------------------------------- worker session

    def _bootstrap(self) -> WorkerSession:
        """POST /workers/bootstrap with our instanceId: same worker record, new token."""
        started = self._clock()
        response = self._post(
            "/workers/bootstrap",
            what="worker bootstrap",
            json_body={"instanceId": self.instance_id, "name": "workerless", "capabilities": ["http-pull"]},
            headers={"X-API-Key": self.config.api_key},
        )
        if response.status_code in (401, 403):
            raise ConfigurationError(
                f"StageNext refused STAGENEXT_API_KEY at worker bootstrap ({response.status_code})",
                key="STAGENEXT_API_KEY",
            )
        if response.status_code not in (200, 201):
            raise error_for_response(ENGINE, response, what="worker bootstrap")
        data = self._json(response, what="worker bootstrap")
        worker_id, token = data.get("workerId"), data.get("sessionToken")
        if not isinstance(worker_id, str) or not worker_id:
            raise ResponseShapeError("worker bootstrap answered without workerId", engine=ENGINE, field="workerId")
        if not isinstance(token, str) or not token:
            raise ResponseShapeError(
                "worker bootstrap answered without sessionToken", engine=ENGINE, field="sessionToken"
            )
        ttl = self._session_ttl(data, started)
        # Rotate well before expiry: refresh_seconds early, but never later than half-way.
        early = min(self.config.session_refresh_seconds, ttl / 2)
        session = WorkerSession(
            worker_id=worker_id,
            token=token,
            instance_id=self.instance_id,
            issued_at=started,
            expires_at=started + ttl,
            refresh_at=started + ttl - early,
        )
        log.info("stagenext worker session bootstrapped", extra={"worker_id": worker_id, "ttl_seconds": ttl})
        return session

    @staticmethod
    def _session_ttl(data: Mapping[str, Any], started: float) -> float:
        # Relative TTL first (immune to clock skew), then the absolute expiry, then the seed's default.
        relative = data.get("expiresInSeconds")
        if isinstance(relative, int | float) and not isinstance(relative, bool) and relative > 0:
            return float(relative)
        absolute = data.get("expiresAt")
        if isinstance(absolute, str):
            try:
                when = dt.datetime.fromisoformat(absolute.replace("Z", "+00:00")).timestamp()
            except ValueError:
                when = 0.0
            if when > started:
                return when - started
        return float(DEFAULT_SESSION_TTL)

    def _current_session(self) -> WorkerSession:
        with self._lock:
            session = self._session
            if session is not None and self._clock() < session.refresh_at:
                return session
            return self._refresh_session(failed_token=None)

    def _refresh_session(self, *, failed_token: str | None) -> WorkerSession:
        """A usable session: the cached one, the shared record, or a fresh bootstrap.

        ``failed_token``: the token a call was just refused with (401); it is never returned again.
        """
        with self._lock:
            if self._state is None:
                session = self._session
                if session is None or failed_token is None or session.token == failed_token:
                    session = self._bootstrap()
                    self._session = session
                return session
            session = self._shared_session(self._state, failed_token)
            self._session = session
            return session

    def _shared_session(self, state: SharedState, failed_token: str | None) -> WorkerSession:
        for _ in range(CLAIM_WAIT_TRIES):
            now = self._clock()
            record = state.get(self.state_key)
            session = WorkerSession.from_record(record)
            usable = session is not None and session.token != failed_token and now < session.expires_at
            if session is not None and usable and now < session.refresh_at:
                return session
            claim = _claim_of(record)
            if claim is not None and claim[0] != self._owner and claim[1] > now:
                # Another container is rotating. The old token stays valid until its bootstrap
                # lands, so keep using it; if it is already refused, wait for the new one.
                if session is not None and usable:
                    return session
                self._sleep(CLAIM_WAIT_INTERVAL)
                continue
            won = self._rotate(state, record)
            if won is not None:
                return won
        raise AuthExpiredError(
            "StageNext worker session is being rotated by another function; retry shortly", engine=ENGINE
        )

    def _rotate(self, state: SharedState, record: dict[str, Any] | None) -> WorkerSession | None:
        """Take the rotation claim (compare-and-set), bootstrap, publish the new token.
        None when another container moved first (the caller re-reads)."""
        nonce = uuid.uuid4().hex
        version = record.get("version") if record else None
        base = {k: v for k, v in (record or {}).items() if k != "version"}
        claim = {"owner": self._owner, "nonce": nonce, "until": int(self._clock()) + CLAIM_SECONDS}
        if not state.put(self.state_key, {**base, "claim": claim}, expected_version=version):
            return None
        try:
            fresh = self._bootstrap()
        except Exception:
            self._release_claim(state, nonce, base)
            raise
        current = state.get(self.state_key)
        current_claim = current.get("claim") if current else None
        if (
            current is not None
            and isinstance(current_claim, Mapping)
            and current_claim.get("nonce") == nonce
            and state.put(self.state_key, fresh.to_record(), expected_version=current.get("version"))
        ):
            return fresh
        # Our claim lapsed and another container took over; its bootstrap replaces our token.
        log.warning("stagenext session rotation claim was taken over; re-reading the shared session")
        return None

    def _release_claim(self, state: SharedState, nonce: str, base: dict[str, Any]) -> None:
        current = state.get(self.state_key)
        claim = current.get("claim") if current else None
        if current is not None and isinstance(claim, Mapping) and claim.get("nonce") == nonce:
            state.put(self.state_key, {**base, "claim": None}, expected_version=current.get("version"))

    def _session_call(self, send: Callable[[WorkerSession], httpx.Response]) -> tuple[httpx.Response, WorkerSession]:
        """Send with the current session; on 401 get a fresh one (shared record or bootstrap) and
        send once more. The second answer is returned whatever it is."""
        session = self._current_session()
        response = send(session)
        if response.status_code == 401:
            session = self._refresh_session(failed_token=session.token)
            response = send(session)
        return response, session

    # ------------------------------------------------------------------------------------ handle

    @staticmethod
    def _handle(ref: JobRef, name: str) -> Any:
        value = ref.handle.get(name)
        if value is None or value == "":
            raise MessageFormatError(f"StageNext job reference handle is missing {name!r}", field=f"handle.{name}")
        return value

    @staticmethod
    def _cookie_header(ref: JobRef) -> dict[str, str]:
        cookies = ref.handle.get("cookies") or {}
        if not isinstance(cookies, Mapping) or not cookies:
            return {}
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}

    def _lease_body(self, ref: JobRef, session: WorkerSession) -> dict[str, Any]:
        body: dict[str, Any] = {"executionId": self._handle(ref, "executionId"), "workerId": session.worker_id}
        if ref.handle.get("attempt") is not None:
            body["attempt"] = ref.handle["attempt"]
        return body

    # ------------------------------------------------------------------------------ the protocol

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        """Pull up to ``capacity`` deliveries per queue (one short POST /jobs/pull each).

        Stops a queue at its first 204. A 429 (gateway capacity) or an unavailable gateway ends the
        cycle: what was already pulled is returned, and the error is raised only when nothing was.
        A 403 (queue outside the application's handler pattern) is a ConfigurationError; deliveries
        already pulled this cycle are requeued first so they do not wait out the visibility timeout.
        """
        jobs: list[ActivatedJob] = []
        for demand in demands:
            for _ in range(max(0, demand.capacity)):
                try:
                    job = self._pull_one(demand)
                except RetryableEngineError:
                    if jobs:
                        log.warning("stagenext pull stopped early; keeping the deliveries already pulled")
                        return jobs
                    raise
                except Exception:
                    self._hand_back(jobs)
                    raise
                if job is None:
                    break
                jobs.append(job)
        return jobs

    def _hand_back(self, jobs: Sequence[ActivatedJob]) -> None:
        for job in jobs:
            try:
                self._ack(job.ref, requeue=True, what="requeue")
            except Exception:  # noqa: BLE001 - best effort; the visibility sweep requeues it anyway
                log.warning("stagenext requeue failed", extra={"job_id": job.ref.job_id})

    def _pull_one(self, demand: Demand) -> ActivatedJob | None:
        queue = demand.engine_queue
        pulled_at = self._clock()
        response = self._post(
            "/jobs/pull",
            what=f"pull from queue {queue!r}",
            json_body={"queue": queue, "waitSeconds": 0},
            headers={"X-API-Key": self.config.api_key},
        )
        cookies = {name: value for name, value in response.cookies.items()}
        # Affinity belongs to the delivery, not to the client: keep it in the handle, and keep the
        # injected client's jar from pinning later pulls (or other deliveries' acks) to one replica.
        for name in cookies:
            self._client.cookies.delete(name)
        status = response.status_code
        if status == 204:
            return None
        if status == 403:
            raise ConfigurationError(
                f"StageNext refused queue {queue!r} (403): it is outside the application's handler pattern; "
                f"check the route for job type {demand.job_type!r} (its EngineQueue in the template's Mappings.Routes)",
                key="route",
            )
        if status == 401:
            raise ConfigurationError(
                f"StageNext refused STAGENEXT_API_KEY on pull from queue {queue!r} (401)", key="STAGENEXT_API_KEY"
            )
        if status != 200:
            raise error_for_response(ENGINE, response, what=f"pull from queue {queue!r}")
        data = self._json(response, what=f"pull from queue {queue!r}")
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
        return ActivatedJob(
            ref=ref,
            variables=self._variables(data.get("input")),
            # Until lease acquire, the only clock on a delivery is the gateway's visibility timeout; but
            # the heartbeat's first look is timed from this (a third of it), and a lease acquired
            # right after the pull lapses one lease length later: the earlier of the two.
            lease_expires_at=pulled_at + min(self.config.visibility_seconds, self.lease_seconds),
            activated_at=pulled_at,
            retries=retries,
            custom_headers={"deliveryCount": delivery_count} if isinstance(delivery_count, int) else {},
        )

    @staticmethod
    def _variables(raw: Any) -> dict[str, Any]:
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw else {}
            except ValueError:
                return {"input": raw}
        if raw is None:
            return {}
        return dict(raw) if isinstance(raw, dict) else {"input": raw}

    def begin(self, job: ActivatedJob) -> bool:
        """Lease acquire. True: this delivery runs. False (acquired=false: lease_held, stale or
        finished execution; or the stage is gone): do not execute, :meth:`skip` it."""
        ref = job.ref
        path = f"/stages/{ref.job_id}/lease/acquire"

        def send(session: WorkerSession) -> httpx.Response:
            return self._post(
                path,
                what="lease acquire",
                job_id=ref.job_id,
                json_body=self._lease_body(ref, session),
                headers={"X-Worker-Session": session.token},
            )

        token = str(self._handle(ref, "ackToken"))
        try:
            response, _ = self._session_call(send)
            if response.status_code == 404:
                self._forget(self._uncertain, token)
                log.info("stagenext lease acquire: stage not found; not executing", extra={"job_id": ref.job_id})
                return False
            if response.status_code != 200:
                raise error_for_response(ENGINE, response, job_id=ref.job_id, what="lease acquire")
            data = self._json(response, what="lease acquire", job_id=ref.job_id)
        except EngineUnavailableError:
            # A 5xx, a dropped connection or a garbled answer: the acquire may have landed. Acquire is
            # not reentrant, so the retry of one that did would be refused (lease_held) and the
            # execution left to lapse: remember to ask the retry's lease_held whose lease it is.
            self._remember(self._uncertain, token)
            raise
        if data.get("acquired") is True:
            self._forget(self._uncertain, token)
            return self._started(ref, data)
        reason = str(data.get("reason"))
        if reason == "lease_held" and token in self._uncertain:
            # Renewal succeeds only for the lease owner: our worker record, so the earlier acquire
            # landed (or another delivery of ours holds it, which stands down: it has no claim).
            owned = self._owns_lease(ref)
            self._forget(self._uncertain, token)
            if owned is not None:
                log.info("stagenext lease acquire answered lease_held after a lost answer: the lease is ours")
                return self._started(ref, owned)
        self._forget(self._uncertain, token)
        log.info("stagenext lease not acquired; not executing", extra={"job_id": ref.job_id, "reason": reason})
        return False

    def _started(self, ref: JobRef, data: Mapping[str, Any]) -> bool:
        self._learn_lease(data)
        self._record_event("job.started", ref)
        self._maybe_flush_events()
        return True

    def _owns_lease(self, ref: JobRef) -> dict[str, Any] | None:
        """Renew the execution's lease: its answer when our worker record owns it, None when renewal
        is refused. Other failures raise (the caller's retry asks again)."""
        try:
            self.extend(ref, int(self.lease_seconds))
        except LeaseLostError:
            return None
        return {"leaseSeconds": self.lease_seconds}

    def _remember(self, memo: OrderedDict[str, int], token: str, value: int = 0) -> None:
        with self._lock:
            memo[token] = value
            memo.move_to_end(token)
            while len(memo) > REMEMBERED_DELIVERIES:
                memo.popitem(last=False)

    def _forget(self, memo: OrderedDict[str, int], token: str) -> None:
        with self._lock:
            memo.pop(token, None)

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        """Lease renew (StageNext sets the lease length, 60 s per the seed; ``lease_seconds`` cannot
        change it). Returns our clock at the request plus the answer's ``leaseSeconds`` (else the
        known length); a definitive refusal raises LeaseLostError."""
        path = f"/stages/{ref.job_id}/lease/renew"

        def send(session: WorkerSession) -> httpx.Response:
            return self._post(
                path,
                what="lease renew",
                job_id=ref.job_id,
                json_body=self._lease_body(ref, session),
                headers={"X-Worker-Session": session.token},
            )

        asked_at = self._clock()
        response, _ = self._session_call(send)
        status = response.status_code
        if status in (404, 409, 410):
            reason = parse_problem(response).get("reason") or f"HTTP {status}"
            raise LeaseLostError(
                f"lease renew refused: {reason}",
                engine=ENGINE,
                job_id=ref.job_id,
                status=status,
                problem=parse_problem(response),
            )
        if status != 200:
            raise error_for_response(ENGINE, response, job_id=ref.job_id, what="lease renew")
        data = self._json(response, what="lease renew", job_id=ref.job_id)
        if data.get("renewed") is False:
            raise LeaseLostError(
                f"lease renew refused: {data.get('reason') or 'renewed=false'}",
                engine=ENGINE,
                job_id=ref.job_id,
                status=status,
            )
        return asked_at + self._learn_lease(data)

    def _learn_lease(self, data: Mapping[str, Any]) -> float:
        """The lease length an acquire or renew answer states (``leaseSeconds``), remembered for the
        next pulls' first heartbeat; the known length when the answer has none."""
        seconds = data.get("leaseSeconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
            self.lease_seconds = float(seconds)
        return self.lease_seconds

    def result_body(self, ref: JobRef, outcome: Outcome, worker_id: str) -> tuple[dict[str, Any], str]:
        """The StageResultSubmit body for ``outcome`` and its result string. Built only from the
        stored outcome and the handle, so a retry sends the same execution identity and result."""
        body: dict[str, Any] = {"executionId": self._handle(ref, "executionId"), "workerId": worker_id}
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
            body.update(
                status="failed", result=result, errorMessage=message, errorCode=outcome.error_code, retryable=False
            )
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

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        """POST /stages/{id}/result, then ack the delivery (requeue:false) once it answered 202.

        Call it only under the execution's lease (acquired by :meth:`begin`, by any container of the
        deployment: the lease belongs to the shared worker record); StageNext's consumer discards a
        result for an execution that is not Running.

        The caps are checked before sending (PayloadTooLargeError naming the cap). A timeout or 5xx
        raises a retryable error: call again with the same stored outcome; the same executionId and
        attempt let StageNext's fencing discard a duplicate. An ack that fails retryably (a 429, a
        502, a dropped connection) raises too, after the result was accepted: the call again only
        acks (this container remembers the accepted result), so the delivery is not left to the
        gateway's requeue and delivered twice; after ACK_TRIES failed acks the report ends without
        one (the gateway's requeue then takes over). A 404 on the ack (token expired, already acknowledged
        — a repeated ack whose first try landed unanswered — or another replica) is logged, not
        raised: the result stands, and a redelivery of a finished execution is refused at lease
        acquire; so is a final refusal of the ack.
        """
        token = str(self._handle(ref, "ackToken"))
        with self._lock:
            failed_acks = self._accepted.get(token)
        if failed_acks is None:
            self._post_result(ref, outcome)
            failed_acks = 0
            self._remember(self._accepted, token, 0)
            self._record_event("job.finished", ref, outcome=outcome.kind)
        try:
            self._ack(ref, requeue=False, what="ack")
        except RetryableEngineError as exc:
            failed_acks += 1
            if failed_acks < ACK_TRIES:
                self._remember(self._accepted, token, failed_acks)
                log.warning(
                    "stagenext ack after an accepted result failed; acknowledging again",
                    extra={"job_id": ref.job_id, "error": type(exc).__name__, "status": exc.status},
                )
                raise
            log.warning(
                "stagenext ack after an accepted result kept failing; the gateway requeues the delivery "
                "and its next delivery is refused at acquire",
                extra={"job_id": ref.job_id, "error": type(exc).__name__, "status": exc.status},
            )
        except Exception as exc:  # noqa: BLE001 - the result is accepted; the sweep requeues the delivery
            log.warning(
                "stagenext ack after result refused; the delivery will be requeued and refused at acquire",
                extra={"job_id": ref.job_id, "error": type(exc).__name__},
            )
        self._forget(self._accepted, token)
        self._maybe_flush_events()

    def _post_result(self, ref: JobRef, outcome: Outcome) -> None:
        path = f"/stages/{ref.job_id}/result"

        def send(session: WorkerSession) -> httpx.Response:
            body, result = self.result_body(ref, outcome, session.worker_id)
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
            return self._post(
                path,
                what="result",
                job_id=ref.job_id,
                content=content,
                headers={"X-API-Key": self.config.api_key, "X-Worker-Session": session.token},
            )

        response, _ = self._session_call(send)
        if response.status_code == 413:
            raise error_for_response(ENGINE, response, job_id=ref.job_id, what="result", cap=RESULT_BODY_CAP)
        if response.status_code not in (200, 202):
            raise error_for_response(ENGINE, response, job_id=ref.job_id, what="result")

    def _ack(self, ref: JobRef, *, requeue: bool, what: str) -> bool:
        """POST /jobs/ack with the pull's affinity cookies. False on 404 (this replica does not hold
        the token; it proves nothing about the delivery), True on success; other errors raise."""
        response = self._post(
            "/jobs/ack",
            what=what,
            job_id=ref.job_id,
            json_body={"token": self._handle(ref, "ackToken"), "requeue": requeue},
            headers=self._cookie_header(ref),
        )
        if response.status_code == 404:
            log.info("stagenext %s: token not held by the gateway replica (404)", what, extra={"job_id": ref.job_id})
            return False
        if response.status_code not in (200, 202, 204):
            raise error_for_response(ENGINE, response, job_id=ref.job_id, what=what)
        return True

    def skip(self, ref: JobRef) -> None:
        """Acknowledge (requeue:false) a delivery refused at lease acquire, without executing it —
        the only delivery the seed lets a worker acknowledge without a result. A 404 (not held: an
        earlier try landed, or the token expired) is not an error; a failed ack raises (retryable:
        a 429, 5xx or dropped connection), and a repeated ack is safe for that 404."""
        self._ack(ref, requeue=False, what="ack (skip)")

    def release(self, job: ActivatedJob, reason: str) -> None:
        """Hand a pulled delivery straight back to the broker (ack requeue:true): for a delivery
        workerless cannot handle now. It does not reset a lease this worker may hold: such a lease
        lapses unrenewed and StageNext's recovery dispatches the stage again."""
        log.info("stagenext releasing delivery", extra={"job_id": job.ref.job_id, "reason": reason})
        self._ack(job.ref, requeue=True, what="requeue")

    def send_logs(self, ref: JobRef, lines: Sequence[Mapping[str, Any]]) -> None:
        """StageNext keeps no task logs: a no-op."""
        return None

    def after_cycle(self, counters: Mapping[str, int]) -> None:
        """Report liveness (POST /workers/heartbeat) with the counters summed since the last report,
        and flush lifecycle events: at most every LIVENESS_INTERVAL_SECONDS (events sooner when a
        full batch is waiting).

        Why not every cycle: a busy poller runs a cycle per batch, and one liveness call per batch
        would add a request to every batch on top of the protocol's four per job. Never raises."""
        with self._lock:
            for key, value in counters.items():
                self._counters[key] = self._counters.get(key, 0) + int(value)
            now = self._clock()
            due = self._liveness_at is None or now - self._liveness_at >= LIVENESS_INTERVAL_SECONDS
            totals = dict(self._counters)
        if not due:
            self._maybe_flush_events()
            return
        try:
            self._flush_events()

            def send(session: WorkerSession) -> httpx.Response:
                return self._post(
                    "/workers/heartbeat",
                    what="worker heartbeat",
                    json_body={"workerId": session.worker_id, "status": "running", "counters": totals},
                    headers={"X-Worker-Session": session.token},
                )

            response, _ = self._session_call(send)
            if response.status_code not in (200, 202, 204):
                raise error_for_response(ENGINE, response, what="worker heartbeat")
        except Exception as exc:  # noqa: BLE001 - liveness reporting must never fail a poller cycle
            log.warning("stagenext worker heartbeat failed", extra={"error": str(exc)})
            return  # the counters stay summed for the next cycle's try
        with self._lock:
            self._liveness_at = now
            for key, value in totals.items():
                left = self._counters.get(key, 0) - value
                if left:
                    self._counters[key] = left
                else:
                    self._counters.pop(key, None)

    def close(self) -> None:
        """Flush events; with a process-local session, announce shutdown. A shared session is the
        whole deployment's worker record and stays up. Never raises."""
        try:
            self._flush_events()
            session = self._session
            if self._state is not None or session is None:
                return
            response = self._post(
                "/workers/shutdown",
                what="worker shutdown",
                json_body={"workerId": session.worker_id, "reason": "close"},
                headers={"X-Worker-Session": session.token},
            )
            if response.status_code not in (200, 202, 204):
                raise error_for_response(ENGINE, response, what="worker shutdown")
        except Exception as exc:  # noqa: BLE001 - closing must not mask the caller's own outcome
            log.warning("stagenext worker shutdown failed", extra={"error": str(exc)})

    # ----------------------------------------------------------------------------------- events

    def _record_event(self, kind: str, ref: JobRef, **data: Any) -> None:
        event = {
            "type": kind,
            "stageId": ref.job_id,
            "executionId": ref.handle.get("executionId"),
            "queue": ref.job_type,
            "at": dt.datetime.fromtimestamp(self._clock(), tz=dt.UTC).isoformat(),
            **data,
        }
        with self._lock:
            if not self._events:
                self._events_since = self._clock()
            # Bounded: lifecycle events are telemetry; a long outage drops the oldest, not memory.
            self._events.append(event)
            del self._events[: max(0, len(self._events) - 10 * self.config.events_max_batch)]

    def _maybe_flush_events(self) -> None:
        with self._lock:
            due = len(self._events) >= self.config.events_max_batch or (
                self._events_since is not None
                and self._clock() - self._events_since >= self.config.events_flush_seconds
            )
        if due:
            try:
                self._flush_events()
            except Exception as exc:  # noqa: BLE001 - telemetry must not fail a job
                log.warning("stagenext events flush failed", extra={"error": str(exc)})

    def _flush_events(self) -> None:
        """POST /workers/events in batches of at most STAGENEXT_EVENTS_MAX_BATCH. A failed batch is
        dropped (logged): lifecycle events feed a dashboard, they are not worth a job's retry."""
        with self._lock:
            pending, self._events, self._events_since = self._events, [], None
        size = self.config.events_max_batch
        for start in range(0, len(pending), size):
            batch = pending[start : start + size]

            def send(session: WorkerSession, batch: list[dict[str, Any]] = batch) -> httpx.Response:
                return self._post(
                    "/workers/events",
                    what="worker events",
                    json_body={"workerId": session.worker_id, "events": batch},
                    headers={"X-Worker-Session": session.token},
                )

            response, _ = self._session_call(send)
            if response.status_code not in (200, 202, 204):
                log.warning("stagenext dropped %d lifecycle events (%d)", len(batch), response.status_code)


def _truncate(text: str, cap: int) -> str:
    data = text.encode()
    if len(data) <= cap:
        return text
    return data[: cap - 3].decode(errors="ignore") + "..."


def from_values(
    values: Mapping[str, str],
    client: httpx.Client,
    *,
    worker_id: str | None = None,
    state: SharedState | None = None,
    clock: Callable[[], float] | None = None,
) -> StageNextEngine:
    """Validate StageNext's connection values and build the adapter.

    ``state``: where the deployment-wide worker session lives (the jobs table in AWS); None keeps a
    process-local session. ``clock``: epoch-seconds clock (tests pass the emulator's).
    """
    return StageNextEngine(StageNextConfig.from_values(values), client, worker_id=worker_id, state=state, clock=clock)
