"""Issue 29's candidates, each priced from the figures of the same `make bench` run.

Every row is arithmetic on what the run measured (bench/results.json) and on AWS's published
behaviour, with the source named: a move made shows its measured before and after elsewhere (the
moves table); a move refused or left open shows here what it would save and why it is not made.
Nothing here is measured on its own: the functions take the run's results and return rows.
"""

from __future__ import annotations

import math
from typing import Any

from bench.cost import (
    DDB_PER_RRU,
    DDB_PER_WRU,
    ESM_IDLE_POLLERS,
    ESM_LONG_POLL_SECONDS,
    ESM_OPTIMISED_POLLERS,
    LAMBDA_PER_GB_S,
    LAMBDA_PER_REQUEST,
    LATENCY_MS,
    MEMORY_MB,
    SECONDS_PER_MONTH,
    SQS_PER_REQUEST,
)

#: main's figures before issue 29's idle-cost moves (the ticker's event source uncapped, the depth read
#: only when the tracked jobs leave no room): bench/RESULTS.md at c696d82, the same model.
BEFORE_IDLE_CAPS = {
    "commit": "c696d82",
    "cost": 7.34,
    "backlog": 4.78,
    "idle": 1.96,
    "break_even": 0.71,
    "get_queue_attributes_per_job": 0.738,
    "p50": 0.63,
    "p99": 1.12,
}

#: The handlers' functions in the billable run (bench.measure.TEMPLATE_TYPES).
HANDLERS = ("charge-payment", "send-receipt", "generate-report")
#: The smallest batching window Lambda takes for an SQS event source above 0: it is set in whole
#: seconds, 0 to 300 ("You can configure MaximumBatchingWindowInSeconds to any value from 0 seconds to
#: 300 seconds in increments of seconds", Lambda API reference, EventSourceMappingConfiguration).
BATCHING_WINDOW_S = 1
#: The template's BatchSize for the routes (HandlerBatchSize's default).
ROUTE_BATCH_SIZE = 5
#: The template's lease (WORKERLESS_LEASE_SECONDS' default): a ticket is due at a third of it.
LEASE_SECONDS = 60
#: Bytes one open job takes in the poller lock's intent batch, and the item's own header: the
#: figures bench/run.py's dispatch-on-paper model uses for a Sheptra job.
INTENT_ENTRY_BYTES, INTENT_HEADER_BYTES = 75, 550
#: A relay's own overhead in the relayed invocation beyond the poll it makes either way: its send
#: (SQS) and the lock takeover (DynamoDB), and Lambda's 1 ms rounding (half on average).
RELAY_OVERHEAD_MS = LATENCY_MS["sqs"] + LATENCY_MS["dynamodb"] + 0.5
#: How long a relayed poller waits between polls (workerless._poller.poller.RELAY_DELAY_SECONDS): a resident
#: poller would sleep this long instead, billed at its memory.
RELAY_GAP_S = 1.0


def _per_job(counter: dict[str, float], jobs: int, *, prefix: str = "", suffix: str = "") -> float:
    return sum(v for k, v in counter.items() if k.startswith(prefix) and k.endswith(suffix)) / jobs


def relay_vs_resident(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per arrival rate, the relay chain's cost per million jobs beside a resident poller that sleeps
    the relay's second in its invocation instead (at the template's 256 MB and at 128 MB). A relay
    costs a send, the event source's receive and delete, a Lambda request, the takeover's write and
    its own overhead in duration; a resident poller costs the gap second at its memory. Everything
    else (the polls themselves) is the same in both."""
    relay = (
        3 * SQS_PER_REQUEST
        + LAMBDA_PER_REQUEST
        + DDB_PER_WRU
        + RELAY_OVERHEAD_MS / 1000 * MEMORY_MB / 1024 * LAMBDA_PER_GB_S
    )
    out = []
    for row in rows:
        relays = row.get("relays_per_job")
        if relays is None:
            continue
        resident = {mb: RELAY_GAP_S * mb / 1024 * LAMBDA_PER_GB_S for mb in (MEMORY_MB, 128)}
        out.append(
            {
                "rate_per_second": row["rate_per_second"],
                "relays_per_job": relays,
                "relay_chain_per_million": round(relays * relay * 1e6, 3),
                "resident_256_per_million": round(relays * resident[MEMORY_MB] * 1e6, 3),
                "resident_128_per_million": round(relays * resident[128] * 1e6, 3),
            }
        )
    return out


def batching_window(run: dict[str, Any], p50: float | None, routes: int = 3) -> dict[str, Any]:
    """The routes' event sources with MaximumBatchingWindowInSeconds 1: each handler invocation
    gathers what arrives on its route within the window (Poisson, rate/routes a second) on top of
    the batch it gets today, capped at BatchSize; each job waits the rest of its batch's window.
    Saved: the event source's receive and delete and a Lambda request per invocation spared."""
    jobs = run["jobs"]
    lam = (run["rate_per_second"] or 0.0) / routes
    w = float(BATCHING_WINDOW_S)
    invocations = sum(run["invocations"].get(h, 0) for h in HANDLERS) / jobs
    before = 1 / invocations if invocations else 1.0
    after = min(float(ROUTE_BATCH_SIZE), before + lam * w)
    spared = 1 / before - 1 / after
    saving = spared * (2 * SQS_PER_REQUEST + LAMBDA_PER_REQUEST) * 1e6
    # the first job of a batch waits the whole window, a later one what is left of it
    wait = (w + lam * w * w / 2) / (1 + lam * w)
    return {
        "jobs_per_invocation_before": round(before, 3),
        "jobs_per_invocation_after": round(after, 3),
        "saving_per_million": round(saving, 3),
        "added_wait_s": round(wait, 3),
        "p50_after": None if p50 is None else round(p50 + wait, 3),
    }


def tickets_in_relay_chain(run: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any]:
    """Tickets only for jobs that outlive a third of their lease, the relay chain extending the rest:
    what the tickets cost now (their send, the heartbeat event source's receive and delete, the
    heartbeat's request, duration and BatchGetItem reads) against what the chain would need — every
    job dispatched within the last lease/3 kept open in the poller lock's item (the chain must know
    which leases fall due), which every lock write then carries."""
    jobs = run["jobs"]
    tickets = _per_job(run["sqs_requests_by_call"], jobs, suffix="SendMessage(heartbeat)")
    hb_invocations = run["invocations"].get("heartbeat", 0) / jobs
    hb_reads = _per_job(run["ddb_read_units_by_call"], jobs, prefix="heartbeat:")
    hb_ms = (cost.get("lambda_per_function") or {}).get("heartbeat", {}).get("billed_ms_per_job", 0.0)
    saving = (
        tickets * SQS_PER_REQUEST
        + 2 * hb_invocations * SQS_PER_REQUEST
        + hb_invocations * LAMBDA_PER_REQUEST
        + hb_reads * DDB_PER_RRU
        + hb_ms / 1000 * MEMORY_MB / 1024 * LAMBDA_PER_GB_S
    ) * 1e6
    open_jobs = (run["rate_per_second"] or 0.0) * LEASE_SECONDS / 3
    units = math.ceil((INTENT_HEADER_BYTES + open_jobs * INTENT_ENTRY_BYTES) / 1024)
    # the poller's lock writes (an older results.json without call counts: its units, about one a write)
    calls = run.get("ddb_calls_by_call") or {}
    lock_writes = calls.get("poller:PutItem", run["ddb_write_units_by_call"].get("poller:PutItem", 0)) / jobs
    added = lock_writes * (units - 1) * DDB_PER_WRU * 1e6
    return {
        "tickets_per_job": round(tickets, 3),
        "saving_per_million": round(saving, 3),
        "open_jobs_in_lock": round(open_jobs, 1),
        "lock_write_units_after": units,
        "lock_writes_per_job": round(lock_writes, 3),
        "added_per_million": round(added, 3),
        "net_per_million": round(added - saving, 3),
    }


def lock_item_size(run: dict[str, Any]) -> dict[str, Any]:
    """The poller lock's write units a job split into writes and size: units per write above 1 are
    what a smaller item could save."""
    jobs = run["jobs"]
    units = run["ddb_write_units_by_call"].get("poller:PutItem", 0)
    writes = run.get("ddb_calls_by_call", {}).get("poller:PutItem", 0)
    return {
        "units_per_job": round(units / jobs, 3),
        "writes_per_job": round(writes / jobs, 3),
        "units_per_write": round(units / writes, 4) if writes else None,
        "saving_per_million": round((units - writes) / jobs * DDB_PER_WRU * 1e6, 3) if writes else None,
    }


def idle_event_sources(r: dict[str, Any]) -> dict[str, Any]:
    """The idle figure under each event-source candidate: the routes' mappings disabled while idle,
    one control queue (ticks, relays and tickets on one event source), and AWS's 2-poller
    optimisation (a mapping without MaximumConcurrency) for the heartbeat's event source too. A
    queue's long polls a month: five idle pollers where the mapping is capped, two where not
    (bench.cost.ESM_IDLE_POLLERS, ESM_OPTIMISED_POLLERS); the ticker's is uncapped at the defaults."""
    total = r["idle_cost_per_month_usd"]["value"]
    routes = r["template_shape"]["routes"]
    polls = SECONDS_PER_MONTH / ESM_LONG_POLL_SECONDS * SQS_PER_REQUEST
    capped, uncapped = ESM_IDLE_POLLERS * polls, ESM_OPTIMISED_POLLERS * polls
    ticker = uncapped if r["template_shape"].get("sqs_event_sources_uncapped") else capped
    return {
        "per_queue_month": round(capped, 3),
        "per_uncapped_queue_month": round(uncapped, 3),
        "routes_disabled_idle": round(total - routes * capped, 3),
        # the ticker's event source goes; the tickets' (capped: the heartbeat's reservation) stays
        "one_control_queue": round(total - ticker, 3),
        "heartbeat_uncapped": round(total - capped + uncapped, 3),
        # the routes' mappings without MaximumConcurrency: AWS's 2-poller optimisation for each (a best case)
        "routes_uncapped": round(total - routes * (capped - uncapped), 3),
    }


def reported_write(run: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """Dropping the handler's REPORTED mark: one write unit a job less; the heartbeat then finds a
    finished job STORED, which it cannot tell from one whose report is still to come, so it extends
    (or re-reports) it: one engine request per ticketed job."""
    jobs = run["jobs"]
    handler_updates = sum(
        _per_job(run["ddb_write_units_by_call"], jobs, prefix=f"{h}:", suffix="UpdateItem") for h in HANDLERS
    )
    tickets_jobs = 1.0  # a ticket names every job of its cycle: all of them are STORED by then at 2 jobs/s
    sheptra = (r.get("engine_requests_per_job") or {}).get("sheptra") or {}
    return {
        "handler_update_units_per_job": round(handler_updates, 3),
        "saving_per_million": round(DDB_PER_WRU * 1e6, 3),
        "engine_requests_before": sheptra.get("value"),
        "engine_requests_after": None if sheptra.get("value") is None else round(sheptra["value"] + tickets_jobs, 3),
        "engine_target": None if sheptra.get("floor") is None else round(sheptra["floor"] * 1.05, 3),
    }


def candidates(r: dict[str, Any]) -> dict[str, Any]:
    """Every figure above from one run's results (bench/results.json)."""
    run = r["billable_run"]
    cost = r["cost_per_million_jobs_usd"]
    lat = r.get("pickup_latency_s") or {}
    return {
        "reported_write": reported_write(run, r),
        "lock_item_size": lock_item_size(run),
        "tickets_in_relay_chain": tickets_in_relay_chain(run, cost),
        "batching_window": batching_window(run, lat.get("p50_load"), routes=r["template_shape"]["routes"]),
        "idle_event_sources": idle_event_sources(r),
        "relay_vs_resident": relay_vs_resident(r.get("cost_by_arrival_rate") or []),
    }


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def markdown(r: dict[str, Any]) -> list[str]:
    """bench/RESULTS.md's section on issue 29's candidates: each priced from this run, with the
    verdict and its reason (a guarantee or target it would break, an AWS limit with its source)."""
    c = candidates(r)
    cost = r["cost_per_million_jobs_usd"]["value"]
    idle_now = r["idle_cost_per_month_usd"]["value"]
    rw, lock, tk, bw, idle = (
        c["reported_write"],
        c["lock_item_size"],
        c["tickets_in_relay_chain"],
        c["batching_window"],
        c["idle_event_sources"],
    )
    p50 = (r.get("pickup_latency_s") or {}).get("p50_load")
    gqa = r["billable_run"]["sqs_requests_by_call"].get("poller:GetQueueAttributes", 0) / r["billable_run"]["jobs"]
    rows = [
        (
            "the handler's REPORTED write dropped (a re-report of a stored result refused harmlessly)",
            "$ per million jobs, 2 jobs/s; engine requests a job (Sheptra)",
            f"${cost:.2f}; {rw['engine_requests_before']}",
            f"${cost - rw['saving_per_million']:.2f}; {rw['engine_requests_after']} (target ≤ {rw['engine_target']})",
            "**refused**: without the mark the heartbeat finds a finished job STORED, which it cannot tell from one "
            "whose report is still to come (the handler died between store and report), so it must extend or "
            "re-report it: about one engine request more a job, past the engine-request target. Nor is a re-report "
            "harmless everywhere: StageNext accepts a duplicate result and discards it later, and a repeated ack "
            "is not idempotent (its 404); seed 001, Worker API",
        ),
        (
            "the claim carries what `begun` records",
            "write units a job",
            "1 on StageNext only (0 here: Sheptra)",
            "0 on StageNext",
            "**refused**: `begun_at` records that StageNext's lease acquire landed, an engine call made after the "
            "claim; the claim must come first, since a delivery that finds a stored result re-reports it without "
            "acquiring (guarantee 2), and an acquire before the claim would be refused (`lease_held`) while our own "
            "stored result waits unreported",
        ),
        (
            "the poller lock's item kept from growing with each batch (now, after the move)",
            "poller write units a job; units a write",
            f"{lock['units_per_job']}; {lock['units_per_write']}",
            f"{lock['writes_per_job']}; 1.0 (saves ${lock['saving_per_million'] or 0:.3f} per million)",
            "**made** in part (see the moves: the send log written short); what is left above one unit a write is "
            "the intent batch and the tracked jobs' keys a dispatching cycle's writes carry. The writes themselves: "
            "a takeover per relay and two per dispatching cycle (see the gaps for why each is kept)",
        ),
        (
            "tickets only for jobs that outlive a third of their lease; the relay chain extends the rest",
            "$ per million jobs, 2 jobs/s",
            f"${cost:.2f} (tickets {tk['tickets_per_job']} a job: ${tk['saving_per_million']:.2f} with their "
            "receive, delete, heartbeat invocation and reads)",
            f"${cost + tk['net_per_million']:.2f}: -${tk['saving_per_million']:.2f} for the tickets, "
            f"+${tk['added_per_million']:.2f} for {tk['open_jobs_in_lock']:.0f} open jobs in the lock's item "
            f"({tk['lock_write_units_after']} units a write, {tk['lock_writes_per_job']} writes a job)",
            "**refused** as modelled: the chain can extend only the leases it knows of, so every job of the last "
            "lease/3 stays in the item each lock write carries; the writes grow more than the tickets save",
        ),
        (
            "a ticket sent by the handler itself once its job passes lease/3, instead of the poller's",
            "$ per million jobs, 2 jobs/s",
            f"${cost:.2f} (the poller's tickets: {tk['tickets_per_job']} a job, ${tk['saving_per_million']:.2f} "
            "with their receive, delete, heartbeat invocation and reads)",
            f"${cost:.2f} with the poller's tickets kept (the handlers' add none here: no job of the run outlives "
            f"lease/3 = {LEASE_SECONDS // 3} s); ${cost - tk['saving_per_million']:.2f} only without them",
            "**refused**: a handler can send a ticket only once it runs, and the poller's ticket is what extends a "
            "job still queued when its lease is due (a handler throttled or cold, or up to MaxInFlight jobs of a "
            "route waiting for one): without it such a job's lease lapses while its message waits, the engine "
            "hands it out again, and two attempts of one job run, the first fenced only at its report, after its "
            "side effects (docs/guarantees.md: the heartbeat rows, promise 3). The poller cannot tell at dispatch "
            "which jobs a handler will reach within lease/3, so its ticket stays, and handler tickets could only "
            "add a send, a receive and a delete for each long job",
        ),
        (
            f"the routes' event sources with MaximumBatchingWindowInSeconds {BATCHING_WINDOW_S}",
            "jobs a handler invocation; $ per million jobs; pickup p50 at 2 jobs/s",
            f"{bw['jobs_per_invocation_before']}; ${cost:.2f}; {_seconds(p50)}",
            f"{bw['jobs_per_invocation_after']}; ${cost - bw['saving_per_million']:.2f}; "
            f"{_seconds(bw['p50_after'])} (+{bw['added_wait_s']} s a job on average)",
            "**refused**: the p50 target (≤ 1 s) breaks; the window is set in whole seconds, 1 the least above 0 "
            "(Lambda API reference, EventSourceMappingConfiguration, MaximumBatchingWindowInSeconds)",
        ),
        (
            "a route's event source enabled when the poller dispatches to it, disabled after a quiet period",
            "idle $ a month",
            f"${idle_now:.2f}",
            f"${idle['routes_disabled_idle']:.2f} (3 routes' long polls, ${idle['per_queue_month']:.2f} a queue)",
            "**refused**: AWS publishes no bound on how long a mapping takes from Enabling to Enabled (the Lambda API "
            "reference lists the states Creating, Enabling, Enabled, Disabling, Disabled, Updating, Deleting and "
            "says of UpdateEventSourceMapping only that a disabled mapping stops polling and resumes where it "
            "stopped); the worst case is unbounded, so the idle pickup target (tick + 1 s) could not be promised",
        ),
        (
            "one control queue for ticks, relays and tickets",
            "SQS event sources; idle $ a month",
            f"{r['template_shape']['sqs_event_sources']}; ${idle_now:.2f}",
            f"{r['template_shape']['sqs_event_sources'] - 1}; ${idle['one_control_queue']:.2f}",
            "**refused**: a queue's visibility timeout must be at least the timeout of every function it feeds "
            "(\"Your function's timeout must be less than or equal to the queue's visibility timeout. Lambda "
            'validates this requirement when you create or update an event source mapping", Lambda developer guide, '
            '"Creating and configuring an Amazon SQS event source mapping"). The poller\'s timeout is 60 s (a 20 s '
            "poll budget, a 10 s engine call, the dispatch after it); a ticket queue's visibility must end within "
            "the 40 s of lease a ticket arrives with, less a call (HeartbeatVisibilityTimeout 30 s): no one "
            "visibility serves both consumers",
        ),
        (
            "the ticker's event source without ScalingConfig MaximumConcurrency (AWS's low-traffic optimisation to "
            "2 pollers), the poller capped by its reserved concurrency (PollerReservedConcurrency 3) instead",
            "idle $ a month; the ticker's idle long polls a month",
            f"${BEFORE_IDLE_CAPS['idle']:.2f}; ${idle['per_queue_month']:.2f} (5 pollers)",
            f"${idle_now:.2f}; ${idle['per_uncapped_queue_month']:.2f} (2 pollers; this run)",
            '**made**: AWS says an SQS event source "can optimize to as few as 2 concurrent batches ... not '
            'available when you enable the maximum concurrency setting" (Lambda developer guide, "Configuring '
            'scaling behavior for SQS event source mappings"): "can", so the 2 pollers are a best case, to confirm '
            "on an account. With ReserveConcurrency false, PollerConcurrency still caps the mapping (Fn::If)",
        ),
        (
            "the heartbeat's event source uncapped as well",
            "idle $ a month",
            f"${idle_now:.2f}",
            f"${idle['heartbeat_uncapped']:.2f}",
            "**refused**: an uncapped mapping invokes past the function's reservation (\"Event source mappings don't "
            'account for reserved concurrency", AWS knowledge center, lambda-sqs-scaling; "do not configure maximum '
            'concurrency higher than the reserved concurrency ... Otherwise, Lambda may throttle your messages", '
            '"Configuring scaling behavior for SQS event source mappings"), and a throttled ticket batch comes back '
            "only after the heartbeat queue's 30 s visibility, with 10 s of a 60 s lease left: leases at risk "
            "(guarantees.md)",
        ),
        (
            "the routes' event sources without MaximumConcurrency (HandlerMaximumConcurrency gone by default)",
            "idle $ a month",
            f"${idle_now:.2f}",
            f"${idle['routes_uncapped']:.2f} ({r['template_shape']['routes']} routes at "
            f"${idle['per_uncapped_queue_month']:.2f} a queue, "
            f"not ${idle['per_queue_month']:.2f}: AWS's 2 idle pollers, a best case)",
            "**refused** as the default: guarantees hold without the cap (a handler has no reservation to be "
            "throttled past, and a route's queue holds at most its MaxInFlight leased jobs, so no more invocations "
            "than with the cap of 10 at the defaults), but HandlerMaximumConcurrency and a route's own "
            "MaximumConcurrency are the documented per-handler limit a deployment sets to spare what its handlers "
            "call (docs/getting-started.md, docs/operating.md), and a cap that is there only when a route asks for "
            "it cannot be written: each route's mapping comes from one Fn::ForEach body, and Fn::FindInMap's "
            'DefaultValue must resolve "to a valid value during the transform" (CloudFormation template '
            'reference, "Fn::FindInMap enhancements"), which a condition on a parameter does not. Open as an '
            "opt-in (HandlerMaximumConcurrency 0: every route uncapped), which leaves the default figure as it is; "
            'and the saving rests on AWS\'s "can optimize to as few as 2", to confirm on an account first',
        ),
        (
            "a route's SQS depth read only when the jobs the poller tracks leave no room under MaxInFlight (and "
            "at least every 5 minutes)",
            "GetQueueAttributes a job; $ per million jobs, 2 jobs/s",
            f"{BEFORE_IDLE_CAPS['get_queue_attributes_per_job']:.2f}; ${BEFORE_IDLE_CAPS['cost']:.2f}",
            f"{gqa:.2f}; ${cost:.2f} (this run)",
            "**made**: the tracked jobs (exact: their records re-read every 2 s as before, a BatchGetItem) bound "
            "what a route holds without the count; a count not read again is never added to sends the lock no "
            "longer logs. Deferring the records' reads too was measured and dropped: their final keys stayed in "
            "every lock write (4.23 write units a job, $8.54 per million) "
            "(workerless._poller.bookkeeping.depth_due; tests/unit/runtime/poller/test_poller_depth_reads.py, "
            "the lagging-count bound relayed in tests/unit/runtime/poller/test_poller_lagging_counts.py)",
        ),
    ]
    lines = [
        "| candidate | figure | now (this run) | with the move (modelled from this run) | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {a} | {b} | {n} | {m} | {v} |" for a, b, n, m, v in rows]
    rvr = c["relay_vs_resident"]
    if rvr:
        lines += [
            "",
            "The relay chain against a resident poller that sleeps its second in the invocation (only what differs "
            "between the two; the polls are the same), $ per million jobs, at the rates of the table above:",
            "",
            "| arrival rate | relays a job | relay chain | resident, 256 MB (the template's) | resident, 128 MB |",
            "| --- | --- | --- | --- | --- |",
        ]
        for row in rvr:
            rate = "backlog" if row["rate_per_second"] is None else f"{row['rate_per_second']:g} jobs/s"
            lines.append(
                f"| {rate} | {row['relays_per_job']} | ${row['relay_chain_per_million']:.3f} "
                f"| ${row['resident_256_per_million']:.3f} | ${row['resident_128_per_million']:.3f} |"
            )
        lines += [
            "",
            "The relay chain is kept at every rate: at the template's 256 MB a resident second costs more than a "
            "relay (its send, receive, delete, request and takeover write). At 128 MB a resident poller would be "
            "cheaper by the difference shown, but 128 MB caps a job's payload at 2 MiB "
            "(WORKERLESS_MAX_PAYLOAD_BYTES follows the memory; see the poller's memory above).",
        ]
    return lines
