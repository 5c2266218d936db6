"""The node-flow emulator over real HTTP on 127.0.0.1, driven with raw httpx (no adapter).

Each test checks one rule of seed 002 (or a recorded assumption where the seed is silent).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from workerless_devkit.emulators import nodeflow
from workerless_devkit.emulators.nodeflow import NodeFlowEmulator, lease_scope_covers
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.waits import EVENT_SECONDS, eventually, record_waits

NS = "/v1/ns/default"


class Env:
    def __init__(self, emulator: NodeFlowEmulator, url: str) -> None:
        self.emulator = emulator
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10)
        assert emulator.api_key is not None
        self.key = emulator.api_key

    def h(self, key: str | None = None) -> dict[str, str]:
        return {"X-API-Key": key or self.key}

    def lease(self, queue: str, *, key: str | None = None, **body: Any) -> httpx.Response:
        payload = {"workerId": "w1", "count": 1, "waitSeconds": 0, "leaseSeconds": 60, **body}
        return self.http.post(f"{NS}/queues/{queue}/lease", json=payload, headers=self.h(key))

    def lease_one(self, queue: str, **body: Any) -> dict[str, Any]:
        response = self.lease(queue, **body)
        assert response.status_code == 200, response.text
        tasks = response.json()["tasks"]
        assert len(tasks) == 1
        task: dict[str, Any] = tasks[0]
        return task

    def heartbeat(self, task: dict[str, Any], token: str | None = None, **body: Any) -> httpx.Response:
        payload = {"queueName": task["queueName"], "leaseToken": token or task["leaseToken"], **body}
        return self.http.post(f"{NS}/tasks/{task['taskId']}/heartbeat", json=payload, headers=self.h())

    def report(self, task: dict[str, Any], status: str, token: str | None = None, **body: Any) -> httpx.Response:
        payload = {
            "queueName": task["queueName"],
            "workflowId": task["workflowId"],
            "leaseToken": token or task["leaseToken"],
            "status": status,
            **body,
        }
        return self.http.post(f"{NS}/tasks/{task['taskId']}/report", json=payload, headers=self.h())

    def logs(self, task: dict[str, Any], lines: list[dict[str, Any]], token: str | None = None) -> httpx.Response:
        payload = {"workflowId": task["workflowId"], "leaseToken": token or task["leaseToken"], "logs": lines}
        return self.http.post(f"{NS}/tasks/{task['taskId']}/logs", json=payload, headers=self.h())


@pytest.fixture
def env(workerless_emulator: EmulatorFactory) -> Iterator[Env]:
    running = workerless_emulator("nodeflow")
    e = Env(running.emulator, running.url)
    try:
        yield e
    finally:
        e.http.close()


def expires_in(task_or_body: dict[str, Any], emulator: NodeFlowEmulator) -> float:
    expires = datetime.fromisoformat(task_or_body["leaseExpiresAt"].replace("Z", "+00:00")).timestamp()
    return expires - emulator.now()


# ---------------------------------------------------------------- common emulator shape


def test_common_shape_and_engine_values() -> None:
    emulator = nodeflow.create()
    assert emulator.name == "nodeflow"
    values = emulator.engine_values("http://127.0.0.1:9/")
    assert values["NF_URL"] == "http://127.0.0.1:9"
    assert values["NF_NAMESPACE"] == "default"
    assert values["NF_API_KEY"].startswith("nf_")
    sa = nodeflow.create(auth="service_account", namespace="prod")
    values = sa.engine_values("http://127.0.0.1:9")
    assert set(values) == {"NF_URL", "NF_NAMESPACE", "NF_KEY_ID", "NF_KEY_SECRET"}
    assert values["NF_NAMESPACE"] == "prod"


def test_create_job_state_and_jobs() -> None:
    emulator = nodeflow.create()
    task_id = emulator.create_job("charge", {"amount": 5}, retries=2, domain="eu-west", ref_name="charge_ref")
    state = emulator.job_state(task_id)
    assert state["id"] == task_id
    assert state["type"] == "charge"
    assert state["queue"] == "charge:eu-west"
    assert state["state"] == "ready"
    assert state["retries"] == 2
    assert state["attempts"] == 0
    assert state["output"] is None
    assert state["error_message"] is None
    assert state["logs"] == []
    assert state["history"][0]["event"] == "scheduled"
    assert [j["id"] for j in emulator.jobs()] == [task_id]


def test_load_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(
        json.dumps(
            [
                {"type": "charge", "variables": {"a": 1}},
                {"taskDefName": "ship", "input": {"b": 2}, "domain": "eu", "workflowId": "wf-9", "retries": 1},
            ]
        )
    )
    emulator = nodeflow.create()
    ids = emulator.load_jobs(path)
    assert [emulator.job_state(i)["queue"] for i in ids] == ["charge", "ship:eu"]
    assert emulator.job_state(ids[1])["workflow_id"] == "wf-9"
    path.write_text(json.dumps([{"variables": {}}]))
    with pytest.raises(ValueError, match="job 0"):
        emulator.load_jobs(path)


# ---------------------------------------------------------------- auth and scopes


def test_lease_returns_documented_fields(env: Env) -> None:
    task_id = env.emulator.create_job(
        "charge",
        {"amount": 100},
        workflow_id="wf-1",
        ref_name="charge_card",
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )
    task = env.lease_one("charge")
    assert task["taskId"] == task_id
    assert task["workflowId"] == "wf-1"
    assert task["taskDefName"] == "charge"
    assert task["refName"] == "charge_card"
    assert task["queueName"] == "charge"
    assert task["input"] == {"amount": 100}
    assert task["traceparent"].startswith("00-aaaa")
    assert task["leaseToken"]
    assert 59 <= expires_in(task, env.emulator) <= 60
    assert env.emulator.job_state(task_id)["state"] == "leased"
    assert env.emulator.job_state(task_id)["attempts"] == 1


def test_missing_or_unknown_credentials_are_401(env: Env) -> None:
    no_auth = env.http.post(f"{NS}/queues/charge/lease", json={"workerId": "w"})
    assert no_auth.status_code == 401
    assert no_auth.headers["content-type"] == "application/problem+json"
    assert no_auth.json()["code"] == "UNAUTHENTICATED"
    bad = env.lease("charge", key="nf_not-a-key")
    assert bad.status_code == 401
    assert bad.json()["code"] == "INVALID_API_KEY"


def test_api_key_expiry_uses_the_clock(env: Env) -> None:
    key = env.emulator.create_api_key(expires_in=30)
    assert env.lease("charge", key=key).status_code == 200
    env.emulator.advance(31)
    refused = env.lease("charge", key=key)
    assert refused.status_code == 401
    assert refused.json()["code"] == "API_KEY_EXPIRED"


@pytest.mark.parametrize(
    ("scope", "queue", "allowed"),
    [
        ("queues:lease:charge", "charge", True),
        ("queues:lease:charge", "charge:eu-west", False),  # a domain is an access boundary
        ("queues:lease:charge:eu-west", "charge:eu-west", True),
        ("queues:lease:charge:eu-west", "charge:us-east", False),
        ("queues:lease:charge:*", "charge:eu-west", True),
        ("queues:lease:charge:*", "charge", False),
        ("queues:lease:charge:*", "send_email:eu-west", False),
        ("queues:lease:*", "send_email:eu-west", True),
        ("queues:lease:charge", "send_email", False),
    ],
)
def test_lease_scopes(env: Env, scope: str, queue: str, allowed: bool) -> None:
    key = env.emulator.create_api_key([scope, "tasks:report"])
    response = env.lease(queue, key=key)
    if allowed:
        assert response.status_code == 200, response.text
    else:
        assert response.status_code == 403
        problem = response.json()
        assert problem["requiredScope"] == f"queues:lease:{queue}"
        assert f"queues:lease:{queue}" in problem["detail"]
    assert lease_scope_covers([scope], queue) is allowed


def test_report_calls_need_tasks_report_scope(env: Env) -> None:
    env.emulator.create_job("charge", {})
    task = env.lease_one("charge")
    lease_only = env.emulator.create_api_key(["queues:lease:charge"])
    for action, body in (
        ("heartbeat", {"queueName": "charge", "leaseToken": task["leaseToken"]}),
        ("logs", {"workflowId": task["workflowId"], "leaseToken": task["leaseToken"], "logs": []}),
        (
            "report",
            {
                "queueName": "charge",
                "workflowId": task["workflowId"],
                "leaseToken": task["leaseToken"],
                "status": "COMPLETED",
            },
        ),
    ):
        response = env.http.post(f"{NS}/tasks/{task['taskId']}/{action}", json=body, headers=env.h(lease_only))
        assert response.status_code == 403, action
        assert response.json()["requiredScope"] == "tasks:report"
    assert env.emulator.job_state(task["taskId"])["state"] == "leased"


def test_service_account_token_exchange_and_expiry(env: Env) -> None:
    key_id, secret = env.emulator.create_service_account(["queues:lease:charge", "tasks:report"], name="charge-fleet")
    minted = env.http.post("/v1/auth/token", json={"keyId": key_id, "secret": secret})
    assert minted.status_code == 200
    body = minted.json()
    assert body["tokenType"] == "Bearer"
    assert body["expiresIn"] == 3600
    assert body["scopes"] == ["queues:lease:charge", "tasks:report"]
    bearer = {"Authorization": f"Bearer {body['accessToken']}"}
    whoami = env.http.get("/v1/auth/whoami", headers=bearer).json()
    assert whoami["name"] == "charge-fleet"
    assert whoami["kind"] == "serviceAccount"
    assert whoami["scopes"] == ["queues:lease:charge", "tasks:report"]
    lease = env.http.post(f"{NS}/queues/charge/lease", json={"workerId": "w"}, headers=bearer)
    assert lease.status_code == 200
    env.emulator.advance(3600)
    expired = env.http.get("/v1/auth/whoami", headers=bearer)
    assert expired.status_code == 401
    assert expired.json()["code"] == "TOKEN_EXPIRED"
    wrong = env.http.post("/v1/auth/token", json={"keyId": key_id, "secret": "nope"})
    assert wrong.status_code == 401
    assert wrong.json()["code"] == "INVALID_CREDENTIALS"
    assert env.http.post("/v1/auth/token", json={"keyId": key_id}).status_code == 400


def test_unknown_namespace_is_404(env: Env) -> None:
    response = env.http.post("/v1/ns/other/queues/charge/lease", json={"workerId": "w"}, headers=env.h())
    assert response.status_code == 404
    assert response.json()["code"] == "NAMESPACE_NOT_FOUND"


# ---------------------------------------------------------------- leases


@pytest.mark.parametrize(("asked", "granted"), [(100_000, 600), (1, 5), (None, 60), (90, 90)])
def test_lease_seconds_are_clamped(env: Env, asked: float | None, granted: float) -> None:
    env.emulator.create_job("charge", {})
    body: dict[str, Any] = {"leaseSeconds": asked}
    task = env.lease_one("charge", **body)
    assert task["leaseSeconds"] == granted
    assert granted - 1 <= expires_in(task, env.emulator) <= granted
    beat = env.heartbeat(task, leaseSeconds=100_000)
    assert beat.status_code == 200
    assert beat.json()["leaseSeconds"] == 600
    assert 599 <= expires_in(beat.json(), env.emulator) <= 600


def test_count_is_bounded_and_validated(workerless_emulator: EmulatorFactory) -> None:
    running = workerless_emulator("nodeflow", max_count=2)
    emulator, server = running.emulator, running.server
    for _ in range(3):
        emulator.create_job("charge", {})
    key = emulator.api_key
    assert key is not None
    with httpx.Client(base_url=server.url, timeout=5) as http:
        response = http.post(
            f"{NS}/queues/charge/lease", json={"workerId": "w", "count": 10}, headers={"X-API-Key": key}
        )
        assert len(response.json()["tasks"]) == 2
        zero = http.post(f"{NS}/queues/charge/lease", json={"workerId": "w", "count": 0}, headers={"X-API-Key": key})
        assert zero.status_code == 400
        no_worker = http.post(f"{NS}/queues/charge/lease", json={"count": 1}, headers={"X-API-Key": key})
        assert no_worker.status_code == 400
        assert no_worker.json()["field"] == "workerId"


def test_lease_expiry_requeues_the_same_task_with_a_new_token(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    first = env.lease_one("charge", leaseSeconds=30)
    assert env.lease("charge").json()["tasks"] == []
    env.emulator.advance(30)
    assert env.emulator.job_state(task_id)["state"] == "ready"
    second = env.lease_one("charge", workerId="w2")
    assert second["taskId"] == task_id
    assert second["leaseToken"] != first["leaseToken"]
    state = env.emulator.job_state(task_id)
    assert state["attempts"] == 2
    assert [e["event"] for e in state["history"]] == ["scheduled", "leased", "lease_expired", "leased"]


def test_heartbeat_extends_and_keeps_the_task(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    task = env.lease_one("charge", leaseSeconds=30)
    env.emulator.advance(20)
    assert env.heartbeat(task, leaseSeconds=30).status_code == 200
    env.emulator.advance(20)  # 40 s after the lease: alive only thanks to the heartbeat
    assert env.emulator.job_state(task_id)["state"] == "leased"
    assert env.report(task, "COMPLETED", output={"ok": True}).status_code == 200


def test_stale_token_is_fenced_with_409_lease_expired(env: Env) -> None:
    env.emulator.create_job("charge", {})
    stale = env.lease_one("charge", leaseSeconds=10)
    env.emulator.advance(10)
    fresh = env.lease_one("charge", workerId="w2")
    for response in (
        env.heartbeat(stale),
        env.logs(stale, [{"message": "late", "level": "info"}]),
        env.report(stale, "COMPLETED", output={"from": "A"}),
    ):
        assert response.status_code == 409
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "LEASE_EXPIRED"
        assert stale["leaseToken"] not in response.text
    # The holder of the current token is not disturbed by the stale writes.
    assert env.report(fresh, "COMPLETED", output={"from": "B"}).status_code == 200
    state = env.emulator.job_state(fresh["taskId"])
    assert state["output"] == {"from": "B"}
    assert state["logs"] == []
    assert env.heartbeat(fresh, token="jeton-é").json()["code"] == "LEASE_EXPIRED"  # any string, never a 500
    # And once reported, even the right token is refused: the lease is gone.
    assert env.report(fresh, "COMPLETED").json()["code"] == "LEASE_EXPIRED"


def test_wrong_queue_name_is_404(env: Env) -> None:
    env.emulator.create_job("charge", {}, domain="eu-west")
    task = env.lease_one("charge:eu-west")
    response = env.heartbeat({**task, "queueName": "charge"})
    assert response.status_code == 404
    assert response.json()["code"] == "TASK_NOT_FOUND"


def test_long_poll_parks_and_wakes_on_a_new_task(env: Env) -> None:
    result: dict[str, Any] = {}

    # The poll's window is the emulator's longest: the task, created once the worker is parked,
    # comes long before the window ends, so a poll answering with it was woken by it.
    parked = record_waits(env.emulator, "_cond")

    def poll() -> None:
        result["response"] = env.lease("charge", waitSeconds=env.emulator.max_wait_seconds, workerId="parked")

    thread = threading.Thread(target=poll)
    thread.start()
    # The parked worker is recorded before it waits: it already counts as listening.
    workers: list[dict[str, Any]] = []

    def listening() -> bool:
        nonlocal workers
        workers = env.http.get(f"{NS}/queues/workers", headers=env.h()).json()["workers"]
        return bool(workers) and bool(parked.waits)

    eventually("the worker parked", listening)
    assert [(w["workerId"], w["queue"]) for w in workers] == [("parked", "charge")]
    task_id = env.emulator.create_job("charge", {})
    thread.join(timeout=EVENT_SECONDS)
    assert not thread.is_alive()
    assert result["response"].json()["tasks"][0]["taskId"] == task_id


def test_wait_is_bounded(workerless_emulator: EmulatorFactory) -> None:
    running = workerless_emulator("nodeflow", max_wait_seconds=0.2)
    emulator, server = running.emulator, running.server
    parked = record_waits(emulator, "_cond")
    key = emulator.api_key
    assert key is not None
    started = time.monotonic()
    response = httpx.post(
        f"{server.url}{NS}/queues/charge/lease",
        json={"workerId": "w", "waitSeconds": 60},
        headers={"X-API-Key": key},
    )
    assert response.json() == {"tasks": []}
    assert time.monotonic() - started >= 0.2
    # What the server waited for, not how long a busy machine took: 0.2 s in all, not 60.
    assert parked.waits
    assert all(timeout is not None and timeout <= 0.2 for timeout in parked.waits)


# ---------------------------------------------------------------- reports and retries


def test_completed_without_output_stores_empty_object(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    task = env.lease_one("charge")
    assert env.report(task, "COMPLETED").json() == {"taskId": task_id, "status": "COMPLETED"}
    assert env.emulator.job_state(task_id)["state"] == "completed"
    assert env.emulator.job_state(task_id)["output"] == {}


def test_failed_with_attempts_left_is_a_new_task_id(env: Env) -> None:
    first_id = env.emulator.create_job("charge", {"amount": 1}, retries=2, workflow_id="wf-r", ref_name="charge")
    first = env.lease_one("charge")
    assert env.report(first, "FAILED", reason="gateway timeout").status_code == 200
    own = env.emulator.task_state(first_id)
    assert (own["state"], own["error_message"]) == ("retried", "gateway timeout")
    retry_id = own["next_task_id"]
    assert retry_id != first_id
    retry = env.emulator.task_state(retry_id)
    assert (retry["state"], retry["retries"], retry["workflow_id"]) == ("ready", 1, "wf-r")
    assert retry["previous_task_id"] == first_id
    # The job (what create_job returned) follows the chain: ready again, one attempt so far.
    job = env.emulator.job_state(first_id)
    assert (job["state"], job["task_state"], job["attempts"]) == ("ready", "retried", 1)
    assert (job["next_task_id"], job["current_task_id"]) == (retry_id, retry_id)
    assert job["error_message"] == "gateway timeout"
    second = env.lease_one("charge")
    assert second["taskId"] == retry_id
    assert second["workflowId"] == "wf-r"
    assert second["input"] == {"amount": 1}
    # The last attempt's failure is final: no new task.
    assert env.report(second, "FAILED", reason="still down").status_code == 200
    final = env.emulator.task_state(retry_id)
    assert final["state"] == "failed"
    assert "next_task_id" not in final
    job = env.emulator.job_state(first_id)
    assert (job["state"], job["attempts"], job["error_message"]) == ("failed", 2, "still down")
    assert job["task_ids"] == [first_id, retry_id]
    assert env.emulator.job_state(retry_id)["task_ids"] == [first_id, retry_id]
    assert [j["id"] for j in env.emulator.jobs()] == [first_id]
    tasks = env.http.get("/_admin/tasks").json()["tasks"]
    assert [(t["id"], t["state"]) for t in tasks] == [(first_id, "retried"), (retry_id, "failed")]


def test_logs_of_every_attempt_belong_to_the_job(env: Env) -> None:
    first_id = env.emulator.create_job("charge", {}, retries=2)
    first = env.lease_one("charge")
    env.logs(first, [{"message": "attempt 1"}])
    env.report(first, "FAILED", reason="x")
    second = env.lease_one("charge")
    env.logs(second, [{"message": "attempt 2"}])
    env.report(second, "COMPLETED", output={"ok": True})
    job = env.emulator.job_state(first_id)
    assert job["logs"] == ["attempt 1", "attempt 2"]
    assert (job["state"], job["output"], job["error_message"]) == ("completed", {"ok": True}, None)
    assert env.emulator.task_state(second["taskId"])["logs"] == ["attempt 2"]


def test_terminal_error_skips_the_retries(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {}, retries=5)
    task = env.lease_one("charge")
    response = env.report(task, "FAILED_WITH_TERMINAL_ERROR", reason="card declined: 05")
    assert response.status_code == 200
    state = env.emulator.job_state(task_id)
    assert state["state"] == "failed"
    assert state["error_message"] == "card declined: 05"
    assert "next_task_id" not in state
    assert len(env.emulator.jobs()) == 1
    assert env.http.get(f"{NS}/queues/charge/depth", headers=env.h()).json()["depth"] == 0


def test_report_validation_and_caps(workerless_emulator: EmulatorFactory) -> None:
    running = workerless_emulator("nodeflow", output_cap_bytes=100, reason_cap_chars=10)
    emulator, server = running.emulator, running.server
    e = Env(emulator, server.url)
    emulator.create_job("charge", {})
    task = e.lease_one("charge")
    assert e.report(task, "DONE").status_code == 400
    assert e.report(task, "COMPLETED", output=[1]).status_code == 400
    too_big = e.report(task, "COMPLETED", output={"x": "y" * 200})
    assert too_big.status_code == 413
    assert too_big.json()["maxBytes"] == 100
    assert e.report(task, "FAILED_WITH_TERMINAL_ERROR", reason="r" * 50).status_code == 200
    assert emulator.job_state(task["taskId"])["error_message"] == "r" * 10
    e.http.close()


# ---------------------------------------------------------------- logs and operations


def test_logs_keep_arrival_order_and_levels(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    task = env.lease_one("charge")
    assert env.logs(task, [{"message": "one", "level": "info"}, {"message": "two"}]).status_code == 204
    assert env.logs(task, [{"message": "three", "level": "error"}]).status_code == 204
    assert env.logs(task, [{"message": "x", "level": "loud"}]).status_code == 400
    assert env.logs({**task, "workflowId": "other"}, [{"message": "x"}]).status_code == 404
    state = env.emulator.job_state(task_id)
    assert state["logs"] == ["one", "two", "three"]
    assert [e["level"] for e in state["log_entries"]] == ["info", "info", "error"]


def test_log_caps(workerless_emulator: EmulatorFactory) -> None:
    running = workerless_emulator("nodeflow", log_batch_cap=2, log_message_cap_chars=5)
    emulator, server = running.emulator, running.server
    e = Env(emulator, server.url)
    emulator.create_job("charge", {})
    task = e.lease_one("charge")
    assert e.logs(task, [{"message": "a"}] * 3).status_code == 413
    assert e.logs(task, [{"message": "abcdef"}]).status_code == 413
    e.http.close()


def test_depth_queues_workers_and_whoami(env: Env) -> None:
    for _ in range(3):
        env.emulator.create_job("charge", {})
    env.emulator.create_job("charge", {}, domain="eu-west")
    assert env.http.get(f"{NS}/queues/charge/depth", headers=env.h()).json() == {
        "queue": "charge",
        "depth": 3,
        "ready": 3,
        "leased": 0,
    }
    assert len(env.lease("charge", count=2, workerId="fleet-a").json()["tasks"]) == 2
    depth = env.http.get(f"{NS}/queues/charge/depth", headers=env.h()).json()
    assert (depth["ready"], depth["leased"]) == (1, 2)
    eu = env.http.get(f"{NS}/queues/charge:eu-west/depth", headers=env.h()).json()
    assert eu["depth"] == 1
    queues = env.http.get(f"{NS}/queues", headers=env.h()).json()["queues"]
    assert {q["queue"]: (q["ready"], q["leased"]) for q in queues} == {"charge": (1, 2), "charge:eu-west": (1, 0)}
    workers = env.http.get(f"{NS}/queues/workers", headers=env.h()).json()["workers"]
    assert [(w["workerId"], w["queue"]) for w in workers] == [("fleet-a", "charge")]
    env.emulator.advance(61)  # a worker that stopped polling stops counting as listening
    assert env.http.get(f"{NS}/queues/workers", headers=env.h()).json()["workers"] == []
    whoami = env.http.get("/v1/auth/whoami", headers=env.h()).json()
    assert whoami["kind"] == "apiKey"
    assert whoami["scopes"] == ["queues:lease:*", "tasks:report"]
    assert env.http.get(f"{NS}/queues", headers={}).status_code == 401


def test_admin_api(env: Env) -> None:
    created = env.http.post(
        "/_admin/tasks", json={"taskDefName": "charge", "input": {"a": 1}, "domain": "eu-west", "retries": 1}
    )
    assert created.status_code == 201
    task_id = created.json()["taskId"]
    state = env.http.get(f"/_admin/tasks/{task_id}").json()
    assert (state["queue"], state["state"], state["input"]) == ("charge:eu-west", "ready", {"a": 1})
    assert [t["id"] for t in env.http.get("/_admin/tasks").json()["tasks"]] == [task_id]
    assert env.http.get("/_admin/tasks/nope").status_code == 404
    cred = env.http.post(
        "/_admin/credentials", json={"kind": "apiKey", "scopes": ["queues:lease:charge:eu-west"]}
    ).json()
    leased = env.lease("charge:eu-west", key=cred["apiKey"]).json()["tasks"]
    assert [t["taskId"] for t in leased] == [task_id]
    sa = env.http.post("/_admin/credentials", json={"kind": "serviceAccount", "scopes": ["tasks:report"]}).json()
    assert env.http.post("/v1/auth/token", json={"keyId": sa["keyId"], "secret": sa["secret"]}).status_code == 200
    before = env.emulator.now()
    clock = env.http.post("/_admin/clock", json={"advance": 120}).json()
    assert clock["epoch"] >= before + 120
    assert env.http.get(f"/_admin/tasks/{task_id}").json()["state"] == "ready"  # the 60 s lease lapsed
    stats = env.http.get("/_admin/stats").json()["requests"]
    assert stats["POST /v1/ns/{ns}/queues/{queue}/lease"] == 1
