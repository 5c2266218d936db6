"""Settings, validated once at cold start from the function's environment.

Nothing else in workerless reads ``os.environ``: everything comes from :func:`get_settings` (the
deployment's shape: table, queues, routes, timings) and :func:`engine_overrides` (engine keys set in
the environment). A leaf: no I/O beyond the environment given, nothing cached; the wiring
(:class:`workerless.wiring.Wiring`) keeps the settings it read and loads the engine's connection
values (:func:`workerless.aws.secrets.load_engine_values`).

Example (what :func:`get_settings` does with ``os.environ``, on a mapping of its own):

    >>> Settings.from_env({"WORKERLESS_TABLE": "jobs"}).table_name
    'jobs'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from workerless._core.claimcheck import DEFAULT_MEMORY_MB, answer_budget, memory_needed, payload_limit
from workerless._core.model import RECORD_TYPE_FORBIDDEN
from workerless.engines import ENGINE_NAMES
from workerless.engines import ENGINES as ENGINE_REGISTRY
from workerless.errors import ConfigurationError

#: The engine names as a type (pydantic validates against it); the same names as the registry's
#: (workerless.engines.ENGINES, a unit test keeps the two equal).
EngineName = Literal["sheptra", "nodeflow", "stagenext"]
ENGINES: tuple[str, ...] = ENGINE_NAMES

#: Which keys reveal which engine, when WORKERLESS_ENGINE is absent.
ENGINE_KEY_PREFIXES: dict[str, tuple[str, ...]] = {name: spec.key_prefixes for name, spec in ENGINE_REGISTRY.items()}


class Route(BaseModel):
    """One job type the deployment handles: its SQS queue and how many may be in flight."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: str = Field(min_length=1)
    queue_url: str = Field(alias="queue", min_length=1)
    max_in_flight: int = Field(default=10, alias="max", ge=1, le=10_000)
    #: Engine-side queue where it differs from the type (node-flow ``charge:eu-west``). "" is none
    #: (the template's default where Mappings.Routes names no EngineQueue).
    engine_queue: str | None = Field(default=None, alias="engineQueue")
    #: The poller shard that polls this route ("" the main one; :mod:`workerless._poller.shards`). Each
    #: shard has its own tick chain and poller lock, so a deployment's dispatch rate grows with them.
    shard: str = Field(default="", pattern=r"^[A-Za-z0-9_-]{0,32}$")

    @field_validator("engine_queue", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("type")
    @classmethod
    def _keyable_type(cls, value: str) -> str:
        # Its records are keyed job#<type>#..., and IAM holds its handler to that prefix.
        bad = sorted({c for c in value if c in RECORD_TYPE_FORBIDDEN})
        if bad:
            raise ValueError(
                f"job type {value!r} holds {' '.join(bad)}: a type may not hold {' '.join(RECORD_TYPE_FORBIDDEN)} "
                "(its job records are keyed job#<type>#..., and IAM limits each handler to that prefix)"
            )
        return value


#: A failing handler's backoff and the largest payload, when nothing (handler, settings) says otherwise.
DEFAULT_FAIL_BACKOFF_SECONDS = 30
DEFAULT_MAX_PAYLOAD_BYTES = payload_limit(DEFAULT_MEMORY_MB)

#: The variables outside WORKERLESS_* that Settings reads: Powertools' and Lambda's log levels.
_LOG_LEVEL_VARIABLES = frozenset({"POWERTOOLS_LOG_LEVEL", "AWS_LAMBDA_LOG_LEVEL"})
#: Lambda's own variables read here: the function's memory (the payload limit follows it).
_LAMBDA_VARIABLES = frozenset({"AWS_LAMBDA_FUNCTION_MEMORY_SIZE"})


class Settings(BaseModel):
    """The deployment's shape. Each field maps to one ``WORKERLESS_*`` environment variable (and
    the two log levels to ``POWERTOOLS_LOG_LEVEL`` and ``AWS_LAMBDA_LOG_LEVEL``)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    engine: EngineName | None = Field(default=None, alias="WORKERLESS_ENGINE")
    table_name: str = Field(default="workerless-jobs", alias="WORKERLESS_TABLE", min_length=3)
    #: The routes written out (tests, benchmarks, local fixtures): when set, they are the routes and
    #: WORKERLESS_ROUTES_PATH is not read (docs/assumptions.md). The template never sets it.
    routes: tuple[Route, ...] = Field(default=(), alias="WORKERLESS_ROUTES")
    #: The Parameter Store path holding one parameter per route (the template's route loop makes
    #: them): the poller reads it at its cold start, then every WORKERLESS_ROUTES_REFRESH_SECONDS
    #: (:meth:`workerless.wiring.Wiring.routed_settings`).
    routes_path: str | None = Field(default=None, alias="WORKERLESS_ROUTES_PATH", pattern=r"^/[A-Za-z0-9_.\-/]+$")
    #: How long a poller container polls the routes it read before it reads them again (a stack
    #: update changes a route's parameter, not the poller's configuration); 0: only at cold start.
    routes_refresh_seconds: float = Field(default=300.0, alias="WORKERLESS_ROUTES_REFRESH_SECONDS", ge=0, le=86_400)
    heartbeat_queue_url: str | None = Field(default=None, alias="WORKERLESS_HEARTBEAT_QUEUE_URL")
    ticker_queue_url: str | None = Field(default=None, alias="WORKERLESS_TICKER_QUEUE_URL")
    #: The job dead-letter queue the dead-letter function drains on its schedule (template.yaml's
    #: JobDeadLetterQueue).
    dead_letter_queue_url: str | None = Field(default=None, alias="WORKERLESS_DEAD_LETTER_QUEUE_URL")
    #: Lease asked of the engine at activation and on every extension.
    lease_seconds: int = Field(default=60, alias="WORKERLESS_LEASE_SECONDS", ge=5, le=3600)
    #: The heartbeat stops extending a job held longer than this (a stuck handler must not hold
    #: a job forever); the engine's own lease lapse then hands it to the next activation.
    max_hold_seconds: int = Field(default=3600, alias="WORKERLESS_MAX_HOLD_SECONDS", ge=10)
    #: How many of a heartbeat ticket's leases are extended at once (engine calls side by side): a
    #: round's renewals take about one answer's time per this many jobs instead of one per job.
    #: Lower it for an engine that rate-limits a worker's concurrent calls.
    extend_concurrency: int = Field(default=8, alias="WORKERLESS_EXTEND_CONCURRENCY", ge=1, le=64)
    #: Every engine call's timeout: shorter than any Lambda timeout in the template.
    http_timeout_seconds: float = Field(default=10.0, alias="WORKERLESS_HTTP_TIMEOUT_SECONDS", gt=0, le=60)
    #: How long one poller invocation keeps polling while work keeps arriving.
    poll_budget_seconds: float = Field(default=20.0, alias="WORKERLESS_POLL_BUDGET_SECONDS", ge=0, le=600)
    #: How long one take (or renewal) of the poller lock holds it: a poller that dies without
    #: releasing it blocks polling for at most this long (docs/guarantees.md, MaxInFlight).
    poller_lock_seconds: float = Field(default=30.0, alias="WORKERLESS_POLLER_LOCK_SECONDS", ge=2, le=900)
    #: How long after sending a job the poller counts it itself, on top of SQS's approximate count
    #: (AWS: it may take a minute to settle). The exact count from the job records usually decides
    #: (docs/guarantees.md, MaxInFlight); this bounds a route when they cannot be read.
    sqs_lag_seconds: float = Field(default=60.0, alias="WORKERLESS_SQS_LAG_SECONDS", ge=0, le=900)
    #: Seconds between ticks of the self-rescheduling poller chain (0: schedule only).
    tick_seconds: int = Field(default=0, alias="WORKERLESS_TICK_SECONDS", ge=0, le=900)
    record_ttl_seconds: int = Field(default=7 * 24 * 3600, alias="WORKERLESS_RECORD_TTL_SECONDS", ge=60)
    #: The claim check's S3 bucket (workerless._core.claimcheck): job messages and stored outcomes past
    #: their queue's or table's limit go there. None: nothing is offloaded (such jobs fail, naming
    #: the limit). The template's PayloadBucket; its lifecycle expires objects after the record TTL.
    payload_bucket: str | None = Field(default=None, alias="WORKERLESS_PAYLOAD_BUCKET")
    #: This function's memory (MB), as Lambda sets it; None outside Lambda (then the template's
    #: default, claimcheck.DEFAULT_MEMORY_MB, is assumed).
    function_memory_mb: int | None = Field(default=None, alias="AWS_LAMBDA_FUNCTION_MEMORY_SIZE", ge=128, le=10240)
    #: The largest job input or handler result workerless carries (through the claim check): a
    #: function holds it in memory, several times over while it is parsed. Default: what the
    #: function's memory holds (claimcheck.payload_limit: 10 MiB at 256 MB); set higher than that,
    #: the function refuses to start (raise its MemorySize with it: one decision).
    max_payload_bytes: int = Field(default=0, alias="WORKERLESS_MAX_PAYLOAD_BYTES", ge=1024 * 1024, le=1024**3)
    #: Backoff given to the engine when a handler raises an ordinary exception.
    fail_backoff_seconds: int = Field(
        default=DEFAULT_FAIL_BACKOFF_SECONDS, alias="WORKERLESS_FAIL_BACKOFF_SECONDS", ge=0, le=86_400
    )
    secret_arn: str | None = Field(default=None, alias="WORKERLESS_SECRET_ARN")
    #: A warm container reads the engine secret again this long after it last did, and builds its
    #: engine adapter anew when the values changed (a rotated secret). 0: every invocation.
    secret_max_age_seconds: float = Field(default=300.0, alias="WORKERLESS_SECRET_MAX_AGE_SECONDS", ge=0, le=86_400)
    env_file: str | None = Field(default=None, alias="WORKERLESS_ENV_FILE")
    worker_id: str | None = Field(default=None, alias="WORKERLESS_WORKER_ID")
    #: Trace handlers with X-Ray through Powertools Tracer (the OpenTelemetry span is always made).
    xray_tracing: bool = Field(default=False, alias="WORKERLESS_XRAY_TRACING")
    #: AWS endpoint override (local mode, tests); None in Lambda.
    aws_endpoint_url: str | None = Field(default=None, alias="WORKERLESS_AWS_ENDPOINT_URL")
    #: The two log levels Powertools reads (the template's LogLevel; Lambda's ApplicationLogLevel,
    #: which Powertools lets win): :func:`workerless.observability.apply_log_level`. Not validated
    #: here: Powertools refuses a level it does not know when it builds the logger.
    log_level: str | None = Field(default=None, alias="POWERTOOLS_LOG_LEVEL")
    lambda_log_level: str | None = Field(default=None, alias="AWS_LAMBDA_LOG_LEVEL")

    @field_validator("routes", mode="before")
    @classmethod
    def _parse_routes(cls, value: object) -> object:
        if isinstance(value, str):
            if not value.strip():
                return ()
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not valid JSON: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _lock_outlasts_a_cycle(self) -> Settings:
        # A poll cycle starts with at least half the lock ahead of it, and its engine call alone can
        # take the HTTP timeout: a shorter lock could expire under a live poller.
        if self.poller_lock_seconds < 2 * self.http_timeout_seconds:
            raise ValueError(
                f"WORKERLESS_POLLER_LOCK_SECONDS ({self.poller_lock_seconds:g}) must be at least twice "
                f"WORKERLESS_HTTP_TIMEOUT_SECONDS ({self.http_timeout_seconds:g})"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _payload_limit_from_memory(cls, data: object) -> object:
        limit = data.get("WORKERLESS_MAX_PAYLOAD_BYTES", data.get("max_payload_bytes")) if isinstance(data, dict) else 0
        if isinstance(data, dict) and limit is None:
            memory = data.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", data.get("function_memory_mb"))
            try:
                mb = int(memory) if memory is not None else DEFAULT_MEMORY_MB
            except (TypeError, ValueError):
                return data  # the field's own check names the bad value
            data = {**data, "WORKERLESS_MAX_PAYLOAD_BYTES": payload_limit(max(128, mb))}
        return data

    @model_validator(mode="after")
    def _payload_fits_memory(self) -> Settings:
        memory, needed = self.function_memory_mb or DEFAULT_MEMORY_MB, memory_needed(self.max_payload_bytes)
        if needed > memory:
            raise ValueError(
                f"WORKERLESS_MAX_PAYLOAD_BYTES ({self.max_payload_bytes}) needs a MemorySize of at least "
                f"{needed} MB to hold such a payload, and this function has {memory} MB: "
                f"raise its MemorySize or lower the limit (at most {payload_limit(memory)} bytes at {memory} MB)"
            )
        return self

    @property
    def answer_budget_bytes(self) -> int:
        """The most job variables (bytes, undecoded) the poller keeps from one engine answer."""
        return max(self.max_payload_bytes, answer_budget(self.function_memory_mb or DEFAULT_MEMORY_MB))

    @model_validator(mode="after")
    def _unique_routes(self) -> Settings:
        seen: set[str] = set()
        for route in self.routes:
            if route.type in seen:
                raise ValueError(f"job type {route.type!r} is routed twice")
            seen.add(route.type)
        return self

    def route(self, job_type: str) -> Route | None:
        return next((r for r in self.routes if r.type == job_type), None)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Validate; a bad value raises ConfigurationError naming the variable."""
        read = _LOG_LEVEL_VARIABLES | _LAMBDA_VARIABLES
        values = {k: v for k, v in env.items() if k.startswith("WORKERLESS_") or k in read}
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = first["loc"]
            key = str(loc[0]) if loc else "WORKERLESS_*"
            where = ".".join(str(part) for part in loc[1:])
            raise ConfigurationError(
                f"{key} is invalid{' at ' + where if where else ''}: {first['msg']}", key=key
            ) from None


def get_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings of ``env`` (the process environment unless given), validated. Not cached: a
    :class:`~workerless.wiring.Wiring` reads them once and keeps them."""
    return Settings.from_env(os.environ if env is None else env)


def engine_overrides(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The engine keys ``env`` (the process environment unless given) sets: they win over the
    secret's and the env file's (a developer overriding one key of the block)."""
    prefixes = tuple(p for group in ENGINE_KEY_PREFIXES.values() for p in group)
    return {k: v for k, v in (os.environ if env is None else env).items() if k.startswith(prefixes)}


def infer_engine(values: Mapping[str, str]) -> str:
    """WORKERLESS_ENGINE if given, else the engine whose keys are present."""
    explicit = values.get("WORKERLESS_ENGINE")
    if explicit:
        if explicit not in ENGINES:
            raise ConfigurationError(
                f"WORKERLESS_ENGINE must be one of {', '.join(ENGINES)}, got {explicit!r}",
                key="WORKERLESS_ENGINE",
            )
        return explicit
    found = [name for name, prefixes in ENGINE_KEY_PREFIXES.items() if any(k.startswith(prefixes) for k in values)]
    if len(found) != 1:
        what = "no engine keys" if not found else f"keys of several engines ({', '.join(found)})"
        raise ConfigurationError(
            f"cannot tell which engine to use: {what}; set WORKERLESS_ENGINE", key="WORKERLESS_ENGINE"
        )
    return found[0]


def check_engine_keys(values: Mapping[str, str], *, source: str = "the engine's values") -> None:
    """Refuse a key that has an engine's prefix but is not one that engine reads (``SHEPTRA_MDOE``):
    ignored, it would leave the setting it meant at its default with nothing said. The error names
    the key and, when one is close, the key it likely meant."""
    import difflib

    for key in sorted(values):
        for spec in ENGINE_REGISTRY.values():
            if not key.startswith(spec.key_prefixes) or key in spec.keys:
                continue
            # Compared without the shared prefix, which would make every key look close.
            prefix = next(p for p in spec.key_prefixes if key.startswith(p))
            names = {k.removeprefix(prefix): k for k in spec.keys if k.startswith(prefix)}
            likely = difflib.get_close_matches(key.removeprefix(prefix), sorted(names), n=1, cutoff=0.6)
            hint = (
                f"did you mean {names[likely[0]]}?" if likely else f"{spec.name} reads {', '.join(sorted(spec.keys))}"
            )
            raise ConfigurationError(f"{source}: {key} is not a key {spec.name} reads; {hint}", key=key)


def parse_env_text(text: str, *, source: str = "env file") -> dict[str, str]:
    """Parse dotenv text (the Sheptra block as Drive prints it, comments and blank values included)."""
    import io

    from dotenv import dotenv_values

    parsed = dotenv_values(stream=io.StringIO(text))
    return {k: (v if v is not None else "") for k, v in parsed.items()}
