"""Run every function of a SAM template in one process, on an embedded SQS, DynamoDB and S3 (moto).

:class:`LocalTopology` does what AWS does around the functions, and nothing about what they do:

- creates the template's queues (attributes, redrive to the DLQs) and tables through the same boto3
  calls as in AWS, inside ``moto.mock_aws``;
- sets the process environment to the union of the functions' environments (Lambda gives each
  function its own; one process needs one), points ``WORKERLESS_ENV_FILE`` at the engine values;
- imports each function's handler from its CodeUri directory;
- emulates Lambda's SQS event source mapping per SQS event: long-polls up to BatchSize messages,
  runs at most MaximumConcurrency batches at once, deletes what succeeded (honouring
  ReportBatchItemFailures), leaves the rest to the visibility timeout; moto does the redelivery,
  the ApproximateReceiveCount and the redrive to the DLQ (at the template's maxReceiveCount);
- fires Schedule events as EventBridge scheduled events, at the template's rate;
- stops waiting for an invocation at its function's Timeout, as Lambda does: the invocation failed
  ("Task timed out"), its batch returns after the visibility timeout, and every AWS or engine call
  the abandoned code makes afterwards is refused;
- holds the template to AWS's rules before it starts (:mod:`workerless_devkit.local.rules`) and every call to
  AWS's limits where moto is lenient (:mod:`workerless_devkit.local.limits`);
- holds every AWS call of a function to its own role as SAM renders it, and refuses what the role
  does not allow with AWS's error; refuses at start an SQS event whose queue the role cannot poll
  (see :mod:`workerless_devkit.local.iam`);
- reproduces Lambda's recursive loop detection (see :mod:`workerless_devkit.local.loop`);
- holds every invocation to Lambda's concurrency: the account's limit, the template's reserved
  concurrency; a throttled SQS batch stays in flight until its visibility timeout, a throttled
  scheduled event is retried as Lambda's asynchronous queue does (see
  :mod:`workerless_devkit.local.concurrency`);
- when asked (``memory_limits``), kills an invocation whose memory passes its MemorySize (see
  :mod:`workerless_devkit.local.memory`), and (``schedule_drift``) fires schedules within their minute.

Or, from a rehearsal bundle (:meth:`LocalTopology.from_bundle`), it runs the stack a deploy creates:
the bundle's transformed template created as a stack on moto's CloudFormation, and everything above
read back from that stack (each function's handler, environment, timeout, memory, role and
policies as created in IAM, event source mappings, queue attributes), the code from the uploaded
artifacts (:mod:`workerless_devkit.local.stack`).

It runs the template as written. A test that needs shorter timings passes them as template
parameters (``parameters={"JobQueueVisibilityTimeout": "10", "HandlerTimeout": "10"}``), and a
route that sets its own Timeout and VisibilityTimeout in its Mappings.Routes line gets them as
``route_settings`` (``route_timing_settings(path, timeout=10, visibility=10)``); the only other
timing departure is ``schedule_seconds``, which a schedule's rate cannot express below a minute.

Example:
    >>> with LocalTopology("template.yaml", ".env") as topology:  # doctest: +SKIP
    ...     summary = topology.run_until_idle(idle_seconds=3, max_seconds=60)
    ...     print(summary.table())
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import functools
import importlib.util
import json
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workerless.errors import ConfigurationError
from workerless.settings import check_engine_keys, infer_engine, parse_env_text

from workerless_devkit.local import limits, loop, rules, sqs_lag
from workerless_devkit.local.concurrency import ACCOUNT_CONCURRENCY, AsyncOutcome, Concurrency, Throttled, run_async
from workerless_devkit.local.context import LocalLambdaContext
from workerless_devkit.local.engine_health import EngineHealth
from workerless_devkit.local.iam.enforce import IamEnforcer
from workerless_devkit.local.logs import LogFormat, application_levels, local_logging
from workerless_devkit.local.memory import RUNTIME_BASELINE_MB, MemoryMeter, OutOfMemory
from workerless_devkit.local.polls import PollWatch
from workerless_devkit.local.stack.bundle import Bundle, load_bundle
from workerless_devkit.local.summary import Summary, get_summary, reset_summary
from workerless_devkit.local.template import (
    LOCAL_PLACE,
    STACK_NAME,
    FunctionSpec,
    LocalTemplate,
    Place,
    QueueSpec,
    ScheduleEventSpec,
    SqsEventSpec,
    TemplateError,
    load_template,
)

if TYPE_CHECKING:
    from workerless.engines import EngineHooks
    from workerless.wiring import Wiring

    from workerless_devkit.local.stack import StackView

log = logging.getLogger("workerless_devkit.local")

Handler = Callable[[Any, Any], Any]


def fake_aws_env(place: Place) -> dict[str, str]:
    """Fake credentials for the embedded AWS, and where it is: the region Lambda sets in a
    function's environment (AWS_REGION, AWS_DEFAULT_REGION) and the account moto answers as
    (MOTO_ACCOUNT_ID). Set only while a topology runs."""
    return {
        "AWS_DEFAULT_REGION": place.region,
        "AWS_REGION": place.region,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "MOTO_ACCOUNT_ID": place.account_id,
    }


#: :func:`fake_aws_env` of template.yaml's place (us-east-1).
FAKE_AWS_ENV: Mapping[str, str] = fake_aws_env(LOCAL_PLACE)
#: Removed while a topology runs: they would send the embedded AWS calls elsewhere, or (the secret
#: ARN) make the library read engine values from Secrets Manager instead of the env file.
REMOVED_ENV: tuple[str, ...] = (
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_S3",
    "WORKERLESS_AWS_ENDPOINT_URL",
    "WORKERLESS_SECRET_ARN",
)


class FunctionLoadError(ConfigurationError):
    """A function's handler cannot be imported."""


class IdleTimeout(TimeoutError):
    """The topology did not go idle within ``max_seconds``; ``summary`` holds what happened."""

    def __init__(self, message: str, summary: Summary) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass(frozen=True, slots=True)
class QueueDepth:
    visible: int
    in_flight: int
    delayed: int

    @property
    def busy(self) -> bool:
        return self.visible + self.in_flight > 0


@dataclass(frozen=True, slots=True)
class StoppedLoop:
    """One delivery the recursive-loop limit stopped."""

    function: str
    queue: str
    message_id: str
    depth: int
    #: The DLQ the message was moved to (the source queue's redrive target), or None: dropped.
    moved_to: str | None


@dataclass(frozen=True, slots=True)
class _Source:
    function: FunctionSpec
    event: SqsEventSpec
    queue: QueueSpec
    concurrency: int


class LocalTopology:
    """The template's functions, queues and tables, running in this process.

    Args:
        template_path: the SAM template (None with ``bundle``).
        env_file: dotenv file with the engine's connection values (``WORKERLESS_ENV_FILE``); the
            engine is its ``WORKERLESS_ENGINE`` or is inferred from its keys.
        parameters: template parameter overrides (``{"TickSeconds": "2"}``), checked as
            CloudFormation checks them; shorter timings for a test go here.
        route_settings: {route: {setting: value}} replacing settings of the template's
            Mappings.Routes lines (a long route's own Timeout and VisibilityTimeout, test-sized:
            ``workerless_devkit.local.template.route_timing_settings``); not with a bundle.
        schedule_seconds: a departure from the template, for tests: fire every Schedule event this
            often instead of at its rate (EventBridge's finest is a minute). None: the template's
            rate; a cron schedule then does not fire locally. Schedules fire once at start, then at
            that interval.
        wait_seconds: the long poll of each event source's ReceiveMessage (bounds shutdown too).
        max_batching_window_seconds: a departure: cap MaximumBatchingWindowInSeconds at this.
            None: the template's window.
        default_concurrency: concurrent batches for an SQS event without ScalingConfig (Lambda
            scales such a mapping up to the account's concurrency; local mode caps it).
        loop_limit: depth at which a recursive chain is stopped (Lambda: about 16).
        drain_seconds: how long :meth:`stop` waits for running invocations.
        reset_summary: zero the process-wide summary at start.
        enforce_iam: hold every AWS call of a function to its role as SAM renders it, refusing what
            the role does not allow with AWS's own error (:mod:`workerless_devkit.local.iam`); at start,
            refuse an SQS event its role cannot poll. On by default: AWS's rules, not moto's.
        engine_secret: put the env file's engine values in an embedded Secrets Manager secret and
            give the functions its ARN (WORKERLESS_SECRET_ARN, the parameter it is ``!Ref`` of), so
            they read them as the deployed stack does (``secretsmanager:GetSecretValue`` checked).
        log_format: the runtime's log lines as CloudWatch gets them (``json``) or one short line
            each for a terminal (``readable``); either way at the template's LogLevel and naming
            the function that wrote them (:mod:`workerless_devkit.local.logs`).
        bundle: run a rehearsal bundle's stack instead of a template (see :meth:`from_bundle`); its
            stack name, region and account are the bundle's, and ``parameters`` override the
            bundle's own.
        account_concurrency: the account's Lambda concurrency limit (1,000 by default; new accounts
            start at 10). Functions with ReservedConcurrentExecutions have their own; the others
            share what is left; an invocation with none left is throttled: an SQS batch stays in
            flight until its visibility timeout, a scheduled (asynchronous) event is retried with
            Lambda's backoff until its MaximumEventAgeInSeconds, then dropped
            (:mod:`workerless_devkit.local.concurrency`; :attr:`concurrency`).
        memory_limits: kill an invocation whose memory passes its function's MemorySize, as Lambda
            does (:mod:`workerless_devkit.local.memory`: tracemalloc, plus ``memory_baseline_mb``
            for the runtime). Off by default: tracemalloc slows every allocation of the process.
        schedule_drift: fire each Schedule event at a seeded moment within its minute (within its
            interval when shorter, as with ``schedule_seconds``), as EventBridge does, not on the
            second. Drawn from ``seed``.

    Where it runs is :attr:`place`: template.yaml in us-east-1 of account 123456789012, a bundle's
    stack where its bundle.json says. Every ARN and queue URL, the IAM check's resources, the
    embedded AWS's clients and the functions' AWS_REGION / AWS_DEFAULT_REGION are of that place.
    """

    def __init__(
        self,
        template_path: str | Path | None,
        env_file: str | Path | None = None,
        *,
        parameters: Mapping[str, str] | None = None,
        route_settings: Mapping[str, Mapping[str, Any]] | None = None,
        schedule_seconds: float | None = None,
        wait_seconds: int = 1,
        max_batching_window_seconds: float | None = None,
        default_concurrency: int = 10,
        loop_limit: int = loop.LOOP_LIMIT,
        drain_seconds: float = 10.0,
        stack_name: str = STACK_NAME,
        reset_summary: bool = True,
        enforce_iam: bool = True,
        engine_secret: bool = False,
        log_format: LogFormat = "json",
        bundle: str | Path | None = None,
        sqs_count_lag: float = 0.0,
        seed: int = 0,
        account_concurrency: int = ACCOUNT_CONCURRENCY,
        memory_limits: bool = False,
        memory_baseline_mb: float | Mapping[str, float] = RUNTIME_BASELINE_MB,
        schedule_drift: bool = False,
    ) -> None:
        if schedule_seconds is not None and schedule_seconds <= 0:
            raise ConfigurationError("schedule_seconds must be positive", key="schedule_seconds")
        if (template_path is None) == (bundle is None):
            raise ConfigurationError("LocalTopology runs a template or a rehearsal bundle: give exactly one")
        self._template: LocalTemplate | None = None
        self._bundle: Bundle | None = None
        self._parameters = dict(parameters or {})
        #: The stack read back from the embedded CloudFormation (a bundle's run, once started).
        self.stack: StackView | None = None
        self._code_dir: Path | None = None
        if bundle is not None:
            # The stack, and with it what runs, exists once start() has created it in the mock.
            self._bundle = load_bundle(bundle)
            stack_name = self._bundle.stack_name
            place = self._bundle.place
            if engine_secret:
                raise ConfigurationError(
                    "engine_secret is not supported with a bundle: its roles name the bundle's EngineSecretArn",
                    key="engine_secret",
                )
            if route_settings:
                raise ConfigurationError(
                    "route_settings is not supported with a bundle: its stack was transformed with its own routes",
                    key="route_settings",
                )
        else:
            assert template_path is not None
            self._template = load_template(
                template_path, parameters=parameters, route_settings=route_settings, stack_name=stack_name
            )
            place = self._template.place
            # What AWS would refuse to deploy must not run locally either.
            rules.check_template(self._template)
        self.stack_name = stack_name
        #: The account and region the stack runs in.
        self.place: Place = place
        self.env_file = Path(env_file).resolve() if env_file is not None else None
        self.enforce_iam = enforce_iam
        #: SQS's approximate counts up to this many seconds behind, as AWS documents them (0: moto's
        #: exact counts): :mod:`workerless_devkit.local.sqs_lag`, drawn from ``seed``.
        self.count_lag = sqs_lag.CountLag(sqs_count_lag, seed=seed) if sqs_count_lag > 0 else None
        self.engine_secret = engine_secret
        if engine_secret and self.env_file is None:
            raise ConfigurationError("engine_secret needs an env file to fill the secret with", key="engine_secret")
        #: The IAM check of this topology (built at start; None when enforce_iam is off).
        self.iam: IamEnforcer | None = None
        self._secret_arn: str | None = None
        self.schedule_seconds = schedule_seconds
        self.wait_seconds = max(0, min(20, wait_seconds))
        self.max_batching_window_seconds = max_batching_window_seconds
        self.default_concurrency = default_concurrency
        self.loop_limit = loop_limit
        self.drain_seconds = drain_seconds
        self._reset_summary = reset_summary
        self.log_format: LogFormat = log_format
        self._logging = contextlib.ExitStack()
        # Computed now so a configuration error surfaces before anything starts (a bundle's: at start).
        self.environment: dict[str, str] = self._environment() if self._template is not None else {}

        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._started = False
        self._accepting = True
        self._mock: Any = None
        self._saved_env: dict[str, str | None] = {}
        self._sqs: Any = None
        self._dynamodb: Any = None
        self._queue_urls: dict[str, str] = {}
        self._handlers: dict[str, Handler] = {}
        self._consumers: dict[str, set[str]] = {}  # queue name -> functions it triggers
        #: Queues a function drains itself (its own ReceiveMessage, e.g. on a schedule): like a
        #: consumed queue, a message waiting or in flight there is work still to do.
        self._drained: set[str] = set()
        self._queue_by_name: dict[str, QueueSpec] = {}
        self._depths: dict[str, tuple[str, int]] = {}  # message id -> (function, depth in its chain)
        # (queue name, body MD5) -> [(send token, function, depth)] of self-sends not yet returned.
        self._expected: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
        # Queues a function feeds itself with a delay: a timer (poller tick, heartbeat ticket), not work.
        self._timer_queues: set[str] = set()
        self._chain_queues: set[str] = set()  # ... and without one: a chain doing work
        self._threads: list[threading.Thread] = []
        self._batches: set[threading.Thread] = set()
        self._work_running = 0
        #: Scheduled invocations that became work (see _on_lifecycle_event), by id of their scope.
        self._promoted: set[int] = set()
        self._waiting: set[int] = set()
        self._running = 0
        self._last_activity = time.monotonic()
        self._invocations: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        #: Whether the engine answered the poller (``workerless local --until-idle`` fails if never).
        self.engine_health = EngineHealth()
        #: Polls in progress in the functions (workerless_devkit.local.polls): a run never ends in one.
        self.polls = PollWatch(self._promote_current)
        self._stopped_loops: list[StoppedLoop] = []
        self._limits = limits.LimitState()
        self.seed = seed
        self.schedule_drift = schedule_drift
        self.account_concurrency = account_concurrency
        #: Lambda's concurrency for this stack's functions (a template's: now; a bundle's: at start).
        self.concurrency = Concurrency(account_concurrency)
        if self._template is not None:
            self.concurrency = self._new_concurrency()
        #: The memory meter (None: memory_limits off).
        self.memory: MemoryMeter | None = MemoryMeter(memory_baseline_mb) if memory_limits else None
        #: Every scheduled event that was throttled: (function, what became of it).
        self._async_outcomes: list[tuple[str, AsyncOutcome]] = []

    @classmethod
    def from_bundle(cls, bundle: str | Path, env_file: str | Path | None = None, **options: Any) -> LocalTopology:
        """Run the stack a deploy creates, from a rehearsal bundle directory (bundle.json,
        transformed.json, artifacts/; :mod:`workerless_devkit.local.stack.bundle`).

        At :meth:`start`, inside the embedded AWS: the artifacts are uploaded, the stack is created
        on moto's CloudFormation from transformed.json, and what runs is read back from it (see
        :mod:`workerless_devkit.local.stack`); IAM enforcement holds each function to its role as
        created in IAM. ``options`` are the constructor's (``parameters`` override the bundle's).

        Example:
            >>> with LocalTopology.from_bundle("rehearsal/", "emulator.env") as topology:  # doctest: +SKIP
            ...     topology.run_until_idle(idle_seconds=3, max_seconds=60)
        """
        return cls(None, env_file, bundle=bundle, **options)

    @property
    def template(self) -> LocalTemplate:
        """What runs: the template as local mode resolves it, or (from a bundle) the created stack's."""
        if self._template is None:
            raise RuntimeError("a bundle's stack is created at start(): the topology is not running yet")
        return self._template

    # ------------------------------------------------------------------------------------------
    # Public API

    @property
    def invocations(self) -> dict[str, int]:
        """Invocations so far, per function logical id."""
        with self._lock:
            return dict(self._invocations)

    @property
    def drained_queues(self) -> frozenset[str]:
        """Logical ids of the queues a function has received from itself (a scheduled drain's): from
        then on a message waiting there keeps the topology from being idle."""
        with self._lock:
            names = set(self._drained)
        return frozenset(spec.logical_id for name, spec in self._queue_by_name.items() if name in names)

    @property
    def errors(self) -> dict[str, int]:
        """Invocations that raised or timed out, per function logical id."""
        with self._lock:
            return dict(self._errors)

    @property
    def throttles(self) -> dict[str, int]:
        """Invocations Lambda throttled (no concurrency left for them), per function logical id."""
        return dict(self.concurrency.throttles)

    @property
    def async_outcomes(self) -> list[tuple[str, AsyncOutcome]]:
        """Every throttled scheduled event and what became of it (retried until it ran, or dropped)."""
        with self._lock:
            return list(self._async_outcomes)

    @property
    def stopped_loops(self) -> list[StoppedLoop]:
        """Deliveries stopped by the recursive-loop limit."""
        with self._lock:
            return list(self._stopped_loops)

    @property
    def summary(self) -> Summary:
        return get_summary()

    def queue_url(self, logical_id: str) -> str:
        return self._queue_urls[logical_id]

    def client(self, service: str) -> Any:
        """A boto3 client on the embedded AWS (only while the topology runs)."""
        import boto3

        if not self._started:
            raise RuntimeError("the topology is not running")
        session: Any = boto3.session.Session(region_name=self.place.region)
        return session.client(service)

    @contextlib.contextmanager
    def as_function(self, function_id: str) -> Iterator[None]:
        """Make this thread's AWS calls as ``function_id`` does in an invocation: held to its role
        (and tracked for loops). For tests and debugging a refusal outside a whole invocation.

        Example:
            >>> with topology.as_function("PollerFunction"):                    # doctest: +SKIP
            ...     topology.client("sqs").send_message(QueueUrl=url, MessageBody="x")
        """
        self.template.function(function_id)  # KeyError for a function the template does not have
        token = loop.enter_scope(loop.InvocationScope(self, function_id, 0, iam=self.iam))
        try:
            yield
        finally:
            loop.exit_scope(token)

    def queue_depths(self) -> dict[str, QueueDepth]:
        """Every queue's approximate depth, by logical id."""
        depths: dict[str, QueueDepth] = {}
        for spec in self.template.queues:
            attributes = self._sqs.get_queue_attributes(
                QueueUrl=self._queue_urls[spec.logical_id],
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
            depths[spec.logical_id] = QueueDepth(
                visible=int(attributes.get("ApproximateNumberOfMessages", 0)),
                in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
                delayed=int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
            )
        return depths

    def invoke(self, function_id: str, event: Any) -> Any:
        """Invoke one function directly (synchronously, like ``sam local invoke``); re-raises its error."""
        spec = self.template.function(function_id)
        ok, result = self._invoke(spec, event, depth=0, work=True)
        if not ok:
            raise result if isinstance(result, BaseException) else RuntimeError(str(result))
        return result

    def __enter__(self) -> LocalTopology:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalTopology:
        """Create the embedded AWS resources, load the functions, start the event sources."""
        if self._started:
            return self
        if self._stopping.is_set():
            raise RuntimeError("a LocalTopology runs once: create a new one")
        from moto import mock_aws

        loop.install_hooks()
        limits.install_hooks()
        sqs_lag.install_hooks()  # before the client cache is cleared: every client has it
        limits.check_update_item_size(_moto_write_lock)
        limits.precise_long_polls()
        serialise_moto_dynamodb_writes()
        self._mock = mock_aws()
        self._mock.start()
        self._started = True
        limits.activate(self._limits)
        if self.count_lag is not None:
            sqs_lag.activate(self.count_lag)
        try:
            self._apply_environment()
            if self._bundle is not None:
                self._create_stack(self._bundle)
            level = self.environment.get("POWERTOOLS_LOG_LEVEL") or "INFO"
            # Lambda's own filter on top (LoggingConfig ApplicationLogLevel), function by function.
            lambda_levels = application_levels(
                {f.logical_id: (f.log_format, f.application_log_level) for f in self.template.functions}
            )
            self._logging.enter_context(
                local_logging(level, self.log_format, self.engine_health, application_levels=lambda_levels)
            )
            if self._bundle is None:
                self._create_resources()
            if self.engine_secret:
                self._create_engine_secret()
            if self.enforce_iam:
                self._enable_iam()
            if self._bundle is not None:
                self.concurrency = self._new_concurrency()
            self._load_functions()
        except BaseException:
            self.stop()
            raise
        if self._reset_summary:
            reset_summary()
        self._listen(True)
        if self.memory is not None:
            self.memory.start()
        self._last_activity = time.monotonic()
        self._start_sources()
        return self

    def stop(self) -> None:
        """Stop the event sources, wait (bounded) for running invocations, tear the embedded AWS down."""
        if not self._started:
            self._stopping.set()
            return
        self._stopping.set()
        deadline = time.monotonic() + self.drain_seconds
        for thread in self._threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        for thread in list(self._batches):
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        still = [t.name for t in self._batches if t.is_alive()]
        if still:
            log.warning("stopped with %d invocation(s) still running: %s", len(still), ", ".join(sorted(still)))
        # From here on, an invocation that is still running gets an error from any AWS call instead of
        # reaching past the torn-down mock.
        self._accepting = False
        self._listen(False)
        if self.memory is not None:
            self.memory.stop()
        limits.deactivate(self._limits)
        if self.count_lag is not None:
            sqs_lag.deactivate(self.count_lag)
        self._reset_library(stopping=True)
        self._restore_environment()
        self._logging.close()
        with contextlib.suppress(Exception):
            self._mock.stop()
        if self._code_dir is not None:
            shutil.rmtree(self._code_dir, ignore_errors=True)
            self._code_dir = None
        self._started = False

    def run_until_idle(
        self,
        idle_seconds: float,
        max_seconds: float,
        *,
        poll_seconds: float = 0.1,
        stop: threading.Event | None = None,
    ) -> Summary:
        """Run until nothing has happened for ``idle_seconds`` in a row; return the summary.

        Idle means: no message visible or in flight in any consumed queue (an event source's, or one
        a function has received from itself, like the scheduled dead-letter drain's; ignoring the queues a
        function feeds itself with a delay, like a poller's tick or a heartbeat's ticket), no
        invocation running that was triggered by another queue, and no summary event recorded.
        Invocations of scheduled or self-timed functions that do nothing else (an idle poller tick)
        do not count as work.
        Raises :class:`IdleTimeout` after ``max_seconds``; returns early when ``stop`` is set.
        """
        if not self._started:
            self.start()
        start = time.monotonic()
        version = self.summary.version
        idle_since = time.monotonic()
        while True:
            now = time.monotonic()
            if stop is not None and stop.is_set():
                return self.summary
            if now - start > max_seconds:
                raise IdleTimeout(f"not idle after {max_seconds:g} s", self.summary)
            current = self.summary.version
            if current != version or self._busy():
                version = current
                idle_since = now
            else:
                idle_since = max(idle_since, self._last_activity)
                # A poll in progress (or failed) is work not known yet: never end a run there.
                if now - idle_since >= idle_seconds and self.polls.settled_since(idle_since):
                    return self.summary
            time.sleep(poll_seconds)

    def run_until(self, done: Callable[[], bool], max_seconds: float, *, poll_seconds: float = 0.25) -> bool:
        """Run until ``done()`` is true (True) or ``max_seconds`` pass (False)."""
        if not self._started:
            self.start()
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline:
            if done():
                return True
            if self._stopping.wait(poll_seconds):
                return done()
        return done()

    def wait(self, stop: threading.Event, max_seconds: float | None = None) -> bool:
        """Run until ``stop`` is set (a signal handler sets it): True; or ``max_seconds`` pass: False."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        while not stop.is_set():
            timeout = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if timeout <= 0:
                return False
            stop.wait(timeout)
        return True

    # ------------------------------------------------------------------------------------------
    # LoopTracker (called by the botocore hooks from inside invocations)

    def triggers(self, queue_name: str, function_id: str) -> bool:
        return function_id in self._consumers.get(queue_name, ())

    def record_depth(self, message_id: str, function_id: str, depth: int) -> None:
        with self._lock:
            self._depths[message_id] = (function_id, depth)

    def expect_send(self, token: int, queue_name: str, body_md5s: list[str], function_id: str, depth: int) -> None:
        with self._lock:
            for md5 in body_md5s:
                self._expected.setdefault((queue_name, md5), []).append((token, function_id, depth))

    def sent(self, token: int) -> None:
        with self._lock:
            for key in [k for k, entries in self._expected.items() if any(e[0] == token for e in entries)]:
                left = [e for e in self._expected[key] if e[0] != token]
                if left:
                    self._expected[key] = left
                else:
                    del self._expected[key]

    def _depth_of(self, message: Mapping[str, Any], queue_name: str) -> tuple[str, int]:
        """(function, depth) of a delivered message: by id, else by a self-send still returning."""
        with self._lock:
            known = self._depths.get(message["MessageId"])
            if known is not None:
                return known
            expected = self._expected.get((queue_name, loop.body_md5(message["Body"])))
            if not expected:
                return ("", 0)
            _, function_id, depth = expected[0]
            # Keep it by id too: a redelivery of this message has the same depth.
            self._depths[message["MessageId"]] = (function_id, depth)
            return function_id, depth

    def accepts_calls(self) -> bool:
        return self._accepting

    def note_receive(self, queue_name: str, function_id: str) -> None:
        with self._lock:
            self._drained.add(queue_name)

    def note_send(self, queue_name: str, function_id: str, self_send: bool, delay_seconds: int | None) -> None:
        if delay_seconds is None:
            queue = self._queue_by_name.get(queue_name)
            delay_seconds = queue.delay_seconds if queue is not None else 0
        with self._lock:
            if self_send and delay_seconds >= 1:
                # A function re-arming itself for later (a tick, a heartbeat ticket): its queue is a
                # timer, and runs that do nothing else are not work for idle detection.
                if queue_name not in self._chain_queues:
                    self._timer_queues.add(queue_name)
                return
            if self_send and queue_name not in self._timer_queues:
                # Re-sending to itself for immediate delivery: a chain doing work. A timer's
                # immediate send (a poller relaying at once, its budget spent while jobs flowed) is
                # work now, not from now on: turned into a chain, every later tick of a busy poller
                # was work, and a run against a slow engine never went idle.
                self._chain_queues.add(queue_name)
            # A message for someone else, or for itself at once, is work (a job fanned out, a ticket started).
            self._last_activity = time.monotonic()

    # ------------------------------------------------------------------------------------------
    # Setup

    def _environment(self) -> dict[str, str]:
        env = self.template.environment()
        env.pop("WORKERLESS_SECRET_ARN", None)  # local mode reads the engine values from the env file
        if self.template.unset_parameters:
            log.info(
                "template parameters without a value (empty locally): %s", ", ".join(self.template.unset_parameters)
            )
        if self.env_file is not None:
            try:
                text = self.env_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigurationError(
                    f"env file {str(self.env_file)!r} cannot be read: {exc.strerror}", key="WORKERLESS_ENV_FILE"
                ) from None
            values = parse_env_text(text, source=str(self.env_file))
            check_engine_keys(values, source=str(self.env_file))
            if not self.engine_secret:  # else the functions read the values from the embedded secret
                env["WORKERLESS_ENV_FILE"] = str(self.env_file)
            env["WORKERLESS_ENGINE"] = infer_engine(values)
        return env

    def _apply_environment(self) -> None:
        changes: dict[str, str | None] = {**fake_aws_env(self.place), **self.environment}
        for key in REMOVED_ENV:
            changes.setdefault(key, None)
        for key, value in changes.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._reset_library()

    def _restore_environment(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()

    def _listen(self, on: bool) -> None:
        """Feed the pipeline's lifecycle events (workerless.observability) into the summary."""
        from workerless import observability

        if on:
            observability.add_listener(self._on_lifecycle_event)
        else:
            observability.remove_listener(self._on_lifecycle_event)

    def _on_lifecycle_event(self, job_type: str, event: str, fields: Mapping[str, Any]) -> None:
        get_summary().record_lifecycle(job_type, event, fields)
        if event == "activated":
            self._promote_current()

    def _promote_current(self) -> None:
        """A scheduled invocation that took jobs from the engine is work from then on, until it
        ends: its jobs are leased but in no queue yet, so idle detection must not end the run
        between the activation and the send (on a busy machine that gap can be seconds)."""
        scope = loop.current_scope()
        if scope is None or scope.tracker is not self:
            return
        with self._lock:
            # Only while its _invoke waits for it (an abandoned invocation is over for Lambda).
            if id(scope) in self._waiting and id(scope) not in self._promoted:
                self._promoted.add(id(scope))
                self._work_running += 1
                self._last_activity = time.monotonic()

    def new_wiring(self) -> Wiring | None:
        """The wiring the loaded functions share, as one Lambda container's (None: the runtime's
        default, built on first use). :class:`~workerless_devkit.chaos.topology.ChaosTopology`
        returns one whose engine injects faults. Here: the runtime's own, with the polls its
        engine makes watched (:attr:`polls`)."""
        from workerless.wiring import Wiring

        return Wiring(engine_decorator=self.polls.decorate, hooks=self.engine_hooks())

    def engine_hooks(self) -> EngineHooks:
        """Around each request of the functions' engine client: refuse one from an invocation
        abandoned at its Timeout; note each answer (the engine is up)."""
        from workerless.engines import EngineHooks

        return EngineHooks(
            request_guards=(_refuse_abandoned_engine_call,), response_watchers=(self.engine_health.answered_by,)
        )

    def _reset_library(self, *, stopping: bool = False) -> None:
        """Start the library's container over (engine, store, queues, boto3 clients, settings):
        :func:`workerless.runtime.reset`, with :meth:`new_wiring` installed unless ``stopping``.

        At start: what a previous run built points at a finished mock and an old environment, and its
        clients lack the loop hooks. At stop: closes the engine's HTTP client.
        """
        from workerless import runtime

        runtime.reset(None if stopping else self.new_wiring())

    def _create_resources(self) -> None:
        import boto3
        from botocore.config import Config

        session = boto3.session.Session(region_name=self.place.region)
        config = Config(retries={"mode": "standard", "max_attempts": 3})
        self._sqs = session.client("sqs", config=config)
        self._dynamodb = session.client("dynamodb", config=config)
        pending = list(self.template.queues)
        # Dead-letter queues first: a redrive policy names its target's ARN.
        while pending:
            ready = [q for q in pending if q.dead_letter_queue_id is None or q.dead_letter_queue_id in self._queue_urls]
            if not ready:
                raise TemplateError(f"redrive policies form a cycle: {', '.join(q.logical_id for q in pending)}")
            for spec in ready:
                self._create_queue(spec)
                pending.remove(spec)
        for table in self.template.tables:
            kwargs: dict[str, Any] = {
                "TableName": table.name,
                "KeySchema": list(table.key_schema),
                "AttributeDefinitions": list(table.attribute_definitions),
                "BillingMode": "PAY_PER_REQUEST",
            }
            if table.global_secondary_indexes:
                kwargs["GlobalSecondaryIndexes"] = [
                    {k: v for k, v in index.items() if k != "ProvisionedThroughput"}
                    for index in table.global_secondary_indexes
                ]
            self._dynamodb.create_table(**kwargs)
            if table.ttl_attribute:
                # moto records the setting but never expires items (nor does local mode).
                self._dynamodb.update_time_to_live(
                    TableName=table.name,
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
                )
        if self.template.ssm_parameters:
            # The routes' parameters (the route loop's), as CloudFormation creates them before the
            # functions: the poller reads them with GetParametersByPath (its role checked).
            ssm = session.client("ssm", config=config)
            for parameter in self.template.ssm_parameters:
                ssm.put_parameter(Name=parameter.name, Value=parameter.value, Type=parameter.type, Tier=parameter.tier)
        if self.template.buckets:
            # The claim check's bucket (moto's S3, the same PutObject / GetObject calls as on AWS).
            # Its lifecycle rule is not emulated: nothing in a local run lives for a week.
            from workerless_devkit.local.stack.create import create_bucket

            s3 = session.client("s3", config=config)
            for bucket in self.template.buckets:
                create_bucket(s3, bucket.name)

    def _create_stack(self, bundle: Bundle) -> None:
        """Create the bundle's stack in the mock and take what runs from it (instead of
        :meth:`_create_resources`): the template, the environment, the queues."""
        import boto3
        from botocore.config import Config

        from workerless_devkit.local.stack import load_stack

        session = boto3.session.Session(region_name=self.place.region)
        self._code_dir = Path(tempfile.mkdtemp(prefix=f"workerless-{bundle.stack_name}-"))
        started = time.monotonic()
        self.stack = load_stack(bundle, session, self._code_dir, parameters=self._parameters)
        template = self.stack.template
        log.info(
            "stack %s created from %s in %.1f s: %d functions, %d queues; not created by moto's CloudFormation: %s",
            bundle.stack_name,
            bundle.transformed_path,
            time.monotonic() - started,
            len(template.functions),
            len(template.queues),
            ", ".join(sorted(self.stack.created.skipped)) or "-",
        )
        rules.check_template(template)
        self._template = template
        self.environment = self._environment()
        self._apply_environment()
        config = Config(retries={"mode": "standard", "max_attempts": 3})
        self._sqs = session.client("sqs", config=config)
        self._dynamodb = session.client("dynamodb", config=config)
        for queue in template.queues:
            self._queue_urls[queue.logical_id] = queue.url
            self._queue_by_name[queue.name] = queue

    def _create_engine_secret(self) -> None:
        """The env file's engine values as an embedded secret, named to the functions as in AWS."""
        import boto3

        assert self.env_file is not None  # checked in __init__
        client: Any = boto3.session.Session(region_name=self.place.region).client("secretsmanager")
        answer = client.create_secret(
            Name=f"{self.stack_name}/engine", SecretString=self.env_file.read_text(encoding="utf-8")
        )
        self._secret_arn = str(answer["ARN"])
        os.environ["WORKERLESS_SECRET_ARN"] = self._secret_arn  # restored at stop (REMOVED_ENV saved it)
        self._reset_library()

    def _enable_iam(self) -> None:
        """Render every function's role and refuse (or warn about) what AWS would, before anything runs."""
        from workerless_devkit.local.iam.roles import render_roles, secret_parameter

        place = self.place

        def secret_arn(secret_id: str) -> str | None:
            return _embedded_secret_arn(secret_id, place)

        # Each table's partition key: what DynamoDB puts in a call's dynamodb:LeadingKeys.
        partition_keys = {
            table.arn: key["AttributeName"]
            for table in self.template.tables
            for key in table.key_schema
            if key.get("KeyType") == "HASH"
        }
        if self.stack is not None:  # a bundle's: the roles as created in IAM
            self._install_enforcer(
                IamEnforcer(self.stack.roles, secret_arn=secret_arn, place=place, partition_keys=partition_keys)
            )
            return
        overrides: dict[str, str] = {}
        if self._secret_arn is not None:
            name = secret_parameter(self.template)
            if name is None:
                raise TemplateError(
                    "engine_secret: the functions' WORKERLESS_SECRET_ARN must be !Ref of a template parameter, "
                    "so that their roles can name the secret"
                )
            overrides[name] = self._secret_arn
        roles = render_roles(self.template, parameters=overrides, stack_name=self.stack_name)
        self._install_enforcer(IamEnforcer(roles, secret_arn=secret_arn, place=place, partition_keys=partition_keys))

    def _install_enforcer(self, enforcer: IamEnforcer) -> None:
        for warning in enforcer.check_platform(self.template):
            log.warning("IAM: %s", warning)
        self.iam = enforcer

    def _create_queue(self, spec: QueueSpec) -> None:
        attributes = {
            "VisibilityTimeout": str(spec.visibility_timeout),
            "DelaySeconds": str(spec.delay_seconds),
            "MaximumMessageSize": str(spec.maximum_message_size),
        }
        if spec.message_retention_seconds is not None:
            attributes["MessageRetentionPeriod"] = str(spec.message_retention_seconds)
        if spec.receive_wait_seconds is not None:
            attributes["ReceiveMessageWaitTimeSeconds"] = str(spec.receive_wait_seconds)
        if spec.fifo:
            attributes["FifoQueue"] = "true"
        if spec.dead_letter_queue_id is not None:
            target = self.template.queue(spec.dead_letter_queue_id)
            # SQS's default maxReceiveCount is 10; the template's value is passed as written.
            max_receive = spec.max_receive_count if spec.max_receive_count is not None else 10
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": target.arn, "maxReceiveCount": max_receive}
            )
        url = self._sqs.create_queue(QueueName=spec.name, Attributes=attributes)["QueueUrl"]
        if loop.queue_name_of(url) != spec.name:  # pragma: no cover - moto names queues as asked
            raise TemplateError(f"{spec.logical_id}: embedded SQS created {url}, expected a queue named {spec.name}")
        self._queue_urls[spec.logical_id] = url
        self._queue_by_name[spec.name] = spec

    def _load_functions(self) -> None:
        for spec in self.template.functions:
            self._handlers[spec.logical_id] = _load_handler(spec)
            for event in spec.sqs_events:
                if event.enabled:
                    queue = self.template.queue(event.queue_id)
                    self._consumers.setdefault(queue.name, set()).add(spec.logical_id)
            for ignored in spec.ignored_events:
                log.info("%s: event %s is not emulated locally", spec.logical_id, ignored)

    def _start_sources(self) -> None:
        for spec in self.template.functions:
            for event in spec.sqs_events:
                if not event.enabled:
                    continue
                source = _Source(
                    function=spec,
                    event=event,
                    queue=self.template.queue(event.queue_id),
                    concurrency=event.maximum_concurrency or self.default_concurrency,
                )
                self._spawn(f"sqs:{spec.logical_id}:{event.name}", self._pump, source)
            for schedule in spec.schedule_events:
                if not schedule.enabled:
                    continue
                if schedule_interval(schedule, self.schedule_seconds) is None:
                    log.info(
                        "%s: schedule %s (%s) is not emulated locally without schedule_seconds",
                        spec.logical_id,
                        schedule.name,
                        schedule.expression,
                    )
                    continue
                self._spawn(f"schedule:{spec.logical_id}:{schedule.name}", self._schedule, spec, schedule)

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    # ------------------------------------------------------------------------------------------
    # Invocation

    def _new_concurrency(self) -> Concurrency:
        reserved = {f.logical_id: f.reserved_concurrency for f in self.template.functions}
        return Concurrency(self.account_concurrency, {k: v for k, v in reserved.items() if v is not None})

    def _inject_throttle(self, spec: FunctionSpec, event: Any) -> bool:
        """Whether to throttle this invocation although concurrency is left (a fault: see
        :class:`~workerless_devkit.chaos.topology.ChaosTopology`). Never, here."""
        return False

    def _invoke(self, spec: FunctionSpec, event: Any, *, depth: int, work: bool) -> tuple[bool, Any]:
        """Run one invocation if Lambda's concurrency admits it (else it is throttled: (False,
        :class:`Throttled`), its code never ran); see :meth:`_run_invocation`."""
        function_id = spec.logical_id
        if self._inject_throttle(spec, event):
            self.concurrency.throttled(function_id)
            throttled = Throttled(function_id, "injected: the account's unreserved concurrency is in use")
        elif not self.concurrency.acquire(function_id):
            reserved = self.concurrency.reserved.get(function_id)
            why = (
                f"its reserved concurrency ({reserved}) is in use"
                if reserved is not None
                else f"the account's unreserved concurrency ({self.concurrency.unreserved}) is in use"
            )
            throttled = Throttled(function_id, why)
        else:
            try:
                return self._run_invocation(spec, event, depth=depth, work=work)
            finally:
                self.concurrency.release(function_id)
        log.warning("%s: invocation throttled: %s", function_id, throttled.why)
        return False, throttled

    def _run_invocation(self, spec: FunctionSpec, event: Any, *, depth: int, work: bool) -> tuple[bool, Any]:
        """Run one invocation and wait for it at most the function's Timeout, as Lambda does.

        The handler runs on its own thread. At the Timeout the caller stops waiting: the invocation
        failed ("Task timed out"), its concurrency slot is free, and (for an SQS batch) nothing is
        deleted, so its messages return after the visibility timeout. Lambda would have stopped the
        function there; a thread cannot be stopped, so it is abandoned: every AWS or engine call it
        makes from then on is refused (:class:`~workerless_devkit.local.loop.InvocationAbandonedError`) and
        whatever it returns is discarded.
        """
        handler = self._handlers[spec.logical_id]
        context = LocalLambdaContext(spec)
        with self._lock:
            self._invocations[spec.logical_id] += 1
            self._running += 1
            if work:
                self._work_running += 1
                self._last_activity = time.monotonic()
        scope = loop.InvocationScope(
            self,
            spec.logical_id,
            depth,
            timeout=spec.timeout,
            iam=self.iam,
            function_name=spec.function_name,
            request_id=context.aws_request_id,
        )
        with self._lock:
            self._waiting.add(id(scope))
        run = _Run(handler, event, context, scope)
        scope.control.kill = run.kill
        watch = None
        if self.memory is not None:
            meter = self.memory
            watch = meter.watch(spec.logical_id, spec.memory_size, run.kill)
            scope.control.before_call = functools.partial(meter.check, watch)
        thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(run,),
            name=f"{spec.logical_id}:{context.aws_request_id[:8]}",
            daemon=True,
        )
        finished = False
        try:
            thread.start()
            finished = run.wait(spec.timeout)
            if watch is not None and self.memory is not None:
                self.memory.unwatch(watch)
        finally:
            with self._lock:
                self._running -= 1
                self._waiting.discard(id(scope))
                promoted = id(scope) in self._promoted
                self._promoted.discard(id(scope))
                if work or promoted:
                    self._work_running -= 1
                    self._last_activity = time.monotonic()
        if not finished:
            # Lambda's own words for it.
            result: BaseException | Any
            ok, result = False, TimeoutError(f"Task timed out after {spec.timeout:.2f} seconds")
            log.warning("%s: task timed out after %d s (Timeout): abandoned", spec.logical_id, spec.timeout)
        else:
            ok, result = run.ok, run.result
            if watch is not None and watch.killed is not None:
                # Its memory passed MemorySize just before it returned: Lambda had killed it by then.
                ok, result = False, watch.killed
            if isinstance(result, OutOfMemory):
                log.warning("%s: %s", spec.logical_id, result)
            elif not ok:
                log.warning(
                    "%s failed: %s: %s",
                    spec.logical_id,
                    type(result).__name__,
                    result,
                    exc_info=result if log.isEnabledFor(logging.DEBUG) else None,
                )
        if not ok:
            with self._lock:
                self._errors[spec.logical_id] += 1
        return ok, result

    def _busy(self) -> bool:
        with self._lock:
            if self._work_running:
                return True
            background = set(self._timer_queues)
            drained = set(self._drained)
        # A drained queue outside the template (the function's own business) is not the topology's.
        drained &= set(self._queue_by_name)
        consumed = [name for name in sorted({*self._consumers, *drained}) if name not in background]
        for name in consumed:
            spec = self._queue_by_name[name]
            attributes = self._sqs.get_queue_attributes(
                QueueUrl=self._queue_urls[spec.logical_id],
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            if int(attributes.get("ApproximateNumberOfMessages", 0)) or int(
                attributes.get("ApproximateNumberOfMessagesNotVisible", 0)
            ):
                return True
        return False

    # -- schedules ------------------------------------------------------------------------------

    def _schedule_delay(
        self, spec: FunctionSpec, schedule: ScheduleEventSpec, interval: float, rng: random.Random
    ) -> float:
        """How late after its nominal moment this firing comes: EventBridge runs a scheduled rule
        within its minute, not on the second (``schedule_drift``); 0 when not drifting."""
        return rng.uniform(0.0, min(60.0, interval)) if self.schedule_drift else 0.0

    def _schedule(self, spec: FunctionSpec, schedule: ScheduleEventSpec) -> None:
        interval = schedule_interval(schedule, self.schedule_seconds)
        if interval is None:  # pragma: no cover - _start_sources does not start these
            return
        rng = random.Random(f"{self.seed}:{spec.logical_id}:{schedule.name}")
        next_run = time.monotonic()  # fire at start: a local run should not wait a minute for the first tick
        while True:
            fire_at = next_run + self._schedule_delay(spec, schedule, interval, rng)
            if self._stopping.wait(max(0.0, fire_at - time.monotonic())):
                return
            event = schedule.input if schedule.input is not None else _scheduled_event(spec, schedule)
            self._deliver_async(spec, event)
            # The next nominal moment (drift delays a firing, not the ones after it); never in the
            # past, so a long invocation does not make the schedule fire twice in a row.
            next_run = max(next_run + interval, time.monotonic())

    def _deliver_async(self, spec: FunctionSpec, event: Any) -> None:
        """An asynchronous (EventBridge) invocation: run now; if throttled, Lambda keeps the event
        and retries it in the background (:func:`~workerless_devkit.local.concurrency.run_async`)."""
        ok, result = self._invoke(spec, event, depth=0, work=False)
        if ok or not isinstance(result, Throttled):
            # It ran. A function error is not retried locally (Lambda retries it MaximumRetryAttempts
            # times, 2 by default; template.yaml's scheduled functions set 0).
            return
        first = [True]

        def attempt() -> bool:
            if first[0]:  # the throttled attempt above
                first[0] = False
                return False
            _, again = self._invoke(spec, event, depth=0, work=False)
            return not isinstance(again, Throttled)

        def retry() -> None:
            try:
                outcome = run_async(attempt, spec.maximum_event_age, clock=time.monotonic, sleep=self._stopping.wait)
                with self._lock:
                    self._async_outcomes.append((spec.logical_id, outcome))
                if not outcome.ran and not outcome.stopped:
                    log.warning(
                        "%s: a scheduled event throttled %d time(s) dropped, %.0f s old (MaximumEventAgeInSeconds %d)",
                        spec.logical_id,
                        outcome.throttles,
                        outcome.age,
                        spec.maximum_event_age,
                    )
            finally:
                with self._lock:
                    self._batches.discard(threading.current_thread())

        thread = threading.Thread(target=retry, name=f"{spec.logical_id}#async-retry", daemon=True)
        with self._lock:
            self._batches.add(thread)
        thread.start()

    # -- SQS event source -----------------------------------------------------------------------

    def _pump(self, source: _Source) -> None:
        slots = threading.BoundedSemaphore(source.concurrency)
        url = self._queue_urls[source.queue.logical_id]
        while not self._stopping.is_set():
            if not slots.acquire(timeout=0.2):
                continue
            try:
                messages = self._receive(url, source)
            except Exception as exc:  # noqa: BLE001 - the event source keeps polling, as Lambda's does
                slots.release()
                if not self._stopping.is_set():
                    log.warning(
                        "%s: receive from %s failed: %s", source.function.logical_id, source.queue.logical_id, exc
                    )
                self._stopping.wait(0.5)
                continue
            if not messages:
                slots.release()
                continue
            thread = threading.Thread(
                target=self._run_batch,
                args=(source, url, messages, slots),
                name=f"{source.function.logical_id}#{uuid.uuid4().hex[:8]}",
                daemon=True,
            )
            with self._lock:
                self._batches.add(thread)
            thread.start()

    def _receive(self, url: str, source: _Source) -> list[dict[str, Any]]:
        window = source.event.batching_window_seconds
        if self.max_batching_window_seconds is not None:
            window = min(window, self.max_batching_window_seconds)
        deadline = time.monotonic() + window
        messages: list[dict[str, Any]] = []
        while len(messages) < source.event.batch_size and not self._stopping.is_set():
            answer = self._sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(10, source.event.batch_size - len(messages)),
                WaitTimeSeconds=0 if messages else self.wait_seconds,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            received = answer.get("Messages") or []
            messages.extend(received)
            if not messages or time.monotonic() >= deadline:
                break
            if not received:
                self._stopping.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        return messages

    def _run_batch(
        self, source: _Source, url: str, messages: list[dict[str, Any]], slots: threading.BoundedSemaphore
    ) -> None:
        spec = source.function
        with self._lock:
            background = source.queue.name in self._timer_queues
        try:
            deliver: list[dict[str, Any]] = []
            depth = 0
            for message in messages:
                owner, message_depth = self._depth_of(message, source.queue.name)
                if owner != spec.logical_id:
                    message_depth = 0
                if message_depth >= self.loop_limit and not spec.allows_recursion:
                    self._stop_loop(source, url, message, message_depth)
                    continue
                depth = max(depth, message_depth)
                deliver.append(message)
            if not deliver:
                return
            event = {"Records": [_record(message, source.queue) for message in deliver]}
            ok, result = self._invoke(spec, event, depth=depth, work=not background)
            if not ok:
                return  # the whole batch returns to the queue after the visibility timeout
            done = deliver
            if source.event.report_batch_item_failures:
                failed = _batch_item_failures(result, {m["MessageId"] for m in deliver})
                if failed is None:
                    log.warning(
                        "%s returned an invalid batchItemFailures response: the whole batch is retried", spec.logical_id
                    )
                    return
                done = [m for m in deliver if m["MessageId"] not in failed]
            self._delete(url, done)
        except Exception:
            if not self._stopping.is_set():
                log.exception("%s: event source error", spec.logical_id)
        finally:
            slots.release()
            with self._lock:
                self._batches.discard(threading.current_thread())

    def _delete(self, url: str, messages: list[dict[str, Any]]) -> None:
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            answer = self._sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
            for failure in answer.get("Failed") or []:
                log.warning(
                    "delete of a processed message failed (%s): it will be delivered again", failure.get("Code")
                )
            with self._lock:
                for message in chunk:
                    self._depths.pop(message["MessageId"], None)

    def _stop_loop(self, source: _Source, url: str, message: dict[str, Any], depth: int) -> None:
        """Do what Lambda does when it stops a recursive loop: the message does not reach the
        function; it goes to the source queue's dead-letter queue if it has one, else it is dropped."""
        moved_to: str | None = None
        if source.queue.dead_letter_queue_id is not None:
            moved_to = source.queue.dead_letter_queue_id
            kwargs: dict[str, Any] = {"QueueUrl": self._queue_urls[moved_to], "MessageBody": message["Body"]}
            if message.get("MessageAttributes"):
                kwargs["MessageAttributes"] = message["MessageAttributes"]
            self._sqs.send_message(**kwargs)
        self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        with self._lock:
            self._depths.pop(message["MessageId"], None)
            self._stopped_loops.append(
                StoppedLoop(
                    function=source.function.logical_id,
                    queue=source.queue.logical_id,
                    message_id=message["MessageId"],
                    depth=depth,
                    moved_to=moved_to,
                )
            )
        log.warning(
            "recursive loop stopped: %s (message %s from %s, chain depth %d; set RecursiveLoop: Allow if intended)%s",
            source.function.logical_id,
            message["MessageId"],
            source.queue.logical_id,
            depth,
            f"; moved to {moved_to}" if moved_to else "; dropped",
        )


# ------------------------------------------------------------------------------------------------
# Helpers


class _Run:
    """One invocation's call of its handler, run on a thread of its own so that the caller can stop
    waiting at the function's Timeout (:meth:`wait`); a result that comes after that is discarded."""

    def __init__(self, handler: Handler, event: Any, context: LocalLambdaContext, scope: loop.InvocationScope) -> None:
        self._handler = handler
        self._event = event
        self._context = context
        self._scope = scope
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.ok = False
        self.result: Any = None

    def __call__(self) -> None:
        token = loop.enter_scope(self._scope)
        started = time.monotonic()
        ok, result = False, None
        try:
            result = self._handler(self._event, self._context)
            ok = True
        except BaseException as exc:  # noqa: BLE001 - whatever ends the handler ends the invocation
            result = exc
        finally:
            loop.exit_scope(token)
        with self._lock:
            if not self._scope.abandoned.is_set():
                self.ok, self.result = ok, result
                self._done.set()
                return
        log.info(
            "%s: an invocation abandoned (%s) returned after %.1f s; its result is discarded",
            self._scope.function_id,
            self._scope.control.ended_by or "at its Timeout",
            time.monotonic() - started,
        )

    def kill(self, reason: BaseException) -> bool:
        """End the invocation now, as Lambda does when its runtime dies (out of memory): it failed
        with ``reason``, the caller stops waiting, and every later AWS or engine call of its code is
        refused. False if it had already returned."""
        with self._lock:
            if self._done.is_set() or self._scope.abandoned.is_set():
                return False  # returned, or already abandoned at its Timeout
            self._scope.control.ended_by = f"was killed ({type(reason).__name__})"
            self._scope.abandoned.set()
            self.ok, self.result = False, reason
            self._done.set()
            return True

    def wait(self, timeout: float) -> bool:
        """True once the handler has returned; False at ``timeout``, having abandoned the invocation."""
        if self._done.wait(timeout):
            return True
        with self._lock:
            if self._done.is_set():
                return True
            self._scope.abandoned.set()
            return False


def _refuse_abandoned_engine_call() -> None:
    """The engine clients' request guard (workerless.engines): an abandoned invocation's engine
    requests are refused as its AWS calls are (Lambda would have stopped the code making them)."""
    loop.refuse_if_abandoned("engine")


def schedule_interval(schedule: ScheduleEventSpec, override: float | None) -> float | None:
    """Seconds between a schedule's local firings: ``override`` (``schedule_seconds``) when given,
    else the template's rate; None for a cron schedule without an override (not emulated)."""
    if override is not None:
        return override
    return schedule.seconds


def _embedded_secret_arn(secret_id: str, place: Place = LOCAL_PLACE) -> str | None:
    """The full ARN of the embedded Secrets Manager's secret (in ``place``) named or ARN'd
    ``secret_id``, if any."""
    try:
        from moto.secretsmanager.models import secretsmanager_backends

        secret = secretsmanager_backends[place.account_id][place.region].secrets.get(secret_id)
    except Exception:  # noqa: BLE001 - unknown to moto (or moto changed): evaluated as given
        return None
    return str(secret.arn) if secret is not None else None


_moto_write_lock = threading.RLock()


def serialise_moto_dynamodb_writes() -> None:
    """Make moto's DynamoDB writes atomic, as DynamoDB's are.

    DynamoDB applies a conditional write atomically per item. moto checks the condition and then
    writes, in two Python steps: two threads can both pass the check. Local mode runs every
    function in threads of one process, so without this a claim could be won twice (measured: 42
    of 500 racing claim pairs with a short thread switch interval) — a fault of the emulation, not
    of the pipeline. Idempotent; affects only the in-process moto backend.
    """
    import functools

    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "_workerless_serialised", False):
        return
    for name in ("put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"):
        original = getattr(DynamoDBBackend, name)

        def locked(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with _moto_write_lock:
                return __original(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, functools.wraps(original)(locked))
    DynamoDBBackend._workerless_serialised = True  # type: ignore[attr-defined]


def _load_handler(spec: FunctionSpec) -> Handler:
    """Import ``Handler`` (module.function) from the CodeUri directory, as Lambda's bootstrap does.

    Each function gets its own module name (directories like ``charge-payment`` are not valid
    package names, and every function has an ``app.py``); its directory is on ``sys.path`` while it
    is imported, as the task root is in Lambda.
    """
    module_path, _, attribute = spec.handler.rpartition(".")
    file = spec.code_dir.joinpath(*module_path.split(".")).with_suffix(".py")
    if not file.is_file():
        raise FunctionLoadError(f"{spec.logical_id}: handler file {file} not found (Handler {spec.handler})")
    module_name = "workerless_local_fn_" + re.sub(r"\W", "_", f"{spec.logical_id}.{module_path}")
    import_spec = importlib.util.spec_from_file_location(module_name, file)
    if import_spec is None or import_spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise FunctionLoadError(f"{spec.logical_id}: cannot import {file}")
    module = importlib.util.module_from_spec(import_spec)
    sys.modules[module_name] = module
    code_dir = str(spec.code_dir)
    sys.path.insert(0, code_dir)
    try:
        import_spec.loader.exec_module(module)
    except ConfigurationError:
        sys.modules.pop(module_name, None)
        raise
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise FunctionLoadError(f"{spec.logical_id}: importing {file} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(code_dir)
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise FunctionLoadError(f"{spec.logical_id}: {file} has no callable {attribute!r} (Handler {spec.handler})")
    return handler  # type: ignore[no-any-return]


def _record(message: Mapping[str, Any], queue: QueueSpec) -> dict[str, Any]:
    """One SQS event record, shaped as Lambda's SQS event source delivers it."""
    attributes = {str(k): str(v) for k, v in (message.get("Attributes") or {}).items()}
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": attributes,
        "messageAttributes": {
            name: _message_attribute(value) for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue.arn,
        "awsRegion": queue.place.region,
    }
    if message.get("MD5OfMessageAttributes"):
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def _message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    def b64(data: Any) -> str:
        return base64.b64encode(data if isinstance(data, bytes) else str(data).encode()).decode()

    out: dict[str, Any] = {
        "stringListValues": list(value.get("StringListValues") or []),
        "binaryListValues": [b64(v) for v in value.get("BinaryListValues") or []],
        "dataType": value.get("DataType", "String"),
    }
    if "StringValue" in value:
        out["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        out["binaryValue"] = b64(value["BinaryValue"])
    return out


def _batch_item_failures(result: Any, message_ids: set[str]) -> set[str] | None:
    """The failed message ids of a partial batch response; None when the response is invalid.

    Lambda's rules: no response, no ``batchItemFailures`` or an empty list is complete success; an
    item without an identifier, or with one that is not in the batch, fails the whole batch.
    """
    if not isinstance(result, dict) or result.get("batchItemFailures") is None:
        return set()
    failures = result["batchItemFailures"]
    if not isinstance(failures, list):
        return None
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or identifier not in message_ids:
            return None
        failed.add(identifier)
    return failed


def _scheduled_event(spec: FunctionSpec, schedule: ScheduleEventSpec) -> dict[str, Any]:
    """An EventBridge scheduled event, as a Schedule event source delivers it."""
    place = spec.place
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": place.account_id,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": place.region,
        "resources": [place.rule_arn(f"{spec.function_name}-{schedule.name}")],
        "detail": {},
    }
