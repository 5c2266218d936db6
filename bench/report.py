"""bench/RESULTS.md and bench/results.png from results.json (see bench/run.py)."""

# ruff: noqa: E501 - Markdown table rows and prose read better unbroken here

from __future__ import annotations

from pathlib import Path
from typing import Any

ENGINE_TOLERANCE = 1.05  # within 5% of the protocol's floor
COST_TARGET = 2.50  # all-in, at 2 jobs/s
BACKLOG_TARGET = 1.75  # all-in, a backlog
BREAK_EVEN_TARGET = 2_500_000  # jobs a month against one always-on Fargate worker
DISPATCH_TARGET = 1000.0  # jobs a second, one deployment on paper
IDLE_TARGET = 1.00
P50_TARGET, P99_TARGET = 1.0, 2.0
CPU_TARGET = 3.0
COLD_TARGET = 2.0
ESM_MONTHLY_PER_QUEUE = 5 * 3 * 60 * 730 * 0.40 / 1e6  # five idle 20 s long polls, a month, priced


#: The same all-in model (this bench/, fakes answering MaximumMessageSize) run on the code as it was
#: before issue 13's first phase (68f24ce: a poller that slept between polls, five INFO lines and
#: 32 custom metrics a busy hour), for the "what each move changed" table. Measured once on this
#: machine; the latency and CPU figures are that commit's own `make bench`.
#: The poller's DynamoDB units a job before the intent batches moved into the lock's item (issue 13's
#: intent-log move), measured at that commit with this section (10,000 jobs at 2 jobs/s).
INTENTS_BEFORE = {"commit": "3716ca5", "poller_wu": 1.87, "poller_ru": 0.55}

BEFORE = {
    "commit": "68f24ce",
    "cost": 11.44,
    "parts": {
        "sqs": 2.08,
        "dynamodb_write": 3.09,
        "dynamodb_read": 0.14,
        "lambda_requests": 0.29,
        "lambda_duration": 2.04,
        "cloudwatch_metrics": 1.87,
        "cloudwatch_logs": 1.89,
        "kms": 0.05,
    },
    "backlog": 6.38,
    "idle": 5.54,
    "idle_metrics": 8,
    "metrics_per_hour": 32,
    "log_lines_per_job": 6.09,
    "log_bytes_per_job": 3305,
    "get_queue_attributes_per_job": 0.71,
    "p50": 0.24,
    "p99": 1.79,
    "cpu_ms": 0.979,
}

#: The idle figure before every route's dead letters shared one queue (319896c: a dead-letter queue
#: and an event source per route, 8 SQS event sources), the same model and idle invocations
#: (bench.measure.idle_invocations, bench.cost.idle_monthly) run on that commit's template.yaml.
BEFORE_SHARED_DLQ = {"commit": "319896c", "sqs_event_sources": 8, "idle": 3.00}

#: The CloudWatch figures before Lambda's log-level controls, the per-function log keys and the two
#: metrics AWS publishes for free (44b09eb: text format, START/END/REPORT on every invocation, five
#: metrics a busy hour), the same billable runs (10,000 jobs at 2 jobs/s; 3,000 on a backlog) and
#: idle model run on that commit.
BEFORE_CLOUDWATCH = {
    "commit": "44b09eb",
    "cost": 7.36,
    "backlog": 4.53,
    "logs": 0.94,
    "metrics": 0.29,
    "log_bytes_per_job": 1884,
    "metrics_per_hour": 5,
    "idle": 2.45,
}

#: The idle figure and an idle tick's calls before the job dead-letter queue lost its event source
#: (drained by the dead-letter function's schedule) and before routes known empty went unread: 44b09eb,
#: the same model (bench.measure.idle_invocations, bench.cost.idle_monthly) run on that commit.
BEFORE_IDLE_MOVES = {
    "commit": "44b09eb",
    "sqs_event_sources": 6,
    "idle": 2.45,
    "tick_sqs": 5.0,
    "tick_chain": 0.61,
    "watchdog": 0.14,
}


#: Issue 13's adapter-CPU move (the batch loop, EMF lines without a provider per line, the no-SDK
#: handler span, the logger formatter's two costly steps), measured side by side: the bench's CPU
#: section alone (bench.measure.cpu_per_job(1000, repeats=3)) on 319896c and on the change,
#: interleaved, in one run on this machine (2 cores, loaded by other work: both sides alike).
CPU_MOVE = {
    "before_commit": "319896c",
    "before_ms": 0.644,
    "before_ratio": 5.22,
    "before_handler_ms": 0.508,
    "after_ms": 0.557,
    "after_ratio": 4.69,
    "after_handler_ms": 0.394,
}

#: Issue 29's start-gate move (no watchdog timer for a batch of one message), side by side in one run:
#: bench.measure.billable_run(2000, rate_per_second=2.0) twice with the timer for every batch and
#: twice without it for one-message batches, interleaved, on this machine (2 cores, loaded alike).
GATE_MOVE = {"before_ms": 0.814, "after_ms": 0.748, "jobs_per_invocation": 1.16}

#: Issue 29's CPU moves, each side by side with the commit before it: bench.measure.cpu_per_job(1000,
#: repeats=1) in a fresh process per run, four runs each way alternated, the medians (a 2-core machine
#: shared with other work: single runs spread by up to 40%). Figures in ms a job (ratio: to the
#: minimal worker measured in the same run).
CPU_MOVES_29 = [
    {
        "move": "one start-gate watchdog thread per route per container, started at its first batch of two "
        "or more (a daemon; its deadlines on one condition), not a threading.Timer per batch",
        "figure": "adapter CPU a job; handler",
        "before": "1.268; 0.868",
        "after": "1.226; 0.838",
    },
    {
        "move": "the engine HTTP client keeps no cookies (no engine needs a client-wide jar: StageNext's affinity "
        "cookie rides in the delivery's handle), which httpx parsed from every response; the bench drives the "
        "client as shipped (new_http_client)",
        "figure": "adapter CPU a job; handler; ratio",
        "before": "0.990; 0.681; 4.96x",
        "after": "0.898; 0.600; 4.32x",
    },
    {
        "move": "the take-work answer's skimmer keeps an answer of at most 64 KiB (nothing in it could be cut) as "
        "it comes, without its tokenizer (a Python loop per structural character: ~85 µs a job of a 10-job "
        "answer; 37 µs for the whole answer now, json.loads alone 35 µs)",
        "figure": "adapter CPU a job; poller; ratio",
        "before": "0.866; 0.258; 4.43x",
        "after": "0.808; 0.213; 4.10x",
    },
    {
        "move": "the three together (main, 5eac7e3, before)",
        "figure": "adapter CPU a job; handler; poller; ratio",
        "before": "1.020; 0.702; 0.285; 5.35x",
        "after": "0.847; 0.591; 0.223; 3.98x",
    },
    {
        "move": "an engine request's URL joined to its base's parsed form (engines/kit/joinurl.engine_url: a path "
        "of unreserved characters and slashes, no dot segment, appended to the base httpx parsed once a container; "
        "any other path, or a base whose joined URL is not equal to httpx's own parse, goes to httpx as the string), "
        "not parsed by httpx each request (14-16 µs a parse; build_request 64-75 µs -> 42-43 µs; main d1a789b before)",
        "figure": "adapter CPU a job; handler; ratio",
        "before": "0.786; 0.565; 4.11x",
        "after": "0.765; 0.535; 3.82x",
    },
    {
        "move": "a completion's variables JSON-encoded once (by the wrapper's serialisable check: "
        "Outcome.encode_variables) and the bytes reused by the stored outcome and Sheptra's report (its size cap "
        "and its body, sent as those bytes); before: the previous move",
        "figure": 'adapter CPU a job; handler, with the bench\'s `{"ok": true}` result; with a 9 KB result',
        "before": "0.716; 0.502; 1.583; 1.141",
        "after": "0.701 (within the spread); 0.492; 1.073; 0.646",
    },
    {
        "move": "the two together (main, 6a4ed05, before)",
        "figure": "adapter CPU a job; handler; poller; ratio",
        "before": "0.735; 0.526; 0.174; 4.02x",
        "after": "0.674; 0.470; 0.169; 3.60x",
    },
]

#: Issue 29's CPU candidates measured and not made (microbenchmarks on the same machine, thread CPU).
CPU_REFUSED_29 = [
    (
        "log records built and dropped",
        "a DEBUG lifecycle step: 2.2-3.7 µs (the message string and extras, then Powertools' wrapper; stdlib "
        "drops it before a record is made); about 3 a job",
        "**refused**: under 10 µs a job, below the runs' spread; no record is built for a dropped line",
    ),
    (
        "pydantic validation done twice",
        "model_validate calls a job in the bench's handler, poller and heartbeat: 0 (settings are validated once "
        "a container; a typed handler's input once, by its own model)",
        "**refused**: nothing to remove",
    ),
    (
        "contextvars copied per job",
        "copy_context calls a job: 0.2 (one per batch of two or more, for the watchdog; none per job)",
        "**refused**: one per batch is what the watchdog's hand-back needs (the invocation's clients)",
    ),
    (
        "the outcome's INFO line",
        "33-50 µs a line: Powertools' format 19-27 µs (its keys 6-11, json.dumps 6), the record 4-6, the caller's "
        "frame 1-2",
        "**kept**: the one line a job the docs promise; a formatter of our own would save perhaps 10 µs of it",
    ),
]

#: Issue 29's lock-item move: `make bench` on main (8eabad9, with the cold-start fix) before the send log
#: and the tracked keys were written short (bench/results.json of that run, kept in the notes).
LOCK_ITEM_BEFORE = {"commit": "8eabad9", "units_per_write": 3.007, "poller_wu": 4.131, "cost": 8.56, "backlog": 5.47}


def _mark(ok: bool | None) -> str:
    return "—" if ok is None else ("**met**" if ok else "**not met**")


def targets(r: dict[str, Any]) -> dict[str, bool | None]:
    er = r["engine_requests_per_job"]
    lat = r.get("pickup_latency_s")
    out: dict[str, bool | None] = {}
    for engine in ("sheptra", "nodeflow", "stagenext"):
        out[f"engine_{engine}"] = er[engine]["value"] <= ENGINE_TOLERANCE * er[engine]["floor"] + 1e-9
        ext = r["long_job_extends"][engine]
        out[f"extends_{engine}"] = ext["extends"] == ext["expected"]
    cost = r["cost_per_million_jobs_usd"]
    out["cost"] = cost["value"] <= COST_TARGET
    out["backlog"] = None if cost.get("backlog") is None else cost["backlog"] <= BACKLOG_TARGET
    be = cost.get("break_even_jobs_per_month_vs_fargate")
    out["break_even"] = be is not None and be >= BREAK_EVEN_TARGET
    rate = (r.get("dispatch_rate_jobs_per_s") or {}).get("deployment_on_paper")
    out["dispatch"] = None if rate is None else rate >= DISPATCH_TARGET
    out["idle"] = r["idle_cost_per_month_usd"]["value"] <= IDLE_TARGET
    if lat:
        out["p50"] = lat["p50_load"] is not None and lat["p50_load"] <= P50_TARGET
        out["p99"] = lat["p99_load"] is not None and lat["p99_load"] <= P99_TARGET
        out["idle_latency"] = lat["idle_max"] is not None and lat["idle_max"] <= lat["tick_seconds"] + 1
    else:
        out["p50"] = out["p99"] = out["idle_latency"] = None
    out["cpu"] = r["cpu_per_job"]["ratio"] <= CPU_TARGET
    out["cold"] = all(v["ratio"] <= COLD_TARGET for v in r["cold_start"].values())
    out["cold_path"] = all(v["cold_path_ratio"] <= COLD_TARGET for v in r["cold_start"].values())
    return out


def write_results_md(r: dict[str, Any], path: Path) -> None:
    t = targets(r)
    er = r["engine_requests_per_job"]
    cost = r["cost_per_million_jobs_usd"]
    idle = r["idle_cost_detail"]
    cpu = r["cpu_per_job"]
    lat = r.get("pickup_latency_s") or {}
    run = r["billable_run"]
    cold = r["cold_start"]
    m = r["machine"]
    lines: list[str] = []
    add = lines.append
    add("# workerless benchmark results")
    add("")
    add(
        f"Generated by `make bench` on {r['generated_at']} — {m['cores']} cores, {m['implementation']} "
        f"{m['python']}, {m['platform']}; the whole run took {r['elapsed_s']} s. Raw figures: "
        "[results.json](results.json); plot: [results.png](results.png)."
    )
    add("")
    add("![results](results.png)")
    add("")
    add("## Every figure beside its target")
    add("")
    add("| # | figure | measured | target | reference | |")
    add("| --- | --- | --- | --- | --- | --- |")
    direct = er["direct_minimal_worker_sheptra"]
    for engine, label in (("sheptra", "Sheptra"), ("nodeflow", "node-flow"), ("stagenext", "StageNext")):
        e = er[engine]
        ref = f"seed 000 minimal worker: {direct['value']:.3f}" if engine == "sheptra" else "protocol floor"
        add(
            f"| 1 | engine requests / job, {label} (batch {e['batch']}, {e['jobs']} short jobs) | {e['value']:.3f} "
            f"({e['over_floor_pct']:+.1f}% vs floor) | ≤ {ENGINE_TOLERANCE * e['floor']:.3f} (floor {e['floor']:.2f} + 5%) "
            f"| {ref} | {_mark(t['engine_' + engine])} |"
        )
    for engine in ("sheptra", "nodeflow", "stagenext"):
        x = r["long_job_extends"][engine]
        add(
            f"| 1 | lease extensions, {engine}, one {x['seconds']:.0f} s job, lease {x['lease_seconds']} s | {x['extends']} "
            f"| {x['expected']} (one per lease/3) | — | {_mark(t['extends_' + engine])} |"
        )
    add(
        f"| 2 | $ per million jobs, all-in ({r['billable_run']['rate_per_second']:g} jobs/s) | ${cost['value']:.2f} | ≤ ${COST_TARGET:.2f} | floor ${cost['floor']:.2f}; "
        f"Step Functions Standard ≥ ${cost['step_functions_standard']:.0f}; Fargate ${cost['fargate_monthly']:.2f}/month "
        f"| {_mark(t['cost'])} |"
    )
    if cost.get("backlog") is not None:
        add(
            f"| 2 | $ per million jobs, all-in (a backlog) | ${cost['backlog']:.2f} | ≤ ${BACKLOG_TARGET:.2f} | floor ${cost['floor']:.2f} "
            f"| {_mark(t['backlog'])} |"
        )
    be = cost.get("break_even_jobs_per_month_vs_fargate")
    add(
        f"| 2 | break-even against one always-on Fargate worker (all-in, {r['billable_run']['rate_per_second']:g} jobs/s) | "
        f"{(be or 0) / 1e6:.2f} million jobs a month | ≥ {BREAK_EVEN_TARGET / 1e6:.1f} million | Fargate ${cost['fargate_monthly']:.2f}/month | {_mark(t['break_even'])} |"
    )
    add(
        f"| 3 | idle cost, $ per month, all-in (defaults, 3 routes) | ${r['idle_cost_per_month_usd']['value']:.2f} | ≤ ${IDLE_TARGET:.2f} "
        f"| Fargate worker ${cost['fargate_monthly']:.2f} | {_mark(t['idle'])} |"
    )
    if lat:
        add(
            f"| 4 | pickup latency p50 under load ({lat['rate_per_second']:g} jobs/s) | {lat['p50_load']:.2f} s | ≤ {P50_TARGET:g} s "
            f"| — | {_mark(t['p50'])} |"
        )
        add(
            f"| 4 | pickup latency p99 under load | {lat['p99_load']:.2f} s | ≤ {P99_TARGET:g} s | — | {_mark(t['p99'])} |"
        )
        add(
            f"| 4 | pickup latency idle, max of {len(lat['idle_samples_s'])} | {lat['idle_max']:.2f} s | ≤ tick + 1 = "
            f"{lat['tick_seconds'] + 1} s | — | {_mark(t['idle_latency'])} |"
        )
    add(
        f"| 5 | adapter CPU / job (poller + wrapper + heartbeat) | {cpu['adapter_ms']:.3f} ms | ≤ 3 x direct = "
        f"{3 * cpu['direct_ms']:.3f} ms | minimal worker {cpu['direct_ms']:.3f} ms (ratio {cpu['ratio']:.2f}) | {_mark(t['cpu'])} |"
    )
    for fn, c in cold.items():
        add(
            f"| 6 | cold start, `{fn}` entry module | {c['import_ms']:.0f} ms ({c['ratio']:.2f}x boto3) | ≤ 2 x boto3 = "
            f"{2 * c['boto3_ms']:.0f} ms | bare `import boto3` {c['boto3_ms']:.0f} ms | "
            f"{_mark(c['ratio'] <= COLD_TARGET)} |"
        )
    for fn, c in cold.items():
        if c.get("cold_path_ratio") is None:
            continue
        add(
            f"| 6 | cold path, `{fn}` (entry module + first invocation's imports, built layer, CPython 3.12) | "
            f"{c['cold_path_ms']:.0f} ms ({c['cold_path_ratio']:.2f}x boto3) | ≤ 2 x boto3 = {2 * c['cold_path_boto3_ms']:.0f} ms "
            f"| bare `import boto3` {c['cold_path_boto3_ms']:.0f} ms | {_mark(c['cold_path_ratio'] <= COLD_TARGET)} |"
        )
    dispatch = r.get("dispatch_rate_jobs_per_s") or {}
    if dispatch:
        local = dispatch["local"]
        add(
            f"| 7 | dispatch rate, one poller, local topology (Sheptra emulator on loopback, {local['jobs']} jobs waiting) | "
            f"{dispatch['one_poller_local'] or 0:,.0f} jobs/s | measured | {local['jobs_per_poll']} jobs a poll | — |"
        )
        sharded = dispatch.get("local_sharded")
        if sharded:
            add(
                f"| 7 | dispatch rate, one poller shard per route, local topology (same backlog, {sharded['shards']} shards) | "
                f"{dispatch['sharded_local'] or 0:,.0f} jobs/s | measured | {sharded['jobs_per_poll']} jobs a poll | — |"
            )
        one = dispatch.get("on_paper_one_shard")
        if one:
            add(
                f"| 7 | dispatch rate, one deployment on paper, one poller (the default) | {one['value']:,.0f} jobs/s | — "
                f"| binding: {one['binding'].replace('_', ' ')} | — |"
            )
        paper = dispatch["on_paper"]
        add(
            f"| 7 | dispatch rate, one deployment on paper, {paper.get('shards', 1)} poller shard(s) | "
            f"{dispatch['deployment_on_paper']:,.0f} jobs/s | ≥ {DISPATCH_TARGET:,.0f} "
            f"| binding: {paper['binding'].replace('_', ' ')} | {_mark(t['dispatch'])} |"
        )
    add("")
    add(f"## What each move changed (before: {BEFORE['commit']}, the same all-in model; after: this run)")
    add("")
    _moves(r, add)
    add("")
    add("## Issue 29's candidates, each priced from this run")
    add("")
    from bench.candidates import markdown

    for line in markdown(r):
        add(line)
    add("")
    add("## How each figure is measured")
    add("")
    add(
        "**The in-process pipeline** (sections 1, 2, 3, 5; `bench/pipeline.py`). The library's real entry points "
        "(`workerless.entrypoints.poller`, `.heartbeat`, and handlers built with `job_handler`) run single-threaded; "
        "the driver plays Lambda and its SQS event sources (receive up to BatchSize 5, invoke, delete what the partial "
        "batch response says succeeded). Below the library, botocore is replaced by in-memory fakes of the SQS and "
        "DynamoDB clients (`bench/fakes.py`, which evaluate the job store's condition and update expressions for real) "
        "and the engine's HTTP by `httpx.MockTransport` in front of the real emulator's router "
        "(`workerless_devkit.emulators.http.mock_transport`): the emulator counts every engine request exactly as over "
        "loopback. In sections 1 and 5 each poller invocation takes one batch (`WORKERLESS_POLL_BUDGET_SECONDS=0`: the "
        "poller's protocol work alone, no pauses); lease-long jobs run on a virtual clock (`time.time` advanced by the "
        "driver), so a 200 s job takes milliseconds."
    )
    add("")
    add(
        f"**Cost** (section 2). {run['jobs']:,} jobs arriving at the engine as a Poisson stream of "
        f"{run['rate_per_second']:g} jobs/s (the pickup-latency section's load) on a virtual clock, through the shipped "
        "poller as deployed (poll budget 20 s; it polls again at once after a dispatch, and after an empty or full poll "
        "while work flows — within 5 s of its last dispatch — it ends and relays to a fresh invocation through the "
        "ticker queue, the message delayed 1 s, the poller lock and the queue counts handed on with it; no invocation "
        "sleeps). Between invocations the driver lets the rest of the deployment run (arrivals, the routes' event "
        "sources and handlers, the heartbeat) and moves the virtual clock to the next relay's delivery, or else to the "
        "next 20 s tick. "
        f"{run['virtual_seconds']:,.0f} virtual seconds: {run['poller_invocations']} poller invocations "
        f"({run['relay_invocations']} from relays, {run['tick_invocations']} from ticks), paused "
        f"{run['paused_s'].get('poller', 0.0):,.0f} s in all. One poller runs at a time (a tick that lands while one "
        "relays is assumed to find the lock held; ticks are priced in the idle cost). It uses the in-memory fakes with the "
        "same call counting, not moto (moto's SendMessage slows as a queue grows); it ran in "
        f"{run['elapsed_s']} s. SQS is metered one request per "
        "started 64 KiB of payload; DynamoDB write units are computed from item sizes (the larger of before and "
        "after, per started KiB, a refused conditional write included) and strongly consistent read units per "
        "started 4 KiB — DynamoDB's own formulas, which is what ReturnConsumedCapacity would report. The event "
        "source's empty receives are its idle long polls and are priced once, in the idle cost; every other call is "
        "in the per-job figure — the poller's GetQueueAttributes, its relay messages and the "
        "relayed invocations (their event-source receive and delete, their Lambda request and duration) included. "
        "Lambda billed duration is modelled: the measured net CPU stretched to 256 MB's share of a vCPU (x1769/256) "
        "plus published typical latencies per call (SQS 10 ms, DynamoDB 5 ms, engine 20 ms) plus the 1 ms rounding "
        "per invocation, plus any virtual seconds a poller spends paused (only an engine error's back-off now; a "
        "sleeping Lambda is billed all the same). CloudWatch: the EMF lines and log bytes the functions write, counted "
        "as written (custom metrics per hour published), and Lambda's own lines per invocation where the template's "
        "LoggingConfig lets them through; KMS: see below. "
        "Prices: us-east-1, arm64 list prices from the issue."
    )
    add("")
    add("Per job in that run:")
    add("")
    add("| call | per job |")
    add("| --- | --- |")
    jobs = run["jobs"]
    for key, value in sorted(run["sqs_requests_by_call"].items()):
        add(f"| SQS {key} | {value / jobs:.3f} requests |")
    for key, value in sorted(run["ddb_write_units_by_call"].items()):
        add(f"| DynamoDB {key} | {value / jobs:.3f} write units |")
    for key, value in sorted(run["ddb_read_units_by_call"].items()):
        add(f"| DynamoDB {key} | {value / jobs:.3f} read units |")
    for key, value in sorted(run["invocations"].items()):
        add(f"| Lambda {key} | {value / jobs:.3f} invocations |")
    add("")
    mc = r.get("moto_cross_check")
    if mc:
        add(
            f"**Cross-check on moto** (`bench/moto_check.py`, {mc['jobs']} jobs): the same run through real boto3 "
            "clients on moto, metered by a botocore event hook (`provide-client-params` adds "
            "`ReturnConsumedCapacity=TOTAL` to every DynamoDB call, `after-call` counts SQS requests in 64 KiB units and "
            "reads `ConsumedCapacity`), beside the in-memory meters:"
        )
        add("")
        add("| per job | in-memory fakes | moto + billing hook |")
        add("| --- | --- | --- |")
        keys = sorted(set(mc["fakes"]["calls"]) | set(mc["moto"]["calls"]))
        for key in keys:
            add(f"| {key} calls | {mc['fakes']['calls'].get(key, 0):.3f} | {mc['moto']['calls'].get(key, 0):.3f} |")
        add(
            f"| SQS billed requests (non-empty) | {mc['fakes']['sqs_requests']:.3f} | {mc['moto']['sqs_requests']:.3f} |"
        )
        add(f"| DynamoDB capacity units | {mc['fakes']['ddb_units']:.3f} | {mc['moto']['ddb_units']:.3f} |")
        add("")
        add(
            "The calls agree one for one (moto's column counts the event source's empty receives among "
            "ReceiveMessage). The capacity units differ: moto reports 1.0 per write and 0.5 per read whatever the "
            "item's size and the read's consistency (a 5 KB put reports 1.0 there), while DynamoDB bills a write "
            "per started KiB of the larger of the old and new item and a strongly consistent read per started "
            "4 KiB — the fakes apply DynamoDB's rule, so the cost model uses their figure."
        )
        add("")
    add(
        "Cost parts, $ per million jobs: "
        + ", ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in cost["parts"].items())
        + f"; billed duration {cost['billed_ms_per_job']:.1f} ms per job."
    )
    if cost.get("lambda_per_function"):
        add("")
        add(
            "| Lambda function | invocations / job | billed ms / invocation (modelled) | billed ms / job | of which paused |"
        )
        add("| --- | --- | --- | --- | --- |")
        for fn, row in cost["lambda_per_function"].items():
            add(
                f"| {fn} | {row['invocations_per_job']:.3f} | {row['billed_ms_per_invocation']:.1f} | {row['billed_ms_per_job']:.2f} "
                f"| {row.get('paused_ms_per_job', 0.0):.2f} |"
            )
    sweep = r.get("cost_by_arrival_rate") or []
    if sweep:
        add("")
        add(
            "**The same run at other arrival rates.** While work flows the poller relays once a second (a send, a "
            "receive, a delete, a Lambda request, a lock write, an engine poll, the routes' depths every 2 s) and the "
            "busy hours' custom metrics are billed per hour, not per job, so the per-job figure falls as the rate rises:"
        )
        add("")
        add(
            "| arrival rate | jobs | $ per million jobs | poller paused (share of the run) | GetQueueAttributes / job | engine requests / job (Sheptra) |"
        )
        add("| --- | --- | --- | --- | --- | --- |")
        for row in sweep:
            rate = "all at once (backlog)" if row["rate_per_second"] is None else f"{row['rate_per_second']:g} jobs/s"
            add(
                f"| {rate} | {row['jobs']:,} | ${row['usd_per_million']:.2f} | {100 * row['poller_paused_fraction']:.0f}% "
                f"| {row['get_queue_attributes_per_job']:.2f} | {row['engine_requests_per_job']:.2f} |"
            )
    memory = r.get("poller_memory") or []
    if memory:
        add("")
        add(
            "**The poller's memory.** Only its duration changes with memory (Lambda's CPU share is memory/1769 of a "
            "vCPU); the poller mostly waits on SQS, DynamoDB and the engine, so less memory bills less. Modelled from "
            "the 2 jobs/s run and the idle tick (measured CPU stretched to each setting, the same call latencies):"
        )
        add("")
        add(
            "| poller memory | its duration, $ per million jobs (2 jobs/s) | billed ms per invocation | idle tick chain's duration, $ a month |"
        )
        add("| --- | --- | --- | --- |")
        for row in memory:
            add(
                f"| {row['memory_mb']} MB | ${row['duration_per_million_usd']:.3f} | {row['billed_ms_per_invocation']:.1f} "
                f"| ${row['idle_tick_duration_per_month_usd']:.3f} |"
            )
        add("")
        add(
            "128 MB measures cheapest, by under a tenth of a dollar per million jobs. The template keeps 256 MB "
            "(`PollerMemorySize`): the payload limit follows the memory (WORKERLESS_MAX_PAYLOAD_BYTES: 10 MiB at "
            "256 MB, 2 MiB at 128; docs/assumptions.md), and the poller's modules and clients alone take about "
            "66 MB (maxrss after importing them and building its four clients, CPython 3.11 here). A deployment "
            "whose jobs are all under 2 MiB can set 128."
        )
    if cost.get("log_bytes_per_job") is not None:
        add("")
        parts = cost["parts"]
        add(
            f"**CloudWatch and KMS, in the figure above.** Logs: the functions write {cost['log_bytes_per_job']:,.0f} bytes "
            f"of logs and EMF lines per job ({cost.get('log_lines_per_job') or 0:.1f} lines, at the template's INFO level), "
            + (
                f"and Lambda adds its START/END/REPORT lines ({cost['log_bytes_per_job_with_platform']:,.0f} bytes a job "
                "in all), "
                if r["template_shape"].get("platform_log_bytes", 1)
                else "and Lambda none of its own (the template's SystemLogLevel WARN drops START and REPORT; their "
                "figures are Lambda's free AWS/Lambda metrics), "
            )
            + f"ingested at $0.50 per GB: ${parts['cloudwatch_logs']:.2f} per million jobs. Metrics: every EMF metric name x "
            f"dimension set is a custom metric at $0.30 a month, prorated by the hours in which it is published; the run "
            f"published {cost.get('custom_metrics_per_hour') or 0} in an hour ({', '.join(cost.get('custom_metrics') or []) or 'none'}): "
            f"${parts['cloudwatch_metrics']:.2f} per million jobs at this rate. KMS: "
            + (
                "the table's SSE uses the AWS managed key (TableKey aws-managed; KMS requests billed at $0.03 per "
                "10,000), one table-key Decrypt per function role and 5-minute window "
                f"({cost.get('kms_decrypts') or 0} role-windows in the run, x2 front-end hosts assumed): "
                f"${parts['kms']:.3f} per million jobs"
                if parts["kms"]
                else "the table is encrypted at rest with the AWS owned key (TableKey's default, aws-owned): no KMS "
                "request is billed; with TableKey aws-managed (its use recorded in CloudTrail) the run's "
                f"{cost.get('kms_decrypts') or 0} role-windows would add one Decrypt each (x2 front-end hosts assumed)"
            )
            + "; the queues' SSE-SQS uses SQS-owned keys (no KMS request billed)."
        )
    add("")
    be = cost.get("break_even_jobs_per_month_vs_fargate")
    add(
        f"**Beside it.** Step Functions Standard with an activity worker: at least "
        f"{2} state transitions per job (the Task state and the terminal state) x $25 per million = "
        f"${cost['step_functions_standard']:.0f} per million jobs, plus an always-on activity worker. An always-on "
        f"Fargate worker (0.25 vCPU, 0.5 GB, arm64): ${cost['fargate_monthly']:.2f} a month whatever the volume. "
        f"Break-even with workerless (idle ${r['idle_cost_per_month_usd']['value']:.2f}/month + ${cost['value']:.2f} per million "
        f"jobs): about {be:,.0f} jobs a month — below that workerless costs less; above it one Fargate task does, "
        "as long as one task can keep up (see docs/scaling.md). Step Functions Standard with the same Fargate "
        f"activity worker never breaks even with workerless: it costs more per job (${cost['step_functions_standard']:.0f} "
        f"vs ${cost['value']:.2f} per million) and more when idle (${cost['fargate_monthly']:.2f} vs "
        f"${r['idle_cost_per_month_usd']['value']:.2f} a month)."
    )
    add("")
    add(
        f"**Idle cost** (section 3). One idle poller invocation of each kind was metered on the fakes: from a tick "
        f"{_calls(idle['per_tick'])}; from the watchdog schedule while the chain is healthy {_calls(idle['per_watchdog'])}; "
        "and the dead-letter function's scheduled drain of its empty queue "
        f"{_calls(idle.get('per_dead_letter_drain') or {'sqs_requests': 0, 'wru': 0, 'rru': 0, 'engine_calls': 0, 'cpu_s': 0})}. "
        f"Per month: {idle['ticks_per_month']:,} ticks (TickSeconds {r['template_shape']['tick_seconds']}), "
        f"{idle['watchdog_invocations_per_month']:,} watchdog runs, {idle.get('dead_letter_drains_per_month') or 0:,} "
        "dead-letter drains, and Lambda's SQS event sources long-polling "
        f"{r['template_shape']['sqs_event_sources']} queues ({idle['event_source_requests_per_month']:,} billed receives, "
        "assuming five idle pollers per event source with MaximumConcurrency and two for one without, "
        f"{r['template_shape'].get('sqs_event_sources_uncapped', 0)} here: AWS's low-traffic optimisation, a best "
        "case; each a 20 s long poll); the custom metrics an idle invocation "
        f"publishes: {', '.join(idle.get('custom_metrics') or []) or 'none'}. Parts, $ per month: "
        + ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in idle["parts"].items())
        + "."
    )
    add("")
    if lat:
        add(
            f"**Pickup latency** (section 4; `bench/latency.py`). `LocalTopology` runs template.yaml with its default "
            f"parameters (TickSeconds {lat['tick_seconds']}, MaxInFlight 10, BatchSize 5; the watchdog at its 1-minute "
            f"rate) on moto, against the Sheptra emulator over loopback HTTP. Latency = handler start (the wrapper's "
            f"`started` event) - job creation at the emulator. Load: Poisson arrivals at {lat['rate_per_second']:g} "
            f"jobs/s for {lat['load_jobs']} jobs; idle: {len(lat['idle_samples_s'])} single jobs at random moments "
            f"({', '.join(f'{x:.1f}' for x in lat['idle_samples_s'])} s)."
        )
        add("")
    add(
        f"**CPU** (section 5). `time.thread_time()` around each invocation, minus the CPU spent inside the fakes and "
        f"the emulator (metered separately), over {cpu['jobs']} jobs after a warm-up, median of three interleaved "
        f"runs (adapter {cpu['adapter_runs_ms']} ms, direct {cpu['direct_runs_ms']} ms). Per function: "
        + ", ".join(f"{k} {v:.3f} ms" for k, v in cpu["adapter_by_function_ms"].items())
        + ". The library logs at INFO as in Lambda (formatted, written to /dev/null). The direct worker is "
        "`bench/minimal_worker.py`, seed 000's loop in Python on the same transport and emulator."
    )
    add("")
    add(
        "**Cold start** (section 6; `bench/cold_start.py`). `python -X importtime -c 'import app'` in the "
        "function's directory, fresh interpreter each run, median of 7, beside `import boto3` measured the same way. "
        "Everything a first invocation needs is imported lazily, so the entry module is light; the table below also "
        "shows the *cold path* (entry module plus every module the first invocation imports: settings, boto3, the "
        "engine adapter with httpx and pydantic, the batch loop), which is what a cold invocation "
        "pays in imports in total."
    )
    add("")
    add("| function | entry module | x boto3 | cold path (built layer, 3.12) | x boto3 | heaviest |")
    add("| --- | --- | --- | --- | --- | --- |")
    for fn, c in cold.items():
        heavy = ", ".join(f"{k} {v:.0f} ms" for k, v in list(c["heaviest_imports_ms"].items())[:2])
        add(
            f"| {fn} | {c['import_ms']:.0f} ms | {c['ratio']:.2f} | {c.get('cold_path_ms') or 0:.0f} ms | "
            f"{c.get('cold_path_ratio') or 0:.2f} | {heavy} |"
        )
    add("")
    add("## Gaps, and the change that closes each")
    add("")
    gaps = _gaps(r, t)
    if not gaps:
        add("Every target is met.")
    for gap in gaps:
        add(f"- {gap}")
    add("")
    path.write_text("\n".join(lines), encoding="utf-8")


def _esm_sensitivity(r: dict[str, Any]) -> str:
    """The idle cost if Lambda's SQS event sources long-poll an idle queue with one connection, not five."""
    from bench.cost import ESM_IDLE_POLLERS

    idle = r["idle_cost_detail"]
    esm = idle["parts"]["event_source_long_polls"]
    one = esm / ESM_IDLE_POLLERS
    total = r["idle_cost_per_month_usd"]["value"] - esm + one
    verdict = "under" if total <= IDLE_TARGET else "still over"
    return (
        f"with one idle long poll per event source instead of {ESM_IDLE_POLLERS}, the event sources cost "
        f"${one:.2f} a month and the idle total is ${total:.2f}, {verdict} the ${IDLE_TARGET:.2f} target with no "
        "code change."
    )


def _moves(r: dict[str, Any], add: Any) -> None:
    cost = r["cost_per_million_jobs_usd"]
    parts = cost["parts"]
    run = r["billable_run"]
    lat = r.get("pickup_latency_s") or {}
    gqa = run["sqs_requests_by_call"].get("poller:GetQueueAttributes", 0) / run["jobs"]
    b = BEFORE
    add("| move | figure | before | after |")
    add("| --- | --- | --- | --- |")
    add(
        "| the bench's SQS fake answers MaximumMessageSize (the wrapper re-asked before every SendMessageBatch: "
        "a measurement artefact, not waste; issue 10's poller reads depths no more often than before) "
        f"| poller GetQueueAttributes a job | 1.67 (as reported) / {b['get_queue_attributes_per_job']:.2f} (measured) | {gqa:.2f} |"
    )
    add(
        "| one INFO line per job outcome, lifecycle steps and an idle poll at DEBUG "
        f"| log lines a job; CloudWatch Logs $/M | {b['log_lines_per_job']:.1f}; ${b['parts']['cloudwatch_logs']:.2f} "
        f"| {cost.get('log_lines_per_job') or 0:.1f}; ${parts['cloudwatch_logs']:.2f} |"
    )
    add(
        "| a fixed set of metrics, service-wide (failures per type), no zero counts, none from an idle tick "
        f"| custom metrics a busy hour; $/M | {b['metrics_per_hour']}; ${b['parts']['cloudwatch_metrics']:.2f} "
        f"| {cost.get('custom_metrics_per_hour') or 0}; ${parts['cloudwatch_metrics']:.2f} |"
    )
    idle = r["idle_cost_detail"]
    add(
        "| (same) | custom metrics an idle tick publishes; idle $/month | "
        f"{b['idle_metrics']} ($2.40 a month); ${b['idle']:.2f} | {len(idle.get('custom_metrics') or [])}; "
        f"${r['idle_cost_per_month_usd']['value']:.2f} |"
    )
    cw = BEFORE_CLOUDWATCH
    add(
        "| CloudWatch all-in: Lambda's JSON log format with SystemLogLevel WARN (no START/END/REPORT lines), no "
        "`function_name` / `function_arn` / `function_memory_size` on every line (the log group names the function), "
        "no `HandlerDuration` / `PollCycles` (AWS/Lambda Duration and Invocations are free); "
        f"{cw['commit']} before | log bytes a job with Lambda's own; CloudWatch Logs $/M; custom metrics a busy hour; "
        f"metrics $/M | {cw['log_bytes_per_job']:,}; ${cw['logs']:.2f}; {cw['metrics_per_hour']}; ${cw['metrics']:.2f} "
        f"| {cost.get('log_bytes_per_job_with_platform') or 0:,.0f}; ${parts['cloudwatch_logs']:.2f}; "
        f"{cost.get('custom_metrics_per_hour') or 0}; ${parts['cloudwatch_metrics']:.2f} |"
    )
    add(
        f"| (same) | $ per million jobs all-in, 2 jobs/s; backlog; idle $/month | ${cw['cost']:.2f}; ${cw['backlog']:.2f}; "
        f"${cw['idle']:.2f} | ${cost['value']:.2f}; ${cost.get('backlog') or 0:.2f}; "
        f"${r['idle_cost_per_month_usd']['value']:.2f} |"
    )
    shared = BEFORE_SHARED_DLQ
    add(
        "| one job dead-letter queue for every route (one event source for the dead-letter function, not one "
        f"per route; {shared['commit']} before) | SQS event sources; idle $/month | {shared['sqs_event_sources']}; "
        f"${shared['idle']:.2f} | {r['template_shape']['sqs_event_sources']}; ${r['idle_cost_per_month_usd']['value']:.2f} |"
    )
    from bench.cost import SCHEDULER_PER_INVOCATION

    moved = BEFORE_IDLE_MOVES
    idle_parts = idle["parts"]
    add(
        "| the job dead-letter queue drained by the dead-letter function's 1-minute schedule, no event source "
        f"({moved['commit']} before) | SQS event sources; their long polls + the drain + its schedule, $/month "
        f"| {moved['sqs_event_sources']}; ${moved['sqs_event_sources'] * ESM_MONTHLY_PER_QUEUE:.2f} "
        f"| {r['template_shape']['sqs_event_sources']}; ${idle_parts['event_source_long_polls'] + idle_parts.get('dead_letter_drain', 0) + (idle.get('dead_letter_drains_per_month') or 0) * SCHEDULER_PER_INVOCATION:.2f} |"
    )
    add(
        "| an idle tick reads no queue depth: a route read empty, nothing sent since, re-read every 5 minutes "
        f"| SQS requests an idle tick; tick chain + watchdog $/month | {moved['tick_sqs']:.1f}; "
        f"${moved['tick_chain'] + moved['watchdog']:.2f} | {idle['per_tick']['sqs_requests']:.1f}; "
        f"${idle_parts['tick_chain'] + idle_parts['watchdog_schedule']:.2f} |"
    )
    add(
        "| no sleeping poller: relay 1 s later with a delayed message, the lock and counts handed on "
        f"| Lambda duration $/M; SQS $/M | ${b['parts']['lambda_duration']:.2f}; ${b['parts']['sqs']:.2f} "
        f"| ${parts['lambda_duration']:.2f}; ${parts['sqs']:.2f} |"
    )
    if lat:
        add(
            f"| (same) | pickup p50 / p99 at 2 jobs/s | {b['p50']:.2f} s / {b['p99']:.2f} s | {lat['p50_load']:.2f} s / {lat['p99_load']:.2f} s |"
        )
    add(
        "| the intent batches in the poller lock's item: two writes a dispatching cycle, the clear riding on the "
        "item's next write, no read of its own (the `dispatched` write kept: see the gaps) "
        f"| DynamoDB read $/M; write $/M | ${b['parts']['dynamodb_read']:.2f}; ${b['parts']['dynamodb_write']:.2f} "
        f"| ${parts['dynamodb_read']:.2f}; ${parts['dynamodb_write']:.2f} |"
    )
    poller_wu = sum(v for k, v in run["ddb_write_units_by_call"].items() if k.startswith("poller:")) / run["jobs"]
    poller_ru = sum(v for k, v in run["ddb_read_units_by_call"].items() if k.startswith("poller:")) / run["jobs"]
    add(
        f"| (same; before: {INTENTS_BEFORE['commit']}, measured the same way) | the poller's DynamoDB write / read "
        f"units a job | {INTENTS_BEFORE['poller_wu']:.2f} / {INTENTS_BEFORE['poller_ru']:.2f} "
        f"| {poller_wu:.2f} / {poller_ru:.2f} |"
    )
    add(
        f"| all of it | $ per million jobs all-in, 2 jobs/s; backlog | ${b['cost']:.2f}; ${b['backlog']:.2f} "
        f"| ${cost['value']:.2f}; ${cost.get('backlog') or 0:.2f} |"
    )
    add(f"| (same) | adapter CPU a job | {b['cpu_ms']:.3f} ms | {r['cpu_per_job']['adapter_ms']:.3f} ms |")
    c = CPU_MOVE
    add(
        "| partial batch responses from a plain loop (not Powertools' batch processor); EMF lines built without a "
        "Powertools provider per line; the handler span without the tracer machinery when no SDK is configured; "
        "the logger formatter's two costly steps made cheap (before: "
        f"{c['before_commit']}, side by side in one run) | adapter CPU a job (handler wrapper); ratio to the "
        f"minimal worker | {c['before_ms']:.3f} ms ({c['before_handler_ms']:.3f} ms); {c['before_ratio']:.2f}x "
        f"| {c['after_ms']:.3f} ms ({c['after_handler_ms']:.3f} ms); {c['after_ratio']:.2f}x |"
    )
    lk = LOCK_ITEM_BEFORE
    calls = run.get("ddb_calls_by_call") or {}
    lock_writes = calls.get("poller:PutItem", 0)
    lock_units = run["ddb_write_units_by_call"].get("poller:PutItem", 0)
    add(
        "| the poller lock's send log as one short string per route, its tracked record keys without their "
        f"route's prefix (issue 29; before: {lk['commit']}, the 60 s lag window's lists had taken the item past 2 KiB) "
        "| write units a lock write; the poller's write units a job; $ per million jobs, 2 jobs/s; backlog "
        f"| {lk['units_per_write']:.2f}; {lk['poller_wu']:.2f}; ${lk['cost']:.2f}; ${lk['backlog']:.2f} "
        f"| {(lock_units / lock_writes if lock_writes else 0):.2f}; {lock_units / run['jobs']:.2f}; ${cost['value']:.2f}; "
        f"${cost.get('backlog') or 0:.2f} |"
    )
    g = GATE_MOVE
    add(
        "| no start-gate watchdog timer (a thread and a context copy) for a batch of one message, whose only job "
        f"always starts (about {g['jobs_per_invocation']:.2f} jobs an invocation at 2 jobs/s; issue 29) "
        f"| handler CPU an invocation at 2 jobs/s (median of two, interleaved) | {g['before_ms']:.3f} ms | {g['after_ms']:.3f} ms |"
    )
    for m in CPU_MOVES_29:
        add(f"| {m['move']} (issue 29) | {m['figure']} (median of 4, interleaved) | {m['before']} | {m['after']} |")
    for candidate, measured, verdict in CPU_REFUSED_29:
        add(f"| not made: {candidate} (issue 29) | {measured} | — | {verdict} |")
    from bench.candidates import BEFORE_IDLE_CAPS as ic

    be = (cost.get("break_even_jobs_per_month_vs_fargate") or 0) / 1e6
    backlog = cost.get("backlog") or 0.0
    add(
        "| the ticker's event source without MaximumConcurrency while ReserveConcurrency is true (the poller "
        "capped by PollerReservedConcurrency; AWS's idle optimisation to 2 pollers), and a route's SQS depth read "
        "only when the poller's tracked jobs leave no room under MaxInFlight, at least every 5 minutes (issue 29; "
        f"before: main at {ic['commit']}, its bench/RESULTS.md) | poller GetQueueAttributes a job; $ per million "
        "jobs, 2 jobs/s; backlog; idle $/month; break-even (million jobs a month) "
        f"| {ic['get_queue_attributes_per_job']:.2f}; ${ic['cost']:.2f}; ${ic['backlog']:.2f}; ${ic['idle']:.2f}; "
        f"{ic['break_even']:.2f} | {gqa:.2f}; ${cost['value']:.2f}; ${backlog:.2f}; "
        f"${r['idle_cost_per_month_usd']['value']:.2f}; {be:.2f} |"
    )
    if lat.get("p50_load") is not None:
        add(
            f"| (same) | pickup p50 / p99 at 2 jobs/s | {ic['p50']:.2f} s / {ic['p99']:.2f} s "
            f"| {lat['p50_load']:.2f} s / {lat['p99_load']:.2f} s |"
        )
    dispatch = r.get("dispatch_rate_jobs_per_s") or {}
    one, sharded = dispatch.get("on_paper_one_shard"), dispatch.get("local_sharded")
    if one and sharded:
        add(
            "| pollers sharded by route (Mappings.Routes PollerShard: each shard its own tick chain, lock and intent "
            f"item; before: one poller, the default, same run) | dispatch rate on paper; locally (jobs/s) "
            f"| {one['value']:,.0f}; {dispatch['one_poller_local'] or 0:,.0f} "
            f"| {dispatch['deployment_on_paper']:,.0f}; {dispatch['sharded_local'] or 0:,.0f} ({sharded['shards']} shards) |"
        )


def _calls(m: dict[str, float]) -> str:
    return (
        f"({m['sqs_requests']:g} SQS requests, {m['wru']:g} write and {m['rru']:g} read units, "
        f"{m['engine_calls']:g} engine short poll, {1000 * m['cpu_s']:.2f} ms CPU)"
    )


def _gaps(r: dict[str, Any], t: dict[str, bool | None]) -> list[str]:
    out: list[str] = []
    er = r["engine_requests_per_job"]
    for engine, label in (("sheptra", "Sheptra"), ("nodeflow", "node-flow"), ("stagenext", "StageNext")):
        if not t["engine_" + engine]:
            e = er[engine]
            listed = ", ".join(f"`{k}` {v}" for k, v in e["requests"].items())
            out.append(
                f"**{label} engine requests ({e['value']:.3f}/job, floor {e['floor']:.2f} + 5%).** Requests counted: "
                f"{listed}. Everything above the protocol's floor is adapter overhead to remove."
            )
    cost = r["cost_per_million_jobs_usd"]
    if not t["cost"] or not t.get("backlog", True) or not t["break_even"]:
        run = r["billable_run"]
        jobs = run["jobs"]
        parts = cost["parts"]
        by_fn: dict[str, float] = {}
        for key, value in run["ddb_write_units_by_call"].items():
            fn = key.split(":", 1)[0]
            by_fn[fn] = by_fn.get(fn, 0.0) + value / jobs
        handler_wu = sum(v for k, v in by_fn.items() if k not in ("poller", "heartbeat"))
        poller_wu = by_fn.get("poller", 0.0)
        poller_ru = sum(v for k, v in run["ddb_read_units_by_call"].items() if k.startswith("poller:")) / jobs
        sqs = run["sqs_requests_by_call"]
        relays = sqs.get("poller:SendMessage(ticker)", 0) / jobs
        esm = (sqs.get("esm:ReceiveMessage", 0) + sqs.get("esm:DeleteMessageBatch", 0)) / jobs
        from bench.cost import DDB_PER_WRU

        ranked = ", ".join(f"{k.replace('_', ' ')} ${v:.2f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]))
        be = cost.get("break_even_jobs_per_month_vs_fargate") or 0
        out.append(
            f"**Cost all-in (${cost['value']:.2f} per million jobs at {run['rate_per_second']:g} jobs/s, target "
            f"${COST_TARGET:.2f}; ${cost.get('backlog') or 0:.2f} on a backlog, target ${BACKLOG_TARGET:.2f}; floor "
            f"${cost['floor']:.2f}; break-even {be / 1e6:.2f} million jobs a month, target {BREAK_EVEN_TARGET / 1e6:.1f}).** "
            f"By part: {ranked}. What is left above the floor, and the change that closes each:\n"
            f"  1. *SQS* ({run['per_job']['sqs_requests']:.2f} requests a job billed): the routes' event sources "
            f"receive and delete {esm:.2f} times a job, because at this rate a handler invocation gets about one job (BatchSize 5 "
            "fills only on a backlog); the poller's relays while work flows (one a second: "
            f"{relays:.2f} a job, each a send, a receive and a delete on the ticker queue) and the routes' depths "
            "(GetQueueAttributes at most every 2 s per route, handed on with the relay). Closing: a batching window on the "
            "route event sources (MaximumBatchingWindowInSeconds 1: fuller batches at up to a second more pickup; a "
            "template setting; it would cost the 2 jobs/s pickup p50 target, about half a second more) and the "
            "heartbeat's tickets (one per dispatching cycle, a send, a receive, a delete and a heartbeat invocation "
            "each, for jobs that have mostly finished by the time the ticket is due at a third of the lease): folding "
            "tickets into the relay chain would need the intent batches kept open in the lock's item until their "
            "ticket is due, which makes every lock write larger (more write units) than the requests it saves. "
            "Poller shards do not lower it: each shard relays and reads its own routes' depths.\n"
            f"  2. *The handler's third write* ({handler_wu:.2f} write units a job in the wrapper: claim, stored result, "
            "and the REPORTED mark, where the floor counts two; -$0.625 per million if dropped). Kept on purpose: the "
            "REPORTED mark is what lets the heartbeat drop a job from its ticket without asking the engine and what "
            "makes a redelivered duplicate a no-op; without it the engine requests per job rise past the 5% target.\n"
            f"  3. *The poller's writes* ({poller_wu:.2f} write units and {poller_ru:.2f} read units a job; "
            f"{INTENTS_BEFORE['poller_wu']:.2f} and {INTENTS_BEFORE['poller_ru']:.2f} at {INTENTS_BEFORE['commit']}): "
            "the intent batches now live in the poller lock's item, two writes per dispatching cycle (activated before "
            "SendMessageBatch, dispatched after it; the clear rides on the item's next write), and the lock taken over "
            "by each relay (one conditional write, no read); the only reads left are the ticks' lock reads. What is "
            "left is kept on purpose. The takeover write: folded into the first intent write, a duplicate relay would "
            "have two invocations poll at once. The `dispatched` write: it is what tells a dead poller's queued jobs "
            "(whose ticket the next invocation sends) from its unqueued ones (handed back), and nothing else can (a "
            "message cannot be looked up in SQS; a job record exists only once a handler claimed it); the ticket sent "
            "before the jobs does not remove that need, and a ticket naming a job never queued would extend or mark "
            "LOST the next lease of the same record key. Closing it would take a per-job arbitration at recovery (a "
            "conditional tombstone in the job record that a later delivery of the queued message honours: a change "
            f"to the handler's claim, unsafe on StageNext as it stands) for ≈ -{poller_wu / 3:.2f} units, "
            f"-${poller_wu / 3 * DDB_PER_WRU * 1e6:.2f}.\n"
            f"  4. *CloudWatch* (metrics ${parts.get('cloudwatch_metrics', 0):.2f}, logs ${parts.get('cloudwatch_logs', 0):.2f}): "
            f"{cost.get('custom_metrics_per_hour') or 0} custom metrics in every busy hour "
            f"({', '.join(m.split('/')[-1].split('[')[0] for m in cost.get('custom_metrics') or [])}: "
            "none has a free AWS equivalent), one INFO line a job (its outcome, ≈ 420 bytes with the "
            "correlation keys the docs promise), a handler invocation's EMF line, and a busy poller invocation's "
            "`poll finished` line and EMF line; Lambda's own lines are off (SystemLogLevel WARN). Closing: the EMF "
            "values of a handler invocation folded into its outcome line (one line, not two, at small batches), and the "
            "busy poller's `poll finished` at DEBUG (≈ 150 bytes a job at 2 jobs/s; it is the poller's only summary).\n"
            "  At a flow of a few jobs a second the per-second costs (relays, depths, busy-hour metrics) are spread over "
            "few jobs; per job they shrink as the rate rises (see the arrival-rate table)."
        )
    idle = r["idle_cost_detail"]
    if not t["idle"]:
        shape = r["template_shape"]
        out.append(
            f"**Idle cost (${r['idle_cost_per_month_usd']['value']:.2f}/month, target ${IDLE_TARGET:.2f}).** "
            f"${idle['parts']['event_source_long_polls']:.2f} of it is Lambda's SQS event sources long-polling "
            f"{shape['sqs_event_sources']} queues (≈ ${ESM_MONTHLY_PER_QUEUE:.2f} a month each, whatever the code "
            f"does; ≈ ${ESM_MONTHLY_PER_QUEUE * 2 / 5:.2f} for each of the {shape.get('sqs_event_sources_uncapped', 0)} "
            "without MaximumConcurrency, AWS's 2 idle pollers, a best case): one per route, the tick and the "
            "heartbeat tickets. The job dead-letter queue every route shares "
            "has none: the dead-letter function drains it on a 1-minute schedule "
            f"(${idle['parts'].get('dead_letter_drain', 0):.2f} a month for its {idle.get('dead_letter_drains_per_month') or 0:,} "
            "empty short polls, plus its schedule's share of the EventBridge line; "
            f"at {BEFORE_IDLE_MOVES['commit']} its event source made {BEFORE_IDLE_MOVES['sqs_event_sources']} and the idle "
            f"figure ${BEFORE_IDLE_MOVES['idle']:.2f}). The tick chain (${idle['parts']['tick_chain']:.2f}) and the watchdog "
            f"(${idle['parts']['watchdog_schedule']:.2f}) are an idle tick's {_calls(idle['per_tick'])}: a route read empty, "
            "with nothing sent to it since, is not read again for 5 minutes "
            f"(before: {BEFORE_IDLE_MOVES['tick_sqs']:.0f} SQS requests a tick, ${BEFORE_IDLE_MOVES['tick_chain'] + BEFORE_IDLE_MOVES['watchdog']:.2f} "
            "a month); what is left of it is the next tick, its delete, and the ticker state's and the poller lock's "
            "writes (three a tick) and reads (two). The changes that close the rest, in order: (1) one control queue "
            "is refused (a queue's visibility must cover every consumer's timeout: the candidates' table), and the "
            "ticker's event source already goes without MaximumConcurrency (two idle pollers, a best case); (2) fewer "
            "lock and ticker writes an idle tick (the lock taken and released is two of them). Had (1) been possible, "
            f"{shape['sqs_event_sources'] - 1} event sources would remain (one per route + "
            f"control): ≈ ${(shape['sqs_event_sources'] - 1) * ESM_MONTHLY_PER_QUEUE:.2f} + "
            f"${idle['parts']['tick_chain'] + idle['parts']['watchdog_schedule']:.2f} — still above $1.00 with a "
            "20 s tick, so the last step is the tick itself: TickSeconds 60 (the watchdog alone) meets $1.00 at the "
            "price of up-to-a-minute idle pickup. The event-source figure rests on the five-idle-pollers assumption "
            "(bench/cost.py, `ESM_IDLE_POLLERS`), and the gap depends on it more than on any code: "
            f"{_esm_sensitivity(r)} It is the number to confirm on a real account first (the SQS bill of an idle "
            "stack over a day: ReceiveMessage requests per queue)."
        )
    lat = r.get("pickup_latency_s")
    if lat and (not t["p50"] or not t["p99"]):
        out.append(
            f"**Pickup latency under load (p50 {lat['p50_load']:.2f} s, p99 {lat['p99_load']:.2f} s; targets 1 s / 2 s).** "
            "While work flows the poller relays to a fresh invocation a second after an empty poll (no sleeping "
            "Lambda), so under load a job should wait about half a second plus the relay's delivery; a figure above that "
            "points at a relay delivered late (see the samples in results.json)."
        )
    if lat and not t["idle_latency"]:
        out.append(
            f"**Idle pickup ({lat['idle_max']:.1f} s > tick + 1).** See the samples above; the tick chain is "
            "what bounds it."
        )
    if not t["cpu"]:
        cpu = r["cpu_per_job"]
        fn = cpu["adapter_by_function_ms"]
        lines = r["billable_run"].get("log_lines_per_job", 0.0)
        out.append(
            f"**Adapter CPU ({cpu['adapter_ms']:.2f} ms a job, {cpu['ratio']:.1f}x the minimal worker's "
            f"{cpu['direct_ms']:.2f} ms; target 3x).** Per function: "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in fn.items())
            + f". The library writes {lines:.1f} log lines a job at INFO (the job's outcome, and EMF lines). Where the "
            "CPU goes (cProfile per function under the bench's driver, net of the fakes and the emulator; the profiler "
            "inflates code that loops per character, so the shares are a guide, the moves' figures measured without "
            "it): in the handler wrapper (main at d1a789b), the engine report through httpx 32% (httpx building the "
            "request 29%, its URL parse 9%: that parse is gone since), the lifecycle lines 16% (the outcome's INFO "
            "line and a DEBUG step), the handler span 9%, the message's parse 3%; in the poller, its activation "
            "request 10%, the job messages' and the lock's JSON 14%. Done in issue 29: one watchdog thread per route, "
            "no cookie jar, no tokenizer for an answer of at most 64 KiB (main before them, side by side, median of "
            "four interleaved runs: adapter 1.020 -> 0.847 ms a job, handler 0.702 -> 0.591, poller 0.285 -> 0.223); "
            "then the engine URL joined to its parsed base (adapter 0.786 -> 0.765, handler 0.565 -> 0.535) and a "
            "completion's JSON encoded once (within the spread for the bench's 13-byte result; handler 1.141 -> "
            "0.646 ms a job for a 9 KB result); "
            "before that, in issue 13: partial batch responses from a plain loop, EMF lines without a Powertools "
            "provider per line, the handler span without the tracer machinery when no SDK is configured, the logger "
            f"formatter's two costly steps made cheap ({CPU_MOVE['before_ms']:.3f} -> "
            f"{CPU_MOVE['after_ms']:.3f} ms a job, ratio {CPU_MOVE['before_ratio']:.2f} -> "
            f"{CPU_MOVE['after_ratio']:.2f}). What is left is mostly the per-job work the docs promise (one INFO line "
            "with its correlation keys, three conditional writes, a span, two metric values) on top of a request that "
            "costs what the minimal worker's whole job does: 3x leaves about two such requests' worth for the poller, "
            "the heartbeat and all of that. Measured and not made (see the moves): a formatter of our own for the "
            "INFO line (perhaps 10 µs of its 33-50)."
        )
    if not t["cold"]:
        out.append("**Cold start.** The entry module is over 2x a bare boto3 import; see the heaviest imports above.")
    cold = r["cold_start"]
    measured = [c for c in cold.values() if c.get("cold_path_ratio") is not None]
    if measured and not t["cold_path"]:
        worst = max(measured, key=lambda c: c["cold_path_ratio"])
        heavy = worst.get("cold_path_heaviest_ms", {})
        listed = ", ".join(f"`{k}` {v:.0f} ms" for k, v in heavy.items())
        over = [
            f"{fn} {c['cold_path_ratio']:.2f}x"
            for fn, c in cold.items()
            if (c.get("cold_path_ratio") or 0) > COLD_TARGET
        ]
        out.append(
            f"**Cold path (target {COLD_TARGET:g}x a bare boto3 import; over it: {', '.join(over)}).** Measured from the "
            "built layer's bytecode under CPython 3.12. Heaviest top-level imports of the worst one (in this "
            f"interpreter): {listed}. Closing: the settings model's pydantic import off the first invocation's path; "
            "the engine adapter's httpx client built on first use."
        )
    elif not measured:
        errors = {c.get("cold_path_error") for c in cold.values()}
        out.append(f"**Cold path not measured**: {'; '.join(e for e in errors if e)}")
    dispatch = r.get("dispatch_rate_jobs_per_s") or {}
    if dispatch and not t["dispatch"]:
        paper = dispatch["on_paper"]
        limits = ", ".join(f"{k.replace('_', ' ')} {v:,.0f}" for k, v in paper["limits_jobs_per_s"].items())
        out.append(
            f"**One deployment's dispatch rate on paper ({paper['value']:,.0f} jobs a second with "
            f"{paper.get('shards', 1)} poller shard(s), target {DISPATCH_TARGET:,.0f}).** One poller polls a shard at a "
            f"time (its poller lock), so a shard dispatches what one poller's cycle does, back to back: "
            f"{paper['jobs_per_poll']:g} jobs a poll (measured locally) in a {paper['cycle_ms']:.0f} ms cycle on AWS "
            f"(published latencies, measured CPU at 256 MB). Ceilings, jobs a second: {limits} (binding: "
            f"{paper['binding'].replace('_', ' ')}). Closing: more shards than routes would need a route split "
            "across shards (two locks over one MaxInFlight: not done); the poller's memory raised where its CPU binds "
            "the cycle (a route's SendMessageBatch calls already go side by side, up to 8 at once)."
        )
    return out


def write_plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    fig.suptitle("workerless — make bench", fontsize=14)

    ax = axes[0][0]
    er = r["engine_requests_per_job"]
    names = ["sheptra", "nodeflow", "stagenext"]
    values = [er[n]["value"] for n in names] + [er["direct_minimal_worker_sheptra"]["value"]]
    floors = [er[n]["floor"] for n in names] + [er["direct_minimal_worker_sheptra"]["floor"]]
    labels = ["Sheptra", "node-flow", "StageNext", "seed 000\nminimal worker"]
    xs = range(len(values))
    ax.bar(xs, values, color=["#4472c4", "#4472c4", "#4472c4", "#a5a5a5"], label="measured")
    ax.scatter(xs, floors, color="black", marker="_", s=900, label="protocol floor", zorder=3)
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("engine requests per job")
    ax.set_title("1. Engine requests per job (batch 10)")
    ax.legend(loc="upper left")
    for x, v in zip(xs, values, strict=True):
        ax.text(x, v, f"{v:.3f}", ha="center", va="bottom")

    ax = axes[0][1]
    cost = r["cost_per_million_jobs_usd"]
    bottom = 0.0
    colors = {
        "sqs": "#ed7d31",
        "dynamodb_write": "#4472c4",
        "dynamodb_read": "#9dc3e6",
        "lambda_requests": "#70ad47",
        "lambda_duration": "#a9d18e",
    }
    for key, value in cost["parts"].items():
        ax.bar(0, value, bottom=bottom, color=colors.get(key, "grey"), label=key.replace("_", " "))
        bottom += value
    backlog = next((row for row in r.get("cost_by_arrival_rate") or [] if row["rate_per_second"] is None), None)
    bottom = 0.0
    for key, value in (backlog or {}).get("parts", {}).items():
        ax.bar(1, value, bottom=bottom, color=colors.get(key, "grey"))
        bottom += value
    ax.bar(2, cost["floor"], color="#d9d9d9")
    ax.axhline(COST_TARGET, color="red", linestyle="--", label=f"target ${COST_TARGET}")
    rate = r["billable_run"].get("rate_per_second")
    ax.set_xticks([0, 1, 2], [f"workerless\n{rate:g} jobs/s", "workerless\nbacklog", "design floor"])
    ax.set_ylabel("$ per million jobs")
    ax.set_title(f"2. Adapter overhead (Step Functions Std ≥ ${cost['step_functions_standard']:.0f})")
    ax.legend(fontsize=8, loc="upper right")

    ax = axes[1][0]
    lat = r.get("pickup_latency_s")
    if lat and lat.get("load_samples_s"):
        samples = sorted(lat["load_samples_s"])
        ax.plot(samples, [(i + 1) / len(samples) for i in range(len(samples))], label="under load (CDF)")
        for i, s in enumerate(lat["idle_samples_s"]):
            ax.axvline(s, color="grey", linestyle=":", label="idle samples" if i == 0 else None)
        ax.axvline(P50_TARGET, color="green", linestyle="--", label="p50 target")
        ax.axvline(P99_TARGET, color="red", linestyle="--", label="p99 target")
        ax.set_xlabel("seconds from job created to handler start")
        ax.set_ylabel("fraction of jobs")
        ax.legend(fontsize=8)
    ax.set_title("4. Pickup latency (local topology, defaults)")

    ax = axes[1][1]
    cold = r["cold_start"]
    fns = list(cold)
    ax.bar([i - 0.2 for i in range(len(fns))], [cold[f]["import_ms"] for f in fns], width=0.4, label="entry module")
    ax.bar(
        [i + 0.2 for i in range(len(fns))],
        [cold[f].get("cold_path_ms") or 0 for f in fns],
        width=0.4,
        label="cold path",
        color="#a5a5a5",
    )
    boto = next(iter(cold.values()))["boto3_ms"]
    ax.axhline(boto, color="black", linestyle=":", label="import boto3")
    ax.axhline(2 * boto, color="red", linestyle="--", label="target: 2 x boto3")
    ax.set_xticks(range(len(fns)), fns, rotation=20)
    ax.set_ylabel("import ms (median)")
    ax.set_title("6. Cold start imports")
    ax.legend(fontsize=8)

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_readme_section(r: dict[str, Any], path: Path) -> None:
    """The README's "Performance" section (the lead pastes it): the headline table and the plot."""
    t = targets(r)
    er = r["engine_requests_per_job"]
    cost = r["cost_per_million_jobs_usd"]
    lat = r.get("pickup_latency_s") or {}

    def ok(flag: bool | None) -> str:
        return "—" if flag is None else ("met" if flag else "not yet")

    lines = [
        "## Performance",
        "",
        "`make bench` measures what a serverless worker costs and how it behaves — in one run, in under ten "
        "minutes, with no AWS account — and writes [bench/RESULTS.md](bench/RESULTS.md) (every figure beside its "
        "target, how it was measured, and the change that closes each gap), `bench/results.json` and the plot "
        "below. It is a benchmark, not a test: `make test` asserts on no time.",
        "",
        "| | measured | target | |",
        "| --- | --- | --- | --- |",
        f"| AWS cost all-in (Lambda, SQS, DynamoDB, EventBridge, CloudWatch metrics and logs, KMS), per million jobs at {r['billable_run']['rate_per_second']:g} jobs/s | ${cost['value']:.2f} | ≤ ${COST_TARGET:.2f} (floor ≈ ${cost['floor']:.2f}) | {ok(t['cost'])} |",
    ]
    if cost.get("backlog") is not None:
        lines.append(
            f"| … the same on a backlog (every job at once) | ${cost['backlog']:.2f} | ≤ ${BACKLOG_TARGET:.2f} | {ok(t['backlog'])} |"
        )
    be = cost.get("break_even_jobs_per_month_vs_fargate") or 0
    lines += [
        f"| the same work on Step Functions Standard | ≥ ${cost['step_functions_standard']:.0f} | | |",
        f"| idle cost per month, all-in (defaults, 3 routes) | ${r['idle_cost_per_month_usd']['value']:.2f} | ≤ ${IDLE_TARGET:.2f} (an always-on Fargate worker: ${cost['fargate_monthly']:.2f}) | {ok(t['idle'])} |",
        f"| break-even against one always-on Fargate worker | {be / 1e6:.2f} million jobs a month | ≥ {BREAK_EVEN_TARGET / 1e6:.1f} million | {ok(t['break_even'])} |",
    ]
    dispatch = r.get("dispatch_rate_jobs_per_s") or {}
    if dispatch:
        lines.append(
            f"| dispatch rate: one poller locally / one deployment on paper, a poller shard per route | {dispatch['one_poller_local'] or 0:,.0f} / {dispatch['deployment_on_paper']:,.0f} jobs/s | measured / ≥ {DISPATCH_TARGET:,.0f} | {ok(t['dispatch'])} |"
        )
    if lat:
        lines.append(
            f"| pickup latency under load, p50 / p99 | {lat['p50_load']:.2f} s / {lat['p99_load']:.2f} s | ≤ 1 s / ≤ 2 s | {ok(bool(t['p50'] and t['p99']))} |"
        )
        lines.append(
            f"| pickup latency when idle (tick {lat['tick_seconds']} s) | ≤ {lat['idle_max']:.1f} s | ≤ tick + 1 s | {ok(t['idle_latency'])} |"
        )
    for engine, label, floor in (
        ("sheptra", "Sheptra", "1 + 1/batch"),
        ("nodeflow", "node-flow", "1 + 1/batch"),
        ("stagenext", "StageNext", "4"),
    ):
        lines.append(
            f"| engine requests per job, {label} (batch 10) | {er[engine]['value']:.2f} | floor {floor} = {er[engine]['floor']:.2f}, +5% | {ok(t['engine_' + engine])} |"
        )
    lines += [
        "",
        f"The seed's own minimal Sheptra worker makes {er['direct_minimal_worker_sheptra']['value']:.2f} engine requests "
        "per job on the same emulator. Scaling limits and when to shard pollers: [docs/scaling.md](docs/scaling.md).",
        "",
        "![make bench](bench/results.png)",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")
