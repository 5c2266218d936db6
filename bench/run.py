"""`make bench`: run every section, write bench/results.json, bench/RESULTS.md and bench/results.png.

    .venv/bin/python -m bench.run            # everything (< 10 minutes on 2 cores)
    .venv/bin/python -m bench.run --quick    # smaller samples, for a smoke run

A benchmark, not a test: nothing here asserts on a time; RESULTS.md shows each figure beside its
target and reference and says which targets are met.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.run")
    parser.add_argument("--quick", action="store_true", help="smaller samples (smoke run)")
    parser.add_argument("--skip-latency", action="store_true", help="skip the local-topology latency section")
    args = parser.parse_args(argv)
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "INFO")

    from bench import cold_start, cost, measure

    started = time.monotonic()
    scale = 0.2 if args.quick else 1.0
    results: dict[str, Any] = {
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
        },
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

    log("1/6 engine requests per job (in-process pipeline, emulator transport)")
    n = max(100, int(500 * scale))
    results["engine_requests_per_job"] = {
        e: measure.engine_requests(e, n) for e in ("sheptra", "nodeflow", "stagenext")
    }
    results["engine_requests_per_job"]["direct_minimal_worker_sheptra"] = measure.direct_worker_requests(n)
    results["long_job_extends"] = {e: measure.long_job_extends(e) for e in ("sheptra", "nodeflow", "stagenext")}

    log("2/6 billable AWS calls of a 10,000-job run at 2 jobs/s (in-memory SQS/DynamoDB fakes, metered)")
    jobs = 10_000 if not args.quick else 2_000
    run = measure.billable_run(jobs, rate_per_second=measure.REFERENCE_RATE)
    results["billable_run"] = run
    # The lingering poller is billed per second busy, not per job: the same run at other arrival rates.
    sweep_jobs = 3_000 if not args.quick else 600
    sweep_runs = {rate: measure.billable_run(sweep_jobs, rate_per_second=rate) for rate in measure.SWEEP_RATES}

    log("3/6 idle poller invocations and the idle cost model")
    idle = measure.idle_invocations()
    shape = cost.template_shape(ROOT / "template.yaml")
    idle_cost = cost.idle_monthly(
        shape, idle["per_tick"], idle["per_watchdog"], idle.get("custom_metrics"), idle.get("per_dead_letter_drain")
    )
    results["template_shape"] = shape
    results["idle_cost_per_month_usd"] = {"value": idle_cost["value"], "parts": idle_cost["parts"]}
    results["idle_cost_detail"] = idle_cost
    results["poller_memory"] = cost.poller_memory_sweep(run, idle["per_tick"], idle_cost["ticks_per_month"])

    per_million = cost.per_million_jobs(run)
    backlog = cost.per_million_jobs(sweep_runs[None]) if None in sweep_runs else None
    results["cost_by_arrival_rate"] = sorted(
        (_rate_row(cost, sweep) for sweep in [*sweep_runs.values(), run]),
        key=lambda row: -(row["rate_per_second"] or 1e9),
    )
    results["cost_per_million_jobs_usd"] = {
        "value": per_million["value"],
        "backlog": backlog["value"] if backlog else None,
        "backlog_parts": backlog["parts"] if backlog else None,
        "floor": cost.floor_per_million(),
        "step_functions_standard": cost.step_functions_per_million(),
        "fargate_monthly": round(cost.fargate_monthly(), 2),
        "break_even_jobs_per_month_vs_fargate": _round(
            cost.break_even_jobs_per_month(per_million["value"], idle_cost["value"])
        ),
        "break_even_jobs_per_month_vs_fargate_backlog": _round(
            cost.break_even_jobs_per_month(backlog["value"], idle_cost["value"]) if backlog else None
        ),
        "parts": per_million["parts"],
        # Jobs under the queue's and the table's limits (all of the billable run's) add nothing.
        "claim_check_added": cost.claim_check_table(ROOT / "template.yaml"),
        "billed_ms_per_job": per_million["billed_ms_per_job"],
        "lambda_per_function": per_million["per_function"],
        "log_bytes_per_job": run.get("log_bytes_per_job"),
        "log_bytes_per_job_with_platform": per_million["log_bytes_per_job_with_platform"],
        "log_lines_per_job": run.get("log_lines_per_job"),
        "custom_metrics_per_hour": run.get("custom_metrics_per_hour"),
        "custom_metrics": run.get("custom_metrics"),
        "kms_decrypts": run.get("kms_decrypts"),
        "invocations_per_job": per_million["invocations_per_job"],
        "rate_per_second": run["rate_per_second"],
        "poller_paused_s_per_job": round(run["paused_s"].get("poller", 0.0) / run["jobs"], 4),
        "method": "all-in (Lambda, SQS, DynamoDB, CloudWatch metrics and logs, KMS): in-memory fakes, "
        "metered per AWS billing rules; write units from item sizes; EMF metrics and log bytes as written; "
        "shipped poller on a virtual clock, Poisson arrivals",
    }

    log("2b/6 cross-check of the meters: the same pipeline on moto with a botocore billing hook")
    from bench.moto_check import moto_vs_fakes

    results["moto_cross_check"] = moto_vs_fakes(150 if args.quick else 300)

    log("4/6 adapter CPU per job beside the seed's minimal worker")
    results["cpu_per_job"] = measure.cpu_per_job(max(200, int(1000 * scale)), repeats=3)
    # An I/O-bound route, sync beside async: jobs a second per handler invocation (issue 15).
    results["async_vs_sync_route"] = measure.async_vs_sync_route(20 if args.quick else 50, io_seconds=0.2)

    log("5/6 cold start (python -X importtime, fresh interpreters)")
    results["cold_start"] = cold_start.cold_start(runs=3 if args.quick else 7)

    if args.skip_latency:
        results["pickup_latency_s"] = None
    else:
        log("6/6 pickup latency in the local topology (moto + Sheptra emulator on loopback)")
        from bench.latency import pickup_latency

        results["pickup_latency_s"] = pickup_latency(
            load_seconds=12 if args.quick else 30, idle_samples=2 if args.quick else 3
        )

    log("6b/6 one poller's dispatch rate in the local topology (a backlog, room never binding)")
    from bench.latency import dispatch_rate

    local = dispatch_rate(jobs=200 if args.quick else 600)
    log("6c/6 the same with one poller shard per route (Mappings.Routes PollerShard)")
    sharded = dispatch_rate(jobs=200 if args.quick else 600, sharded=True)
    handler = per_million["per_function"].get("charge-payment", {})

    def on_paper(run: dict[str, Any]) -> dict[str, Any]:
        jobs_per_poll = run.get("jobs_per_poll") or 1.0
        return cost.dispatch_on_paper(
            jobs_per_poll=jobs_per_poll,
            poller_cpu_ms_per_job=results["cpu_per_job"]["adapter_by_function_ms"].get("poller", 0.0),
            routes=len(measure.TEMPLATE_TYPES),
            # the lock item holds the batch and is written twice a cycle (activated, dispatched; the clear
            # rides on the next write): about 75 bytes a Sheptra job plus 550 of lock and batch header
            intent_wru_per_cycle=2 * max(1, -(-int(jobs_per_poll * 75 + 550) // 1024)),
            handler_ms_per_invocation=handler.get("billed_ms_per_invocation", 50.0),
            handler_batch=5,
            shards=run.get("shards", 1),
        )

    paper, paper_sharded = on_paper(local), on_paper(sharded)
    results["dispatch_rate_jobs_per_s"] = {
        "one_poller_local": local.get("jobs_per_s"),
        "sharded_local": sharded.get("jobs_per_s"),
        # one deployment, sharded one poller per route (the template setting the target is met with)
        "deployment_on_paper": paper_sharded["value"],
        "deployment_on_paper_one_shard": paper["value"],
        "local": local,
        "local_sharded": sharded,
        "on_paper": paper_sharded,
        "on_paper_one_shard": paper,
    }

    results["elapsed_s"] = round(time.monotonic() - started, 1)
    (OUT / "results.json").write_text(json.dumps(results, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    from bench.report import write_plot, write_readme_section, write_results_md

    write_results_md(results, OUT / "RESULTS.md")
    write_readme_section(results, OUT / "README-section.md")
    try:
        write_plot(results, OUT / "results.png")
    except ImportError as exc:
        log(f"no plot: {exc} (pip install matplotlib)")
    log(f"done in {results['elapsed_s']} s: bench/results.json, RESULTS.md, README-section.md, results.png")
    return 0


def _rate_row(cost: Any, run: dict[str, Any]) -> dict[str, Any]:
    """One row of the cost-by-arrival-rate table (bench.measure.billable_run at one rate)."""
    jobs = run["jobs"]
    priced = cost.per_million_jobs(run)
    gqa = run["sqs_requests_by_call"].get("poller:GetQueueAttributes", 0)
    return {
        "rate_per_second": run["rate_per_second"],
        "jobs": jobs,
        "usd_per_million": priced["value"],
        "parts": priced["parts"],
        "poller_paused_fraction": round(run["paused_s"].get("poller", 0.0) / run["virtual_seconds"], 3),
        "engine_requests_per_job": round(sum(run["engine_requests"].values()) / jobs, 3),
        "get_queue_attributes_per_job": round(gqa / jobs, 3),
        # the relay chain's messages (a relay a second while work flows): bench.candidates prices them
        # against a resident poller at each rate
        "relays_per_job": round(run["sqs_requests_by_call"].get("poller:SendMessage(ticker)", 0) / jobs, 4),
        "virtual_seconds": run["virtual_seconds"],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, -3)


if __name__ == "__main__":
    sys.exit(main())
