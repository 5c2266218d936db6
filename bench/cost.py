"""The cost model: us-east-1 list prices (arm64), billed-duration model, per-job and idle cost.

Everything here is arithmetic on counts measured elsewhere (bench.measure, bench.idle); the
assumptions that are not measured are named constants, each with its source or reason.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from bench.fakes import KMS_WINDOW_SECONDS

# --- us-east-1 list prices (issue 6; Fargate from the Fargate pricing page, Linux/ARM) ------------
LAMBDA_PER_REQUEST = 0.20 / 1e6
LAMBDA_PER_GB_S = 0.0000133334  # arm64
SQS_PER_REQUEST = 0.40 / 1e6  # standard queue, per 64 KiB chunk
DDB_PER_WRU = 0.625 / 1e6  # on-demand
DDB_PER_RRU = 0.125 / 1e6
SCHEDULER_PER_INVOCATION = 1.00 / 1e6  # EventBridge Scheduler (a SAM Schedule rule is priced alike here)
SFN_PER_TRANSITION = 25.0 / 1e6  # Step Functions Standard
#: S3 Standard (the claim check's bucket): PUT per request, GET per request, storage per GB-month.
S3_PER_PUT = 0.005 / 1000
S3_PER_GET = 0.0004 / 1000
S3_PER_GB_MONTH = 0.023
#: CloudWatch Logs ingestion, standard log class, per GB (what the functions write, EMF lines included).
LOGS_PER_GB = 0.50
#: CloudWatch custom metrics: $0.30 a month each (first 10,000 tier), prorated by the hours in which
#: the metric (one name x one dimension set with its values) is published.
METRIC_PER_MONTH = 0.30
#: AWS KMS: $0.03 per 10,000 requests (symmetric keys). The account's 20,000 free requests a month are
#: not taken off (they are shared by everything in the account).
KMS_PER_REQUEST = 0.03 / 10_000
#: SSM Parameter Store: standard parameters (the routes', template.yaml's <type>Route) cost nothing
#: to store ("No additional charge", Systems Manager user guide, "Managing parameter tiers"), and API
#: calls at the default (standard) throughput nothing either ("without additional cost", "Changing
#: Parameter Store throughput"); only higher throughput and advanced parameters are charged.
SSM_STANDARD_PER_CALL = 0.0
FARGATE_VCPU_HOUR = 0.03238  # Linux/ARM, us-east-1
FARGATE_GB_HOUR = 0.00356
HOURS_PER_MONTH = 730.0
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600

# --- modelling assumptions ------------------------------------------------------------------------
#: Lambda's own lines per invocation: START (~70 bytes), END (~50) and REPORT (~210: durations,
#: memory; more with Init Duration), ingested like the rest. Counted only when the template's
#: LoggingConfig lets them through (:func:`platform_log_bytes`): START and REPORT are INFO-level system
#: logs, which SystemLogLevel WARN (the template's default) drops; the Text format filters nothing.
LAMBDA_PLATFORM_LOG_BYTES = 330
#: The table's SSE with TableKey aws-managed (SSESpecification SSEEnabled true, no key given) is the
#: AWS managed key aws/dynamodb: "AWS KMS charges apply" (DynamoDB API reference, SSESpecification);
#: the default, aws-owned (SSEEnabled false: still encrypted at rest), bills no KMS request
#: (:func:`table_managed_key` reads which the template deploys). DynamoDB
#: decrypts the table key with it and caches the plaintext key per caller (principal), asking KMS again
#: after 5 minutes (AWS KMS developer guide, "How Amazon DynamoDB uses AWS KMS"): one Decrypt per
#: function role and 5-minute window in which it calls DynamoDB (bench.fakes.Meter.ddb_windows),
#: times this factor for the several DynamoDB front-end hosts a busy caller's connections reach (an
#: assumption, not a published figure). The queues use SSE-SQS (SqsManagedSseEnabled): SQS-owned
#: keys, no KMS request billed.
KMS_HOSTS_PER_CALLER = 2
#: Lambda gives a function CPU in proportion to memory: one full vCPU at 1,769 MB. CPU time measured
#: here on a full core takes 1769/256 as long at the template's 256 MB.
LAMBDA_FULL_VCPU_MB = 1769
MEMORY_MB = 256
#: Published/typical in-region latencies (ms) added to the measured CPU for billed duration:
#: SQS API calls "tens of ms" at most, typically ~10 ms; DynamoDB "single-digit ms" (5 ms); the engine
#: is a SaaS endpoint across the internet: 20 ms per request is assumed.
LATENCY_MS = {"sqs": 10.0, "dynamodb": 5.0, "engine": 20.0}
#: Lambda's SQS event source keeps long-polling every mapped queue even when it is empty: five
#: concurrent pollers with 20 s long polls (AWS: "Lambda ... polls the queue using up to five
#: parallel long-polling connections" at idle) = 15 billed ReceiveMessage requests a minute per queue.
ESM_IDLE_POLLERS = 5
ESM_LONG_POLL_SECONDS = 20
#: An event source without ScalingConfig MaximumConcurrency: AWS's low-traffic optimisation "can
#: optimize to as few as 2 concurrent batches to reduce the SQS calls and corresponding costs.
#: However, this optimization is not available when you enable the maximum concurrency setting"
#: (Lambda developer guide, "Configuring scaling behavior for SQS event source mappings",
#: https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html). Modelled at those 2
#: pollers: AWS says "can", not "does" (docs/assumptions.md), so the idle figure is a best case there.
ESM_OPTIMISED_POLLERS = 2
#: The poller reads its routes (GetParametersByPath, one page of 10 per call) at a container's first
#: poll and every WORKERLESS_ROUTES_REFRESH_SECONDS (300) after; at most two poller containers.
ROUTES_REFRESH_SECONDS = 300
POLLER_CONTAINERS = 2
#: Step Functions Standard, one Task state backed by an activity: the Task state's transition and the
#: terminal state's — 2 billed transitions per job at the least.
SFN_TRANSITIONS_PER_JOB = 2
#: An always-on Fargate worker: the smallest task (0.25 vCPU, 0.5 GB), arm64.
FARGATE_VCPU, FARGATE_GB = 0.25, 0.5


TEMPLATE = Path(__file__).resolve().parents[1] / "template.yaml"


@functools.cache
def table_managed_key(template: Path = TEMPLATE) -> bool:
    """Whether the template's job table deploys with the AWS managed KMS key (TableKey's default)."""
    from workerless_devkit.local.template import parse_template_text

    data = parse_template_text(template.read_text(encoding="utf-8"), source=str(template))
    table = (data.get("Resources") or {}).get("JobsTable") or {}
    enabled = ((table.get("Properties") or {}).get("SSESpecification") or {}).get("SSEEnabled")
    if isinstance(enabled, bool):
        return enabled
    default = ((data.get("Parameters") or {}).get("TableKey") or {}).get("Default")
    return default == "aws-managed"


def fargate_monthly() -> float:
    return (FARGATE_VCPU * FARGATE_VCPU_HOUR + FARGATE_GB * FARGATE_GB_HOUR) * HOURS_PER_MONTH


def billed_seconds(cpu_s: float, calls: dict[str, float]) -> float:
    """Billed duration of work: CPU stretched to 256 MB's share of a vCPU, plus call latencies."""
    stretched = cpu_s * LAMBDA_FULL_VCPU_MB / MEMORY_MB
    waits = sum(LATENCY_MS[kind] * n for kind, n in calls.items()) / 1000
    return stretched + waits


def gb_s(seconds: float) -> float:
    return seconds * MEMORY_MB / 1024


@functools.cache
def platform_log_bytes(template: Path = TEMPLATE) -> int:
    """Lambda's own log bytes per invocation under the template's functions' LoggingConfig (Globals
    merged): :data:`LAMBDA_PLATFORM_LOG_BYTES` when a function's SystemLogLevel lets INFO through
    (INFO, DEBUG, or the Text format, which has no level filter), else 0."""
    from workerless_devkit.local.template import load_template

    levels = {f.system_log_level if f.log_format == "JSON" else None for f in load_template(template).functions}
    return LAMBDA_PLATFORM_LOG_BYTES if levels & {None, "INFO", "DEBUG"} else 0


def per_million_jobs(run: dict[str, Any], *, platform_bytes: float | None = None) -> dict[str, Any]:
    """Adapter overhead per million jobs from a metered run (bench.measure.billable_run); Lambda's
    own log bytes per invocation ``platform_bytes`` (default: the template's, :func:`platform_log_bytes`)."""
    if platform_bytes is None:
        platform_bytes = platform_log_bytes()
    jobs = run["jobs"]
    per_job = dict(run["per_job"])
    # The event source's empty receives are its long polls, counted once in the idle cost.
    empty = sum(v for k, v in run["sqs_requests_by_call"].items() if k.endswith("ReceiveMessageEmpty"))
    per_job["sqs_requests"] -= empty / jobs
    calls = run["calls"]
    engine_calls = sum(run["engine_requests"].values())
    sqs_calls = sum(v for k, v in calls.items() if k.startswith("sqs."))
    ddb_calls = sum(v for k, v in calls.items() if k.startswith("dynamodb."))
    invocations = sum(run["invocations"].values())
    cpu = sum(run["cpu_s"].values())
    seconds = billed_seconds(cpu, {"sqs": sqs_calls, "dynamodb": ddb_calls, "engine": engine_calls})
    # The event source's own receive/delete calls are SQS requests we pay for, but not Lambda duration.
    esm_calls = sum(v for k, v in run["sqs_requests_by_call"].items() if k.startswith("esm:"))
    seconds -= LATENCY_MS["sqs"] * esm_calls / 1000
    # Lambda rounds each invocation up to the next millisecond.
    seconds += 0.0005 * invocations
    # A lingering poller is billed while it pauses between polls (LINGER_PAUSE_SECONDS), not only while it works.
    paused = run.get("paused_s", {})
    seconds += sum(paused.values())
    log_bytes = run.get("log_bytes_per_job", 0.0) + platform_bytes * invocations / jobs
    metric_hours = run.get("custom_metrics_per_hour", 0) * run["virtual_seconds"] / 3600
    parts = {
        "sqs": per_job["sqs_requests"] * SQS_PER_REQUEST * 1e6,
        "dynamodb_write": per_job["ddb_write_units"] * DDB_PER_WRU * 1e6,
        "dynamodb_read": per_job["ddb_read_units"] * DDB_PER_RRU * 1e6,
        "lambda_requests": invocations / jobs * LAMBDA_PER_REQUEST * 1e6,
        "lambda_duration": gb_s(seconds) / jobs * LAMBDA_PER_GB_S * 1e6,
        "cloudwatch_metrics": metric_hours * METRIC_PER_MONTH / HOURS_PER_MONTH / jobs * 1e6,
        "cloudwatch_logs": log_bytes / 1e9 * LOGS_PER_GB * 1e6,
        "kms": run.get("kms_decrypts", 0) * KMS_HOSTS_PER_CALLER * KMS_PER_REQUEST / jobs * 1e6 * table_managed_key(),
    }
    logs = parts["cloudwatch_logs"]
    by_caller = run.get("calls_by_caller", {})
    per_function: dict[str, Any] = {}
    for function, count in run["invocations"].items():
        calls = {kind: float(by_caller.get(f"{function}:{kind}", 0)) for kind in LATENCY_MS}
        billed = billed_seconds(run["cpu_s"].get(function, 0.0), calls) + 0.0005 * count + paused.get(function, 0.0)
        per_function[function] = {
            "paused_ms_per_job": round(1000 * paused.get(function, 0.0) / jobs, 3),
            "invocations_per_job": round(count / jobs, 4),
            "billed_ms_per_invocation": round(1000 * billed / count, 2),
            "billed_ms_per_job": round(1000 * billed / jobs, 3),
        }
    return {
        "value": round(sum(parts.values()), 3),
        "parts": {k: round(v, 4) for k, v in parts.items()},
        "cloudwatch_logs": round(logs, 3),
        "log_bytes_per_job_with_platform": round(log_bytes, 1),
        "platform_log_bytes_per_invocation": platform_bytes,
        "per_function": per_function,
        "billed_ms_per_job": round(1000 * seconds / jobs, 3),
        "invocations_per_job": round(invocations / jobs, 4),
    }


def floor_per_million() -> float:
    """The issue's floor for this design: 2 write units (claim, result), one batched send, receive and
    delete per job at batch 10, and one handler invocation per 10 jobs."""
    return round(
        (2 * DDB_PER_WRU + 3 * SQS_PER_REQUEST / 10 + LAMBDA_PER_REQUEST / 10) * 1e6,
        3,
    )


def step_functions_per_million() -> float:
    return round(SFN_TRANSITIONS_PER_JOB * SFN_PER_TRANSITION * 1e6, 2)


def break_even_jobs_per_month(per_million: float, idle_monthly: float) -> float | None:
    """Monthly volume above which an always-on Fargate worker costs less than workerless' overhead."""
    per_job = per_million / 1e6
    if per_job <= 0:
        return None
    return max(0.0, (fargate_monthly() - idle_monthly) / per_job)


# --------------------------------------------------------------------------------- claim check


def claim_check_per_job(
    message_bytes: int,
    *,
    max_message_bytes: int,
    expiry_days: int,
    result_bytes: int = 0,
    gets: int = 1,
) -> dict[str, Any]:
    """What the claim check adds to one job (USD): nothing when the job message fits its queue's limit
    less the margin (workerless._core.claimcheck) and the result fits the job record; otherwise per object
    a PUT, ``gets`` GETs (the handler's read; a re-report reads a stored result again) and its storage
    until the lifecycle rule expires it (``expiry_days``, plus half a day on average: S3 rounds the
    expiry up to the next midnight UTC). The SQS message that carries a pointer instead of the
    variables is billed as one 64 KiB chunk, not up to 16 (not credited here: the total stays an
    upper bound)."""
    from workerless._core.claimcheck import OUTCOME_INLINE_BYTES, message_threshold

    objects = []
    if message_bytes > message_threshold(max_message_bytes):
        objects.append(message_bytes)
    if result_bytes > OUTCOME_INLINE_BYTES:
        objects.append(result_bytes)
    months = (expiry_days + 0.5) / (HOURS_PER_MONTH / 24)
    parts = {
        "s3_put": len(objects) * S3_PER_PUT,
        "s3_get": len(objects) * gets * S3_PER_GET,
        "s3_storage": sum(objects) / 1e9 * months * S3_PER_GB_MONTH,
    }
    return {"value": sum(parts.values()), "parts": parts, "objects": len(objects)}


def claim_check_table(template: Path) -> list[dict[str, Any]]:
    """The claim check's cost per million jobs at a few sizes, from the template's queue limit and
    lifecycle expiry (bench/RESULTS.md)."""
    from workerless_devkit.local.template import load_template, parse_template_text

    loaded = load_template(template)
    data = parse_template_text(template.read_text(encoding="utf-8"), source=str(template))
    limit = min(q.maximum_message_size for q in loaded.queues)
    rules = data["Resources"]["PayloadBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    days = int(next(r["ExpirationInDays"] for r in rules if "ExpirationInDays" in r))
    rows = []
    for label, message, result in (
        ("100 KB job, 1 KB result", 100_000, 1_000),
        ("2 MB job, 1 KB result", 2_000_000, 1_000),
        ("5 MB job, 900 KB result", 5_000_000, 900_000),
    ):
        priced = claim_check_per_job(message, max_message_bytes=limit, expiry_days=days, result_bytes=result)
        rows.append({"case": label, "per_million_usd": round(priced["value"] * 1e6, 3), "objects": priced["objects"]})
    return rows


# --------------------------------------------------------------------------------- idle, per month


def template_shape(template: Path) -> dict[str, Any]:
    """Counts from template.yaml: SQS event sources, schedules, routes, default tick."""
    from workerless_devkit.local.template import load_template, parse_template_text

    loaded = load_template(template)
    data = parse_template_text(template.read_text(encoding="utf-8"), source=str(template))
    params = data.get("Parameters") or {}
    schedules = [s for f in loaded.functions for s in f.schedule_events if s.enabled]
    return {
        "sqs_event_sources": sum(1 for f in loaded.functions for e in f.sqs_events if e.enabled),
        # those without MaximumConcurrency (the poller's ticker while ReserveConcurrency is true)
        "sqs_event_sources_uncapped": sum(
            1 for f in loaded.functions for e in f.sqs_events if e.enabled and e.maximum_concurrency is None
        ),
        "event_sources_by_function": {f.logical_id: len(f.sqs_events) for f in loaded.functions if f.sqs_events},
        "schedule_seconds": [s.seconds for s in schedules],
        "schedule_seconds_by_function": {
            f.logical_id: [s.seconds for s in f.schedule_events if s.enabled]
            for f in loaded.functions
            if any(s.enabled for s in f.schedule_events)
        },
        "tick_seconds": int((params.get("TickSeconds") or {}).get("Default", 0)),
        "memory_mb": MEMORY_MB,
        "routes": len(loaded.ssm_parameters),
        # Lambda's START/REPORT lines per invocation under the functions' LoggingConfig (0 at WARN).
        "platform_log_bytes": platform_log_bytes(template),
    }


#: The function whose schedule is the poller's watchdog (every other scheduled function's idle run is
#: priced from its own measured invocation: the dead-letter function's drain).
POLLER_FUNCTION = "PollerFunction"


def idle_monthly(
    shape: dict[str, Any],
    per_tick: dict[str, Any],
    per_watchdog: dict[str, Any],
    idle_metrics: list[str] | None = None,
    per_drain: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Idle cost per month, all-in, from the template's shape and the measured calls, log bytes and
    custom metrics of one idle poller invocation of each kind (a tick from the ticker queue; the
    watchdog schedule) and of the dead-letter function's scheduled drain of its empty queue
    (``per_drain``: needed when the template schedules a function other than the poller)."""
    ticks = SECONDS_PER_MONTH / shape["tick_seconds"] if shape["tick_seconds"] else 0.0
    by_function = shape.get("schedule_seconds_by_function") or {POLLER_FUNCTION: shape["schedule_seconds"]}

    def runs(seconds: list[float | None]) -> float:
        return sum(SECONDS_PER_MONTH / s for s in seconds if s)

    watchdogs = runs(by_function.get(POLLER_FUNCTION, []))
    drains = sum(runs(seconds) for function, seconds in by_function.items() if function != POLLER_FUNCTION)
    if drains and per_drain is None:
        raise ValueError(f"the template schedules {sorted(set(by_function) - {POLLER_FUNCTION})}: per_drain is needed")
    drain = per_drain or {"cpu_s": 0.0, "sqs_calls": 0, "ddb_calls": 0, "engine_calls": 0}
    uncapped = shape.get("sqs_event_sources_uncapped", 0)
    pollers = (shape["sqs_event_sources"] - uncapped) * ESM_IDLE_POLLERS + uncapped * ESM_OPTIMISED_POLLERS
    esm_requests = pollers * SECONDS_PER_MONTH / ESM_LONG_POLL_SECONDS
    routes_reads = (
        POLLER_CONTAINERS * SECONDS_PER_MONTH / ROUTES_REFRESH_SECONDS * math.ceil(max(1, shape.get("routes", 1)) / 10)
    )

    def invocation_cost(m: dict[str, Any]) -> float:
        seconds = billed_seconds(
            m["cpu_s"], {"sqs": m["sqs_calls"], "dynamodb": m["ddb_calls"], "engine": m["engine_calls"]}
        )
        seconds = math.ceil(seconds * 1000) / 1000
        return (
            LAMBDA_PER_REQUEST
            + gb_s(seconds) * LAMBDA_PER_GB_S
            + m["sqs_requests"] * SQS_PER_REQUEST
            + m["wru"] * DDB_PER_WRU
            + m["rru"] * DDB_PER_RRU
        )

    platform = float(shape.get("platform_log_bytes", LAMBDA_PLATFORM_LOG_BYTES))

    def log_bytes(m: dict[str, Any]) -> float:
        return float(m.get("log_bytes", 0.0)) + platform

    metrics = len(idle_metrics or [])
    parts = {
        "event_source_long_polls": esm_requests * SQS_PER_REQUEST,
        "tick_chain": ticks * invocation_cost(per_tick),
        "watchdog_schedule": watchdogs * invocation_cost(per_watchdog),
        # the job dead-letter queue's drain (a Schedule on the dead-letter function, no event source)
        "dead_letter_drain": drains * invocation_cost(drain) if drains else 0.0,
        "eventbridge": (watchdogs + drains) * SCHEDULER_PER_INVOCATION,
        # every idle metric is published in every hour of the month
        "cloudwatch_metrics": metrics * METRIC_PER_MONTH,
        "cloudwatch_logs": (
            ticks * log_bytes(per_tick)
            + watchdogs * log_bytes(per_watchdog)
            + (drains * log_bytes(drain) if drains else 0.0)
        )
        / 1e9
        * LOGS_PER_GB,
        # the poller's role calls DynamoDB in every 5-minute window of the month (an idle drain calls
        # none: its role asks KMS nothing)
        "kms": SECONDS_PER_MONTH
        / KMS_WINDOW_SECONDS
        * KMS_HOSTS_PER_CALLER
        * KMS_PER_REQUEST
        * table_managed_key()
        * (1 + (1 if drains and drain["ddb_calls"] else 0)),
        # the routes' parameters and their reads (standard tier and throughput): free
        "parameter_store": routes_reads * SSM_STANDARD_PER_CALL,
    }
    return {
        "value": round(sum(parts.values()), 3),
        "parts": {k: round(v, 3) for k, v in parts.items()},
        "custom_metrics": list(idle_metrics or []),
        "ticks_per_month": round(ticks),
        "watchdog_invocations_per_month": round(watchdogs),
        "dead_letter_drains_per_month": round(drains),
        "event_source_requests_per_month": round(esm_requests),
        "parameter_store_calls_per_month": round(routes_reads),
        "per_tick": per_tick,
        "per_watchdog": per_watchdog,
        "per_dead_letter_drain": per_drain,
    }


# ------------------------------------------------------------------------- dispatch rate on paper

#: DynamoDB: a single item lives in one partition, which takes at most 1,000 write units a second
#: (DynamoDB developer guide, "partitions and data distribution"): the poller lock's item, which holds
#: the intent batches.
DDB_PARTITION_WRU_PER_S = 1000
#: SQS standard queues: "a nearly unlimited number of transactions per second per API action"
#: (SQS quotas); Lambda: 1,000 concurrent executions per account by default (Lambda quotas).
LAMBDA_ACCOUNT_CONCURRENCY = 1000


def dispatch_on_paper(
    *,
    jobs_per_poll: float,
    poller_cpu_ms_per_job: float,
    routes: int,
    intent_wru_per_cycle: float,
    handler_ms_per_invocation: float,
    handler_batch: int,
    shards: int = 1,
) -> dict[str, Any]:
    """One deployment's dispatch rate on AWS, from measured figures and published latencies/quotas.

    One poller polls at a time (the poller lock), so a deployment dispatches what one poller cycle
    does, back to back: an engine activation (LATENCY_MS engine), the SendMessageBatch calls of each
    route (one per started 10 jobs, up to SEND_CONCURRENCY of them at once), one heartbeat ticket,
    the intent log's writes, and the poller's measured CPU per job stretched to 256 MB's share of a
    vCPU. Ceilings: the partition of the lock's item, which
    holds the intent batches (its writes a cycle against 1,000 WRU/s), and the account's Lambda
    concurrency for the handlers.

    ``shards``: poller shards (template.yaml Mappings.Routes PollerShard), the routes spread evenly
    over them. Each polls under its own lock, in its own cycle, and writes its own lock item, so the
    first two ceilings grow with the shards; ``jobs_per_poll`` is then one shard's."""
    shards = max(1, min(shards, routes))
    per_route = jobs_per_poll / max(1, routes / shards)
    # One send_batch per route, one route after another; a route's calls side by side, up to
    # workerless.aws.sqs.SEND_CONCURRENCY at once: a round trip per round of them.
    from workerless.aws.sqs import SEND_CONCURRENCY

    rounds = math.ceil(routes / shards) * math.ceil(math.ceil(max(1.0, per_route) / 10) / SEND_CONCURRENCY)
    cycle_ms = (
        LATENCY_MS["engine"]
        + rounds * LATENCY_MS["sqs"]
        + LATENCY_MS["sqs"]  # the ticket
        + 2 * LATENCY_MS["dynamodb"]  # intent activated, dispatched (the clear rides on the next write)
        + poller_cpu_ms_per_job * jobs_per_poll * LAMBDA_FULL_VCPU_MB / MEMORY_MB
    )
    poller = shards * 1000 * jobs_per_poll / cycle_ms
    partition = shards * DDB_PARTITION_WRU_PER_S / max(1.0, intent_wru_per_cycle) * jobs_per_poll
    handlers = LAMBDA_ACCOUNT_CONCURRENCY * handler_batch * 1000 / max(1.0, handler_ms_per_invocation)
    cycles = "one_poller_cycle" if shards == 1 else "shard_poller_cycles"
    limits = {cycles: poller, "intent_item_partition": partition, "lambda_account_concurrency": handlers}
    binding = min(limits, key=lambda name: limits[name])
    return {
        "value": round(limits[binding], 1),
        "cycle_ms": round(cycle_ms, 1),
        "jobs_per_poll": round(jobs_per_poll, 2),
        "shards": shards,
        "limits_jobs_per_s": {name: round(v, 1) for name, v in limits.items()},
        "binding": binding,
    }


# ------------------------------------------------------------------------- the poller's memory

#: Lambda memory settings the poller's cost is modelled at (the template's is MEMORY_MB).
POLLER_MEMORY_SWEEP_MB = (128, 256, 512, 1024)


def poller_memory_sweep(run: dict[str, Any], per_tick: dict[str, Any], ticks_per_month: float) -> list[dict[str, Any]]:
    """The poller's Lambda duration at each of POLLER_MEMORY_SWEEP_MB, from one metered run (its CPU
    stretched to that memory's share of a vCPU, plus the same call latencies) and one idle tick:
    $ per million jobs and the idle tick chain's duration $ a month. Only the poller's duration
    changes with its memory; its requests, SQS, DynamoDB and logs do not."""
    by_caller = run.get("calls_by_caller", {})
    calls = {kind: float(by_caller.get(f"poller:{kind}", 0)) for kind in LATENCY_MS}
    waits = sum(LATENCY_MS[kind] * n for kind, n in calls.items()) / 1000
    cpu = run["cpu_s"].get("poller", 0.0)
    count = run["invocations"].get("poller", 0)
    tick_calls = {"sqs": per_tick["sqs_calls"], "dynamodb": per_tick["ddb_calls"], "engine": per_tick["engine_calls"]}
    tick_waits = sum(LATENCY_MS[kind] * n for kind, n in tick_calls.items()) / 1000
    rows = []
    for memory in POLLER_MEMORY_SWEEP_MB:
        seconds = cpu * LAMBDA_FULL_VCPU_MB / memory + waits + 0.0005 * count
        tick = math.ceil((per_tick["cpu_s"] * LAMBDA_FULL_VCPU_MB / memory + tick_waits) * 1000) / 1000
        rows.append(
            {
                "memory_mb": memory,
                "duration_per_million_usd": round(seconds * memory / 1024 * LAMBDA_PER_GB_S / run["jobs"] * 1e6, 4),
                "billed_ms_per_invocation": round(1000 * seconds / max(1, count), 2),
                "idle_tick_duration_per_month_usd": round(tick * memory / 1024 * LAMBDA_PER_GB_S * ticks_per_month, 4),
            }
        )
    return rows
