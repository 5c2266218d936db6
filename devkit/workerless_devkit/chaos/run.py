"""One chaos run: an engine emulator, template.yaml's topology in local mode, faults, figures.

Time is scaled so a run takes seconds, not hours: a 5 s lease, 1 s poller ticks, handler Lambdas
whose context counts down from a few seconds, visibility timeouts a second past that, a 1 s HTTP
timeout, a 1 s claim margin and a 3 s poller lock (the template's values are 60 s, 20 s, 120 s,
720 s, 10 s, 30 s and 30 s; docs/guarantees.md states the windows in those terms). Everything else
is the production code path.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workerless.engines import ENGINE_NAMES

from workerless_devkit.chaos.inject import ChaosState, activate, install_hooks
from workerless_devkit.chaos.ledger import Ledger
from workerless_devkit.chaos.plan import Fault, FaultPlan, Recorder
from workerless_devkit.emulators.harness import RunningEmulator, start

ENGINES = ENGINE_NAMES
FINAL = frozenset({"completed", "failed", "thrown"})
#: A large job's padding: over the job queue's MaximumMessageSize (1 MiB).
LARGE_JOB_BYTES = 1_100_000
#: The emulators' history events: a lease granted or extended, a lease lapsed, a job final.
_GRANTED = frozenset({"activated", "leased", "lease_acquired"})
_EXTENDED = frozenset({"lease-extended", "heartbeat", "lease_renewed"})
_LAPSED = frozenset({"lease-lapsed", "lease_expired"})


@dataclass
class RunConfig:
    """One run's shape (defaults: the CI-sized pass)."""

    engine: str
    jobs: int = 40
    plan: FaultPlan = field(default_factory=FaultPlan)
    template: Path = Path("template.yaml")
    lease_seconds: int = 5
    #: Where the StageNext emulator puts a requeued delivery: "original" (its place, as RabbitMQ
    #: does) or "back" (the tail: a broker that requeues behind the backlog; docs/guarantees.md).
    stagenext_requeue: str = "original"
    handler_timeout: float = 8.0
    max_seconds: float = 60.0
    #: A job is stuck when it is not final this long after its first activation.
    deadline_seconds: float = 60.0
    #: generate-report runs this long; ``long_reports`` of them run past the lease (heartbeat).
    report_seconds: float = 0.5
    long_reports: int = 1
    #: send-receipt jobs whose variables are over the job queue's MaximumMessageSize (1 MiB): the
    #: poller writes them to the claim check's bucket (S3) and the handler reads them back.
    large_jobs: int = 0
    retries: int = 10
    max_in_flight: int = 20
    #: How far behind SQS's approximate counts may be when the plan arms Fault.SQS_COUNT_LAG (AWS:
    #: they "may not achieve consistency until at least 1 minute after the producers stop sending").
    sqs_count_lag_seconds: float = 60.0
    ledger_path: Path | None = None
    #: Powertools log level of every function (the template's LogLevel parameter).
    log_level: str = "CRITICAL"
    #: Called with the emulator object once it serves (tests attach spies to its router).
    on_emulator: Callable[[Any], None] | None = None
    #: Leave faults on for this long after the start (None: the whole run).
    fault_seconds: float | None = None
    #: Run past ``max_seconds`` until this many jobs have completed, giving up at ``give_up_seconds``:
    #: a run on a busy machine gets the work done that an idle one does in ``max_seconds``.
    at_least_completed: int = 0
    give_up_seconds: float | None = None
    #: Called ``(job_type, event, fields)`` for every lifecycle step of the run's functions.
    listeners: tuple[Callable[[str, str, dict[str, Any]], None], ...] = ()


@dataclass
class Figures:
    """What a run proves. The first four must be 0."""

    engine: str
    jobs: int
    lost: int
    duplicate_completions: int
    stale_writes_accepted: int
    stuck_past_deadline: int
    completed: int
    failed: int
    thrown: int
    faults_injected: int
    faults_by_kind: dict[str, int]
    effects_repeated: int
    reruns_after_lapse: int
    stale_writes_refused: int
    jobs_hit_by_faults: int
    recover_mean_seconds: float
    recover_worst_seconds: float
    deadline_seconds: float
    elapsed_seconds: float
    engine_attempts: int
    runs_stopped_at_timeout: int = 0
    #: Leases that lapsed at the engine (no extension in time), and the worst time a lapse cost a
    #: job: from the lapsed lease's last grant or extension to the job's next lease (or its end).
    lease_lapses: int = 0
    lapse_worst_seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    #: The ids behind ``stuck_past_deadline``: never final, or final later than the deadline.
    stuck_jobs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.duplicate_completions == 0
            and self.stale_writes_accepted == 0
            and self.stuck_past_deadline == 0
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _recovery(self) -> str:
        return f"{self.recover_mean_seconds:.2f} / {self.recover_worst_seconds:.2f}"

    def _lapses(self) -> str:
        return f"{self.lease_lapses} / {self.lapse_worst_seconds:.2f}"

    def table(self) -> str:
        rows = [
            ("engine", self.engine),
            ("jobs", self.jobs),
            ("completed / failed / thrown", f"{self.completed} / {self.failed} / {self.thrown}"),
            ("engine attempts (activations)", self.engine_attempts),
            ("faults injected", self.faults_injected),
            *((f"  {kind}", count) for kind, count in self.faults_by_kind.items()),
            ("jobs lost (must be 0)", self.lost),
            ("duplicate completed side effects, one attempt (must be 0)", self.duplicate_completions),
            ("stale writes accepted (must be 0)", self.stale_writes_accepted),
            (f"jobs stuck past their deadline of {self.deadline_seconds:g} s (must be 0)", self.stuck_past_deadline),
            (
                "side effects repeated under one key (a crash or a lapse; deduplicated downstream)",
                self.effects_repeated,
            ),
            ("handler re-run under a new lease after its lease lapsed (by design)", self.reruns_after_lapse),
            ("stale reports refused by the engine (409)", self.stale_writes_refused),
            ("runs stopped at their Lambda timeout (not injected)", self.runs_stopped_at_timeout),
            ("jobs hit by a fault", self.jobs_hit_by_faults),
            ("time to recover, mean / worst (s)", self._recovery()),
            ("lease lapses at the engine / worst time a lapse cost (s)", self._lapses()),
            ("elapsed (s)", f"{self.elapsed_seconds:.1f}"),
        ]
        width = max(len(str(name)) for name, _ in rows)
        lines = [f"{str(name).ljust(width)}  {value}" for name, value in rows]
        lines.extend(f"PROBLEM: {p}" for p in self.problems)
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Emulators


@dataclass
class Emulator:
    """A served emulator (``running``) and the faults only its engine can stage (``hooks``)."""

    running: RunningEmulator
    #: Keys the env file adds to the engine's connection values.
    env_extra: dict[str, str]
    hooks: dict[str, Callable[[], bool]]
    ready: dict[str, Callable[[], bool]] = field(default_factory=dict)

    @property
    def engine(self) -> str:
        return self.running.engine

    @property
    def emulator(self) -> Any:
        return self.running.emulator

    @property
    def base_url(self) -> str:
        return self.running.url

    def stop(self) -> None:
        self.running.stop()


def start_emulator(engine: str, *, lease_seconds: int, stagenext_requeue: str = "original") -> Emulator:
    """Serve ``engine``'s emulator on loopback and the env file that reaches it."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    if engine == "sheptra":
        running = start(engine, auth=True)
        emu: Any = running.emulator

        def revoke() -> bool:
            # Rotating the signing key refuses every token minted so far (401); new mints work.
            if not emu.tokens_minted:
                return False
            emu.invalidate_tokens()
            return True

        def move() -> bool:
            emu.move_cell()
            return True

        hooks = {"421": move, "401": revoke}
        ready = {"401": lambda: emu.tokens_minted > 0}
        # Discovery mode, so a cell move (421) is re-resolved as in production.
        return Emulator(running, {"SHEPTRA_MODE": "discovery"}, hooks, ready)
    running = (
        start(engine, lease_seconds=lease_seconds, requeue_position=stagenext_requeue)
        if engine == "stagenext"
        else start(engine)
    )
    return Emulator(running, {}, {})


# ------------------------------------------------------------------------------------------------
# The run


def chaos_timings(config: RunConfig) -> dict[str, str]:
    """The template parameters that scale the run's Lambda timings down (local mode holds them to
    Lambda's rule: a function's timeout at most its queue's visibility).

    Handlers time out at ``handler_timeout`` and their messages come back 2 s after that; the
    heartbeat gets room for a slow round (it may wait a lease and a second before extending) and
    its ticket comes back right after its timeout.
    """
    handler = math.ceil(config.handler_timeout)
    heartbeat = max(handler + 2, 2 * config.lease_seconds + 2)
    return {
        "HandlerTimeout": str(handler),
        "JobQueueVisibilityTimeout": str(handler + 2),
        "HeartbeatTimeout": str(heartbeat),
        "HeartbeatVisibilityTimeout": str(heartbeat),
    }


def chaos_route_settings(config: RunConfig) -> dict[str, dict[str, int]]:
    """:func:`chaos_timings` for the routes that set their own Timeout and VisibilityTimeout in their
    Mappings.Routes line (generatereport): the same handler timeout, its messages back 2 s after."""
    from workerless_devkit.local.template import route_timing_settings

    handler = math.ceil(config.handler_timeout)
    return route_timing_settings(config.template, timeout=handler, visibility=handler + 2)


@contextmanager
def _scaled_time(config: RunConfig) -> Iterator[None]:
    """Test-sized timings for the library (restored afterwards)."""
    from workerless._handler import delivery

    env = {
        "WORKERLESS_HTTP_TIMEOUT_SECONDS": "1",
        "WORKERLESS_FAIL_BACKOFF_SECONDS": "0",
        "WORKERLESS_POLL_BUDGET_SECONDS": "3",
        # A dead poller's lock blocks polling until it expires: scaled like the rest (template: 30 s).
        "WORKERLESS_POLLER_LOCK_SECONDS": "3",
    }
    saved_env = {k: os.environ.get(k) for k in env}
    saved = (delivery.CLAIM_MARGIN_SECONDS, delivery.REPORT_MARGIN_SECONDS)
    os.environ.update(env)
    delivery.CLAIM_MARGIN_SECONDS, delivery.REPORT_MARGIN_SECONDS = 1.0, 1.0
    try:
        yield
    finally:
        delivery.CLAIM_MARGIN_SECONDS, delivery.REPORT_MARGIN_SECONDS = saved
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _job_mix(config: RunConfig, index: int) -> tuple[str, dict[str, Any]]:
    if index < config.long_reports:
        # Longer than a lease (the heartbeat must keep it), and short enough of the handler's timeout
        # to leave its claim, store and report time on a busy machine (a run that ends in the
        # Lambda's last moments cannot store its result, and runs again).
        return "generate-report", {"seconds": min(config.lease_seconds * 1.3, config.handler_timeout - 2.5)}
    if index >= config.jobs - config.large_jobs:
        # Over the queue's 1 MiB MaximumMessageSize less its margin: carried through the claim check.
        return "send-receipt", {"orderId": f"o{index}", "note": "x" * LARGE_JOB_BYTES}
    kind = index % 10
    if kind < 5:
        return "charge-payment", {"orderId": f"o{index}", "amount": 10 + index}
    if kind < 9:
        return "send-receipt", {"orderId": f"o{index}"}
    return "generate-report", {"seconds": config.report_seconds}


def _output(state: Mapping[str, Any]) -> Any:
    output = state.get("output")
    if isinstance(output, str):
        try:
            return json.loads(output)
        except ValueError:
            return output
    return output


@dataclass
class RunResult:
    """A run's figures, and what they were computed from (for tests that look closer)."""

    figures: Figures
    state: ChaosState
    #: job id → the emulator's final view of it (history included).
    jobs: dict[str, dict[str, Any]]
    #: job id → wall time it was first seen final.
    final_at: dict[str, float]
    emulator: Any


def run(config: RunConfig) -> RunResult:
    """Run one engine under ``config.plan``; its figures and records."""
    from workerless_devkit.chaos.topology import ChaosTopology

    install_hooks()
    emulator = start_emulator(
        config.engine, lease_seconds=config.lease_seconds, stagenext_requeue=config.stagenext_requeue
    )
    if config.on_emulator is not None:
        config.on_emulator(emulator.emulator)
    recorder = Recorder()
    ledger = Ledger(config.ledger_path)
    state = ChaosState(
        plan=config.plan,
        recorder=recorder,
        ledger=ledger,
        lease_seconds=config.lease_seconds,
        admin_url=emulator.base_url,
        http_timeout=1.0,
        engine_hooks=emulator.hooks,
        engine_ready=emulator.ready,
    )
    first_activated: dict[str, float] = {}
    final_at: dict[str, float] = {}
    ids: list[str] = []
    refused: list[str] = []
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="workerless-chaos-") as tmp, _scaled_time(config):
            env_file = Path(tmp) / f"{config.engine}.env"
            emulator.running.write_env_file(env_file, **emulator.env_extra)
            topology = ChaosTopology(
                config.template,
                env_file,
                parameters={
                    "LeaseSeconds": str(config.lease_seconds),
                    "TickSeconds": "1",
                    "MaxReceiveCount": "20",
                    "MaxInFlight": str(config.max_in_flight),
                    "LogLevel": config.log_level,
                    **chaos_timings(config),
                },
                route_settings=chaos_route_settings(config),
                schedule_seconds=1,
                state=state,
                handler_timeout=config.handler_timeout,
                drain_seconds=config.handler_timeout + 2,
                sqs_count_lag=config.sqs_count_lag_seconds if config.plan.roll(Fault.SQS_COUNT_LAG) else 0.0,
                seed=config.plan.seed,
                # The engine's values in a Secrets Manager secret, read as the deployed stack reads
                # them: a Secrets Manager fault (chaos.services) meets the real read.
                engine_secret=True,
                listeners=config.listeners,
            )
            state.duplicate_sender = topology.send_duplicate
            for index in range(config.jobs):
                job_type, variables = _job_mix(config, index)
                ids.append(emulator.emulator.create_job(job_type, variables, retries=config.retries))
            activate(state)
            with topology:
                deadline = time.monotonic() + config.max_seconds
                give_up = time.monotonic() + max(config.max_seconds, config.give_up_seconds or 0.0)
                completed: set[str] = set()
                while time.monotonic() < deadline or (
                    len(completed) < config.at_least_completed and time.monotonic() < give_up
                ):
                    now = time.time()
                    if config.fault_seconds is not None and time.monotonic() - started > config.fault_seconds:
                        config.plan.enabled = False
                    with state.lock:
                        for job_id in state.activations:
                            first_activated.setdefault(job_id, now)
                    for job_id in ids:
                        if job_id not in final_at:
                            job_state = emulator.emulator.job_state(job_id)["state"]
                            if job_state in FINAL:
                                final_at[job_id] = now
                            if job_state == "completed":
                                completed.add(job_id)
                    if len(final_at) == len(ids):
                        break
                    time.sleep(0.2)
                config.plan.enabled = False
            lag = topology.count_lag
            if lag is not None and lag.lagged:
                # One injection a run (armed once), with how many answers it put behind the queue's.
                state.recorder.note(
                    Fault.SQS_COUNT_LAG, where=f"GetQueueAttributes: {lag.lagged} of {lag.answers} answers behind"
                )
            # Local mode holds every function to its role: a refused call is a fault of the template
            # or the code, never one the plan injected.
            if topology.iam is not None:
                refused = sorted(
                    {f"IAM refused {r.function}: {r.action} on {r.resource}" for r in topology.iam.refusals}
                )
    finally:
        activate(None)
        emulator.stop()
    elapsed = time.monotonic() - started
    states = {job_id: emulator.emulator.job_state(job_id) for job_id in ids}
    figures = _figures(config, states, state, ids, final_at, first_activated, elapsed)
    figures.problems.extend(refused)
    return RunResult(figures, state, states, final_at, emulator.emulator)


def _figures(
    config: RunConfig,
    states: dict[str, dict[str, Any]],
    state: ChaosState,
    ids: list[str],
    final_at: dict[str, float],
    first_activated: dict[str, float],
    elapsed: float,
) -> Figures:
    problems: list[str] = []
    # Attempts of one job under other ids (node-flow: a new task id per retry) map to its root id.
    root_of: dict[str, str] = {}
    for job_id, job in states.items():
        for task_id in job.get("task_ids") or [job_id]:
            root_of[str(task_id)] = job_id
    counts = {"completed": 0, "failed": 0, "thrown": 0}
    lost = 0
    stale = 0
    for job_id, job in states.items():
        if job["state"] in counts:
            counts[job["state"]] += 1
        else:
            lost += 1
            problems.append(f"job {job_id} not final: {job['state']}")
        if job["state"] == "completed":
            output = _output(job)
            key = output.get("_chaos_key") if isinstance(output, dict) else None
            current = str(job.get("current_task_id") or job_id)
            keys = state.activations.get(current) or []
            if key is None or not keys:
                problems.append(f"job {job_id}: completed without a chaos key or an activation")
                stale += 1
            elif key != keys[-1]:
                problems.append(f"job {job_id}: result of attempt {key} accepted; current attempt is {keys[-1]}")
                stale += 1
    first_act_root: dict[str, float] = {}
    for task_id, at in first_activated.items():
        root = root_of.get(task_id, task_id)
        first_act_root[root] = min(first_act_root.get(root, at), at)
    stuck: list[str] = []
    for job_id in ids:
        start = first_act_root.get(job_id)
        end = final_at.get(job_id)
        if end is None or (start is not None and end - start > config.deadline_seconds):
            stuck.append(job_id)
    recover = []
    hit: dict[str, float] = {}
    for task_id, at in state.recorder.first_hit().items():
        found = root_of.get(task_id)
        if found is not None:
            hit[found] = min(hit.get(found, at), at)
    for job_id, at in hit.items():
        if job_id in final_at:
            recover.append(max(0.0, final_at[job_id] - at))
    lapses, lapse_worst = lease_lapses(states)
    faults = state.recorder.counts()
    attempts = sum(int(job.get("attempts") or 0) for job in states.values())
    runs = {e.key: e.runs for e in state.ledger.entries()}
    for key in state.ledger.duplicated_keys():
        job_id = key.split("#")[1]
        problems.append(f"attempt {key}: runs {runs.get(key)}; engine history {_history(states, job_id)}")
        kinds = sorted({i.kind.value + "@" + i.where for i in state.recorder.injections if job_id in i.job_ids})
        problems.append(f"attempt {key} ran to completion more than once (faults on it: {', '.join(kinds) or 'none'})")
    return Figures(
        engine=config.engine,
        jobs=len(ids),
        lost=lost,
        duplicate_completions=state.ledger.duplicate_completions,
        stale_writes_accepted=stale,
        stuck_past_deadline=len(stuck),
        completed=counts["completed"],
        failed=counts["failed"],
        thrown=counts["thrown"],
        faults_injected=sum(faults.values()),
        faults_by_kind=faults,
        effects_repeated=state.ledger.effects_repeated,
        reruns_after_lapse=state.ledger.reruns_after_lapse,
        stale_writes_refused=state.refused_stale,
        jobs_hit_by_faults=len(hit),
        recover_mean_seconds=statistics.fmean(recover) if recover else 0.0,
        recover_worst_seconds=max(recover) if recover else 0.0,
        deadline_seconds=config.deadline_seconds,
        elapsed_seconds=elapsed,
        engine_attempts=attempts,
        runs_stopped_at_timeout=state.timed_out,
        lease_lapses=lapses,
        lapse_worst_seconds=lapse_worst,
        problems=problems,
        stuck_jobs=stuck,
    )


def lease_lapses(states: Mapping[str, Mapping[str, Any]]) -> tuple[int, float]:
    """Leases that lapsed at the engine, and the worst time one cost its job: from the lapsed
    lease's last grant or extension (when the job was last known covered) to its next lease, or to
    the end of its history when none came."""
    count, worst = 0, 0.0
    for job in states.values():
        covered: float | None = None
        lapsed_from: float | None = None
        history = sorted(job.get("history") or [], key=lambda e: float(e.get("at") or 0.0))
        for event in history:
            name, at = str(event.get("event")), float(event.get("at") or 0.0)
            if name in _GRANTED:
                if lapsed_from is not None:
                    worst = max(worst, at - lapsed_from)
                    lapsed_from = None
                covered = at
            elif name in _EXTENDED:
                covered = at
            elif name in _LAPSED:
                count += 1
                lapsed_from = covered if covered is not None else at
        if lapsed_from is not None and history:
            worst = max(worst, float(history[-1].get("at") or 0.0) - lapsed_from)
    return count, worst


def _history(states: dict[str, dict[str, Any]], job_id: str) -> list[str]:
    job = states.get(job_id) or {}
    return [str(e.get("event")) for e in job.get("history") or []]


def explain(result: RunResult) -> str:
    """For every job that is not final or was final past its deadline, what the engine saw and which
    faults hit it, in time order (seconds from the run's first fault): what the next person needs to
    diagnose a lost or a late job."""
    injections = result.state.recorder.injections
    t0 = min((i.at for i in injections), default=0.0)
    lines: list[str] = []
    late = set(result.figures.stuck_jobs)
    for job_id, job in result.jobs.items():
        if job["state"] in FINAL and job_id not in late:
            continue
        lines.append(f"job {job_id} ({job.get('type')}) is {job['state']}{' (late)' if job_id in late else ''}:")
        events = [
            (float(e.get("at") or 0.0), json.dumps(e, default=str, sort_keys=True)) for e in job.get("history") or []
        ]
        events += [(i.at, f"FAULT {i.kind.value} at {i.where}") for i in injections if job_id in i.job_ids]
        lines.extend(f"  {at - t0:8.2f}  {text}" for at, text in sorted(events))
        lines.append(f"  activations: {result.state.activations.get(job_id)}")
    return "\n".join(lines)


def print_figures(figures: Figures, *, out: Any = sys.stdout) -> None:
    out.write(figures.table() + "\n\n")
