"""StageNext's worker session, shared by every container of a deployment.

A deployment holds ONE worker session: one instanceId (STAGENEXT_INSTANCE_ID, else the worker id,
else ``workerless``), one worker record, one token, kept in :class:`SharedState` under
``stagenext-session#{instanceId}``. Leases belong to the worker record, so a lease acquired by a
handler container is renewed by the heartbeat container with the same record. Rotation is a
rebootstrap of the same instanceId: StageNext keeps the workerId (leases in flight stay ours) and
replaces the token (every container holding the old one gets 401 from then on). So rotation is done
by exactly one container — whoever first sees the session due takes a short claim with
compare-and-set, bootstraps, and writes the new token — and every other container answers a 401 by
re-reading the shared record and retrying once (the kit's re-authenticate-once loop). Without
``state`` the session is process-local and the instance id gets a random suffix (two processes never
share an instance id).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from workerless._core.retry import SESSION_WAIT
from workerless.engines.base import SharedState
from workerless.engines.kit.answers import json_object
from workerless.engines.kit.resend import Recovery, send_recovering
from workerless.engines.kit.times import timestamp_or_none
from workerless.engines.kit.tokens import renew_at
from workerless.engines.kit.translate import Translator
from workerless.engines.stagenext.config import (
    CLAIM_SECONDS,
    DEFAULT_SESSION_TTL,
    ENGINE,
    SESSION_KEY_PREFIX,
    StageNextConfig,
)
from workerless.errors import AuthExpiredError, ConfigurationError, ResponseShapeError

__all__ = ["Sessions", "WorkerSession"]

logger = logging.getLogger("workerless.engines.stagenext")

#: The engine's POST: (path, what, json body, headers) → the answer (transport errors translated).
Post = Callable[..., httpx.Response]


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


class Sessions:
    """The session this container sends with: cached, read from the shared record, or bootstrapped
    (and rotated by at most one container at a time)."""

    def __init__(
        self,
        config: StageNextConfig,
        post: Post,
        translate: Translator,
        *,
        instance_id: str,
        state: SharedState | None,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        lock: threading.RLock,
    ) -> None:
        self._config = config
        self._post = post
        self._translate = translate
        self.instance_id = instance_id
        self.state_key = SESSION_KEY_PREFIX + instance_id
        self._state = state
        self._clock = clock
        self._sleep = sleep
        self._lock = lock
        self._owner = uuid.uuid4().hex
        self.session: WorkerSession | None = None

    def bootstrap(self) -> WorkerSession:
        """POST /workers/bootstrap with our instanceId: same worker record, new token."""
        started = self._clock()
        response = self._post(
            "/workers/bootstrap",
            what="worker bootstrap",
            json_body={"instanceId": self.instance_id, "name": "workerless", "capabilities": ["http-pull"]},
            headers={"X-API-Key": self._config.api_key},
        )
        if response.status_code in (401, 403):
            raise ConfigurationError(
                f"StageNext refused STAGENEXT_API_KEY at worker bootstrap ({response.status_code})",
                key="STAGENEXT_API_KEY",
            )
        if response.status_code not in (200, 201):
            raise self._translate.response(response, what="worker bootstrap")
        data = json_object(response, engine=ENGINE, what="worker bootstrap", garbled_retryable=True)
        worker_id, token = data.get("workerId"), data.get("sessionToken")
        if not isinstance(worker_id, str) or not worker_id:
            raise ResponseShapeError("worker bootstrap answered without workerId", engine=ENGINE, field="workerId")
        if not isinstance(token, str) or not token:
            raise ResponseShapeError(
                "worker bootstrap answered without sessionToken", engine=ENGINE, field="sessionToken"
            )
        ttl = _session_ttl(data, started)
        session = WorkerSession(
            worker_id=worker_id,
            token=token,
            instance_id=self.instance_id,
            issued_at=started,
            expires_at=started + ttl,
            # Rotate well before expiry: refresh_seconds early, but never later than half-way.
            refresh_at=renew_at(started, ttl, self._config.session_refresh_seconds),
        )
        logger.info("stagenext worker session bootstrapped", extra={"worker_id": worker_id, "ttl_seconds": ttl})
        return session

    def current(self) -> WorkerSession:
        """The session to send with (renewed when due)."""
        with self._lock:
            session = self.session
            if session is not None and self._clock() < session.refresh_at:
                return session
            return self.refresh(failed_token=None)

    def refresh(self, *, failed_token: str | None) -> WorkerSession:
        """A usable session: the cached one, the shared record, or a fresh bootstrap.

        ``failed_token``: the token a call was just refused with (401); it is never returned again.
        """
        with self._lock:
            if self._state is None:
                session = self.session
                if session is None or failed_token is None or session.token == failed_token:
                    session = self.bootstrap()
                    self.session = session
                return session
            session = self._shared(self._state, failed_token)
            self.session = session
            return session

    def call(self, send: Callable[[WorkerSession], httpx.Response]) -> tuple[httpx.Response, WorkerSession]:
        """Send with the current session; on 401 get a fresh one (shared record or bootstrap) and
        send once more. The second answer is returned whatever it is."""
        used = [self.current()]

        def recover(response: httpx.Response) -> Recovery | None:
            if response.status_code != 401:
                return None
            return "reauthenticate", lambda: used.append(self.refresh(failed_token=used[-1].token))

        response = send_recovering(lambda: send(used[-1]), recover)
        return response, used[-1]

    def _shared(self, state: SharedState, failed_token: str | None) -> WorkerSession:
        for _ in SESSION_WAIT.tries(sleep=self._sleep):
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
            fresh = self.bootstrap()
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
        logger.warning("stagenext session rotation claim was taken over; re-reading the shared session")
        return None

    def _release_claim(self, state: SharedState, nonce: str, base: dict[str, Any]) -> None:
        current = state.get(self.state_key)
        claim = current.get("claim") if current else None
        if current is not None and isinstance(claim, Mapping) and claim.get("nonce") == nonce:
            state.put(self.state_key, {**base, "claim": None}, expected_version=current.get("version"))


def _session_ttl(data: Mapping[str, Any], started: float) -> float:
    # Relative TTL first (immune to clock skew), then the absolute expiry (the kit's timestamp
    # rule), then the seed's default.
    relative = data.get("expiresInSeconds")
    if isinstance(relative, int | float) and not isinstance(relative, bool) and relative > 0:
        return float(relative)
    when = timestamp_or_none(data.get("expiresAt")) if isinstance(data.get("expiresAt"), str) else None
    if when is not None and when > started:
        return when - started
    return float(DEFAULT_SESSION_TTL)
