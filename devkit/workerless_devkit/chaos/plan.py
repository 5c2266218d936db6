"""Fault kinds, the plan that decides when each fires, and the record of what fired."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class SimulatedCrash(BaseException):
    """The process running this code dies here.

    A BaseException so that no ``except Exception`` in the pipeline (the batch loop, workerless._core.batch;
    the handler wrapper's "any exception fails the job") can treat it as a handler outcome: it
    unwinds the whole invocation, as a killed process would. :class:`ChaosTopology` turns it into
    an invocation failure at the Lambda boundary, where AWS would see the runtime exit.
    """


class Fault(StrEnum):
    """Every fault the chaos suite injects, named after where it hits."""

    # The handler process dies: before its side effect, after it (result not stored), after the
    # result is stored but before it is reported. The Lambda times out mid-run.
    CRASH_BEFORE_EFFECT = "crash_before_effect"
    CRASH_AFTER_EFFECT = "crash_after_effect"
    CRASH_AFTER_STORE = "crash_after_store"
    LAMBDA_TIMEOUT = "lambda_timeout"
    # SQS delivers a job message twice, or again after its visibility timeout while it still runs.
    SQS_DUPLICATE = "sqs_duplicate"
    SQS_REDELIVERY = "sqs_redelivery"
    # The poller dies after activation (before dispatch), or after dispatch (before the ticket).
    POLLER_CRASH_AFTER_ACTIVATE = "poller_crash_after_activate"
    POLLER_CRASH_BEFORE_TICKET = "poller_crash_before_ticket"
    # The engine answers badly (injected through the emulator's admin API, over real HTTP).
    ENGINE_429 = "engine_429"
    ENGINE_503 = "engine_503"
    ENGINE_500 = "engine_500"
    ENGINE_TIMEOUT = "engine_timeout"
    ENGINE_DROP = "engine_drop"
    ENGINE_401 = "engine_401"
    ENGINE_421 = "engine_421"
    # The engine's answer is lost or mangled on the way back after the request took effect (a 200
    # with truncated JSON or an empty body, a connection closed without an answer), or a proxy
    # answers for it (a 502 with an HTML page). Not in the mixed run's rates: opt in with --rate.
    ENGINE_GARBLED_200 = "engine_garbled_200"
    ENGINE_EMPTY_200 = "engine_empty_200"
    ENGINE_502_HTML = "engine_502_html"
    ENGINE_DROP_AFTER = "engine_drop_after"
    # A lease lapses under a slow heartbeat: the heartbeat's next extension is refused (409).
    ENGINE_409_SLOW_HEARTBEAT = "engine_409_slow_heartbeat"
    # DynamoDB / SQS throttle or fail a call (after botocore's own retries).
    DYNAMODB_THROTTLE = "dynamodb_throttle"
    DYNAMODB_ERROR = "dynamodb_error"
    SQS_THROTTLE = "sqs_throttle"
    SQS_ERROR = "sqs_error"
    # SQS's approximate counts lag (up to RunConfig.sqs_count_lag_seconds, as AWS documents them):
    # armed once a run (a positive rate), noted once with how many answers it put behind.
    SQS_COUNT_LAG = "sqs_count_lag"
    # The heartbeat ticket arrives late, or the heartbeat Lambda dies.
    HEARTBEAT_LATE = "heartbeat_late"
    HEARTBEAT_CRASH = "heartbeat_crash"
    # AWS services failing where it hurts most, after the SDK's retries (chaos.services): a
    # conditional DynamoDB write that took effect but whose answer was lost; SendMessageBatch to a
    # job queue refused whole (500), partly (some entries Failed), or sent with its answer lost;
    # S3 (the claim check), SSM Parameter Store (the routes) and Secrets Manager (the engine secret).
    DYNAMODB_WRITE_LOST = "dynamodb_write_lost"
    SQS_BATCH_ERROR = "sqs_batch_error"
    SQS_BATCH_PARTIAL = "sqs_batch_partial"
    SQS_BATCH_LOST = "sqs_batch_lost"
    S3_ERROR = "s3_error"
    SSM_ERROR = "ssm_error"
    SECRETS_ERROR = "secrets_error"
    # Lambda's bad days (workerless_devkit.local.concurrency, .memory): a handler invocation killed
    # past its MemorySize mid-batch (the whole batch fails, its thread's later calls refused); an
    # invocation of a function without reserved concurrency throttled (a burst holds the account's
    # unreserved pool: an SQS batch stays in flight until its visibility timeout, a scheduled event
    # is retried with Lambda's backoff); a scheduled rule fired late within its interval.
    LAMBDA_OUT_OF_MEMORY = "lambda_out_of_memory"
    LAMBDA_THROTTLE = "lambda_throttle"
    SCHEDULE_DRIFT = "schedule_drift"


#: Rates for the long mixed run: every fault on at once.
MIXED_RATES: Mapping[Fault, float] = {
    Fault.CRASH_BEFORE_EFFECT: 0.03,
    Fault.CRASH_AFTER_EFFECT: 0.03,
    Fault.CRASH_AFTER_STORE: 0.03,
    Fault.LAMBDA_TIMEOUT: 0.01,
    Fault.SQS_DUPLICATE: 0.04,
    Fault.SQS_REDELIVERY: 0.03,
    Fault.POLLER_CRASH_AFTER_ACTIVATE: 0.04,
    Fault.POLLER_CRASH_BEFORE_TICKET: 0.04,
    Fault.ENGINE_429: 0.02,
    Fault.ENGINE_503: 0.02,
    Fault.ENGINE_500: 0.02,
    Fault.ENGINE_TIMEOUT: 0.005,
    Fault.ENGINE_DROP: 0.01,
    Fault.ENGINE_401: 0.01,
    Fault.ENGINE_421: 0.005,
    Fault.ENGINE_409_SLOW_HEARTBEAT: 0.02,
    Fault.DYNAMODB_THROTTLE: 0.01,
    Fault.DYNAMODB_ERROR: 0.005,
    Fault.SQS_THROTTLE: 0.01,
    Fault.SQS_ERROR: 0.005,
    # One roll a run, and SQS's counts lag on every day AWS runs (they "may not achieve consistency
    # until at least 1 minute after the producers stop sending"), not on some: always armed, each
    # answer's lag drawn from the run's seed (local.sqs_lag), counted once with how many answers it
    # put behind.
    Fault.SQS_COUNT_LAG: 1.0,
    Fault.HEARTBEAT_LATE: 0.05,
    Fault.HEARTBEAT_CRASH: 0.05,
    **{
        # chaos.services: each where it hurts most (see Fault). S3 is called only for the few
        # large jobs; SSM and Secrets Manager once per container (a cold start), so the first
        # reads always fail (MIXED_LIMITS bounds how many).
        Fault.DYNAMODB_WRITE_LOST: 0.01,
        Fault.SQS_BATCH_ERROR: 0.02,
        Fault.SQS_BATCH_PARTIAL: 0.02,
        Fault.SQS_BATCH_LOST: 0.02,
        Fault.S3_ERROR: 0.3,
        Fault.SSM_ERROR: 1.0,
        Fault.SECRETS_ERROR: 1.0,
    },
    # Per handler job started; per invocation of a function without a reservation (handlers, the
    # dead-letter drain); per scheduled firing.
    Fault.LAMBDA_OUT_OF_MEMORY: 0.01,
    Fault.LAMBDA_THROTTLE: 0.02,
    Fault.SCHEDULE_DRIFT: 0.3,
}

#: Budgets of the mixed run: a cold start's route and secret reads fail twice each, then succeed.
MIXED_LIMITS: Mapping[Fault, int] = {Fault.SSM_ERROR: 2, Fault.SECRETS_ERROR: 2}


@dataclass
class FaultPlan:
    """When each fault fires: a probability per opportunity (each point where it can hurt), a seed,
    and an optional budget per kind (``limits``: at most that many of a kind, for targeted tests).

    Example:
        >>> plan = FaultPlan({Fault.CRASH_AFTER_STORE: 1.0}, limits={Fault.CRASH_AFTER_STORE: 1})
        >>> plan.roll(Fault.CRASH_AFTER_STORE), plan.roll(Fault.CRASH_AFTER_STORE)
        (True, False)
    """

    rates: Mapping[Fault, float] = field(default_factory=dict)
    seed: int = 0
    limits: Mapping[Fault, int] = field(default_factory=dict)
    #: Never hit a job a fault already hit (targeted tests: one fault, one job, one recovery).
    exclusive: bool = False
    #: The first ``sure`` opportunities of each armed kind fire without a roll. A short run has few
    #: opportunities, so how many faults it sees is otherwise down to thread timing (a CI pass once
    #: drew 9); this makes "every armed kind that could fire did" something a test can assert.
    sure: int = 0

    def __post_init__(self) -> None:
        for kind, rate in self.rates.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"rate of {kind} must be between 0 and 1, got {rate}")
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()
        self._fired: Counter[Fault] = Counter()
        self._chances: Counter[Fault] = Counter()
        self.enabled = True

    @classmethod
    def mixed(cls, *, seed: int = 0, scale: float = 1.0, sure: int = 0) -> FaultPlan:
        """Every fault on at once (the long mixed run), rates multiplied by ``scale``."""
        rates = {k: min(1.0, v * scale) for k, v in MIXED_RATES.items()}
        return cls(rates, seed=seed, sure=sure, limits=dict(MIXED_LIMITS))

    def roll(self, kind: Fault) -> bool:
        """Whether ``kind`` fires at this opportunity."""
        rate = self.rates.get(kind, 0.0)
        if not self.enabled or rate <= 0.0:
            return False
        with self._lock:
            limit = self.limits.get(kind)
            if limit is not None and self._fired[kind] >= limit:
                return False
            self._chances[kind] += 1
            if self._chances[kind] > self.sure and self._random.random() >= rate:
                return False
            self._fired[kind] += 1
            return True

    def chances(self) -> dict[str, int]:
        """Kind → opportunities it had while armed (whether or not it fired)."""
        with self._lock:
            return {kind.value: count for kind, count in sorted(self._chances.items())}

    def active(self, kinds: Iterable[Fault]) -> bool:
        return self.enabled and any(self.rates.get(k, 0.0) > 0 for k in kinds)


@dataclass(frozen=True, slots=True)
class Injection:
    kind: Fault
    at: float
    job_ids: tuple[str, ...] = ()
    where: str = ""


class Recorder:
    """Every fault injected: kind, wall time, the jobs it hit (when it hit identifiable jobs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.injections: list[Injection] = []

    def was_hit(self, job_ids: Iterable[str]) -> bool:
        wanted = set(job_ids)
        with self._lock:
            return any(wanted.intersection(i.job_ids) for i in self.injections)

    def note(self, kind: Fault, *, job_ids: Iterable[str] = (), where: str = "") -> None:
        with self._lock:
            self.injections.append(Injection(kind, time.time(), tuple(job_ids), where))

    def counts(self) -> dict[str, int]:
        with self._lock:
            counted = Counter(i.kind.value for i in self.injections)
        return dict(sorted(counted.items()))

    def first_hit(self) -> dict[str, float]:
        """Job id → time of the first fault that hit it."""
        first: dict[str, float] = {}
        with self._lock:
            for injection in self.injections:
                for job_id in injection.job_ids:
                    first[job_id] = min(first.get(job_id, injection.at), injection.at)
        return first

    def of(self, kind: Fault) -> list[Injection]:
        with self._lock:
            return [i for i in self.injections if i.kind is kind]
