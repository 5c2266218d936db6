"""Pickup latency in the local topology: from a job becoming activatable at the emulator (created)
to its handler starting (the wrapper's ``started`` lifecycle event), under a steady arrival rate
and when idle. The template as written (default parameters; TickSeconds from the template unless
overridden), on moto, against the Sheptra emulator over loopback HTTP. The watchdog schedule fires
at its template rate (1 minute), not local mode's faster default, so the tick is what is measured.
"""

from __future__ import annotations

import logging
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def pickup_latency(
    *,
    rate_per_second: float = 2.0,
    load_seconds: float = 30.0,
    idle_samples: int = 4,
    tick_seconds: int | None = None,
    seed: int = 6,
) -> dict[str, Any]:
    from workerless_devkit.emulators import start
    from workerless_devkit.local.runtime import LocalTopology

    logging.getLogger("workerless").setLevel(logging.ERROR)
    logging.getLogger("workerless_devkit.local").setLevel(logging.ERROR)
    rng = random.Random(seed)
    template = ROOT / "template.yaml"
    tick = tick_seconds if tick_seconds is not None else _template_tick(template)

    created: dict[str, float] = {}
    started: dict[str, float] = {}
    lock = threading.Lock()

    def listener(job_type: str, event: str, fields: dict[str, Any]) -> None:
        if event == "started":
            with lock:
                started.setdefault(str(fields.get("job_id")), time.time())

    running = start("sheptra")
    emulator = running.emulator
    try:
        with tempfile.TemporaryDirectory(prefix="workerless-bench-") as tmp:
            env_file = running.write_env_file(Path(tmp) / "sheptra.env")
            parameters = {"EngineName": "sheptra", "LogLevel": "ERROR", "TickSeconds": str(tick)}
            # The template as written: the watchdog at its rate (1 minute), the tick at TickSeconds.
            topology = LocalTopology(template, env_file, parameters=parameters, listeners=(listener,))
            with topology:
                # Let the first watchdog poll and the tick chain start, as a deployment that has been up a while.
                time.sleep(2.0)

                def create(job_type: str, variables: dict[str, Any]) -> str:
                    job_id = emulator.create_job(job_type, variables)
                    with lock:
                        created[job_id] = time.time()
                    return job_id

                # -- steady arrivals (Poisson, rate_per_second) over load_seconds
                # The first tick + 5 s are a warm-up (a burst from idle waits for the next tick: that is
                # the idle figure); only jobs created after it count as "under load".
                load_ids: list[str] = []
                warmup_ids: list[str] = []
                warm_end = time.monotonic() + tick + 5
                end = warm_end + load_seconds
                i = 0
                while time.monotonic() < end:
                    job_type = ("charge-payment", "send-receipt")[i % 2]
                    job_id = create(job_type, {"orderId": f"load-{i}", "amount": 10})
                    (warmup_ids if time.monotonic() < warm_end else load_ids).append(job_id)
                    i += 1
                    time.sleep(min(2.0, rng.expovariate(rate_per_second)))
                every = warmup_ids + load_ids
                topology.run_until(lambda: all(j in started for j in every), max_seconds=tick + 60)

                # -- idle: one job at a time, at a random moment relative to the tick chain
                idle_ids: list[str] = []
                for n in range(idle_samples):
                    time.sleep(rng.uniform(0, tick or 5))
                    job_id = create("send-receipt", {"orderId": f"idle-{n}"})
                    idle_ids.append(job_id)
                    topology.run_until(lambda j=job_id: j in started, max_seconds=tick + 70)
    finally:
        running.stop()

    load = [started[j] - created[j] for j in load_ids if j in started]
    idle = [started[j] - created[j] for j in idle_ids if j in started]
    return {
        "p50_load": round(statistics.median(load), 3) if load else None,
        "p99_load": round(_percentile(load, 0.99), 3) if load else None,
        "max_load": round(max(load), 3) if load else None,
        "idle_max": round(max(idle), 3) if idle else None,
        "idle_samples_s": [round(x, 2) for x in idle],
        "tick_seconds": tick,
        "poller": "as shipped (lingering, relay)",
        "load_jobs": len(load_ids),
        "warmup_jobs": len(warmup_ids),
        "load_seconds": load_seconds,
        "load_started": len(load),
        "rate_per_second": rate_per_second,
        "load_samples_s": [round(x, 3) for x in load],
    }


def _template_tick(template: Path) -> int:
    from workerless_devkit.local.template import parse_template_text

    params = parse_template_text(template.read_text(encoding="utf-8"), source=str(template)).get("Parameters") or {}
    return int((params.get("TickSeconds") or {}).get("Default", 0))


#: One poller shard per route (Mappings.Routes PollerShard), for the sharded dispatch rate.
SHARDED_ROUTES = """  Routes:
    chargepayment: {Type: charge-payment, PollerShard: payments}
    sendreceipt: {Type: send-receipt, PollerShard: receipts}
    generatereport: {Type: generate-report, Timeout: 900, VisibilityTimeout: 5400, BatchSize: 1, PollerShard: reports}
"""


def _sharded_template() -> Path:
    """template.yaml with each route in a poller shard of its own, beside it (CodeUri is relative)."""
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    routes = (
        "  Routes:\n    chargepayment: {Type: charge-payment}\n    sendreceipt: {Type: send-receipt}\n"
        "    generatereport: {Type: generate-report, Timeout: 900, VisibilityTimeout: 5400, BatchSize: 1}\n"
    )
    if routes not in text:
        raise RuntimeError("template.yaml's Mappings.Routes is not the one the sharded bench run rewrites")
    path = ROOT / f".bench-sharded-{os.getpid()}.yaml"
    path.write_text(text.replace(routes, SHARDED_ROUTES, 1), encoding="utf-8")
    return path


def dispatch_rate(*, jobs: int = 600, max_in_flight: int = 1000, sharded: bool = False) -> dict[str, Any]:
    """One poller's dispatch rate in the local topology (template.yaml on moto, the Sheptra
    emulator over loopback HTTP): a backlog of ``jobs`` at the engine, MaxInFlight high enough that
    room never binds, jobs a second from the first dispatch to the last (the ``dispatched`` lifecycle
    step). The handlers run meanwhile in the same process, as local mode runs them. ``sharded``: each
    route in a poller shard of its own (PollerReservedConcurrency 5), the deployment's rate with 3 pollers."""
    from workerless_devkit.emulators import start
    from workerless_devkit.local.runtime import LocalTopology

    logging.getLogger("workerless").setLevel(logging.ERROR)
    logging.getLogger("workerless_devkit.local").setLevel(logging.ERROR)
    dispatched: list[float] = []
    lock = threading.Lock()

    def listener(job_type: str, event: str, fields: dict[str, Any]) -> None:
        if event == "dispatched":
            with lock:
                dispatched.append(time.monotonic())

    running = start("sheptra")
    emulator = running.emulator
    types = ("charge-payment", "send-receipt", "generate-report")
    for i in range(jobs):
        emulator.create_job(types[i % 3], {"orderId": f"rate-{i}", "amount": 1})
    try:
        with tempfile.TemporaryDirectory(prefix="workerless-bench-") as tmp:
            env_file = running.write_env_file(Path(tmp) / "sheptra.env")
            parameters = {"EngineName": "sheptra", "LogLevel": "ERROR", "MaxInFlight": str(max_in_flight)}
            template = ROOT / "template.yaml"
            if sharded:
                template = _sharded_template()
                # 3 shards' ticker batches side by side and the watchdog beside them: the reservation caps
                # the poller (its ticker event source sets no MaximumConcurrency while it is reserved).
                parameters["PollerReservedConcurrency"] = "5"
            try:
                with LocalTopology(template, env_file, parameters=parameters, listeners=(listener,)) as topology:
                    topology.run_until(lambda: len(dispatched) >= jobs, max_seconds=180)
            finally:
                if sharded:
                    template.unlink(missing_ok=True)
        activations = sum(v for k, v in emulator.router.stats.items() if "activate" in k)
    finally:
        running.stop()
    span = dispatched[-1] - dispatched[0] if len(dispatched) > 1 else 0.0
    return {
        "jobs": jobs,
        "dispatched": len(dispatched),
        "seconds": round(span, 2),
        "jobs_per_s": round((len(dispatched) - 1) / span, 1) if span > 0 else None,
        "max_in_flight": max_in_flight,
        "activations": activations,
        "jobs_per_poll": round(len(dispatched) / activations, 2) if activations else None,
        "shards": 3 if sharded else 1,
    }
