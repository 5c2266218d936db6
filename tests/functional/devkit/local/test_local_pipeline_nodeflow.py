"""The whole pipeline on node-flow, end to end: template.yaml's topology run by local mode (poller,
heartbeat, dead-letter and the handlers on moto's SQS and DynamoDB) with WORKERLESS_ENGINE=nodeflow,
against the node-flow emulator over loopback (seed 002).

Timings are test-sized, as in the Sheptra module: a 5 s lease (node-flow's minimum) puts each
heartbeat about 1 s after the last, a 1 s tick and schedule keep pickup fast, and the job queues'
visibility timeout (with the handlers' Timeout, template parameters) is cut to seconds but kept
well above any handler run here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from moto import mock_aws
from workerless._core.lease import ACTIVATION_LEASE, BEGIN_LEASE
from workerless._core.model import JobRef, Outcome
from workerless._core.record import Decision, Status, decide
from workerless.aws.dynamo import JobStore
from workerless_devkit.devtools.scaffold import template_job_types
from workerless_devkit.emulators.nodeflow import NodeFlowEmulator
from workerless_devkit.local import LocalTopology
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.pipeline import (
    TEMPLATE,
    Events,
    more_polls,
    template_variant,
    topology,
    wait_counted,
    wait_final,
)

#: Runs the topology for seconds to minutes: `make test` runs it, `make test-fast` does not.
pytestmark = pytest.mark.slow

TEST_HANDLERS = Path(__file__).resolve().parents[2] / "handlers_nodeflow"
NS = "/v1/ns/default"
#: A lease is 5 s and a heartbeat re-anchors it to now + 5 s: moving the emulator's clock by a bit
#: more than that lapses it at once. Kept just over the lease (not, say, 10 s) because the pipeline
#: reads leaseExpiresAt against its own clock: a larger jump would make every later lease look
#: longer to the heartbeat than it really is.
LAPSE_SECONDS = 5.1

Serve = Callable[..., tuple[NodeFlowEmulator, str, Path]]


@pytest.fixture
def serve(workerless_emulator: EmulatorFactory) -> Serve:
    """Start node-flow emulators (options as :func:`nodeflow.create`): (emulator, URL, env file)."""

    def start(**options: Any) -> tuple[NodeFlowEmulator, str, Path]:
        running = workerless_emulator("nodeflow", **options)
        assert running.env_file is not None
        return running.emulator, running.url, running.env_file

    return start


def wait_for(topo: LocalTopology, what: str, done: Callable[[], bool], seconds: float) -> None:
    """Run until ``done()``. ``seconds`` is what it takes on an idle machine; the wait ends at the
    event, so it allows a busy machine far longer before failing."""
    limit = max(seconds, 60.0)
    assert topo.run_until(done, max_seconds=limit, poll_seconds=0.05), f"not within {limit} s: {what}"


def seen(events: Events, event: str, job_id: str) -> int:
    return sum(1 for _, name, fields in events if name == event and fields.get("job_id") == job_id)


def record_status(topo: LocalTopology, task_id: str, job_type: str = "generate-report") -> str | None:
    """The status of the task's job record in the embedded DynamoDB (key
    ``job#{type}#nodeflow#{taskId}``)."""
    key = JobRef("nodeflow", task_id, job_type).record_key
    item = topo.client("dynamodb").get_item(
        TableName=topo.environment["WORKERLESS_TABLE"], Key={"pk": {"S": key}}, ConsistentRead=True
    )
    status = item.get("Item", {}).get("status", {}).get("S")
    return str(status) if status is not None else None


def history(emulator: NodeFlowEmulator, task_id: str) -> list[str]:
    return [event["event"] for event in emulator.task_state(task_id)["history"]]


# ------------------------------------------------------------------------------------------------


def test_example_tasks_complete_and_a_terminal_failure_is_never_retried(
    serve: Serve, tmp_path: Path, events: Events
) -> None:
    """GIVEN tasks on all three example queues and a charge whose amount is 0
    WHEN the template runs against node-flow
    THEN every task completes on its first lease with the output its handler returned, and the
    zero charge is reported FAILED_WITH_TERMINAL_ERROR and not retried although attempts remain."""
    emulator, _url, env_file = serve()
    charged = [emulator.create_job("charge-payment", {"orderId": f"o{i}", "amount": 10 + i}) for i in range(4)]
    receipts = [emulator.create_job("send-receipt", {"orderId": f"r{i}"}) for i in range(3)]
    report = emulator.create_job("generate-report", {"seconds": 1})
    declined = emulator.create_job("charge-payment", {"orderId": "bad", "amount": 0}, retries=3)

    with topology(env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_final(topo, emulator.job_state, [*charged, *receipts, report, declined], 25)
        # The engine shows a job final before the handler has counted it: wait for the count itself.
        summary = wait_counted(
            topo,
            {
                "charge-payment": {"completed": 4, "failed": 1},
                "send-receipt": {"completed": 3},
                "generate-report": {"completed": 1},
            },
            25,
        )
        errors = topo.errors

    for i, task_id in enumerate(charged):
        state = emulator.job_state(task_id)
        assert state["state"] == "completed"
        assert state["output"] == {"paymentOk": True, "chargeId": f"ch_o{i}"}
        assert state["logs"] == [f"charging {10 + i} for order o{i}"]
    for i, task_id in enumerate(receipts):
        state = emulator.job_state(task_id)
        assert state["output"] == {"receiptSent": True}
        assert state["logs"] == [f"receipt sent for order r{i}"]
    assert emulator.job_state(report)["output"] == {"reportReady": True}
    for task_id in [*charged, *receipts, report]:
        assert emulator.job_state(task_id)["attempts"] == 1, "one lease each: nothing lapsed or was redone"

    failed = emulator.task_state(declined)
    assert failed["state"] == "failed"
    assert "failed_terminal" in history(emulator, declined), "reported FAILED_WITH_TERMINAL_ERROR, not FAILED"
    assert "next_task_id" not in failed, "a terminal failure schedules no retry"
    assert emulator.job_state(declined)["task_ids"] == [declined]
    assert failed["attempts"] == 1
    assert "ChargeInput: amount: Value error, amount must be a positive number" in failed["error_message"]

    assert summary["charge-payment"]["completed"] == 4
    assert summary["charge-payment"]["failed"] == 1
    assert summary["send-receipt"]["completed"] == 3
    assert summary["generate-report"]["completed"] == 1
    assert not errors, f"no function invocation failed: {errors}"


def test_lease_stolen_mid_run_stops_the_handler_and_nothing_of_it_is_applied(
    serve: Serve, tmp_path: Path, events: Events
) -> None:
    """GIVEN a 20 s report running under a 5 s lease kept alive by the heartbeat
    WHEN the lease lapses mid-run and another worker leases the task
    THEN the heartbeat's next extension is refused (409 LEASE_EXPIRED), the job record is marked
    LOST, the handler sees job.lease_lost() and stops long before its 20 s, nothing it did reaches
    the engine (no report, no log line, no stack), and the pipeline neither fails nor takes the task
    back: the other worker's report is the one that counts."""
    emulator, url, env_file = serve()
    task_id = emulator.create_job("generate-report", {"seconds": 20}, retries=1)
    # One job in flight per route: while the handler holds the message, the poller has no room to
    # lease the task again itself, so the only other holder is the worker below.
    with topology(env_file, job_visibility_seconds=30, max_in_flight=1, listeners=(events,)) as topo:
        wait_for(topo, "handler started", lambda: seen(events, "started", task_id) == 1, 10)
        started_at = time.monotonic()
        wait_for(topo, "a heartbeat extended the lease", lambda: seen(events, "extended", task_id) >= 1, 5)

        emulator.advance(LAPSE_SECONDS)
        stolen = httpx.post(
            f"{url}{NS}/queues/generate-report/lease",
            json={"workerId": "other-worker", "count": 1, "waitSeconds": 0, "leaseSeconds": 600},
            headers={"X-API-Key": emulator.api_key or ""},
        )
        stolen.raise_for_status()
        assert [t["taskId"] for t in stolen.json()["tasks"]] == [task_id]

        # The heartbeat's 409 marks the record LOST; the handler notices and returns, which
        # records a second lease_lost (its outcome is dropped) and deletes its message.
        wait_for(topo, "record marked LOST", lambda: record_status(topo, task_id) == "lost", 8)
        wait_for(topo, "handler stopped", lambda: seen(events, "lease_lost", task_id) >= 2, 8)
        ran_for = time.monotonic() - started_at
        wait_for(topo, "job message settled", lambda: not topo.queue_depths()["generatereportQueue"].busy, 5)
        # A few more ticks: the pipeline must not lease, run or report the task again.
        more_polls(topo)
        invocations, errors = topo.invocations, topo.errors

    # Stopped before the job's own end (it sleeps 20 s from its start): by the lost lease, not by finishing.
    assert ran_for < 20, f"the handler ran for {ran_for:.1f} s: to its end, not stopped by the lost lease"
    assert invocations.get("generatereportFunction") == 1
    assert not errors, f"no function invocation failed: {errors}"
    assert seen(events, "started", task_id) == 1
    assert seen(events, "activated", task_id) == 1
    for event in ("completed", "failed", "thrown", "rereported"):
        assert seen(events, event, task_id) == 0, f"the lost handler's {event} reached the pipeline"

    state = emulator.task_state(task_id)
    assert state["state"] == "leased" and state["worker_id"] == "other-worker"
    assert state["logs"] == [], "no log line or stack of the lost handler was accepted"
    assert state["output"] is None and state["error_message"] is None
    assert history(emulator, task_id)[-2:] == ["lease_expired", "leased"]

    task = stolen.json()["tasks"][0]
    done = httpx.post(
        f"{url}{NS}/tasks/{task_id}/report",
        json={
            "queueName": "generate-report",
            "workflowId": task["workflowId"],
            "leaseToken": task["leaseToken"],
            "status": "COMPLETED",
            "output": {"by": "other-worker"},
        },
        headers={"X-API-Key": emulator.api_key or ""},
    )
    assert done.status_code == 200, done.text
    assert emulator.job_state(task_id)["output"] == {"by": "other-worker"}


def test_lease_lapsed_mid_run_is_taken_back_by_the_pipeline_and_finished(
    serve: Serve, tmp_path: Path, events: Events
) -> None:
    """GIVEN a 20 s report whose lease lapses mid-run
    WHEN the pipeline's own poller leases the same task id again (node-flow keeps the id across a
    lapse; only the lease token changes)
    THEN the first run stops (its lease is gone), and the task is still finished under the new
    lease: the pipeline does not skip its own new lease for ever because the old one was lost."""
    emulator, _url, env_file = serve()
    task_id = emulator.create_job("generate-report", {"seconds": 3}, retries=1)
    # The new lease's message arrives while the first run still holds the claim: it comes back
    # after the visibility timeout (10 s, longer than the 3 s run) and then claims the LOST record.
    with topology(env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_for(topo, "handler started", lambda: seen(events, "started", task_id) == 1, 10)
        wait_for(topo, "a heartbeat extended the lease", lambda: seen(events, "extended", task_id) >= 1, 5)
        emulator.advance(LAPSE_SECONDS)
        wait_final(topo, emulator.job_state, [task_id], 30)
        errors = topo.errors

    state = emulator.job_state(task_id)
    assert state["state"] == "completed"
    assert state["output"] == {"reportReady": True}
    assert state["attempts"] >= 2, "the task was leased again after the lapse"
    assert state["task_ids"] == [task_id], "a lapse is not a retry: the same task id throughout"
    assert seen(events, "lease_lost", task_id) >= 1
    # One run per lease: the new lease either ran the handler again (the first run was stopped) or,
    # if the first run had stored its result before the 409, re-reported that result.
    assert seen(events, "started", task_id) + seen(events, "rereported", task_id) == 2
    assert seen(events, "completed", task_id) == 1
    assert not errors, f"no function invocation failed: {errors}"


def test_logs_reach_the_task_in_order_followed_by_the_failure_stack(
    serve: Serve, tmp_path: Path, events: Events
) -> None:
    """GIVEN a handler that logs 60 lines through job.log and then raises
    THEN the task's log holds the 60 lines in order (the first 50 flushed mid-run, the rest before
    the report), then the stack of the failure, and the task is reported FAILED with the error."""
    template = template_variant(tmp_path, handlers={"generate-report": TEST_HANDLERS})
    emulator, _url, env_file = serve()
    lines = [f"step {i:02d}" for i in range(60)]
    task_id = emulator.create_job("generate-report", {"lines": lines, "error": "report exploded"}, retries=1)

    with topology(env_file, job_visibility_seconds=10, template=template, listeners=(events,)) as topo:
        wait_final(topo, emulator.job_state, [task_id], 20)

    state = emulator.task_state(task_id)
    assert state["state"] == "failed"
    assert "failed" in history(emulator, task_id) and "failed_terminal" not in history(emulator, task_id)
    assert state["error_message"] == "RuntimeError: report exploded"
    logs = state["log_entries"]
    assert [entry["message"] for entry in logs[:60]] == lines
    assert all(entry["level"] == "info" for entry in logs[:60])
    assert len(logs) == 61, "the lines, then exactly one entry with the stack"
    stack = logs[60]
    assert stack["level"] == "error"
    assert stack["message"].startswith("Traceback (most recent call last):")
    assert "handlers_nodeflow" in stack["message"]
    assert stack["message"].rstrip().endswith("RuntimeError: report exploded")
    assert [entry["at"] for entry in logs] == sorted(entry["at"] for entry in logs)


def test_a_terminal_failure_has_its_stack_in_the_task_log_before_it_is_reported(
    serve: Serve, tmp_path: Path, events: Events
) -> None:
    """GIVEN the example charge-payment handler and a charge above its limit (it raises TerminalError)
    THEN, as for any other exception, the failure's stack is in the task's log, written before the
    task was reported FAILED_WITH_TERMINAL_ERROR (seed 002: "the lines explaining a failure are
    there when someone opens the failed task")."""
    emulator, _url, env_file = serve()
    task_id = emulator.create_job("charge-payment", {"orderId": "bad", "amount": 10**7}, retries=3)

    with topology(env_file, job_visibility_seconds=10, listeners=(events,)) as topo:
        wait_final(topo, emulator.job_state, [task_id], 20)

    state = emulator.task_state(task_id)
    assert state["state"] == "failed"
    assert "above the single-charge limit" in (state["error_message"] or "")
    stacks = [e for e in state["log_entries"] if e["message"].startswith("Traceback (most recent call last):")]
    assert len(stacks) == 1, f"one stack in the task log: {state['log_entries']}"
    assert stacks[0]["level"] == "error"
    assert "TerminalError: amount 1e+07 is above the single-charge limit" in stacks[0]["message"]
    reported = [e["at"] for e in state["history"] if e["event"] == "failed_terminal"]
    assert len(reported) == 1
    assert stacks[0]["at"] <= reported[0], "the stack is written before the failure is reported"


def test_domain_route_leases_only_its_domain_queue(serve: Serve, tmp_path: Path, events: Events) -> None:
    """GIVEN the charge-payment route set to EngineQueue charge-payment:eu-west (its Mappings.Routes
    entry, which its SSM route parameter carries to the poller), a credential whose
    only charge scope is queues:lease:charge-payment:eu-west, and charges on both queues
    THEN the eu-west charges are leased and completed, the plain charge-payment ones stay queued
    (never leased, never asked for), and no poll is refused."""
    route = "    chargepayment: {Type: charge-payment}\n"
    template = template_variant(
        tmp_path, {route: '    chargepayment: {Type: charge-payment, EngineQueue: "charge-payment:eu-west"}\n'}
    )
    others = [t for t in template_job_types(TEMPLATE.read_text(encoding="utf-8")) if t != "charge-payment"]
    emulator, url, env_file = serve(
        scopes=("queues:lease:charge-payment:eu-west", *(f"queues:lease:{t}" for t in others), "tasks:report")
    )
    eu = [emulator.create_job("charge-payment", {"orderId": f"eu{i}", "amount": 5}, domain="eu-west") for i in range(2)]
    plain = [emulator.create_job("charge-payment", {"orderId": f"p{i}", "amount": 5}) for i in range(2)]

    with topology(env_file, job_visibility_seconds=10, template=template, listeners=(events,)) as topo:
        wait_final(topo, emulator.job_state, eu, 20)
        more_polls(topo)  # a few more polls of every route
        errors = topo.errors

    for i, task_id in enumerate(eu):
        state = emulator.job_state(task_id)
        assert state["state"] == "completed"
        assert state["queue"] == "charge-payment:eu-west"
        assert state["output"] == {"paymentOk": True, "chargeId": f"ch_eu{i}"}
    for task_id in plain:
        state = emulator.job_state(task_id)
        assert state["state"] == "ready" and state["attempts"] == 0, "a plain charge-payment task was leased"
    assert not errors, f"no function invocation failed (a 403 would fail the poller): {errors}"

    workers = httpx.get(f"{url}{NS}/queues/workers", headers={"X-API-Key": emulator.api_key or ""})
    workers.raise_for_status()
    polled = {row["queue"] for row in workers.json()["workers"]}
    assert "charge-payment:eu-west" in polled
    assert "charge-payment" not in polled
    depth = httpx.get(f"{url}{NS}/queues/charge-payment/depth", headers={"X-API-Key": emulator.api_key or ""})
    assert depth.json()["ready"] == 2


def test_job_record_tells_a_later_lease_of_the_same_task_from_the_lost_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record rules behind the lapse test, on moto's DynamoDB: node-flow leases a lapsed task
    again under the same task id, so the job record (key ``nodeflow#{taskId}``) must tell the
    leases apart by their fingerprint (a hash of the handle, never the lease token itself)."""

    def ref(token: str) -> JobRef:
        handle = {"queueName": "generate-report", "leaseToken": token, "workflowId": "wf"}
        return JobRef("nodeflow", "task-1", "generate-report", handle=handle)

    first, second = ACTIVATION_LEASE.fingerprint(ref("lt_first")), ACTIVATION_LEASE.fingerprint(ref("lt_second"))
    assert first and second and first != second
    assert "lt_first" not in first
    assert BEGIN_LEASE.fingerprint(ref("lt_first")) == "", "engines leased at begin keep the old rules"
    key = ref("lt_first").key
    assert key == "nodeflow#task-1" and ref("lt_second").key == key, "job.key stays the task id"

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="jobs",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        store = JobStore("jobs", ttl_seconds=3600, client=client)

        assert store.claim(key, owner="a", claim_seconds=60, job_type="generate-report", lease=first)[0]
        # The second lease's delivery arrives while the first still runs: it must wait.
        claimed, found = store.claim(key, owner="b", claim_seconds=60, job_type="generate-report", lease=second)
        assert not claimed and decide(found, time.time(), second) is Decision.RETRY_LATER
        # The first lease's heartbeat is refused: LOST. A redelivery under that lease still skips...
        assert store.mark(key, Status.LOST, reason="409", job_type="generate-report", lease=first)
        claimed, found = store.claim(key, owner="a2", claim_seconds=60, job_type="generate-report", lease=first)
        assert not claimed and decide(found, time.time(), first) is Decision.SKIP
        # ...but the second lease claims the record again and runs.
        assert store.claim(key, owner="b", claim_seconds=60, job_type="generate-report", lease=second)[0]
        record = store.get(key)
        assert record is not None and record.status is Status.CLAIMED and record.lease == second
        assert record.other_lease(first), "the first run's lease_lost() now answers True"
        # A late 409 on the first lease's heartbeat must not stop the second lease's run.
        assert not store.mark(key, Status.LOST, reason="409", job_type="generate-report", lease=first)
        assert store.get(key).status is Status.CLAIMED  # type: ignore[union-attr]

        # A result stored under a lease whose report was then refused is re-reported under the next.
        other = "nodeflow#task-2"
        assert store.claim(other, owner="a", claim_seconds=60, job_type="generate-report", lease=first)[0]
        assert store.store_outcome(other, owner="a", outcome=Outcome.complete({"reportReady": True})) is None
        store.mark_reported(other, note="lease lost at report", lease=first)
        claimed, found = store.claim(other, owner="b", claim_seconds=60, job_type="generate-report", lease=second)
        assert not claimed and decide(found, time.time(), second) is Decision.REREPORT
        assert found is not None and found.outcome == Outcome.complete({"reportReady": True})
        assert decide(found, time.time(), first) is Decision.DONE, "the refused lease itself has nothing left"
