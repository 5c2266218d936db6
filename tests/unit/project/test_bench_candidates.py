"""Issue 29's candidate pricing (bench/candidates.py) and the bench's cold-start function list:
arithmetic checked on small synthetic runs whose answers are worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import candidates, cold_start, cost

ROOT = Path(__file__).resolve().parents[3]


def test_every_cold_start_function_has_its_code_directory() -> None:
    """GIVEN the bench's cold-start functions THEN each names a directory under functions/ (the
    routes' directories are their route names since b019e92: `make bench` stopped at section 5)."""
    missing = [f for f in cold_start.FUNCTIONS if not (cold_start.function_dir(f) / "app.py").is_file()]
    assert missing == []


def _run(**over: object) -> dict[str, object]:
    run: dict[str, object] = {
        "jobs": 1000,
        "rate_per_second": 3.0,
        "invocations": {"charge-payment": 400, "send-receipt": 300, "generate-report": 300, "heartbeat": 200},
        "sqs_requests_by_call": {"poller:SendMessage(heartbeat)": 200},
        "ddb_write_units_by_call": {"poller:PutItem": 1100, "charge-payment:UpdateItem": 2000},
        "ddb_read_units_by_call": {"heartbeat:BatchGetItem": 1000},
        "ddb_calls_by_call": {"poller:PutItem": 1000},
    }
    run.update(over)
    return run


def test_batching_window_fills_batches_by_the_route_rate_and_adds_the_window_wait() -> None:
    """GIVEN one job per handler invocation at 1 job/s a route THEN a 1 s window makes it 2, spares
    half the invocations (a receive, a delete and a request each) and adds (1 + 1/2) / 2 s a job."""
    out = candidates.batching_window(_run(), p50=0.5, routes=3)
    assert out["jobs_per_invocation_before"] == 1.0
    assert out["jobs_per_invocation_after"] == 2.0
    per_invocation = (2 * cost.SQS_PER_REQUEST + cost.LAMBDA_PER_REQUEST) * 1e6
    assert out["saving_per_million"] == pytest.approx(0.5 * per_invocation, abs=1e-3)
    assert out["added_wait_s"] == 0.75
    assert out["p50_after"] == 1.25


def test_lock_item_units_split_into_writes_and_size() -> None:
    out = candidates.lock_item_size(_run())
    assert out["writes_per_job"] == 1.0
    assert out["units_per_write"] == 1.1
    assert out["saving_per_million"] == pytest.approx(0.1 * cost.DDB_PER_WRU * 1e6, abs=1e-3)


def test_tickets_folded_into_the_chain_keep_a_third_of_a_lease_of_jobs_in_the_lock() -> None:
    """GIVEN 3 jobs/s and a 60 s lease THEN 60 jobs stay open in the lock's item: 550 + 60 x 75 bytes
    = 5 write units a lock write, 4 more than now, at one lock write a job."""
    out = candidates.tickets_in_relay_chain(_run(), {"lambda_per_function": {"heartbeat": {"billed_ms_per_job": 0}}})
    assert out["open_jobs_in_lock"] == 60.0
    assert out["lock_write_units_after"] == 5
    assert out["added_per_million"] == pytest.approx(4 * cost.DDB_PER_WRU * 1e6, abs=1e-3)
    tickets = 0.2 * cost.SQS_PER_REQUEST + 0.2 * (2 * cost.SQS_PER_REQUEST + cost.LAMBDA_PER_REQUEST)
    assert out["saving_per_million"] == pytest.approx((tickets + 1.0 * cost.DDB_PER_RRU) * 1e6, abs=1e-3)


def test_a_resident_second_costs_more_than_a_relay_at_256_mb_and_less_at_128() -> None:
    rows = candidates.relay_vs_resident([{"rate_per_second": 2.0, "relays_per_job": 0.5}, {"rate_per_second": None}])
    assert len(rows) == 1, "a row without relay counts (an older results.json) is left out"
    row = rows[0]
    assert row["resident_256_per_million"] > row["relay_chain_per_million"] > row["resident_128_per_million"]


def test_the_section_prices_every_candidate_from_the_committed_results() -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))
    lines = candidates.markdown(results)
    rows = [line for line in lines if line.startswith("| ") and "**" in line]
    assert len(rows) == 12
    assert all(any(v in row for v in ("**made**", "**refused**", "**open**")) for row in rows)


def test_the_routes_uncapped_save_their_queues_difference_and_no_more() -> None:
    results = json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))
    idle = candidates.idle_event_sources(results)
    routes = results["template_shape"]["routes"]
    saved = results["idle_cost_per_month_usd"]["value"] - idle["routes_uncapped"]
    assert saved == pytest.approx(routes * (idle["per_queue_month"] - idle["per_uncapped_queue_month"]), abs=2e-3)
    assert idle["per_uncapped_queue_month"] < idle["per_queue_month"]
