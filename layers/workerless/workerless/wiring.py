"""The composition root: one object that holds everything the pipeline's entry points use.

A :class:`Wiring` holds the settings, the engine adapter, the job store, the queues, the claim
check, the shared state, the clock, the sleep and the observer. Each piece is built on first use
(never at import, so a cold start pays only for what its function touches) and kept for the life
of the wiring: in Lambda one wiring per container (:func:`workerless.runtime.current`), so a warm
invocation reuses the engine's token, HTTP connection and boto3 clients.

Whatever is passed in is used as given instead of being built: tests, the benchmark, chaos and
local mode build their own wiring (fakes, spies, a virtual clock, a fault-injecting engine) and
pass it to the entry points (``entrypoints.poller(event, context, wiring=...)``) or install it as
the container's (:func:`workerless.runtime.reset`).

Example:
    >>> from workerless.testing import FakeEngine
    >>> wiring = Wiring(engine=FakeEngine())
    >>> wiring.engine.name
    'fake'
    >>> wiring.close()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import httpx

    from workerless._core.observer import Observer
    from workerless._core.ports import Clock, JobStore, PayloadStore, Queues, SharedState, Sleep
    from workerless._core.settings import Settings
    from workerless._poller.routes import RouteReader
    from workerless.aws.clients import Clients
    from workerless.engines import EngineHooks
    from workerless.engines.base import Engine
    from workerless.observability import Listener

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Hooks:
    """What a wiring calls around its work (local mode's and the tests'; nothing in Lambda).

    ``request_guards`` run before every request of the engine's HTTP client the wiring builds; one
    raising stops it (local mode refuses the requests of an invocation it abandoned at its Timeout).
    ``response_watchers`` get each of its responses and must not raise. ``lifecycle_listeners`` are
    called ``(job_type, event, fields)`` for every lifecycle step of an invocation run through the
    wiring (:func:`workerless.observability.emit`); one raising is logged, never fails the step.
    ``metrics``: whether its invocations write EMF metrics (local mode's do not: nothing would bill
    or read them), unless :func:`workerless.observability.configure` forces them on or off.
    """

    request_guards: tuple[Callable[[], None], ...] = ()
    response_watchers: tuple[Callable[[httpx.Response], None], ...] = ()
    lifecycle_listeners: tuple[Listener, ...] = ()
    metrics: bool = True

    def engine(self) -> EngineHooks:
        """The engine client's part (:func:`workerless.engines.new_http_client`)."""
        from workerless.engines import EngineHooks

        return EngineHooks(request_guards=self.request_guards, response_watchers=self.response_watchers)


class Wiring:
    """The pipeline's dependencies, each built lazily once (thread-safe: local mode runs a
    container's invocations on several threads).

    ``engine_decorator`` wraps the engine adapter once, when it is first needed (chaos puts its
    fault-injecting engine there); the observer wraps the result for the pipeline
    (:attr:`observed_engine`). ``clock`` and ``sleep`` are the poller's: its poll budget, pauses and
    deadline are on them (the benchmark's virtual poller passes a virtual clock).

    ``environ`` is the function's environment the settings (when not given) and the engine's
    overriding keys are read from: the process's unless given (local mode gives each function its
    own). ``clients`` are the boto3 clients (built on the settings' endpoint unless given). ``hooks``
    (:class:`Hooks`) run around each request of the engine's HTTP client this wiring builds (local
    mode's guards) and hear the lifecycle steps of its invocations (through :attr:`observer`).
    """

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        engine: Engine | None = None,
        store: JobStore | None = None,
        queues: Queues | None = None,
        payloads: PayloadStore | None = None,
        state: SharedState | None = None,
        observer: Observer | None = None,
        engine_decorator: Callable[[Engine], Engine] | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        environ: Mapping[str, str] | None = None,
        clients: Clients | None = None,
        routes: RouteReader | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self._settings = settings
        self._environ = environ
        self._clients = clients
        self._routes = routes
        self.hooks = hooks
        self._engine = engine
        self._store = store
        self._queues = queues
        self._payloads = payloads
        self._state = state
        self._observer = observer
        self._observed: Engine | None = None
        self._decorator = engine_decorator
        self._http: httpx.Client | None = None  # the engine's client, when this wiring built it
        #: The connection values the engine was built from and when they were read (time.monotonic):
        #: read again past WORKERLESS_SECRET_MAX_AGE_SECONDS (:meth:`_rotate_if_due`).
        self._values: dict[str, str] | None = None
        self._values_read_at = 0.0
        #: Engines replaced after a rotation, closed with the wiring (a thread may still be using one).
        self._retired: list[tuple[Engine, httpx.Client | None]] = []
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.RLock()

    def _once(self, attribute: str, build: Callable[[], T]) -> T:
        """``self.<attribute>``, built by ``build()`` under the lock the first time."""
        value: T | None = getattr(self, attribute)
        if value is None:
            with self._lock:
                value = getattr(self, attribute)
                if value is None:
                    value = build()
                    setattr(self, attribute, value)
        return value

    @property
    def settings(self) -> Settings:
        """The settings given, else the environment's (read once, on first use)."""

        def build() -> Settings:
            from workerless._core.settings import get_settings

            return get_settings(self._environ)

        return self._once("_settings", build)

    @property
    def clients(self) -> Clients:
        """The boto3 clients (:class:`workerless.aws.clients.Clients` on the settings' endpoint)."""

        def build() -> Clients:
            from workerless.aws.clients import Clients

            return Clients(endpoint_url=self.settings.aws_endpoint_url)

        return self._once("_clients", build)

    @property
    def routes(self) -> RouteReader:
        """The routes this wiring's poller read (:class:`workerless._poller.routes.RouteReader`)."""

        def build() -> RouteReader:
            from workerless._poller.routes import RouteReader

            return RouteReader()

        return self._once("_routes", build)

    def routed_settings(self, *, deadline: float) -> Settings:
        """The settings with their routes (read from Parameter Store when only their path is set)."""
        settings = self.settings
        if settings.routes or not settings.routes_path:
            return settings
        return self.routes.routed(settings, deadline=deadline, client=self.clients.ssm)

    def engine_values(self) -> dict[str, str]:
        """The engine's connection values, read now (the secret, the env file, the environment's keys)."""
        from workerless.aws.secrets import load_engine_values

        settings = self.settings
        client = self.clients.secretsmanager if settings.secret_arn else None
        return load_engine_values(settings, client, env=self._environ)

    @property
    def store(self) -> JobStore:
        """The job store (:class:`workerless.aws.dynamo.JobStore` on the settings' table)."""

        def build() -> JobStore:
            from workerless.aws.dynamo import JobStore

            settings = self.settings
            return JobStore(
                settings.table_name,
                ttl_seconds=settings.record_ttl_seconds,
                clients=self.clients,  # its client built on its first call, as before
                payloads=self.payloads,
                max_outcome_bytes=settings.max_payload_bytes,
            )

        return self._once("_store", build)

    @property
    def payloads(self) -> PayloadStore:
        """The claim check's bucket (WORKERLESS_PAYLOAD_BUCKET; disabled without one)."""

        def build() -> PayloadStore:
            from workerless.aws.payloads import Payloads

            return Payloads(self.settings.payload_bucket, clients=self.clients)

        return self._once("_payloads", build)

    @property
    def queues(self) -> Queues:
        """The SQS queues (:class:`workerless.aws.sqs.Queues`)."""

        def build() -> Queues:
            from workerless.aws.sqs import Queues

            return Queues(clients=self.clients)

        return self._once("_queues", build)

    @property
    def state(self) -> SharedState:
        """The deployment's shared state: the poller lock, the tick chain, engine sessions
        (:class:`workerless.aws.dynamo.DynamoState` on the job store's table)."""

        def build() -> SharedState:
            from workerless.aws.dynamo import DynamoState, JobStore

            store = self.store
            if not isinstance(store, JobStore):
                raise TypeError("a wiring whose store is not the DynamoDB JobStore needs its shared state given")
            return DynamoState(store)

        return self._once("_state", build)

    @property
    def engine(self) -> Engine:
        """The engine adapter (built from the settings' engine values), with the wiring's
        ``engine_decorator`` around it; not observed (see :attr:`observed_engine`)."""
        return self._once("_engine", self._build_engine)

    def _build_engine(self) -> Engine:
        from workerless._core.settings import infer_engine
        from workerless.engines import build_engine, new_http_client

        settings = self.settings
        values = self.engine_values()
        self._values, self._values_read_at = values, time.monotonic()
        client = new_http_client(settings.http_timeout_seconds, None if self.hooks is None else self.hooks.engine())
        self._http = client  # owned here: closed by close(), whatever the adapter does
        engine = build_engine(
            settings.engine or infer_engine(values),
            values,
            client,
            worker_id=settings.worker_id,
            state=self.state,
        )
        return engine if self._decorator is None else self._decorator(engine)

    @property
    def observer(self) -> Observer:
        """What counts the pipeline's metrics and wraps its engine (:class:`workerless.observability.Observer`)."""

        def build() -> Observer:
            from workerless._core.observer import Observer
            from workerless.observability import apply_log_level

            # Once per container, before the entry point's first line: the deployment's LogLevel
            # over Lambda's ApplicationLogLevel (the handler wrapper applies it at each batch too).
            settings = self.settings
            apply_log_level(settings.log_level, settings.lambda_log_level)
            hooks = self.hooks if self.hooks is not None else Hooks()
            return Observer(hooks.lifecycle_listeners, metrics=hooks.metrics)

        return self._once("_observer", build)

    @property
    def observed_engine(self) -> Engine:
        """:attr:`engine` as the pipeline calls it: through the observer (failed calls counted).
        A warm container's engine is built anew when its secret has changed (read again
        WORKERLESS_SECRET_MAX_AGE_SECONDS after the last read)."""
        self._rotate_if_due()
        return self._once("_observed", lambda: self.observer.engine(self.engine))

    def _rotate_if_due(self) -> None:
        """Read the engine secret again once it is older than its max age; a changed secret
        retires the engine built from the old one (the next use builds one from the new). Only for
        an engine this wiring built from a secret; a failed read keeps the engine it has."""
        if self._values is None or self._http is None:
            return
        settings = self.settings
        if not settings.secret_arn or time.monotonic() - self._values_read_at < settings.secret_max_age_seconds:
            return
        from workerless.errors import WorkerlessError
        from workerless.observability import logger

        with self._lock:
            if time.monotonic() - self._values_read_at < settings.secret_max_age_seconds:
                return  # another thread read it just now
            self._values_read_at = time.monotonic()
            try:
                values = self.engine_values()
            except WorkerlessError as exc:  # the old values still work until the engine refuses them
                logger.warning("could not read the engine secret again; keeping the engine", extra={"error": str(exc)})
                return
            if values == self._values:
                return
            logger.info("the engine secret changed: building the engine adapter from its new values")
            if self._engine is not None:
                self._retired.append((self._engine, self._http))
            self._engine, self._observed, self._http, self._values = None, None, None, None

    def set_engine(self, engine: Engine) -> None:
        """Use ``engine`` from now on (a test's fake); the wiring's ``engine_decorator`` is not applied."""
        with self._lock:
            self._engine = engine
            self._observed = None

    def close(self) -> None:
        """Close the engine (if there is one) and the HTTP client this wiring built for it."""
        from workerless.observability import logger

        with self._lock:
            engine, self._engine, self._observed = self._engine, None, None
            client, self._http = self._http, None
            retired, self._retired = self._retired, []
        for old, old_client in [(engine, client), *retired]:
            if old is not None:
                try:
                    old.close()
                except Exception:
                    logger.warning("engine close failed", exc_info=True)
            if old_client is not None:
                old_client.close()
