"""The whole pipeline on StageNext, end to end: template.yaml's topology run by local mode (poller,
heartbeat, dead-letter and the three example handlers on moto's SQS and DynamoDB) against the
StageNext emulator over loopback.

Timings are test-sized: the emulator's execution lease is a few seconds instead of StageNext's 60
(``create(lease_seconds=...)``, told to the adapter with STAGENEXT_LEASE_SECONDS so the heartbeat's
first look comes in time), and its gateway visibility timeout is shortened where a test needs the
gateway's redelivery (``visibility_timeout=...``, told to the adapter with STAGENEXT_VISIBILITY_SECONDS).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from workerless._core.model import Demand
from workerless.engines import stagenext as stagenext_adapter
from workerless_devkit import cli
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.pipeline import ROOT, Events, more_polls, topology, wait_counted, wait_final

#: Runs the topology for seconds to minutes: `make test` runs it, `make test-fast` does not.
pytestmark = pytest.mark.slow


class Emulated:
    """A served StageNext emulator and the env file that points local mode at it."""

    def __init__(self, emulator: Any, url: str, env_file: Path) -> None:
        self.emulator = emulator
        self.url = url
        self.env_file = env_file

    def state(self, stage_id: str) -> dict[str, Any]:
        state: dict[str, Any] = self.emulator.job_state(stage_id)
        return state

    def fault(self, **fault: Any) -> None:
        httpx.post(f"{self.url}/_admin/faults", json={"method": "POST", **fault}).raise_for_status()


@pytest.fixture
def serve(workerless_emulator: EmulatorFactory) -> Callable[..., Emulated]:
    """Start an emulator with the given lease and gateway visibility; the env file tells the adapter both."""

    def start(*, lease_seconds: int, visibility_timeout: float = 60) -> Emulated:
        # engine_values carries STAGENEXT_LEASE_SECONDS / STAGENEXT_VISIBILITY_SECONDS when they
        # differ from the seed's 60 s.
        running = workerless_emulator("stagenext", lease_seconds=lease_seconds, visibility_timeout=visibility_timeout)
        assert running.env_file is not None
        return Emulated(running.emulator, running.url, running.env_file)

    return start


def applied(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The results StageNext's consumer applied (fencing discards the others)."""
    return [r for r in state["results"] if r["applied"]]


def count(events: Events, name: str, stage_id: str) -> int:
    return sum(1 for _, event, fields in events if event == name and fields.get("job_id") == stage_id)


def test_example_jobs_complete_and_every_result_is_applied_once(serve: Callable[..., Emulated], events: Events) -> None:
    """GIVEN charges, receipts, a short report and a charge that can never succeed
    THEN every stage is final on its first execution, exactly one result of each was applied (the
    declined charge's as a non-retryable failure), every delivery was acknowledged, and each handler
    ran once."""
    emu = serve(lease_seconds=6)
    create = emu.emulator.create_job
    charged = [create("charge-payment", {"orderId": f"o{i}", "amount": 10 + i}) for i in range(4)]
    receipts = [create("send-receipt", {"orderId": f"o{i}"}) for i in range(3)]
    report = create("generate-report", {"seconds": 1})
    declined = create("charge-payment", {"orderId": "bad", "amount": 0})
    every = [*charged, *receipts, report, declined]

    with topology(emu.env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_final(topo, emu.state, every, 30)
        # The engine shows a job final before the handler has counted it: wait for the count itself.
        summary = wait_counted(
            topo,
            {
                "charge-payment": {"completed": 4, "failed": 1},
                "send-receipt": {"completed": 3},
                "generate-report": {"completed": 1},
            },
            30,
        )

    for stage_id in charged:
        state = emu.state(stage_id)
        assert state["state"] == "completed"
        assert state["output"] == {"paymentOk": True, "chargeId": f"ch_{state['input']['orderId']}"}
    assert all(emu.state(s)["output"] == {"receiptSent": True} for s in receipts)
    assert emu.state(report)["output"] == {"reportReady": True}
    failed = emu.state(declined)
    assert failed["state"] == "failed"
    assert "ChargeInput: amount: Value error, amount must be a positive number" in failed["error_message"]
    assert applied(failed)[0]["retryable"] is False
    assert failed["retries"] == 3, "a terminal failure is not retried"
    for stage_id in every:
        state = emu.state(stage_id)
        assert len(applied(state)) == 1, f"{stage_id}: results {state['results']}"
        assert len(state["executions"]) == 1 and state["attempts"] == 1
        assert [a["status"] for a in state["acks"]] == [200], f"{stage_id}: acks {state['acks']}"
        assert count(events, "started", stage_id) == 1
    assert emu.emulator.inflight() == [0, 0]
    assert summary["charge-payment"]["completed"] == 4
    assert summary["charge-payment"]["failed"] == 1
    assert summary["send-receipt"]["completed"] == 3
    assert summary["generate-report"]["completed"] == 1


def test_gateway_redelivery_of_a_running_job_is_acknowledged_without_running(
    serve: Callable[..., Emulated], events: Events
) -> None:
    """GIVEN a 2 s gateway visibility timeout and a report that runs 20 s
    WHEN the gateway's sweep requeues the unacknowledged delivery and the poller pulls it again
    THEN the second delivery's lease acquire answers lease_held and it is acknowledged without
    running; the handler ran once, one result was applied, and no delivery is left pending.

    The run is long so that the redelivery has about 18 s, not 3, in which to be pulled: on a busy
    machine one poller invocation finishing the batch its predecessor left took 3 s (CI, stop 19),
    and the report finished before any poll could see the requeued delivery."""
    emu = serve(lease_seconds=6, visibility_timeout=2)
    stage_id = emu.emulator.create_job("generate-report", {"seconds": 20})

    with topology(emu.env_file, job_visibility_seconds=60, listeners=(events,)) as topo:
        wait_final(topo, emu.state, [stage_id], 120)
        # The redelivery was acknowledged: nothing comes back after another visibility period.
        settled = topo.run_until(lambda: emu.emulator.inflight() == [0, 0], max_seconds=60)
        deliveries = emu.state(stage_id)["deliveries"]
        # Past another gateway visibility period on the emulator's clock (its sweep runs now), then
        # a few polls that would pull anything it requeued.
        emu.emulator.advance(3)
        more_polls(topo)

    state = emu.state(stage_id)
    assert state["state"] == "completed"
    assert state["output"] == {"reportReady": True}
    assert settled and state["deliveries"] == deliveries, "a finished stage kept being redelivered"
    assert state["deliveries"] >= 2, "the gateway redelivered the running job"
    refused = [h for h in state["history"] if h["event"] == "acquire_refused"]
    # lease_held while the first delivery runs (execution_finished only if a pull raced the finish).
    assert any(h["reason"] == "lease_held" for h in refused), state["history"]
    assert {h["reason"] for h in refused} <= {"lease_held", "execution_finished"}
    assert any(a["status"] == 200 and a["requeue"] is False for a in state["acks"]), "redelivery acknowledged"
    assert len(applied(state)) == 1
    assert len(state["executions"]) == 1
    assert count(events, "started", stage_id) == 1, "the handler ran once"
    assert count(events, "skipped", stage_id) >= 1


def test_long_job_is_kept_past_several_leases_by_renewals(serve: Callable[..., Emulated], events: Events) -> None:
    """GIVEN a 4 s StageNext lease and a report that takes 13 s (more than three lease lengths)
    THEN the heartbeat renews the lease as it goes and the stage completes on its first execution,
    with its retries untouched."""
    emu = serve(lease_seconds=4)
    stage_id = emu.emulator.create_job("generate-report", {"seconds": 13}, retries=3)

    with topology(emu.env_file, job_visibility_seconds=30, listeners=(events,)) as topo:
        wait_final(topo, emu.state, [stage_id], 30)

    state = emu.state(stage_id)
    assert state["state"] == "completed"
    assert len(state["executions"]) == 1 and state["attempts"] == 1
    assert state["retries"] == 3
    assert not [h for h in state["history"] if h["event"] == "lease_expired"]
    assert state["executions"][0]["renewals"] >= 3, state["executions"][0]
    assert count(events, "extended", stage_id) >= 3
    assert count(events, "started", stage_id) == 1
    assert len(applied(state)) == 1


def test_failed_lease_acquire_leaves_the_stage_to_its_redelivery_not_to_the_heartbeat(
    serve: Callable[..., Emulated], events: Events
) -> None:
    """GIVEN lease acquire answers 503 to every try of the first delivery, and the heartbeat's first
    ticket comes while those tries are still going (a 4 s lease: it looks after ~1 s)
    WHEN the delivery gives up — left unacknowledged, its SQS message done: the gateway hands it out
    again after its visibility timeout (3 s here) and the poller pulls it as a new message
    THEN the heartbeat never renewed the unacquired execution (renewing it is refused "not running",
    and marking that LOST once made the redelivery acknowledge a stage nobody ran — chaos, seed 7),
    the redelivery claims at once (the failed delivery gave its claim back), acquires, and the
    heartbeat keeps that lease through a run longer than it: one execution, one applied result."""
    emu = serve(lease_seconds=4, visibility_timeout=3)
    stage_id = emu.emulator.create_job("generate-report", {"seconds": 5}, retries=3)
    emu.fault(path="/stages/{stageId}/lease/acquire", status=503, times=4)  # CALLS tries begin 4 times

    with topology(emu.env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_final(topo, emu.state, [stage_id], 40)

    state = emu.state(stage_id)
    assert state["state"] == "completed", state["history"]
    # "not_running" is the renewal of an execution nobody acquired. A renewal that reaches the
    # engine just after the result was applied ("not_current_execution": a busy machine delays the
    # heartbeat) is harmless, and a late one that let the lease lapse shows as a second attempt.
    refused = [h for h in state["history"] if h["event"] == "renew_refused" and h.get("reason") == "not_running"]
    assert refused == [], "the heartbeat renewed an execution whose lease was never acquired"
    assert len(state["executions"]) == 1 and state["attempts"] == 1, state["history"]
    assert state["executions"][0]["renewals"] >= 1, "the acquired lease was renewed through the 5 s run"
    assert len(applied(state)) == 1
    assert count(events, "started", stage_id) == 1
    assert emu.emulator.inflight() == [0, 0]


def test_unanswered_result_is_rereported_from_the_stored_outcome_on_redelivery(
    serve: Callable[..., Emulated], events: Events
) -> None:
    """GIVEN every try of the first delivery's result post is dropped (the connection closes: an
    unknown outcome) and StageNext's lease (4 s) is shorter than SQS's visibility timeout (10 s)
    WHEN SQS redelivers the message
    THEN the heartbeat has kept the lease while the result was owed, the stored result is posted
    again with the same execution identity and applied once, and the handler ran once."""
    emu = serve(lease_seconds=4)
    stage_id = emu.emulator.create_job("send-receipt", {"orderId": "r1"})
    # Four drops: every try of the first delivery's report (the retry policy makes four).
    emu.fault(path=f"/stages/{stage_id}/result", drop=True, times=4)

    with topology(emu.env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_final(topo, emu.state, [stage_id], 30)

    state = emu.state(stage_id)
    execution = state["executions"][0]
    assert state["state"] == "completed"
    assert state["output"] == {"receiptSent": True}
    assert len(state["executions"]) == 1, "the lease held while the result was owed: no second execution"
    assert [(r["executionId"], r["attempt"], r["applied"]) for r in state["results"]] == [
        (execution["executionId"], execution["attempt"], True)
    ]
    assert count(events, "started", stage_id) == 1, "the handler ran once"
    assert count(events, "rereported", stage_id) >= 1


def test_result_accepted_but_unanswered_is_retried_with_the_same_identity(
    serve: Callable[..., Emulated], events: Events, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN StageNext accepts the first two result posts only after the client has timed out
    THEN the retries carry the same computed result and execution identity, StageNext's fencing
    applies one and discards the rest as duplicates, and the handler ran once."""
    monkeypatch.setenv("WORKERLESS_HTTP_TIMEOUT_SECONDS", "1")
    emu = serve(lease_seconds=6)
    stage_id = emu.emulator.create_job("charge-payment", {"orderId": "u1", "amount": 5})
    emu.fault(path=f"/stages/{stage_id}/result", delay=1.5, times=2)

    with topology(emu.env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_final(topo, emu.state, [stage_id], 20)
        # The delayed posts land after the retry that succeeded: wait for all three.
        topo.run_until(lambda: len(emu.state(stage_id)["results"]) >= 3, max_seconds=60)

    state = emu.state(stage_id)
    assert state["state"] == "completed"
    assert state["output"] == {"paymentOk": True, "chargeId": "ch_u1"}
    results = state["results"]
    assert len(results) == 3
    assert len({(r["executionId"], r["attempt"], r["result"]) for r in results}) == 1, "same identity and result"
    assert len(applied(state)) == 1
    assert {r["reason"] for r in results if r["discarded"]} == {"duplicate"}
    assert count(events, "started", stage_id) == 1


def test_adapter_times_the_first_renewal_by_the_lease_and_learns_its_length(
    workerless_emulator: EmulatorFactory,
) -> None:
    """The heartbeat's first look is timed from a pulled job's ``lease_expires_at``: it must fall
    within one lease of the pull. GIVEN an engine whose lease is 4 s
    THEN with STAGENEXT_LEASE_SECONDS the very first pull is bounded by it; without it the adapter
    assumes the seed's 60 s until an acquire answer states the lease, and uses that from then on."""
    running = workerless_emulator("stagenext", lease_seconds=4, visibility_timeout=30)
    emulator, server = running.emulator, running.server
    values = emulator.engine_values(server.url)
    assert values["STAGENEXT_LEASE_SECONDS"] == "4" and values["STAGENEXT_VISIBILITY_SECONDS"] == "30"
    with httpx.Client(timeout=5) as client:
        told = stagenext_adapter.from_values(values, client, clock=emulator.now)
        emulator.create_job("charge-payment", {})
        [job] = told.activate([Demand("charge-payment", 1)], lease_seconds=60)
        assert job.lease_expires_at - job.activated_at == pytest.approx(4)

        untold = {k: v for k, v in values.items() if k != "STAGENEXT_LEASE_SECONDS"}
        engine = stagenext_adapter.from_values(untold, client, clock=emulator.now)
        emulator.create_job("charge-payment", {})
        [first] = engine.activate([Demand("charge-payment", 1)], lease_seconds=60)
        assert first.lease_expires_at - first.activated_at == pytest.approx(30), "the visibility bounds it"
        assert engine.begin(first)
        assert engine.lease_seconds == 4, "learned from the acquire answer"
        emulator.create_job("charge-payment", {})
        [second] = engine.activate([Demand("charge-payment", 1)], lease_seconds=60)
        assert second.lease_expires_at - second.activated_at == pytest.approx(4)
        asked = emulator.now()
        assert engine.extend(first.ref, 60) == pytest.approx(asked + 4, abs=1)
        engine.close()
        told.close()


# workerless.runtime.reset() drops the engine without closing the httpx client get_engine() built
# for it: collect those sockets here, under this filter (as test_cli's demo test does).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_demo_completes_every_job(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`workerless demo --engine stagenext`: every example job completes at the emulator."""
    monkeypatch.chdir(ROOT)
    code = cli.main(["demo", "--engine", "stagenext", "--jobs", "6", "--max-seconds", "30"])
    out, err = capsys.readouterr()
    gc.collect()
    assert code == 0, out + err
    assert "demo: all 6 jobs completed" in out
