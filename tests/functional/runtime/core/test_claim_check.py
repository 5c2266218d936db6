"""Any payload the engine accepts, workerless carries (issue 14): a job message over its queue's
MaximumMessageSize, or a stored outcome over DynamoDB's 400 KB item, goes to the claim check's S3
bucket (moto's S3, the same boto3 calls as on AWS) and the message or record carries a pointer.

Every run is template.yaml under ``workerless local`` with the IAM check on, against an emulator over
loopback; send-receipt runs tests/functional/handlers_large (it answers with the size and SHA-256 of
its input, and returns incompressible text when asked): each job ends with the exact output expected,
on its first attempt."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from workerless._core.claimcheck import payload_limit
from workerless_devkit.devtools.scaffold import stem
from workerless_devkit.emulators import sheptra
from workerless_devkit.local import LocalTopology
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.handlers_large.app import blob, fingerprint
from tests.functional.pipeline import Events, job_timings, route_timings, template_variant, wait_counted, wait_final

pytestmark = pytest.mark.slow

HANDLERS = Path(__file__).resolve().parents[2] / "handlers_large"
#: send-receipt's function, as the route loop names it (charge-payment -> chargepaymentFunction).
SEND_RECEIPT = f"{stem('send-receipt')}Function"
#: Lambda's own timeouts and a short tick; leases long enough that no test needs the heartbeat to
#: keep a job (a 5 MB job is read, hashed and reported well within a minute here).
PARAMETERS = {"LeaseSeconds": "60", "TickSeconds": "1", **job_timings(20)}


@pytest.fixture
def serve(workerless_emulator: EmulatorFactory) -> Callable[[str], tuple[Any, Path]]:
    """start(engine) -> (emulator, env file): an emulator of ``engine`` on loopback."""

    def start(name: str) -> tuple[Any, Path]:
        running = workerless_emulator(name)
        assert running.env_file is not None
        return running.emulator, running.env_file

    return start


def large_topology(
    tmp_path: Path,
    env_file: Path,
    *,
    heartbeat: bool = True,
    parameters: dict[str, str] | None = None,
    listeners: tuple[Events, ...] = (),
) -> LocalTopology:
    replacements: dict[str, str] = {}
    if not heartbeat:
        # The heartbeat's event source off: an owed report can then only be settled by SQS's
        # redelivery of the job message (the path under test), never by the heartbeat's re-send.
        replacements["Properties: {Queue: !GetAtt HeartbeatQueue.Arn, "] = (
            "Properties: {Enabled: false, Queue: !GetAtt HeartbeatQueue.Arn, "
        )
    template = template_variant(tmp_path, replacements, handlers={"send-receipt": HANDLERS})
    return LocalTopology(
        template,
        env_file,
        parameters={**PARAMETERS, **(parameters or {})},
        route_settings=route_timings(20, template),
        schedule_seconds=1,
        listeners=listeners,
    )


def s3_grants(topo: LocalTopology) -> set[tuple[str, str, str]]:
    """(function, action, key prefix) of every S3 call the IAM check allowed; none may be refused."""
    assert topo.iam is not None and topo.iam.refusals == [], [
        r.message for r in (topo.iam.refusals if topo.iam else [])
    ]
    bucket = f"arn:aws:s3:::{topo.template.buckets[0].name}/"
    return {
        (g.function, g.action, g.resource.removeprefix(bucket).rsplit("/", 1)[0])
        for g in topo.iam.grants
        if g.action.startswith("s3:")
    }


def big_result_refused_once(emu: Any, variables: dict[str, Any]) -> str:
    """A Sheptra send-receipt job whose first delivery's report is refused every try (four 503s: the
    retry policy's tries), so it is left owed; its id."""
    job_id: str = emu.create_job("send-receipt", variables, retries=3)
    httpx.post(
        f"{emu.base_url}/_admin/faults",
        json={"method": "POST", "path": f"/cells/{emu.cell}/v1/jobs/{job_id}/complete", "status": 503, "times": 4},
    ).raise_for_status()
    return job_id


def offloaded(events: Events, job_id: str) -> list[dict[str, Any]]:
    return [f for _, e, f in events if e == "offloaded" and f.get("job_id") == job_id]


def records(topo: LocalTopology) -> list[dict[str, Any]]:
    table = topo.template.tables[0].name
    items: list[dict[str, Any]] = topo.client("dynamodb").scan(TableName=table)["Items"]
    return [item for item in items if not item["pk"]["S"].startswith("state#")]


def objects(topo: LocalTopology, prefix: str) -> list[str]:
    bucket = topo.template.buckets[0].name
    answer = topo.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for o in answer.get("Contents", [])]


def run_one(topo: LocalTopology, emu: Any, job_id: str, *, seconds: float = 90) -> dict[str, Any]:
    """Run until the job is final and its outcome counted; its state at the engine."""
    wait_final(topo, emu.job_state, [job_id], seconds)
    state: dict[str, Any] = emu.job_state(job_id)
    event = {"completed": "completed", "failed": "failed", "thrown": "thrown"}[state["state"]]
    wait_counted(topo, {"send-receipt": {event: 1}}, 30)
    return state


def assert_first_attempt(state: dict[str, Any], expected: dict[str, Any]) -> None:
    assert state["state"] == "completed", state.get("error_message")
    assert state["output"] == expected
    assert state["attempts"] == 1, "no retry spent"


def test_a_node_flow_task_with_a_5_mb_input_runs_through_the_claim_check(
    tmp_path: Path, serve: Any, events: Events
) -> None:
    """GIVEN a node-flow task whose input is 5 MB (node-flow has no cap on it), five times SQS's 1 MiB
    THEN the poller writes its input to jobs/send-receipt/ in the bucket and queues a pointer, the
    handler reads the whole input back, and the task completes on its first attempt."""
    emu, env_file = serve("nodeflow")
    variables = {"orderId": "big", "blob": "n" * 5_000_000}
    job_id = emu.create_job("send-receipt", variables)

    with large_topology(tmp_path, env_file, listeners=(events,)) as topo:
        state = run_one(topo, emu, job_id)
        keys = objects(topo, "jobs/send-receipt/")
        grants = s3_grants(topo)

    assert_first_attempt(state, {"receiptSent": True, **fingerprint(variables)})
    assert grants == {
        ("PollerFunction", "s3:PutObject", "jobs/send-receipt"),
        (SEND_RECEIPT, "s3:GetObject", "jobs/send-receipt"),
    }
    [note] = offloaded(events, job_id)
    assert note["bytes"] > 5_000_000
    assert len(keys) == 1


def test_a_sheptra_job_with_1_000_000_bytes_of_variables_completes(tmp_path: Path, serve: Any, events: Events) -> None:
    """GIVEN a Sheptra job with exactly 1,000,000 bytes of variables as the engine measures its 1 MB cap
    (names plus UTF-8 JSON values), text in a non-Latin script: its job message, where JSON escapes
    each such character to six bytes, is about 3 MB, three times SQS's 1 MiB
    THEN it runs through the claim check and completes on its first attempt, retries untouched."""
    variables = {"orderId": "o1", "blob": ""}
    left = 1_000_000 - sheptra.variables_size(variables)
    variables["blob"] = "й" * (left // 2) + "s" * (left % 2)
    assert sheptra.variables_size(variables) == 1_000_000
    emu, env_file = serve("sheptra")
    job_id = emu.create_job("send-receipt", variables, retries=3)

    with large_topology(tmp_path, env_file, listeners=(events,)) as topo:
        state = run_one(topo, emu, job_id)

    assert_first_attempt(state, {"receiptSent": True, **fingerprint(variables)})
    assert state["retries"] == 3
    assert len(offloaded(events, job_id)) == 1


def test_a_sheptra_handler_returning_900_kb_of_incompressible_variables_completes(
    tmp_path: Path, serve: Any, events: Events
) -> None:
    """GIVEN a handler that returns 900 KB of incompressible variables (about 680 KB compressed: over
    DynamoDB's 400 KB item; Sheptra takes up to 1 MB) THEN the outcome is stored in results/send-receipt/
    and the record points at it, and the engine gets exactly those variables, on the first attempt."""
    emu, env_file = serve("sheptra")
    variables = {"orderId": "o2", "returnBytes": 900_000}
    job_id = emu.create_job("send-receipt", variables, retries=3)

    with large_topology(tmp_path, env_file, listeners=(events,)) as topo:
        state = run_one(topo, emu, job_id)
        [record] = records(topo)
        keys = objects(topo, "results/send-receipt/")
        assert s3_grants(topo) == {(SEND_RECEIPT, "s3:PutObject", "results/send-receipt")}

    expected = {"receiptSent": True, **fingerprint(variables), "blob": blob(900_000, job_id)}
    assert_first_attempt(state, expected)
    assert state["retries"] == 3
    assert "outcome" not in record, "the outcome is not in the record"
    ref = json.loads(record["outcome_ref"]["S"])
    assert [ref["key"]] == keys and ref["key"].startswith("results/send-receipt/")
    assert offloaded(events, job_id) == [], "the input was small: queued inline"


def test_a_stagenext_stage_with_a_900_kb_input_completes(tmp_path: Path, serve: Any, events: Events) -> None:
    """GIVEN a StageNext stage whose input is 900 KB of UTF-8 JSON, accented text: its job message,
    where JSON escapes each such character to six bytes, is about 2.7 MB
    THEN it is queued through the claim check, run under its lease and its result applied, on its
    first execution (and a 900 KB input of plain ASCII fits a message and runs inline)."""
    emu, env_file = serve("stagenext")
    variables = {"orderId": "o3", "blob": "ü" * 450_000}
    plain = {"orderId": "o3b", "blob": "t" * 900_000}
    plain_id = emu.create_job("send-receipt", plain, retries=3)
    stage_id = emu.create_job("send-receipt", variables, retries=3)

    with large_topology(tmp_path, env_file, listeners=(events,)) as topo:
        wait_final(topo, emu.job_state, [stage_id, plain_id], 90)
        wait_counted(topo, {"send-receipt": {"completed": 2}}, 30)

    for job_id, given in ((stage_id, variables), (plain_id, plain)):
        state = emu.job_state(job_id)
        assert_first_attempt(state, {"receiptSent": True, **fingerprint(given)})
        assert len(state["executions"]) == 1 and state["retries"] == 3
        [result] = state["results"]
        assert result["applied"] and not result["discarded"]
    assert len(offloaded(events, stage_id)) == 1
    assert offloaded(events, plain_id) == []


def test_a_redelivered_job_whose_outcome_is_in_s3_is_rereported_not_rerun(
    tmp_path: Path, serve: Any, events: Events
) -> None:
    """GIVEN a handler returning 900 KB (its outcome goes to S3) and Sheptra refusing every try of the
    first delivery's report (503), with the heartbeat's event source off
    WHEN SQS redelivers the job message after its visibility timeout
    THEN the redelivery reads the outcome from S3 and reports it: the handler ran once, and the engine
    has exactly its variables, on the first attempt."""
    emu, env_file = serve("sheptra")
    variables = {"orderId": "o4", "returnBytes": 900_000}
    job_id = big_result_refused_once(emu, variables)

    with large_topology(tmp_path, env_file, heartbeat=False, listeners=(events,)) as topo:
        state = run_one(topo, emu, job_id)
        [record] = records(topo)
        grants = s3_grants(topo)

    assert_first_attempt(state, {"receiptSent": True, **fingerprint(variables), "blob": blob(900_000, job_id)})
    mine = [e for _, e, f in events if f.get("job_id") == job_id]
    assert mine.count("started") == 1, "the handler ran once"
    assert "report_owed" in mine and mine.count("rereported") == 1, mine
    assert "outcome_ref" in record and record["status"]["S"] == "reported"
    assert (SEND_RECEIPT, "s3:GetObject", "results/send-receipt") in grants


def test_an_owed_report_whose_outcome_is_in_s3_is_settled_by_the_heartbeat(
    tmp_path: Path, serve: Any, events: Events
) -> None:
    """GIVEN a 900 KB outcome in S3 whose first report Sheptra refuses (503, every try), a 15 s lease
    (the heartbeat's ticket comes in 5 s) and the job queue's 20 s visibility
    THEN the heartbeat reads the outcome from S3 (its results/* grant) and re-sends it: accepted, the
    handler ran once, the job message deleted."""
    emu, env_file = serve("sheptra")
    variables = {"orderId": "o5", "returnBytes": 900_000}
    job_id = big_result_refused_once(emu, variables)

    with large_topology(tmp_path, env_file, parameters={"LeaseSeconds": "15"}, listeners=(events,)) as topo:
        state = run_one(topo, emu, job_id)
        grants = s3_grants(topo)

    assert_first_attempt(state, {"receiptSent": True, **fingerprint(variables), "blob": blob(900_000, job_id)})
    mine = [e for _, e, f in events if f.get("job_id") == job_id]
    assert mine.count("started") == 1 and mine.count("rereported") == 1, mine
    assert ("HeartbeatFunction", "s3:GetObject", "results/send-receipt") in grants


def test_a_job_larger_than_workerless_carries_is_failed_naming_its_size_and_the_limit(
    tmp_path: Path, serve: Any, events: Events
) -> None:
    """GIVEN a node-flow task of 100 MB (over WORKERLESS_MAX_PAYLOAD_BYTES, 10 MiB at the template's
    256 MB) THEN the poller fails it at the engine at once, terminally, with its size and the limit in
    the reason (it reads the answer as it streams and never holds the task's input); nothing is
    queued or written to the bucket, and no handler runs."""
    emu, env_file = serve("nodeflow")
    job_id = emu.create_job("send-receipt", {"blob": "h" * 100_000_000})

    with large_topology(tmp_path, env_file, listeners=(events,)) as topo:
        wait_final(topo, emu.job_state, [job_id], 90)
        keys = objects(topo, "jobs/")
        assert s3_grants(topo) == set()

    state = emu.job_state(job_id)
    assert state["state"] == "failed"
    reason = state["error_message"] or ""
    size = re.search(r"input is (\d+) bytes", reason)  # as node-flow sent it: 100 MB and its JSON
    assert size and 100_000_000 < int(size.group(1)) < 100_000_100, reason
    assert f"at most {payload_limit(256)} bytes" in reason, reason
    assert state["attempts"] == 1 and "next_task_id" not in state, "not retried: it would come back as large"
    assert keys == []
    assert not [e for _, e, f in events if e == "started" and f.get("job_id") == job_id]
