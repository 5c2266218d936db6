"""The StageNext emulator against seed 001, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from workerless_devkit.emulators import stagenext
from workerless_devkit.emulators.http import EmulatorServer
from workerless_devkit.emulators.stagenext import RESULT_BODY_CAP, RESULT_STRING_CAP, StageNextEmulator
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.waits import EVENT_SECONDS, eventually

KEY = stagenext.DEFAULT_API_KEY


@pytest.fixture(scope="module")
def served(workerless_module_emulator: EmulatorFactory) -> tuple[StageNextEmulator, EmulatorServer]:
    # One server for the module (stopping one costs ~0.5 s); every test resets the emulator.
    running = workerless_module_emulator("stagenext")
    return running.emulator, running.server


@pytest.fixture
def emu(served: tuple[StageNextEmulator, EmulatorServer]) -> StageNextEmulator:
    emulator, _ = served
    emulator.reset(handler_patterns=("billing-*", "ship"), events_max_batch=3)
    return emulator


@pytest.fixture
def http(served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[1].url, timeout=5) as client:
        client.delete("/_admin/faults")
        yield client


def bootstrap(http: httpx.Client, instance_id: str = "inst-1") -> dict[str, Any]:
    response = http.post("/workers/bootstrap", json={"instanceId": instance_id}, headers={"X-API-Key": KEY})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def pull(http: httpx.Client, queue: str = "billing-charge", **kw: Any) -> httpx.Response:
    http.cookies.clear()
    return http.post("/jobs/pull", json={"queue": queue, "waitSeconds": kw.pop("wait", 0)}, headers={"X-API-Key": KEY})


def replica_cookie(response: httpx.Response) -> str:
    value = response.cookies.get(stagenext.AFFINITY_COOKIE)
    assert value is not None
    return f"{stagenext.AFFINITY_COOKIE}={value}"


def ack(http: httpx.Client, token: str, cookie: str | None, requeue: bool = False) -> httpx.Response:
    http.cookies.clear()
    headers = {"Cookie": cookie} if cookie else {}
    return http.post("/jobs/ack", json={"token": token, "requeue": requeue}, headers=headers)


def lease(http: httpx.Client, op: str, stage_id: str, execution_id: str, token: str) -> httpx.Response:
    return http.post(
        f"/stages/{stage_id}/lease/{op}", json={"executionId": execution_id}, headers={"X-Worker-Session": token}
    )


def result(http: httpx.Client, stage_id: str, execution_id: str, token: str, **body: Any) -> httpx.Response:
    payload = {"executionId": execution_id, "status": "succeeded", "result": '{"ok":true}', **body}
    return http.post(f"/stages/{stage_id}/result", json=payload, headers={"X-API-Key": KEY, "X-Worker-Session": token})


# ------------------------------------------------------------------------------------- sessions


def test_rebootstrap_reuses_worker_record_and_replaces_token(http: httpx.Client, emu: StageNextEmulator) -> None:
    """GIVEN a bootstrapped worker WHEN the same instanceId bootstraps again THEN the workerId is kept
    and the old token stops working while the new one works."""
    first = bootstrap(http)
    second = bootstrap(http)
    assert second["workerId"] == first["workerId"]
    assert second["sessionToken"] != first["sessionToken"]
    assert second["expiresInSeconds"] == 24 * 3600
    old = http.post(
        "/workers/heartbeat", json={"workerId": first["workerId"]}, headers={"X-Worker-Session": first["sessionToken"]}
    )
    assert old.status_code == 401
    new = http.post(
        "/workers/heartbeat",
        json={"workerId": first["workerId"], "counters": {"polls": 2}},
        headers={"X-Worker-Session": second["sessionToken"]},
    )
    assert new.status_code == 200
    assert len(emu.workers()) == 1
    assert emu.workers()[0]["bootstraps"] == 2
    assert emu.workers()[0]["counters"] == {"polls": 2}
    # A different instanceId is a different worker record.
    assert bootstrap(http, "inst-2")["workerId"] != first["workerId"]


def test_bootstrap_requires_a_valid_api_key(http: httpx.Client) -> None:
    assert http.post("/workers/bootstrap", json={}).status_code == 401
    assert http.post("/workers/bootstrap", json={}, headers={"X-API-Key": "nope"}).status_code == 401


def test_session_ttl_is_not_extended_by_heartbeats(http: httpx.Client, emu: StageNextEmulator) -> None:
    session = bootstrap(http)
    headers = {"X-Worker-Session": session["sessionToken"]}
    for _ in range(3):
        emu.advance(8 * 3600 - 10)
        beat = http.post("/workers/heartbeat", json={"workerId": session["workerId"]}, headers=headers)
        assert beat.status_code == 200
    # 3 x (8 h - 10 s) < 24 h: still valid; 20 s later it has expired despite the heartbeats.
    assert http.post("/workers/heartbeat", json={"workerId": session["workerId"]}, headers=headers).status_code == 200
    emu.advance(31)
    assert http.post("/workers/heartbeat", json={"workerId": session["workerId"]}, headers=headers).status_code == 401


def test_heartbeat_workerid_must_match_session(http: httpx.Client) -> None:
    session = bootstrap(http)
    response = http.post(
        "/workers/heartbeat", json={"workerId": "wrk_other"}, headers={"X-Worker-Session": session["sessionToken"]}
    )
    assert response.status_code == 403


def test_events_batch_cap_and_shutdown_is_not_revocation(http: httpx.Client, emu: StageNextEmulator) -> None:
    session = bootstrap(http)
    headers = {"X-Worker-Session": session["sessionToken"]}
    events = [{"type": "job.started"}] * 4
    too_many = http.post("/workers/events", json={"workerId": session["workerId"], "events": events}, headers=headers)
    assert too_many.status_code == 400
    assert "WORKER_EVENTS_MAX_BATCH" in too_many.json()["detail"]
    ok = http.post("/workers/events", json={"workerId": session["workerId"], "events": events[:3]}, headers=headers)
    assert ok.status_code == 202
    down = http.post("/workers/shutdown", json={"workerId": session["workerId"]}, headers=headers)
    assert down.status_code == 200
    assert emu.workers()[0]["stopped"] is True
    # Not a revocation: the token still authenticates.
    assert http.post("/workers/heartbeat", json={"workerId": session["workerId"]}, headers=headers).status_code == 200


# ----------------------------------------------------------------------------------- pull / ack


def test_pull_empty_is_204_and_queue_outside_pattern_is_403(http: httpx.Client) -> None:
    assert pull(http).status_code == 204
    forbidden = pull(http, "payroll")
    assert forbidden.status_code == 403
    assert "payroll" in forbidden.json()["detail"]
    assert http.post("/jobs/pull", json={"queue": "billing-x"}).status_code == 401
    assert (
        http.post("/jobs/pull", json={"queue": "billing-x", "waitSeconds": 21}, headers={"X-API-Key": KEY}).status_code
        == 400
    )


def test_pull_with_wait_returns_a_job_that_arrives_during_the_wait(http: httpx.Client, emu: StageNextEmulator) -> None:
    """The job is created once the pull is being served, well inside its 20 s window: a 200 with the
    job (not the deadline's 204) shows the waiting pull picked it up."""
    pulls = emu.router.stats["POST /jobs/pull"]
    answer: dict[str, httpx.Response] = {}
    puller = threading.Thread(target=lambda: answer.update(response=pull(http, wait=20)))
    puller.start()
    eventually("the pull reached the emulator", lambda: emu.router.stats["POST /jobs/pull"] > pulls)
    emu.create_job("billing-charge", {"n": 1})
    puller.join(timeout=EVENT_SECONDS)
    assert not puller.is_alive()
    response = answer["response"]
    assert response.status_code == 200
    assert response.json()["input"] == {"n": 1}


def test_pull_with_wait_answers_204_at_the_deadline(http: httpx.Client) -> None:
    started = time.monotonic()
    assert pull(http, wait=0.5).status_code == 204
    assert time.monotonic() - started >= 0.5  # held for the wait (a lower bound holds on a busy machine)


def test_pull_delivers_execution_identity_and_sets_affinity_cookie(http: httpx.Client, emu: StageNextEmulator) -> None:
    stage_id = emu.create_job("billing-charge", {"amount": 3}, retries=2)
    response = pull(http)
    assert response.status_code == 200
    body = response.json()
    assert body["stageId"] == stage_id
    assert body["executionId"].startswith("exe_")
    assert body["attempt"] == 1
    assert body["retries"] == 2
    assert body["ackToken"].startswith("ack_")
    assert replica_cookie(response).startswith("gw_replica=r")
    assert emu.job_state(stage_id)["deliveries"] == 1


def test_gateway_inflight_cap_is_429(http: httpx.Client, emu: StageNextEmulator) -> None:
    emu.reset(max_inflight=2, replicas=1)
    for _ in range(3):
        emu.create_job("q", {})
    assert pull(http, "q").status_code == 200
    assert pull(http, "q").status_code == 200
    limited = pull(http, "q")
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "1"
    assert emu.inflight() == [2]


def test_ack_needs_the_replica_that_holds_the_token_and_is_not_idempotent(
    http: httpx.Client, emu: StageNextEmulator
) -> None:
    stage_id = emu.create_job("billing-charge", {})
    response = pull(http)
    token, cookie = response.json()["ackToken"], replica_cookie(response)
    other = "gw_replica=r1" if cookie.endswith("r0") else "gw_replica=r0"
    assert ack(http, token, other).status_code == 404
    assert ack(http, token, cookie).status_code == 200
    assert ack(http, token, cookie).status_code == 404
    statuses = [a["status"] for a in emu.job_state(stage_id)["acks"]]
    assert statuses == [404, 200, 404]


def test_requeue_returns_the_same_execution_without_a_new_attempt(http: httpx.Client, emu: StageNextEmulator) -> None:
    stage_id = emu.create_job("billing-charge", {})
    first = pull(http)
    assert ack(http, first.json()["ackToken"], replica_cookie(first), requeue=True).status_code == 200
    second = pull(http)
    assert second.status_code == 200
    assert second.json()["executionId"] == first.json()["executionId"]
    assert second.json()["deliveryCount"] == 2
    assert len(emu.job_state(stage_id)["executions"]) == 1


def test_visibility_sweep_requeues_and_forgets_the_token(http: httpx.Client, emu: StageNextEmulator) -> None:
    """GIVEN a pulled, leased delivery WHEN the gateway visibility timeout passes (even with the
    lease renewed) THEN the delivery is requeued, its token answers 404, and the lease stays held."""
    session = bootstrap(http)
    stage_id = emu.create_job("billing-charge", {})
    first = pull(http)
    execution_id = first.json()["executionId"]
    assert lease(http, "acquire", stage_id, execution_id, session["sessionToken"]).json()["acquired"] is True
    emu.advance(40)
    assert lease(http, "renew", stage_id, execution_id, session["sessionToken"]).status_code == 200
    emu.advance(21)
    assert any(h["event"] == "visibility_requeue" for h in emu.job_state(stage_id)["history"])
    assert ack(http, first.json()["ackToken"], replica_cookie(first)).status_code == 404
    again = pull(http)
    assert again.json()["executionId"] == execution_id
    # The redelivery of a running execution is refused at acquire.
    refused = lease(http, "acquire", stage_id, execution_id, session["sessionToken"]).json()
    assert refused == {"acquired": False, "reason": "lease_held", "stageId": stage_id}
    assert emu.job_state(stage_id)["state"] == "leased"


def _requeue_by(http: httpx.Client, emu: StageNextEmulator, how: str, *delivered: httpx.Response) -> None:
    """Hand ``delivered`` back to the broker: an ack with requeue, or the gateway's visibility sweep."""
    if how == "ack":
        for response in delivered:
            assert ack(http, response.json()["ackToken"], replica_cookie(response), requeue=True).status_code == 200
    else:
        emu.advance(emu.visibility_timeout + 1)
    events = [h["event"] for r in delivered for h in emu.job_state(r.json()["stageId"])["history"]]
    assert events.count("requeued" if how == "ack" else "visibility_requeue") == len(delivered)


def _drain(http: httpx.Client, queue: str = "billing-charge") -> list[str]:
    """Every stage id the queue hands out, in order (each delivery acknowledged)."""
    order: list[str] = []
    for _ in range(20):  # bounded: the tests queue at most a handful
        response = pull(http, queue)
        if response.status_code == 204:
            return order
        assert response.status_code == 200, response.text
        order.append(response.json()["stageId"])
        assert ack(http, response.json()["ackToken"], replica_cookie(response)).status_code == 200
    raise AssertionError(f"the queue did not drain: {order}")


@pytest.mark.parametrize("how", ["ack", "sweep"])
def test_a_requeued_delivery_goes_back_to_its_original_place(
    http: httpx.Client, emu: StageNextEmulator, how: str
) -> None:
    """GIVEN stages A, B, C queued in that order WHEN A is pulled and handed back (ack requeue:true,
    or left for the visibility sweep) THEN the next pull is A again, not B: RabbitMQ requeues a
    message at its original position (docs/assumptions.md), not behind the backlog."""
    a, b, c = (emu.create_job("billing-charge", {"n": n}) for n in range(3))
    first = pull(http)
    assert first.json()["stageId"] == a
    _requeue_by(http, emu, how, first)
    assert _drain(http) == [a, b, c]


@pytest.mark.parametrize("how", ["ack", "sweep"])
def test_requeued_deliveries_keep_their_order_ahead_of_later_publishes(
    http: httpx.Client, emu: StageNextEmulator, how: str
) -> None:
    """GIVEN A, B, C queued, A and B pulled, then D published WHEN B and A are handed back (B first)
    THEN they are handed out again in their publish order A, B, still ahead of C and D."""
    a, b, c = (emu.create_job("billing-charge", {"n": n}) for n in range(3))
    first, second = pull(http), pull(http)
    assert [first.json()["stageId"], second.json()["stageId"]] == [a, b]
    d = emu.create_job("billing-charge", {"n": 3})
    _requeue_by(http, emu, how, second, first)
    assert _drain(http) == [a, b, c, d]


@pytest.mark.parametrize("how", ["ack", "sweep"])
def test_requeue_position_back_models_a_broker_that_requeues_at_the_tail(
    http: httpx.Client, emu: StageNextEmulator, how: str
) -> None:
    """GIVEN ``requeue_position="back"`` WHEN A is pulled and handed back THEN it comes out after
    B and C, and it is still the same execution (no new attempt)."""
    emu.reset(handler_patterns=("billing-*",), requeue_position="back")
    a, b, c = (emu.create_job("billing-charge", {"n": n}) for n in range(3))
    first = pull(http)
    assert first.json()["stageId"] == a
    _requeue_by(http, emu, how, first)
    assert _drain(http) == [b, c, a]
    assert len(emu.job_state(a)["executions"]) == 1
    assert emu.job_state(a)["deliveries"] == 2


def test_requeue_position_is_original_or_back() -> None:
    assert stagenext.create().requeue_position == "original"
    with pytest.raises(ValueError, match="requeue_position"):
        stagenext.create(requeue_position="front")


# ------------------------------------------------------------------------------------ leases


def test_acquire_is_not_reentrant_and_renew_only_by_owner(http: httpx.Client, emu: StageNextEmulator) -> None:
    owner = bootstrap(http, "a")
    other = bootstrap(http, "b")
    stage_id = emu.create_job("billing-charge", {})
    execution_id = pull(http).json()["executionId"]
    acquired = lease(http, "acquire", stage_id, execution_id, owner["sessionToken"]).json()
    assert acquired["acquired"] is True
    assert acquired["leaseSeconds"] == 60
    again = lease(http, "acquire", stage_id, execution_id, owner["sessionToken"]).json()
    assert again["acquired"] is False
    assert again["reason"] == "lease_held"
    refused = lease(http, "renew", stage_id, execution_id, other["sessionToken"])
    assert refused.status_code == 409
    assert refused.json()["reason"] == "not_lease_owner"
    emu.advance(50)
    renewed = lease(http, "renew", stage_id, execution_id, owner["sessionToken"])
    assert renewed.status_code == 200
    emu.advance(50)  # 100 s after acquire, 50 s after the renewal: still held
    assert emu.job_state(stage_id)["state"] == "leased"
    assert lease(http, "renew", stage_id, execution_id, "wss_bogus").status_code == 401


def test_lapsed_lease_is_recovered_as_a_new_execution(http: httpx.Client, emu: StageNextEmulator) -> None:
    session = bootstrap(http)
    stage_id = emu.create_job("billing-charge", {}, retries=1)
    first = pull(http).json()
    lease(http, "acquire", stage_id, first["executionId"], session["sessionToken"])
    emu.advance(61)
    refused = lease(http, "renew", stage_id, first["executionId"], session["sessionToken"])
    assert refused.status_code == 409
    assert refused.json()["reason"] == "lease_expired"
    state = emu.job_state(stage_id)
    assert state["retries"] == 0
    assert [e["state"] for e in state["executions"]] == ["expired", "dispatched"]
    # The late result of the expired execution is accepted, then discarded by fencing.
    late = result(http, stage_id, first["executionId"], session["sessionToken"])
    assert late.status_code == 202
    assert emu.job_state(stage_id)["results"][-1]["reason"] == "stale_execution"
    assert emu.job_state(stage_id)["state"] == "ready"


# ------------------------------------------------------------------------------------ results


def test_result_202_applied_once_then_duplicates_discarded(http: httpx.Client, emu: StageNextEmulator) -> None:
    session = bootstrap(http)
    stage_id = emu.create_job("billing-charge", {})
    execution_id = pull(http).json()["executionId"]
    lease(http, "acquire", stage_id, execution_id, session["sessionToken"])
    assert result(http, stage_id, execution_id, session["sessionToken"], attempt=1).status_code == 202
    assert result(http, stage_id, execution_id, session["sessionToken"], attempt=1).status_code == 202
    state = emu.job_state(stage_id)
    assert state["state"] == "completed"
    assert state["output"] == {"ok": True}
    assert [(r["applied"], r["reason"]) for r in state["results"]] == [(True, None), (False, "duplicate")]


def test_result_requires_api_key_and_session(http: httpx.Client, emu: StageNextEmulator) -> None:
    session = bootstrap(http)
    stage_id = emu.create_job("billing-charge", {})
    body = {"executionId": "exe_x", "status": "succeeded", "result": ""}
    no_key = http.post(f"/stages/{stage_id}/result", json=body, headers={"X-Worker-Session": session["sessionToken"]})
    assert no_key.status_code == 401
    no_session = http.post(f"/stages/{stage_id}/result", json=body, headers={"X-API-Key": KEY})
    assert no_session.status_code == 401


def test_result_size_caps_are_413(http: httpx.Client, emu: StageNextEmulator) -> None:
    session = bootstrap(http)
    stage_id = emu.create_job("billing-charge", {})
    execution_id = pull(http).json()["executionId"]
    lease(http, "acquire", stage_id, execution_id, session["sessionToken"])
    too_long = result(http, stage_id, execution_id, session["sessionToken"], result="x" * (RESULT_STRING_CAP + 1))
    assert too_long.status_code == 413
    too_big = result(http, stage_id, execution_id, session["sessionToken"], result="", padding="y" * RESULT_BODY_CAP)
    assert too_big.status_code == 413
    assert emu.job_state(stage_id)["results"] == []
    exact = result(http, stage_id, execution_id, session["sessionToken"], result="z" * RESULT_STRING_CAP)
    assert exact.status_code == 202


def test_failed_result_dispatches_a_new_execution_until_retries_run_out(
    http: httpx.Client, emu: StageNextEmulator
) -> None:
    session = bootstrap(http)
    stage_id = emu.create_job("billing-charge", {}, retries=1)
    for expected_state in ("ready", "failed"):
        execution_id = pull(http).json()["executionId"]
        lease(http, "acquire", stage_id, execution_id, session["sessionToken"])
        result(http, stage_id, execution_id, session["sessionToken"], status="failed", errorMessage="boom")
        state = emu.job_state(stage_id)
        assert state["state"] == expected_state
    assert state["error_message"] == "boom"
    assert state["attempts"] == 2


def test_admin_api_creates_reads_and_advances(http: httpx.Client, emu: StageNextEmulator) -> None:
    created = http.post("/_admin/jobs", json={"type": "ship", "variables": {"to": "x"}, "retries": 1})
    assert created.status_code == 201
    stage_id = created.json()["id"]
    read = http.get(f"/_admin/jobs/{stage_id}").json()
    assert (read["type"], read["state"], read["retries"], read["input"]) == ("ship", "ready", 1, {"to": "x"})
    assert http.get("/_admin/jobs/nope").status_code == 404
    before = emu.now()
    assert http.post("/_admin/clock", json={"advance": 100}).json()["now"] >= before + 100
    assert len(http.get("/_admin/jobs").json()["jobs"]) == 1
    assert http.get("/_admin/workers").json() == {"workers": []}


def test_load_jobs_and_engine_values(tmp_path: Any) -> None:
    emu = stagenext.create(instance_id="fleet-1")
    path = tmp_path / "jobs.json"
    path.write_text('[{"type": "ship", "variables": {"a": 1}}, {"type": "ship", "retries": 0}]')
    ids = emu.load_jobs(path)
    assert [emu.job_state(i)["retries"] for i in ids] == [3, 0]
    assert emu.engine_values("http://127.0.0.1:1") == {
        "STAGENEXT_API_URL": "http://127.0.0.1:1",
        "STAGENEXT_API_KEY": KEY,
        "STAGENEXT_INSTANCE_ID": "fleet-1",
    }
