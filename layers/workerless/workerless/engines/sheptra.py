"""The Sheptra adapter: the worker side of seed 000 behind :class:`~workerless.engines.base.Engine`.

What it does, and why:

- **Configuration** comes from the six-key *Worker environment block* Drive prints (parsed as
  dotenv by :func:`workerless.settings.parse_env_text`). Config mode (``SHEPTRA_API_URL``) is the
  default; discovery mode (``SHEPTRA_DISCOVERY_URL`` + ``SHEPTRA_ENVIRONMENT``) is chosen with
  ``SHEPTRA_MODE=discovery`` — the block itself has no selector key.
- **Credentials**: OAuth2 client credentials minted against ``SHEPTRA_TOKEN_ENDPOINT``, cached in
  the adapter (one adapter lives per Lambda container) and renewed a minute before ``expires_in``
  runs out. A 401 from the engine drops the token, mints again and retries that call once. An empty
  ``SHEPTRA_TOKEN_ENDPOINT`` means authentication is off: no Authorization header at all.
- **Discovery**: the answer's ``baseUrl`` is cached and resolved again only on a 421 or after
  :data:`TRANSPORT_FAILURES_BEFORE_RERESOLVE` consecutive connection failures — never per request,
  and a management-plane outage never stops a worker that already has a ``baseUrl``.
- **Errors**: every non-2xx answer goes through :func:`error_for_response`, every transport failure
  through :func:`error_for_transport`. The adapter never sleeps or loops on 429/503: it raises, and
  the pipeline's single retry policy decides. No secret (client secret, access token) ever appears
  in a log line or an exception message.

Example:
    >>> engine = from_values(parse_env_text(block), httpx.Client(timeout=10))   # doctest: +SKIP
    >>> jobs = engine.activate([Demand("charge-payment", 10)], lease_seconds=60)  # doctest: +SKIP
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, SecretStr

from workerless.engines.base import SharedState, error_for_response, error_for_transport, is_loopback, json_size
from workerless.errors import (
    ConfigurationError,
    EngineError,
    EngineUnavailableError,
    LeaseLostError,
    PayloadTooLargeError,
    ResponseShapeError,
    RetryableEngineError,
)
from workerless.lease import ACTIVATION_LEASE, LeaseModel
from workerless.model import ActivatedJob, Demand, JobRef, Outcome

__all__ = [
    "ENGINE",
    "PAYLOAD_CAP",
    "RENEW_EARLY_SECONDS",
    "TRANSPORT_FAILURES_BEFORE_RERESOLVE",
    "SheptraConfig",
    "SheptraEngine",
    "check_discovered_base_url",
    "from_values",
]

log = logging.getLogger(__name__)

ENGINE = "sheptra"
#: "Every variables-bearing request is capped at 1 MB of names plus JSON values; past it the answer
#: is 413." Checked before sending so a too-large result fails fast with a clear error.
PAYLOAD_CAP = 1_048_576
#: The dev scripts renew a minute early; so do we, so a token never expires in flight.
RENEW_EARLY_SECONDS = 60
#: "Re-resolve ... on persistent connection failure": this many consecutive transport failures
#: against the cached ``baseUrl`` make the next call ask discovery again.
TRANSPORT_FAILURES_BEFORE_RERESOLVE = 3
#: OAuth2 makes ``expires_in`` optional; Sheptra's tokens are one-hour JWTs.
DEFAULT_TOKEN_TTL_SECONDS = 3600

Mode = Literal["config", "discovery"]

_PLACEHOLDER = re.compile(r"<[^>]*>|…")
_METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
_METADATA_NETWORKS = (
    ipaddress.ip_network("169.254.0.0/16"),  # IPv4 link-local: AWS/GCP/Azure IMDS, ECS task metadata
    ipaddress.ip_network("fe80::/10"),  # IPv6 link-local
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS IMDS over IPv6
    ipaddress.ip_network("100.100.100.200/32"),  # Alibaba Cloud metadata
)


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


class SheptraConfig(BaseModel):
    """The Sheptra connection values, validated (see :meth:`from_values`).

    ``token_endpoint`` is None when authentication is off on the deployment. URLs carry no
    trailing slash. ``client_secret`` is a :class:`SecretStr`, so a repr never shows it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "config"
    token_endpoint: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    api_url: str | None = None
    discovery_url: str | None = None
    environment: str | None = None
    tenant_ids: tuple[str, ...] = ()

    @property
    def auth(self) -> bool:
        """Whether tokens are minted (False: authentication is off on the deployment)."""
        return self.token_endpoint is not None

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> SheptraConfig:
        """Validate the environment block; a missing or malformed key raises
        :class:`ConfigurationError` naming it (never echoing a secret).

        Example:
            >>> SheptraConfig.from_values({"SHEPTRA_TOKEN_ENDPOINT": "", "SHEPTRA_API_URL": "http://127.0.0.1:9"}).auth
            False
        """
        mode_text = _value(values, "SHEPTRA_MODE").lower()
        if mode_text not in ("", "config", "discovery"):
            raise ConfigurationError(
                f"SHEPTRA_MODE must be 'config' (the default) or 'discovery', got {mode_text!r}", key="SHEPTRA_MODE"
            )
        mode: Mode = "discovery" if mode_text == "discovery" else "config"

        if "SHEPTRA_TOKEN_ENDPOINT" not in values:
            raise ConfigurationError(
                "SHEPTRA_TOKEN_ENDPOINT is missing: paste the whole worker environment block from Drive "
                "(it is present but empty when authentication is off on the deployment)",
                key="SHEPTRA_TOKEN_ENDPOINT",
            )
        token_endpoint: str | None = None
        client_id: str | None = None
        client_secret: SecretStr | None = None
        endpoint_text = _value(values, "SHEPTRA_TOKEN_ENDPOINT")
        if endpoint_text:
            if _PLACEHOLDER.search(endpoint_text):
                raise ConfigurationError(
                    f"SHEPTRA_TOKEN_ENDPOINT is still Drive's placeholder ({endpoint_text}): the management host did "
                    "not answer the auth discovery when the block was printed; fill in your identity provider's "
                    "token endpoint (https://<your-authkit-domain>/oauth2/token)",
                    key="SHEPTRA_TOKEN_ENDPOINT",
                )
            token_endpoint = _check_url("SHEPTRA_TOKEN_ENDPOINT", endpoint_text)
            client_id = _required(values, "SHEPTRA_CLIENT_ID", "the API client's id from Drive (client_…)")
            secret_text = _value(values, "SHEPTRA_CLIENT_SECRET")
            if not secret_text:
                raise ConfigurationError(
                    "SHEPTRA_CLIENT_SECRET is missing or empty: it is shown once, when the API client is created "
                    "in Drive (create a new client if it was lost)",
                    key="SHEPTRA_CLIENT_SECRET",
                )
            if _PLACEHOLDER.fullmatch(secret_text):
                raise ConfigurationError(
                    "SHEPTRA_CLIENT_SECRET is still a placeholder: paste the secret Drive showed when the API client "
                    "was created",
                    key="SHEPTRA_CLIENT_SECRET",
                )
            client_secret = SecretStr(secret_text)

        api_url = discovery_url = environment = None
        if mode == "config":
            api_url = _check_url(
                "SHEPTRA_API_URL",
                _required(values, "SHEPTRA_API_URL", "the environment host to poll (or set SHEPTRA_MODE=discovery)"),
            )
        else:
            discovery_url = _check_url(
                "SHEPTRA_DISCOVERY_URL",
                _required(values, "SHEPTRA_DISCOVERY_URL", "the management host's /v1/discovery/cell URL"),
            )
            environment = _required(values, "SHEPTRA_ENVIRONMENT", "the cluster id of the environment to poll")

        tenant_ids = tuple(part.strip() for part in _value(values, "SHEPTRA_TENANT_IDS").split(",") if part.strip())
        return cls(
            mode=mode,
            token_endpoint=token_endpoint,
            client_id=client_id,
            client_secret=client_secret,
            api_url=api_url,
            discovery_url=discovery_url,
            environment=environment,
            tenant_ids=tenant_ids,
        )


def _value(values: Mapping[str, str], key: str) -> str:
    raw = values.get(key)
    return raw.strip() if isinstance(raw, str) else ""


def _required(values: Mapping[str, str], key: str, what: str) -> str:
    text = _value(values, key)
    if not text:
        state = "empty" if key in values else "missing"
        raise ConfigurationError(f"{key} is {state}: it must hold {what}", key=key)
    if _PLACEHOLDER.search(text):
        raise ConfigurationError(f"{key} is still a placeholder ({text}): fill in {what}", key=key)
    return text


def _check_url(key: str, text: str) -> str:
    """An engine URL: https, or plain http to loopback only (tokens and secrets travel on it)."""
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise ConfigurationError(f"{key} is not a valid URL: {text!r}", key=key) from None
    if parts.scheme not in ("https", "http") or not host:
        raise ConfigurationError(f"{key} must be an https:// URL with a host, got {text!r}", key=key)
    if parts.scheme == "http" and not is_loopback(host):
        raise ConfigurationError(
            f"{key} must use https (plain http is allowed only for loopback: 127.0.0.1, localhost, ::1), got {text!r}",
            key=key,
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(f"{key} must not carry credentials in the URL", key=key)
    if parts.query or parts.fragment:
        raise ConfigurationError(f"{key} must not have a query or fragment, got {text!r}", key=key)
    return text.rstrip("/")


def check_discovered_base_url(value: object) -> str:
    """Validate a ``baseUrl`` from a discovery answer before any token is sent to it.

    The bearer token goes to whatever address discovery names, so the answer is checked like a
    user-supplied URL (https unless loopback) and refused outright when it points at a link-local
    or cloud metadata address (SSRF: a token or the request itself must never reach the instance
    metadata service). Host names are not resolved here; literal addresses, numeric host forms and
    the well-known metadata names are.

    Raises :class:`ResponseShapeError` (``field="baseUrl"``) saying why.
    """

    def refuse(why: str) -> ResponseShapeError:
        return ResponseShapeError(
            f"discovery answered a baseUrl that is refused: {why}", engine=ENGINE, field="baseUrl"
        )

    if not isinstance(value, str) or not value.strip():
        raise refuse("it is missing or not a string")
    text = value.strip()
    try:
        parts = urlsplit(text)
        host = (parts.hostname or "").lower()
        _ = parts.port
    except ValueError:
        raise refuse(f"{text!r} is not a valid URL") from None
    if not host:
        raise refuse(f"{text!r} has no host")
    if parts.username is not None or parts.password is not None:
        raise refuse("it carries credentials")
    if parts.scheme not in ("https", "http") or (parts.scheme == "http" and not is_loopback(host)):
        raise refuse(f"{text!r} is not https (plain http is accepted only for loopback)")
    if host.rstrip(".") in _METADATA_HOSTS:
        raise refuse(f"{host!r} is a cloud metadata host")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
        # "2852039166", "0xa9fea9fe", "169.254.43518": numeric forms some resolvers turn into an
        # address; a real environment host is a DNS name or a dotted address.
        if re.fullmatch(r"[0-9.]+|0x[0-9a-f.x]+", host):
            raise refuse(f"{host!r} is a numeric host that is not a plain address") from None
    if address is not None:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in net for net in _METADATA_NETWORKS) or address.is_link_local:
            raise refuse(f"{host} is a link-local / metadata address")
        if address.is_unspecified or address.is_multicast:
            raise refuse(f"{host} is not a unicast address")
    return text.rstrip("/")


# --------------------------------------------------------------------------------------------
# The adapter
# --------------------------------------------------------------------------------------------


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
    #: Leased at activation (:mod:`workerless.lease`).
    lease: ClassVar[LeaseModel] = ACTIVATION_LEASE

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
        self._token: str | None = None
        self._spent_token: str | None = None  # the last token dropped, still redacted from errors
        self._renew_at = 0.0
        self._base_url: str | None = config.api_url
        # Discovery mode: set when the cached baseUrl is suspect (persistent transport failures);
        # the next call asks discovery again but keeps the old baseUrl if discovery is down.
        self._reresolve = False
        self._transport_failures = 0

    def __repr__(self) -> str:
        return f"SheptraEngine(mode={self.config.mode!r}, base_url={self._base_url!r}, auth={self.config.auth})"

    # ---- credentials ----------------------------------------------------------------------

    def _auth_headers(self) -> dict[str, str]:
        if not self.config.auth:
            return {}
        return {"Authorization": f"Bearer {self._access_token()}"}

    def _access_token(self) -> str:
        with self._lock:
            if self._token is not None and self._clock() < self._renew_at:
                return self._token
            token, expires_in = self._mint()
            # Renew a minute early so a token never expires between our check and the engine's;
            # a (non-Sheptra) very short TTL renews at half-life instead of minting on every call.
            self._token = token
            self._renew_at = self._clock() + max(expires_in - RENEW_EARLY_SECONDS, expires_in / 2)
            return token

    def _drop_token(self) -> None:
        with self._lock:
            self._spent_token = self._token or self._spent_token
            self._token = None
            self._renew_at = 0.0

    def _mint(self) -> tuple[str, float]:
        config = self.config
        endpoint = _configured(config.token_endpoint, "SHEPTRA_TOKEN_ENDPOINT")
        form = {
            "grant_type": "client_credentials",
            "client_id": _configured(config.client_id, "SHEPTRA_CLIENT_ID"),
            "client_secret": _configured(self._secret(), "SHEPTRA_CLIENT_SECRET"),
        }
        try:
            response = self._client.post(endpoint, data=form, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise self._redact(error_for_transport(ENGINE, exc, what="token mint")) from exc
        status = response.status_code
        oauth_error = _oauth_error(response)
        if status in (401, 403) or (status == 400 and oauth_error in ("invalid_client", "unauthorized_client")):
            raise ConfigurationError(
                f"the token endpoint refused the client credentials ({status}"
                f"{' ' + oauth_error if oauth_error else ''}): check SHEPTRA_CLIENT_ID and SHEPTRA_CLIENT_SECRET "
                "(a client revoked in Drive is refused at once)",
                key="SHEPTRA_CLIENT_ID",
            )
        if status in (404, 405):
            raise ConfigurationError(
                f"SHEPTRA_TOKEN_ENDPOINT answered {status}: it is not a token endpoint ({endpoint})",
                key="SHEPTRA_TOKEN_ENDPOINT",
            )
        if not response.is_success:
            raise self._redact(error_for_response(ENGINE, response, what="token mint"))
        body = _json_object(response, what="token mint")
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise ResponseShapeError("token mint answered without an access_token", engine=ENGINE, field="access_token")
        token_type = body.get("token_type")
        if token_type is not None and (not isinstance(token_type, str) or token_type.lower() != "bearer"):
            raise ResponseShapeError(
                f"token mint answered token_type {token_type!r}, expected Bearer", engine=ENGINE, field="token_type"
            )
        expires_in = body.get("expires_in", DEFAULT_TOKEN_TTL_SECONDS)
        if isinstance(expires_in, str) and expires_in.isdigit():
            expires_in = int(expires_in)  # some identity providers send it as a string
        if isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or expires_in <= 0:
            raise ResponseShapeError(
                "token mint answered an expires_in that is not a positive number", engine=ENGINE, field="expires_in"
            )
        return token, float(expires_in)

    def _redact(self, exc: EngineError) -> EngineError:
        """Belt and braces: strip the secret and the token from an error an engine body fed."""
        secrets = [s for s in (self._token, self._spent_token, self._secret()) if s]
        if not secrets:
            return exc
        exc.args = (_scrub(str(exc.args[0]) if exc.args else "", secrets), *exc.args[1:])
        exc.problem = {str(k): _scrub(v, secrets) for k, v in exc.problem.items()}
        return exc

    def _secret(self) -> str | None:
        secret = self.config.client_secret
        return secret.get_secret_value() if secret is not None else None

    # ---- finding the engine ---------------------------------------------------------------

    def _engine_base(self) -> str:
        if self.config.mode == "config":
            return _configured(self.config.api_url, "SHEPTRA_API_URL")
        with self._lock:
            if self._base_url is not None and not self._reresolve:
                return self._base_url
            try:
                self._base_url = self._resolve()
            except RetryableEngineError:
                if self._base_url is None:
                    raise
                # A management-plane outage must never stop a worker that is already configured:
                # keep polling the baseUrl we have and ask discovery again only after the next
                # run of consecutive failures, never on every call.
                log.warning("sheptra discovery failed; keeping the cached baseUrl %s", self._base_url)
            self._reresolve = False
            self._transport_failures = 0
            return self._base_url

    def _resolve(self) -> str:
        """GET {SHEPTRA_DISCOVERY_URL}?cluster={SHEPTRA_ENVIRONMENT} with the engine's bearer token."""
        config = self.config
        discovery_url = _configured(config.discovery_url, "SHEPTRA_DISCOVERY_URL")
        environment = _configured(config.environment, "SHEPTRA_ENVIRONMENT")
        response = self._discovery_get(discovery_url, environment)
        if response.status_code == 401 and config.auth:
            # Same token as the engine's: one that expired early is minted again, once.
            self._drop_token()
            response = self._discovery_get(discovery_url, environment)
        if response.status_code == 404:
            raise ConfigurationError(
                f"discovery answered 404 for cluster {environment!r}: the cluster id is unknown or the "
                "organization has no environments; check SHEPTRA_ENVIRONMENT",
                key="SHEPTRA_ENVIRONMENT",
            )
        if not response.is_success:
            raise self._redact(error_for_response(ENGINE, response, what="discovery"))
        body = _json_object(response, what="discovery")
        wrapped = body.get("environment")
        if "baseUrl" not in body and isinstance(wrapped, dict):
            body = wrapped  # tolerate {"environment": {...}} around the documented object
        base = check_discovered_base_url(body.get("baseUrl"))
        log.info("sheptra discovery resolved cluster %s to %s", environment, base)
        return base

    def _discovery_get(self, discovery_url: str, environment: str) -> httpx.Response:
        try:
            return self._client.get(
                discovery_url,
                params={"cluster": environment},
                headers={"Accept": "application/json", **self._auth_headers()},
            )
        except httpx.HTTPError as exc:
            raise self._redact(error_for_transport(ENGINE, exc, what="discovery")) from exc

    # ---- the one request path -------------------------------------------------------------

    def _call(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        what: str,
        job_id: str | None = None,
    ) -> httpx.Response:
        """POST ``body`` to the engine; a 2xx response, or the translated error.

        At most three sends: the first, one after re-minting on a 401, one after re-resolving on
        a 421 (discovery mode). Nothing here sleeps: 429/503 raise with ``retry_after``.
        """
        reminted = resolved = False
        last: EngineError | None = None
        for _ in range(3):
            base = self._engine_base()
            headers = {"Accept": "application/json", **self._auth_headers()}
            try:
                response = self._client.post(base + path, json=body, headers=headers)
            except httpx.HTTPError as exc:
                if isinstance(exc, httpx.TransportError):
                    self._note_transport_failure()
                raise self._redact(error_for_transport(ENGINE, exc, job_id=job_id, what=what)) from exc
            self._transport_failures = 0
            status = response.status_code
            if status == 401:
                if not self.config.auth:
                    raise ConfigurationError(
                        f"{what} answered 401 but SHEPTRA_TOKEN_ENDPOINT is empty (authentication off): this "
                        "deployment requires a token; paste the block Drive prints for it",
                        key="SHEPTRA_TOKEN_ENDPOINT",
                    )
                last = self._redact(error_for_response(ENGINE, response, job_id=job_id, what=what))
                if reminted:
                    raise last
                # The token expired early or the signing key rotated: mint a new one, retry once.
                reminted = True
                self._drop_token()
                continue
            if status == 421:
                if self.config.mode == "config":
                    raise ConfigurationError(
                        f"{what} answered 421 Misdirected Request: SHEPTRA_API_URL ({self.config.api_url}) does not "
                        "serve this environment (it may have moved cells); fix SHEPTRA_API_URL or use "
                        "SHEPTRA_MODE=discovery",
                        key="SHEPTRA_API_URL",
                    )
                last = self._redact(error_for_response(ENGINE, response, job_id=job_id, what=what))
                if resolved:
                    raise last
                # The environment moved to another cell: the cached baseUrl is wrong, resolve again.
                resolved = True
                log.info("sheptra %s answered 421 at %s; resolving the environment again", what, base)
                with self._lock:
                    self._base_url = None
                continue
            if response.is_success:
                return response
            error = error_for_response(ENGINE, response, job_id=job_id, what=what, cap=PAYLOAD_CAP)
            if isinstance(error, LeaseLostError):
                error.args = (
                    f"{error.args[0]}; the lease is gone — someone else finished this job, or it is back in the "
                    "queue: stop working on it",
                )
            raise self._redact(error)
        # Unreachable: the third pass can neither re-mint nor re-resolve again, so it raised.
        raise last if last is not None else EngineUnavailableError(f"{what} was not sent", engine=ENGINE, job_id=job_id)

    def _note_transport_failure(self) -> None:
        if self.config.mode != "discovery":
            return
        with self._lock:
            self._transport_failures += 1
            if self._transport_failures >= TRANSPORT_FAILURES_BEFORE_RERESOLVE:
                log.warning(
                    "sheptra: %d consecutive connection failures at %s; resolving again on the next call",
                    self._transport_failures,
                    self._base_url,
                )
                self._reresolve = True

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
        response = self._call(self.activate_path, body, what="activate")
        envelope = _json_object(response, what="activate", field="jobs")
        raw_jobs = envelope.get("jobs")
        if not isinstance(raw_jobs, list):
            raise ResponseShapeError("activate answered without a 'jobs' list", engine=ENGINE, field="jobs")

        now = self._clock()
        taken: dict[str, int] = {}
        jobs: list[ActivatedJob] = []
        for raw in raw_jobs:
            try:
                job = self._parse_job(raw, now, label)
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

    def _parse_job(self, raw: object, now: float, label: str | None = None) -> ActivatedJob:
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
        lease_expires_at = _parse_time(raw.get("lockExpiresAt"))
        if lease_expires_at is None:
            raise _Malformed("lockExpiresAt", "is missing or not an RFC 3339 timestamp")
        variables = raw.get("variables")
        if not isinstance(variables, dict):
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
        )

    def _hand_back_malformed(self, raw: object, bad: _Malformed, label: str | None = None) -> None:
        job_id = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(job_id, str) or not job_id:
            # Nothing to address it by: the engine's lease returns it to the queue on its own.
            log.error("sheptra activate answered a malformed job without a usable id (%s); left to its lease", bad)
            return
        retries = raw.get("retries") if isinstance(raw, dict) else None
        usable_retries = (
            retries if isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0 else None
        )
        job_type = raw.get("type") if isinstance(raw, dict) else None
        ref = JobRef(
            ENGINE, job_id, job_type if isinstance(job_type, str) and job_type else "?", handle=_label_handle(label)
        )
        log.error("sheptra activate answered malformed job %s (%s); handing it back", job_id, bad)
        self._hand_back(ref, usable_retries, f"workerless could not read this job: {bad}")

    def _hand_back(self, ref: JobRef, retries: int | None, message: str) -> None:
        """Fail with retries unchanged and no backoff, so the job is not stuck for a whole lease.
        Best effort: if this fails too, the engine's lease hands the job out again later."""
        log.warning("sheptra handing back job %s: %s", ref.job_id, message)
        try:
            self._fail(ref, message, retries=retries, backoff_seconds=0)
        except (EngineError, ConfigurationError) as exc:
            log.warning("sheptra could not hand back job %s (%s); it returns when its lease lapses", ref.job_id, exc)

    def begin(self, job: ActivatedJob) -> bool:
        """Sheptra's lease started at activation: nothing to acquire."""
        return True

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        """Re-anchor the lease to now + ``lease_seconds``; the granted expiry (epoch seconds)."""
        response = self._call(
            _job_path(self.extend_path, ref.job_id),
            self._labelled({"leaseSeconds": lease_seconds}, ref),
            what="extend-lease",
            job_id=ref.job_id,
        )
        body = _json_object(response, what="extend-lease", field="lockExpiresAt")
        expires = _parse_time(body.get("lockExpiresAt"))
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
            variables = outcome.variables or {}
            self._check_cap(ref, variables, "complete")
            self._call(
                _job_path(self.complete_path, ref.job_id),
                self._labelled({"variables": variables}, ref),
                what="complete",
                job_id=ref.job_id,
            )
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

    def _labelled(self, body: dict[str, Any], ref: JobRef) -> dict[str, Any]:
        # The engine identifies the holder as {sub}/{workerId} when activation carried the label,
        # so every call on a job carries the activation's label or the engine sees another worker (409).
        label = ref.handle.get("workerId") if isinstance(ref.handle.get("workerId"), str) else self._worker_id
        if label:
            body["workerId"] = label
        return body

    def _check_cap(self, ref: JobRef, variables: Mapping[str, Any], what: str) -> None:
        size = json_size(variables)
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

    def skip(self, ref: JobRef) -> None:
        """Nothing to acknowledge on Sheptra."""

    def send_logs(self, ref: JobRef, lines: Sequence[Mapping[str, Any]]) -> None:
        """Sheptra keeps no task logs."""

    def after_cycle(self, counters: Mapping[str, int]) -> None:
        """Sheptra has no worker liveness report."""

    def close(self) -> None:
        """Nothing is held engine-side; the injected client belongs to the caller."""


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


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _job_path(template: str, job_id: str) -> str:
    # Job ids come from the engine's answer: quote them so an odd id can never change the path.
    return template.replace("{id}", quote(job_id, safe=""))


def _configured(value: str | None, key: str) -> str:
    if value is None:  # the config's mode/auth validation makes this unreachable
        raise ConfigurationError(f"{key} is not configured", key=key)
    return value


def _scrub(value: Any, secrets: Sequence[str]) -> Any:
    """``value`` (a parsed JSON value) with every occurrence of each secret replaced by ``***``."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "***")
        return value
    if isinstance(value, dict):
        return {_scrub(str(k), secrets): _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value


def _json_object(response: httpx.Response, *, what: str, field: str = "body") -> dict[str, Any]:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        raise ResponseShapeError(
            f"{what} answered a body that is not JSON (expected an object with {field!r})", engine=ENGINE, field=field
        ) from None
    if not isinstance(body, dict):
        raise ResponseShapeError(
            f"{what} answered JSON that is not an object (expected an object with {field!r})",
            engine=ENGINE,
            field=field,
        )
    return body


def _oauth_error(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, str) and re.fullmatch(r"[a-z_]{1,40}", error) else ""


def _parse_time(value: object) -> float | None:
    """An RFC 3339 timestamp as epoch seconds (a zone-less one is taken as UTC); None if invalid."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()
