"""Run every function of a SAM template in one process, on an embedded SQS, DynamoDB and S3 (moto).

:class:`LocalTopology` does what AWS does around the functions, and nothing about what they do. It
is a facade composing one collaborator per part of AWS it stands in for:

- :mod:`~workerless_devkit.local.provision`: CloudFormation and IAM, inside ``moto.mock_aws``: the
  template's resources, created with the same boto3 calls as in AWS; every AWS call of a function held
  to its role (:mod:`~workerless_devkit.local.iam`) and to AWS's limits (:mod:`~workerless_devkit.local.limits`);
- :mod:`~workerless_devkit.local.environment`: one process environment, the union of the functions';
- :mod:`~workerless_devkit.local.host`: imports each handler from its CodeUri directory, runs each
  invocation within Lambda's concurrency and its function's Timeout (an abandoned invocation's later
  AWS and engine calls are refused) and, when asked (``memory_limits``), its MemorySize;
- :mod:`~workerless_devkit.local.event_source`: Lambda's SQS event source mapping, one per SQS event;
- :mod:`~workerless_devkit.local.scheduler`: Schedule events as EventBridge fires them;
- :mod:`~workerless_devkit.local.recursion`: Lambda's recursive loop detection;
- :mod:`~workerless_devkit.local.idle`: when a run has nothing left to do.

Or it runs the stack a deploy creates, from a rehearsal bundle (:meth:`LocalTopology.from_bundle`).

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

import contextlib
import logging
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workerless.errors import ConfigurationError

from workerless_devkit.local import limits, loop, provision, rules, sqs_lag
from workerless_devkit.local.concurrency import ACCOUNT_CONCURRENCY, AsyncOutcome, Concurrency
from workerless_devkit.local.engine_health import EngineHealth
from workerless_devkit.local.environment import ProcessEnvironment, function_environment
from workerless_devkit.local.event_source import MappingRuntime, SqsEventSourceMapping, mappings_of
from workerless_devkit.local.host import FunctionHost, Handler, ThreadSet
from workerless_devkit.local.iam.enforce import IamEnforcer
from workerless_devkit.local.idle import IdleTimeout, IdleTracker, QueueDepth, queue_depths, run_until, wait_for
from workerless_devkit.local.library import LibraryAttachments
from workerless_devkit.local.logs import LogFormat, application_levels, local_logging
from workerless_devkit.local.memory import RUNTIME_BASELINE_MB, MemoryMeter
from workerless_devkit.local.polls import PollWatch
from workerless_devkit.local.provision import EmbeddedAws
from workerless_devkit.local.recursion import LoopDetector, StoppedLoop
from workerless_devkit.local.scheduler import Scheduler, drift
from workerless_devkit.local.stack.bundle import Bundle
from workerless_devkit.local.summary import Summary, get_summary, reset_summary
from workerless_devkit.local.template import STACK_NAME, FunctionSpec, LocalTemplate, Place, ScheduleEventSpec
from workerless_devkit.local.tracker import TopologyTracker

if TYPE_CHECKING:
    from workerless.observability import Listener
    from workerless.wiring import Hooks, Wiring

    from workerless_devkit.local.stack import StackView

__all__ = ["IdleTimeout", "LocalTopology", "QueueDepth", "StoppedLoop"]

log = logging.getLogger("workerless_devkit.local")


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
        listeners: Sequence[Listener] = (),
    ) -> None:
        if schedule_seconds is not None and schedule_seconds <= 0:
            raise ConfigurationError("schedule_seconds must be positive", key="schedule_seconds")
        self._template, self._bundle, stack_name, place = provision.open_stack(
            template_path, bundle, parameters, route_settings, stack_name=stack_name, engine_secret=engine_secret
        )
        self._parameters = dict(parameters or {})
        #: The stack read back from the embedded CloudFormation (a bundle's run, once started).
        self.stack: StackView | None = None
        self._code_dir: Path | None = None
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

        self._stopping = threading.Event()
        self._started = False
        self._mock: Any = None
        self._process_env = ProcessEnvironment()
        self._aws: EmbeddedAws | None = None
        self._threads = ThreadSet()
        self._idle = IdleTracker()
        self._loops = LoopDetector()
        #: What the botocore hooks report to, from inside this topology's invocations.
        self._tracker = TopologyTracker(self._loops, self._idle)
        #: Whether the engine answered the poller (``workerless local --until-idle`` fails if never).
        self.engine_health = EngineHealth()
        #: Polls in progress in the functions (workerless_devkit.local.polls): a run never ends in one.
        self.polls = PollWatch(self._promote_current)
        #: ``listeners`` hear every lifecycle step of the functions (through each wiring's hooks).
        self._library = LibraryAttachments(self.engine_health, self._promote_current, listeners)
        self._limits = limits.LimitState()
        self.seed = seed
        self.schedule_drift = schedule_drift
        self.account_concurrency = account_concurrency
        self._host = FunctionHost(self._tracker, self._idle, Concurrency(account_concurrency))
        self._host.polls = self.polls
        #: The function handlers by logical id (the host's; loaded at start).
        self._handlers: dict[str, Handler] = self._host.handlers
        if self._template is not None:
            self.concurrency = self._new_concurrency()
        #: The memory meter (None: memory_limits off).
        self.memory: MemoryMeter | None = MemoryMeter(memory_baseline_mb) if memory_limits else None
        self._host.memory = self.memory
        self._scheduler = Scheduler(self._invoke, self._schedule_delay, self._stopping, self._threads, seed=seed)

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

    @property
    def concurrency(self) -> Concurrency:
        """Lambda's concurrency for this stack's functions (a template's: now; a bundle's: at start)."""
        return self._host.concurrency

    @concurrency.setter
    def concurrency(self, value: Concurrency) -> None:
        self._host.concurrency = value

    @property
    def iam(self) -> IamEnforcer | None:
        """The IAM check of this topology (built at start; None when enforce_iam is off)."""
        return self._host.iam

    @property
    def invocations(self) -> dict[str, int]:
        """Invocations so far, per function logical id."""
        return self._host.invocations

    @property
    def drained_queues(self) -> frozenset[str]:
        """Logical ids of the queues a function has received from itself (a scheduled drain's): from
        then on a message waiting there keeps the topology from being idle."""
        names = self._idle.drained()
        return frozenset(spec.logical_id for name, spec in self._embedded.queue_by_name.items() if name in names)

    @property
    def errors(self) -> dict[str, int]:
        """Invocations that raised or timed out, per function logical id."""
        return self._host.errors

    @property
    def throttles(self) -> dict[str, int]:
        """Invocations Lambda throttled (no concurrency left for them), per function logical id."""
        return dict(self.concurrency.throttles)

    @property
    def async_outcomes(self) -> list[tuple[str, AsyncOutcome]]:
        """Every throttled scheduled event and what became of it (retried until it ran, or dropped)."""
        return self._scheduler.async_outcomes

    @property
    def stopped_loops(self) -> list[StoppedLoop]:
        """Deliveries stopped by the recursive-loop limit."""
        return self._loops.stopped_loops

    @property
    def summary(self) -> Summary:
        return get_summary()

    def queue_url(self, logical_id: str) -> str:
        return self._embedded.queue_urls[logical_id]

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
        token = loop.enter_scope(loop.InvocationScope(self._tracker, function_id, 0, iam=self.iam))
        try:
            yield
        finally:
            loop.exit_scope(token)

    def queue_depths(self) -> dict[str, QueueDepth]:
        """Every queue's approximate depth, by logical id."""
        return queue_depths(self._sqs, self.template.queues, self._embedded.queue_urls)

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

        provision.install_emulation()
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
                self._aws = EmbeddedAws.connect(self.place)
                self._tracker.queue_by_name = self._aws.queue_by_name
                provision.create_resources(self.template, self._aws)
            if self.engine_secret:
                self._create_engine_secret()
            if self.enforce_iam:
                self._host.iam = provision.iam_enforcer(
                    self.template, self.place, self.stack, self._secret_arn, self.stack_name
                )
            if self._bundle is not None:
                self.concurrency = self._new_concurrency()
            self._load_functions()
        except BaseException:
            self.stop()
            raise
        if self._reset_summary:
            reset_summary()
        self._library.listen(True)
        if self.memory is not None:
            self.memory.start()
        self._idle.touch()
        self._start_sources()
        return self

    def stop(self) -> None:
        """Stop the event sources, wait (bounded) for running invocations, tear the embedded AWS down."""
        if not self._started:
            self._stopping.set()
            return
        self._stopping.set()
        deadline = time.monotonic() + self.drain_seconds
        for thread in self._threads.sources:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        for thread in self._threads.batches():
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        still = [t.name for t in self._threads.batches() if t.is_alive()]
        if still:
            log.warning("stopped with %d invocation(s) still running: %s", len(still), ", ".join(sorted(still)))
        # From here on, an invocation that is still running gets an error from any AWS call instead of
        # reaching past the torn-down mock.
        self._tracker.accepting = False
        self._library.listen(False)
        if self.memory is not None:
            self.memory.stop()
        limits.deactivate(self._limits)
        if self.count_lag is not None:
            sqs_lag.deactivate(self.count_lag)
        self._reset_library(stopping=True)
        self._process_env.restore()
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

        What counts as something happening: :mod:`workerless_devkit.local.idle` (in short: a
        message in a consumed queue, an invocation doing work, a summary event, a poll in progress).
        Raises :class:`IdleTimeout` after ``max_seconds``; returns early when ``stop`` is set.
        """
        if not self._started:
            self.start()
        return self._idle.run_until_idle(
            get_summary, self._busy, self.polls, idle_seconds, max_seconds, poll_seconds=poll_seconds, stop=stop
        )

    def run_until(self, done: Callable[[], bool], max_seconds: float, *, poll_seconds: float = 0.25) -> bool:
        """Run until ``done()`` is true (True) or ``max_seconds`` pass (False)."""
        if not self._started:
            self.start()
        return run_until(done, max_seconds, poll_seconds=poll_seconds, stopping=self._stopping)

    def wait(self, stop: threading.Event, max_seconds: float | None = None) -> bool:
        """Run until ``stop`` is set (a signal handler sets it): True; or ``max_seconds`` pass: False."""
        return wait_for(stop, max_seconds)

    # ------------------------------------------------------------------------------------------
    # Setup

    @property
    def _embedded(self) -> EmbeddedAws:
        if self._aws is None:
            raise RuntimeError("the topology is not running")
        return self._aws

    @property
    def _sqs(self) -> Any:
        """The embedded SQS client the event sources and idle detection use."""
        return self._embedded.sqs

    def _environment(self) -> dict[str, str]:
        return function_environment(self.template, self.env_file, engine_secret=self.engine_secret)

    def _apply_environment(self) -> None:
        self._process_env.apply_topology(self.place, self.environment)
        self._reset_library()

    def _promote_current(self) -> None:
        """The current invocation took jobs from the engine: work from then on (:meth:`IdleTracker.promote`)."""
        scope = loop.current_scope()
        if scope is None or scope.tracker is not self._tracker:
            return
        self._idle.promote(id(scope))

    def new_wiring(self) -> Wiring | None:
        """The wiring the loaded functions share, as one Lambda container's (None: the runtime's
        default, built on first use). :class:`~workerless_devkit.chaos.topology.ChaosTopology`
        returns one whose engine injects faults. Here: the runtime's own, with the polls its
        engine makes watched (:attr:`polls`)."""
        from workerless.wiring import Wiring

        return Wiring(engine_decorator=self.polls.decorate, hooks=self.hooks())

    def hooks(self) -> Hooks:
        """The functions' wiring's hooks: around each request of its engine client (refuse one from
        an invocation abandoned at its Timeout; note each answer: the engine is up), and its lifecycle
        listeners (the summary's and ``listeners``)."""
        return self._library.hooks()

    def _reset_library(self, *, stopping: bool = False) -> None:
        """Start the library's container over (engine, store, queues, boto3 clients, settings):
        :func:`workerless.runtime.reset`, with :meth:`new_wiring` installed unless ``stopping``.

        At start: what a previous run built points at a finished mock and an old environment, and its
        clients lack the loop hooks. At stop: closes the engine's HTTP client.
        """
        from workerless import runtime

        runtime.reset(None if stopping else self.new_wiring())

    def _create_stack(self, bundle: Bundle) -> None:
        """Create the bundle's stack in the mock and take what runs from it (instead of
        :func:`~workerless_devkit.local.provision.create_resources`): the template, the environment, the queues."""
        self.stack, self._code_dir = provision.create_stack(bundle, self.place, self._parameters)
        template = self.stack.template
        rules.check_template(template)
        self._template = template
        self.environment = self._environment()
        self._apply_environment()
        self._aws = provision.stack_aws(template, self.place)
        self._tracker.queue_by_name = self._aws.queue_by_name

    def _create_engine_secret(self) -> None:
        """The env file's engine values as an embedded secret, named to the functions as in AWS."""
        assert self.env_file is not None  # checked in __init__
        self._secret_arn = provision.create_engine_secret(self.place, self.stack_name, self.env_file)
        # Restored at stop (REMOVED_ENV saved it).
        self._process_env.apply({"WORKERLESS_SECRET_ARN": self._secret_arn})
        self._reset_library()

    def _load_functions(self) -> None:
        for spec in self.template.functions:
            self._host.load(spec)
            for event in spec.sqs_events:
                if event.enabled:
                    queue = self.template.queue(event.queue_id)
                    self._tracker.consumers.setdefault(queue.name, set()).add(spec.logical_id)
            for ignored in spec.ignored_events:
                log.info("%s: event %s is not emulated locally", spec.logical_id, ignored)

    def _start_sources(self) -> None:
        self._mappings = MappingRuntime(
            sqs=self._sqs,
            queue_urls=self._embedded.queue_urls,
            stopping=self._stopping,
            threads=self._threads,
            idle=self._idle,
            loops=self._loops,
            loop_limit=self.loop_limit,
            wait_seconds=self.wait_seconds,
            max_batching_window_seconds=self.max_batching_window_seconds,
        )
        for spec in self.template.functions:
            for source in mappings_of(spec, self.template, self.default_concurrency):
                name = f"sqs:{spec.logical_id}:{source.event.name}"
                self._threads.spawn(name, source.pump, self._mappings, self._run_batch)
            self._scheduler.start_function(spec, self.schedule_seconds)

    # ------------------------------------------------------------------------------------------
    # Invocation (hooks a subclass overrides: ChaosTopology injects its faults here)

    def _new_concurrency(self) -> Concurrency:
        reserved = {f.logical_id: f.reserved_concurrency for f in self.template.functions}
        return Concurrency(self.account_concurrency, {k: v for k, v in reserved.items() if v is not None})

    def _inject_throttle(self, spec: FunctionSpec, event: Any) -> bool:
        """Whether to throttle this invocation although concurrency is left (a fault: see
        :class:`~workerless_devkit.chaos.topology.ChaosTopology`). Never, here."""
        return False

    def _invoke(self, spec: FunctionSpec, event: Any, *, depth: int, work: bool) -> tuple[bool, Any]:
        """Run one invocation on the function host (:meth:`FunctionHost.invoke`)."""
        inject = self._inject_throttle(spec, event)
        return self._host.invoke(spec, event, depth=depth, work=work, inject_throttle=inject)

    def _busy(self) -> bool:
        aws = self._embedded
        return self._idle.busy(aws.sqs, aws.queue_urls, aws.queue_by_name, set(self._tracker.consumers))

    def _schedule_delay(
        self, spec: FunctionSpec, schedule: ScheduleEventSpec, interval: float, rng: random.Random
    ) -> float:
        """How late after its nominal moment this firing comes: EventBridge runs a scheduled rule
        within its minute, not on the second (``schedule_drift``); 0 when not drifting."""
        return drift(interval, rng) if self.schedule_drift else 0.0

    def _run_batch(
        self,
        source: SqsEventSourceMapping,
        url: str,
        messages: list[dict[str, Any]],
        slots: threading.BoundedSemaphore,
    ) -> None:
        """Deliver one received batch (:meth:`SqsEventSourceMapping.run_batch`), on its own thread."""
        source.run_batch(self._mappings, self._invoke, url, messages, slots)
