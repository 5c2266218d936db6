"""StageNext's connection values (seed 001) and the adapter's constants."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workerless.engines.kit import values as kv
from workerless.engines.kit.urls import check_base_url
from workerless.errors import ConfigurationError

__all__ = [
    "CLAIM_SECONDS",
    "DEFAULT_API_URL",
    "DEFAULT_SESSION_TTL",
    "ENGINE",
    "ERROR_MESSAGE_CAP",
    "LEASE_SECONDS",
    "LIVENESS_INTERVAL_SECONDS",
    "PULL_BUDGET_SECONDS",
    "REMEMBERED_DELIVERIES",
    "RESULT_BODY_CAP",
    "RESULT_STRING_CAP",
    "SESSION_KEY_PREFIX",
    "StageNextConfig",
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
SESSION_KEY_PREFIX = "stagenext-session#"
#: Liveness (POST /workers/heartbeat) is reported at most this often per container.
LIVENESS_INTERVAL_SECONDS = 30.0
DEFAULT_SESSION_TTL = 24 * 3600
#: Deliveries remembered per container between a retried call and its retry: results accepted whose
#: ack is still owed, and lease acquires whose answer was lost. Bounded: an entry lives for one
#: report's or one acquire's retries, and an evicted one only costs a duplicate result (discarded by
#: StageNext's fencing) or a lease left to lapse.
REMEMBERED_DELIVERIES = 1024
#: How long one activate keeps pulling (one delivery per POST /jobs/pull) before it returns what it
#: has: a pulled delivery is dispatched without waiting for the rest of the pulls. A slow gateway
#: (every call 0.5-2.5 s late) otherwise held 11 pulled deliveries for 15 s, undispatched, their
#: visibility timeouts running; the poller polls again at once for the capacity left.
PULL_BUDGET_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class StageNextConfig:
    """StageNext connection values, validated.

    Keys: STAGENEXT_API_URL (default http://localhost:8081; https required except on loopback; no
    credentials, query or fragment: the kit's URL rule), STAGENEXT_API_KEY (required),
    STAGENEXT_INSTANCE_ID, STAGENEXT_VISIBILITY_SECONDS (60), STAGENEXT_LEASE_SECONDS (60: the
    execution lease until an acquire or renew answer states it), STAGENEXT_SESSION_REFRESH_SECONDS
    (3600: rotate this long before the session expires, at most half its TTL),
    STAGENEXT_EVENTS_MAX_BATCH (100), STAGENEXT_EVENTS_FLUSH_SECONDS (10).
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
        """Validate; a missing or malformed value raises ConfigurationError naming the key.

        Example:
            >>> StageNextConfig.from_values({"STAGENEXT_API_KEY": "k"}).api_url
            'http://localhost:8081'
        """
        # The API key and session tokens travel in headers: the kit's rule for every engine URL.
        url = check_base_url("STAGENEXT_API_URL", kv.text(values, "STAGENEXT_API_URL") or DEFAULT_API_URL)
        api_key = kv.text(values, "STAGENEXT_API_KEY")
        if not api_key:
            raise ConfigurationError("STAGENEXT_API_KEY is required", key="STAGENEXT_API_KEY")
        return cls(
            api_url=url,
            api_key=api_key,
            instance_id=kv.optional(values, "STAGENEXT_INSTANCE_ID"),
            visibility_seconds=kv.positive(values, "STAGENEXT_VISIBILITY_SECONDS", 60.0),
            lease_seconds=kv.positive(values, "STAGENEXT_LEASE_SECONDS", float(LEASE_SECONDS)),
            session_refresh_seconds=kv.positive(values, "STAGENEXT_SESSION_REFRESH_SECONDS", 3600.0),
            events_max_batch=int(kv.positive(values, "STAGENEXT_EVENTS_MAX_BATCH", 100, integer=True)),
            events_flush_seconds=kv.positive(values, "STAGENEXT_EVENTS_FLUSH_SECONDS", 10.0),
        )
