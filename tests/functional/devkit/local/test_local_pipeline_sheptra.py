"""The whole pipeline on Sheptra, end to end: template.yaml's topology run by local mode (poller,
heartbeat, dead-letter and the three example handlers on moto's SQS and DynamoDB) against the
Sheptra emulator over loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from workerless._core.model import Demand
from workerless._core.settings import parse_env_text
from workerless.engines import build_engine
from workerless_devkit.devtools.scaffold import stem
from workerless_devkit.emulators import RunningEmulator
from workerless_devkit.local import LocalTopology

from tests.functional.pipeline import TEMPLATE, Events, job_timings, route_timings, topology, wait_counted, wait_final

#: Runs the topology for seconds to minutes: `make test` runs it, `make test-fast` does not.
pytestmark = pytest.mark.slow


@pytest.fixture
def emulator(sheptra_emulator: RunningEmulator) -> Any:
    return sheptra_emulator.emulator


@pytest.fixture
def env_file(sheptra_emulator: RunningEmulator) -> Path:
    assert sheptra_emulator.env_file is not None
    return sheptra_emulator.env_file


def test_example_handlers_complete_fail_terminally_and_are_summarised(
    emulator: Any, env_file: Path, events: Events
) -> None:
    charged = [emulator.create_job("charge-payment", {"orderId": f"o{i}", "amount": 10 + i}) for i in range(4)]
    receipts = [emulator.create_job("send-receipt", {"orderId": f"o{i}"}) for i in range(3)]
    report = emulator.create_job("generate-report", {"seconds": 1})
    declined = emulator.create_job("charge-payment", {"orderId": "bad", "amount": 0})

    with topology(env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_final(topo, emulator.job_state, [*charged, *receipts, report, declined], 40)
        # The engine shows a job final before the handler has counted it: wait for the count itself.
        summary = wait_counted(
            topo,
            {
                "charge-payment": {"completed": 4, "failed": 1},
                "send-receipt": {"completed": 3},
                "generate-report": {"completed": 1},
            },
            40,
        )

    for job_id in charged:
        state = emulator.job_state(job_id)
        assert state["state"] == "completed"
        assert state["output"]["paymentOk"] is True
        assert state["output"]["chargeId"] == f"ch_{state['variables']['orderId']}"
    assert all(emulator.job_state(j)["output"] == {"receiptSent": True} for j in receipts)
    assert emulator.job_state(report)["output"] == {"reportReady": True}
    failed = emulator.job_state(declined)
    assert failed["state"] == "failed"
    assert failed["retries"] == 0
    assert "ChargeInput: amount: Value error, amount must be a positive number" in failed["error_message"]
    assert summary["charge-payment"]["completed"] == 4
    assert summary["charge-payment"]["failed"] == 1
    assert summary["send-receipt"]["completed"] == 3
    assert all(emulator.job_state(j)["attempts"] == 1 for j in [*charged, *receipts, report])


def test_long_job_is_kept_alive_by_the_heartbeat_past_several_leases(
    emulator: Any, env_file: Path, events: Events
) -> None:
    """GIVEN a 5 s lease and a report that takes 17 s (more than three lease lengths)
    THEN the heartbeat extends the lease as it goes, the job completes on its first attempt with
    its retries untouched, and nobody else is handed it."""
    job_id = emulator.create_job("generate-report", {"seconds": 17}, retries=3)

    with topology(env_file, job_visibility_seconds=60, listeners=(events,)) as topo:
        wait_final(topo, emulator.job_state, [job_id], 45)

    state = emulator.job_state(job_id)
    assert state["state"] == "completed"
    assert state["attempts"] == 1
    assert state["retries"] == 3
    extends = [e for t, e, f in events if e == "extended" and f.get("job_id") == job_id]
    assert len(extends) >= 3, f"expected an extension per third of a lease, saw {len(extends)}"


def test_redelivered_job_is_rereported_not_rerun(emulator: Any, env_file: Path, events: Events) -> None:
    """GIVEN the engine refuses the first delivery's report (503, every try)
    WHEN SQS redelivers the message after its visibility timeout
    THEN the stored result is reported, and the handler has run exactly once."""
    job_id = emulator.create_job("send-receipt", {"orderId": "r1"})
    # Four 503s: every try of the first delivery's report (the retry policy makes four).
    httpx.post(
        f"{emulator.base_url}/_admin/faults",
        json={"method": "POST", "path": f"/cells/{emulator.cell}/v1/jobs/{job_id}/complete", "status": 503, "times": 4},
    ).raise_for_status()

    with topology(env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_final(topo, emulator.job_state, [job_id], 40)

    assert emulator.job_state(job_id)["state"] == "completed"
    started = [e for t, e, f in events if e == "started" and f.get("job_id") == job_id]
    rereported = [e for t, e, f in events if e == "rereported" and f.get("job_id") == job_id]
    assert len(started) == 1, "the handler ran once"
    assert len(rereported) >= 1, "the stored result was re-reported on redelivery"
    assert emulator.job_state(job_id)["attempts"] == 1


def _activate(env_file: Path, job_type: str) -> str:
    """Activate one job of ``job_type`` outside the topology (a standalone adapter, as a poller
    would): its SQS message, for the test to put where it likes."""
    values = parse_env_text(env_file.read_text(encoding="utf-8"))
    with httpx.Client(timeout=10) as client:
        adapter = build_engine("sheptra", values, client)
        try:
            activated = adapter.activate([Demand(job_type, 1)], 120)
        finally:
            adapter.close()
    assert len(activated) == 1, activated
    return activated[0].to_message()


def test_every_routes_dead_letters_share_one_queue_and_each_is_settled_as_its_own_type(
    emulator: Any, env_file: Path, events: Events
) -> None:
    """GIVEN a charge-payment job in the send-receipt queue and a send-receipt job in the charge-payment
    queue (a handler refuses a job of another type: each delivery fails and SQS redelivers it)
    WHEN SQS's redrive moves both, after MaxReceiveCount deliveries, from their two queues into the one
    job dead-letter queue
    THEN the dead-letter function fails each at the engine as the type its message names, not the
    queue it came through; every call under local mode's IAM check, none refused."""
    charge = emulator.create_job("charge-payment", {"orderId": "d1", "amount": 5}, retries=1)
    charge_message = _activate(env_file, "charge-payment")
    receipt = emulator.create_job("send-receipt", {"orderId": "d2"}, retries=1)
    receipt_message = _activate(env_file, "send-receipt")
    parameters = {"LeaseSeconds": "5", "TickSeconds": "1", "MaxReceiveCount": "2", **job_timings(3)}
    with LocalTopology(
        TEMPLATE,
        env_file,
        parameters=parameters,
        route_settings=route_timings(3),
        schedule_seconds=1,
        listeners=(events,),
    ) as topo:
        assert topo.iam is not None, "local mode enforces IAM by default"
        queues = {q.logical_id: q for q in topo.template.queues}
        assert {q for q in queues if q.endswith("DeadLetterQueue")} == {
            "JobDeadLetterQueue",
            "HeartbeatDeadLetterQueue",
            "TickerDeadLetterQueue",
        }
        assert {queues[f"{stem(t)}Queue"].dead_letter_queue_id for t in ("charge-payment", "send-receipt")} == {
            "JobDeadLetterQueue"
        }
        sqs = topo.client("sqs")
        sqs.send_message(QueueUrl=topo.queue_url("sendreceiptQueue"), MessageBody=charge_message)
        sqs.send_message(QueueUrl=topo.queue_url("chargepaymentQueue"), MessageBody=receipt_message)
        wait_final(topo, emulator.job_state, [charge, receipt], 60)
        refusals = list(topo.iam.refusals)
    settled = {(job_type, f.get("job_id")) for job_type, e, f in events if e == "dead_lettered"}
    assert settled == {("charge-payment", charge), ("send-receipt", receipt)}
    assert not refusals, refusals
    for job_id, job_type in ((charge, "charge-payment"), (receipt, "send-receipt")):
        state = emulator.job_state(job_id)
        assert state["state"] == "failed", state
        assert f"the {job_type} handler Lambda did not finish this job" in state["error_message"]
    # The other type's handler refused each delivery before claiming it: no handler code ran.
    wrong = [f for _, e, f in events if e == "started" and f.get("job_id") in (charge, receipt)]
    assert not wrong, "a job of another type never reaches a handler's code"


def test_a_letter_waiting_for_the_scheduled_drain_keeps_the_run_from_being_idle(
    emulator: Any, env_file: Path, events: Events
) -> None:
    """GIVEN the job dead-letter queue, which no event source reads (DeadLetterFunction drains it on
    its schedule, here every 4 s), and a letter put there after the first drain
    WHEN the run waits until it has been idle for 1 s
    THEN it is not idle while the letter waits for the next drain: when the wait returns, the letter
    has been settled at the engine and the queue is empty."""
    job = emulator.create_job("charge-payment", {"orderId": "i1", "amount": 5}, retries=1)
    message = _activate(env_file, "charge-payment")
    with LocalTopology(
        TEMPLATE,
        env_file,
        parameters=job_timings(10),
        route_settings=route_timings(10),
        schedule_seconds=4,
        listeners=(events,),
    ) as topo:
        # The first drain has received from the queue (an invocation counts from its start, which on a
        # busy machine can be long before its ReceiveMessage): the letter is sent after it.
        assert topo.run_until(lambda: "JobDeadLetterQueue" in topo.drained_queues, max_seconds=30)
        topo.client("sqs").send_message(QueueUrl=topo.queue_url("JobDeadLetterQueue"), MessageBody=message)
        topo.run_until_idle(1.0, max_seconds=60)
        depth = topo.queue_depths()["JobDeadLetterQueue"]
    assert ("charge-payment", "dead_lettered", job) in [(t, e, f.get("job_id")) for t, e, f in events]
    assert (depth.visible, depth.in_flight) == (0, 0)
    assert emulator.job_state(job)["state"] == "failed"
