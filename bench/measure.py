"""Measurements on the in-process pipeline (bench.pipeline): engine requests per job, adapter CPU
per job beside the seed's minimal worker, and the billable AWS calls of a 10,000-job run."""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx
from workerless._core.settings import Settings

from bench.minimal_worker import MinimalWorker
from bench.pipeline import FAKE_BASE_URL, Pipeline, TimedTransport, VirtualClock, emulator_for, patched_time, quiet_logs

#: The protocol's own floor of engine requests per job, at batch size b (issue 6, point 1).
FLOORS = {
    "sheptra": lambda b: 1 + 1 / b,  # one activation per batch, one report per job
    "nodeflow": lambda b: 1 + 1 / b,  # one lease per batch, one report per job
    "stagenext": lambda b: 4.0,  # pull, lease acquire, result, ack
}
EXTEND_ROUTES = ("extend-lease", "/tasks/{task_id}/heartbeat", "/lease/renew")
TEMPLATE_TYPES = ("charge-payment", "send-receipt", "generate-report")
#: The arrival rate of the headline cost figure: the pickup-latency section's load (bench/latency.py).
REFERENCE_RATE = 2.0
#: The same billable run at other rates (None: every job at once, a backlog).
SWEEP_RATES: tuple[float | None, ...] = (None, 10.0, 0.5)


def _ok(job: Any) -> dict[str, Any]:
    return {"ok": True}


def run_until_done(p: Pipeline, *, max_rounds: int = 100_000) -> int:
    """Poll, drain every route, until a poll finds nothing, no route had work and no relay is due.

    A poller that stops while work flows relays (a delayed ticker message carrying the poller lock):
    the next round delivers it, as the ticker's event source would, instead of invoking the poller
    afresh (which would find the lock handed on, and wait out its expiry). Each round moves the
    virtual clock on by a second past the poller's SQS lag window: the poller counts what it sent
    within that window (in whole-second buckets, rounded up) as still in flight, and rounds that took
    no time would find every route full after its first batch; it also makes a relay visible."""
    from workerless._core.settings import get_settings

    from bench.pipeline import TICKER_URL

    step = get_settings().sqs_lag_seconds + 1.0
    rounds = 0
    with patched_time(p.clock):
        for rounds in range(1, max_rounds + 1):  # noqa: B007
            event, _messages = p._event(TICKER_URL, 10)
            report = p.poll(event if event["Records"] else None)
            if event["Records"]:
                p._settle(TICKER_URL, event, {})
            handled = p.drain_routes()
            if not report.get("activated") and not handled and not _relay_pending(p, TICKER_URL):
                break
            p.clock.advance(step)
    return rounds


def _relay_pending(p: Pipeline, url: str) -> bool:
    """Whether a relay waits on the ticker queue (visible or delayed)."""
    depth = getattr(p.sqs, "depth", None)
    if depth is not None:
        return bool(depth(url))
    attrs = p.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return any(int(v) for v in attrs.values())


def engine_requests(engine: str, jobs: int = 500, batch: int = 10) -> dict[str, Any]:
    """Short jobs (well inside a third of the lease): every engine request the emulator counted."""
    with quiet_logs(), Pipeline(engine, {"charge-payment": _ok}, max_in_flight=batch) as p:
        p.create_jobs("charge-payment", jobs)
        run_until_done(p)
        p.clock.advance(120)  # every heartbeat ticket comes due after its jobs were reported
        p.pump_heartbeat()
        stats = p.engine_stats()
    total = sum(stats.values())
    floor = FLOORS[engine](batch)
    value = total / jobs
    return {
        "value": round(value, 4),
        "floor": round(floor, 4),
        "over_floor_pct": round(100 * (value / floor - 1), 2),
        "batch": batch,
        "jobs": jobs,
        "requests": stats,
    }


def long_job_extends(engine: str, seconds: float = 200.0, lease: int = 60) -> dict[str, Any]:
    """One job that runs ``seconds`` of virtual time: lease extensions counted vs one per lease/3."""
    p: Pipeline | None = None

    def long_fn(job: Any) -> dict[str, Any]:
        assert p is not None
        ran = 0.0
        while ran < seconds:  # bounded: `seconds` steps of 1 s of virtual time
            p.clock.advance(1.0)
            ran += 1.0
            p.pump_heartbeat()
        return {"ok": True}

    clock_owner = Pipeline(engine, {"generate-report": long_fn}, max_in_flight=1, batch_size=1, lease_seconds=lease)
    p = clock_owner
    with quiet_logs(), patched_time(p.clock), p:
        p.create_jobs("generate-report", 1)
        run_until_done(p)
        p.clock.advance(3 * lease)
        p.pump_heartbeat()
        stats = p.engine_stats()
    extends = sum(v for k, v in stats.items() if any(r in k for r in EXTEND_ROUTES))
    expected = int(seconds // (lease / 3))
    return {"seconds": seconds, "lease_seconds": lease, "extends": extends, "expected": expected}


def direct_worker_requests(jobs: int = 500, batch: int = 10) -> dict[str, Any]:
    emulator = emulator_for("sheptra")
    transport = TimedTransport(emulator.router)
    for i in range(jobs):
        emulator.create_job("charge-payment", {"n": i})
    worker = MinimalWorker(
        emulator.engine_values(FAKE_BASE_URL),
        httpx.Client(transport=transport),
        {"charge-payment": lambda job: {"ok": True}},
        max_jobs=batch,
        wait_seconds=0,
    )
    worker.run()
    stats = dict(emulator.router.stats)
    return {"value": round(sum(stats.values()) / jobs, 4), "floor": round(1 + 1 / batch, 4), "requests": stats}


# ------------------------------------------------------------------------------------------- CPU


def adapter_cpu(jobs: int = 1000) -> dict[str, Any]:
    """Net CPU (fakes and emulator excluded) of poller + handler wrapper + heartbeat, per job."""
    with quiet_logs(), Pipeline("sheptra", {"charge-payment": _ok}, max_in_flight=10) as p:
        warm = p.create_jobs("charge-payment", 50)  # warm-up: imports, first token, first clients
        run_until_done(p)
        p.invocations.cpu.clear()
        p.invocations.count.clear()
        p.create_jobs("charge-payment", jobs)
        run_until_done(p)
        p.clock.advance(120)
        p.pump_heartbeat()
        cpu = dict(p.invocations.cpu)
        count = dict(p.invocations.count)
    del warm
    return {
        "ms_per_job": 1000 * sum(cpu.values()) / jobs,
        "by_function_ms": {k: 1000 * v / jobs for k, v in cpu.items()},
        "invocations": count,
    }


def direct_cpu(jobs: int = 1000) -> float:
    emulator = emulator_for("sheptra")
    transport = TimedTransport(emulator.router)
    client = httpx.Client(transport=transport)
    values = emulator.engine_values(FAKE_BASE_URL)
    handlers = {"charge-payment": lambda job: {"ok": True}}
    for i in range(50):
        emulator.create_job("charge-payment", {"n": i})
    MinimalWorker(values, client, handlers, wait_seconds=0).run()
    for i in range(jobs):
        emulator.create_job("charge-payment", {"n": i})
    transport.cpu = 0.0
    start = time.thread_time()
    done = MinimalWorker(values, client, handlers, wait_seconds=0).run()
    cpu = time.thread_time() - start - transport.cpu
    assert done == jobs, f"minimal worker finished {done}/{jobs}"
    return 1000 * cpu / jobs


def cpu_per_job(jobs: int = 1000, repeats: int = 3) -> dict[str, Any]:
    """Side by side, ``repeats`` times each (interleaved); the median of each."""
    adapter, direct, detail = [], [], {}
    for _ in range(repeats):
        result = adapter_cpu(jobs)
        adapter.append(result["ms_per_job"])
        detail = result
        direct.append(direct_cpu(jobs))
    a, d = statistics.median(adapter), statistics.median(direct)
    return {
        "adapter_ms": round(a, 4),
        "direct_ms": round(d, 4),
        "ratio": round(a / d, 2),
        "adapter_runs_ms": [round(x, 4) for x in adapter],
        "direct_runs_ms": [round(x, 4) for x in direct],
        "adapter_by_function_ms": {k: round(v, 4) for k, v in detail["by_function_ms"].items()},
        "jobs": jobs,
    }


# ------------------------------------------------------------------------------- billable calls


def billable_run(jobs: int = 10_000, rate_per_second: float | None = 2.0, *, seed: int = 6) -> dict[str, Any]:
    """The template's three routes (max 10 in flight, handler batch 5) on the in-memory fakes, with
    the shipped poller as deployed (poll budget 20 s, relaying while work flows): every billable call
    metered, per job; Lambda invocations, net CPU and paused (billed) seconds per function.

    Jobs arrive at the engine as a Poisson stream of ``rate_per_second`` (None: all at once, a
    backlog) on a virtual clock. When no poller is running, the next one starts at the next tick
    (TickSeconds 20); a relay message on the ticker queue starts one at once. While a poller pauses
    between polls the rest of the deployment runs: arrivals, the routes' event sources and handlers,
    the heartbeat. One poller runs at a time (a tick that lands while one lingers is assumed to find
    nothing to take: it is priced in the idle cost, as are the ticks of quiet periods)."""
    import random

    from bench.pipeline import LOG_SINK, TICKER_URL

    tick = 20.0
    rng = random.Random(seed)
    handlers = {t: _ok for t in TEMPLATE_TYPES}
    p = Pipeline(
        "sheptra",
        handlers,
        max_in_flight=10,
        batch_size=5,
        poll_budget_seconds=20,
        virtual_poller=True,
        sqs_lag_seconds=Settings.model_fields["sqs_lag_seconds"].default,  # as deployed
    )
    with quiet_logs(), patched_time(p.clock), p:
        logged_before = (LOG_SINK.bytes, LOG_SINK.lines)
        p.meter.ddb_windows.clear()
        t0 = p.clock()
        arrivals, at = [], t0
        for _ in range(jobs):
            if rate_per_second:
                at += rng.expovariate(rate_per_second)
            arrivals.append(at)
        created = 0

        def world() -> int:
            nonlocal created
            now = p.clock()
            while created < jobs and arrivals[created] <= now:
                p.emulator.create_job(TEMPLATE_TYPES[created % 3], {"orderId": f"order-{created:05d}", "amount": 10})
                created += 1
            handled = p.drain_routes()
            p.pump_heartbeat()
            return handled

        p.on_pause = world
        started = time.perf_counter()
        pollers = relays = ticks = 0
        for _ in range(1_000_000):  # bounded: every round moves the virtual clock or finishes a relay
            handled = world()
            event, _msgs = p._event(TICKER_URL, 10)
            if event["Records"]:  # a relay: the busy poller handed over to a fresh invocation
                relays += 1
                p.poll(event)
                p._settle(TICKER_URL, event, {})
                continue
            if created >= jobs and not handled:
                relay_at = p.sqs.next_visible(TICKER_URL)
                if relay_at is not None:  # a relay is on its way: it polls next, not a tick
                    p.clock.advance(max(0.0, relay_at - p.clock()) + 0.001)
                    continue
                report = p.poll()  # the last tick: nothing left anywhere
                if not report.get("activated") and not world():
                    break
                continue
            # No poller is running: a delayed relay (work still flowing) or else the next tick starts one.
            now = p.clock()
            next_tick = tick * (int((now - t0) / tick) + 1) + t0
            relay_at = p.sqs.next_visible(TICKER_URL)
            if relay_at is not None and relay_at < next_tick:
                p.clock.advance(max(0.0, relay_at - now) + 0.001)
                continue
            p.clock.advance(next_tick - now)
            world()
            ticks += 1
            p.poll()
        pollers = p.invocations.count["poller"]
        p.clock.advance(120)
        p.pump_heartbeat()
        elapsed = time.perf_counter() - started
        virtual = p.clock() - t0
        by_hour = LOG_SINK.metrics_between(int(t0 // 3600), int(p.clock() // 3600))
        # CloudWatch bills a custom metric for each hour in which it is published: the distinct
        # metrics of a whole hour of the run (of the run's longest hour when it spans none whole).
        whole = [h for h in by_hour if h * 3600 >= t0 and (h + 1) * 3600 <= p.clock()]
        hours = whole or list(by_hour)
        per_hour = max((len(by_hour[h]) for h in hours), default=0)
        kms_windows = sorted({(c, w) for c, w in p.meter.ddb_windows if c not in ("esm", "?")})
        log_bytes, log_lines = LOG_SINK.bytes - logged_before[0], LOG_SINK.lines - logged_before[1]
        states: dict[str, int] = {}
        for job in p.emulator.jobs():
            states[job["state"]] = states.get(job["state"], 0) + 1
        meter = p.meter
        result = {
            "jobs": jobs,
            "rate_per_second": rate_per_second,
            "virtual_seconds": round(virtual, 1),
            "poller_invocations": pollers,
            "tick_invocations": ticks,
            "relay_invocations": relays,
            "elapsed_s": round(elapsed, 2),
            "states": states,
            "per_job": {k: v / jobs for k, v in meter.totals().items()},
            "sqs_requests_by_call": dict(meter.sqs_requests),
            "ddb_write_units_by_call": dict(meter.ddb_write_units),
            "ddb_read_units_by_call": dict(meter.ddb_read_units),
            "ddb_calls_by_call": dict(meter.ddb_calls),
            "invocations": dict(p.invocations.count),
            "cpu_s": dict(p.invocations.cpu),
            "paused_s": {k: round(v, 2) for k, v in p.invocations.paused.items()},
            "calls": dict(meter.calls),
            "calls_by_caller": dict(meter.calls_by_caller),
            "engine_requests": p.engine_stats(),
            "log_bytes_per_job": round(log_bytes / jobs, 1),
            "log_lines_per_job": round(log_lines / jobs, 2),
            "custom_metrics_per_hour": per_hour,
            "custom_metrics": sorted(set().union(*by_hour.values())) if by_hour else [],
            # one table-key Decrypt per (function role, 5-minute window) with a DynamoDB call
            "kms_decrypts": len(kms_windows),
        }
    return result


# ------------------------------------------------------------------------------------ idle poller


def _snapshot(p: Pipeline, function: str = "poller") -> dict[str, float]:
    from bench.pipeline import LOG_SINK

    totals = p.meter.totals()
    return {
        "log_bytes": float(LOG_SINK.bytes),
        "sqs_requests": totals["sqs_requests"],
        "wru": totals["ddb_write_units"],
        "rru": totals["ddb_read_units"],
        "sqs_calls": float(sum(v for k, v in p.meter.calls.items() if k.startswith("sqs."))),
        "ddb_calls": float(sum(v for k, v in p.meter.calls.items() if k.startswith("dynamodb."))),
        "engine_calls": float(sum(p.engine_stats().values())),
        "cpu_s": float(p.invocations.cpu[function]),
    }


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 6) for k in after}


def idle_invocations(tick_seconds: int = 20, repeats: int = 30) -> dict[str, Any]:
    """The calls and net CPU of one idle poller invocation: from a tick, and from the watchdog
    schedule while the chain is healthy; and of the dead-letter function's scheduled drain of an
    empty queue (each averaged over ``repeats``). Three routes, as the template."""
    import json as _json

    from bench.pipeline import TICKER_URL

    handlers = {t: _ok for t in TEMPLATE_TYPES}
    from bench.pipeline import LOG_SINK

    # On the virtual clock throughout (the lock, the marks of routes known empty): the ticks span
    # repeats x tick_seconds (600 s), so the poller's re-reads of routes known empty
    # (EMPTY_RECHECK_SECONDS, 300 s) are in the average at their steady-state rate.
    clock = VirtualClock()
    with (
        quiet_logs(),
        patched_time(clock),
        Pipeline("sheptra", handlers, tick_seconds=tick_seconds, poll_budget_seconds=20, clock=clock) as p,
    ):
        p.poll()  # the watchdog starts the chain (and the first token is minted: not idle cost)
        # Every EMF metric an idle invocation publishes is new in the sink: none published so far counts.
        LOG_SINK.metric_hours.clear()
        ticks: list[dict[str, float]] = []
        watchdogs: list[dict[str, float]] = []
        drains: list[dict[str, float]] = []
        for _ in range(repeats):
            p.clock.advance(tick_seconds)
            event, _ = p._event(TICKER_URL, 10)
            before = _snapshot(p)
            p.poll(event)
            p._settle(TICKER_URL, event, {})  # the event source deletes the tick
            ticks.append(_delta(_snapshot(p), before))
            before = _snapshot(p)
            p.poll({})  # the schedule fires while the chain is healthy: nothing to restart
            watchdogs.append(_delta(_snapshot(p), before))
            before = _snapshot(p, "deadletter")
            p.drain_dead_letters()  # its schedule fires: the job dead-letter queue is empty
            drains.append(_delta(_snapshot(p, "deadletter"), before))
        depth = p.sqs.depth(TICKER_URL)
        idle_metrics = sorted({name for _, name in LOG_SINK.metric_hours})
    del _json

    def mean(rows: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(sum(r[k] for r in rows) / len(rows), 6) for k in rows[0]}

    return {
        "per_tick": mean(ticks),
        "per_watchdog": mean(watchdogs),
        # The dead-letter function's scheduled drain of its empty queue (no event source on it).
        "per_dead_letter_drain": mean(drains),
        "ticker_depth_after": depth,
        # The custom metrics the idle invocations published (each is billed for every idle hour).
        "custom_metrics": idle_metrics,
    }


def async_vs_sync_route(jobs: int = 20, io_seconds: float = 0.2, batch: int = 10) -> dict[str, Any]:
    """Jobs a second per handler invocation of an I/O-bound route (each job waits ``io_seconds``),
    sync (``time.sleep``: one job after another) beside async (``asyncio.sleep``: the batch's jobs
    concurrently, up to the route's ``concurrency``, 10 by default). Wall time of the handler
    invocations only (poller and heartbeat excluded), batches of ``batch``."""
    import asyncio

    def sync_io(job: Any) -> dict[str, Any]:
        time.sleep(io_seconds)
        return {"ok": True}

    async def async_io(job: Any) -> dict[str, Any]:
        await asyncio.sleep(io_seconds)
        return {"ok": True}

    results: dict[str, Any] = {"io_seconds_per_job": io_seconds, "batch_size": batch, "jobs": jobs}
    for name, fn in (("sync", sync_io), ("async", async_io)):
        with quiet_logs(), Pipeline("sheptra", {"io-route": fn}, max_in_flight=jobs, batch_size=batch) as p:
            p.create_jobs("io-route", jobs)
            run_until_done(p)
            wall = p.invocations.wall["io-route"]
            invocations = p.invocations.count["io-route"]
        results[name] = {
            "invocations": invocations,
            "handler_wall_s": round(wall, 3),
            "jobs_per_second_per_invocation": round(jobs / wall, 2) if wall else None,
        }
    return results
