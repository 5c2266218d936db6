"""The node-flow adapter against the node-flow emulator over real HTTP on 127.0.0.1.

Requests the adapter sends are captured with an httpx request hook (the real bytes that went to
the emulator), so each rule is checked both by what was sent and by what the engine now holds.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
from workerless.engines import build_engine
from workerless.engines.nodeflow import NodeFlowEngine, workflow_key
from workerless.errors import (
    ConfigurationError,
    EngineUnavailableError,
    LeaseLostError,
    PayloadTooLargeError,
    RateLimitedError,
    RejectedError,
    ResponseShapeError,
)
from workerless_devkit.emulators import RunningEmulator
from workerless_devkit.emulators.http import EmulatorServer
from workerless_devkit.emulators.nodeflow import NodeFlowEmulator
from workerless_devkit.pytest_plugin import EmulatorFactory

LEASE_ROUTE = "/v1/ns/{ns}/queues/{queue}/lease"
TOKEN_ROUTE = "POST /v1/auth/token"


@dataclass
class Sent:
    method: str
    path: str
    body: Any
    headers: dict[str, str]


@dataclass
class Env:
    emulator: NodeFlowEmulator
    server: EmulatorServer
    client: httpx.Client
    sent: list[Sent] = field(default_factory=list)
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def engine(self, **overrides: str | None) -> NodeFlowEngine:
        values = self.emulator.engine_values(self.url)
        for key, value in overrides.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
        engine = build_engine("nodeflow", values, self.client, worker_id="test-worker")
        assert isinstance(engine, NodeFlowEngine)
        return engine

    def paths(self, action: str) -> list[Sent]:
        return [s for s in self.sent if s.path.endswith(action)]

    def stats(self) -> dict[str, int]:
        return dict(self.emulator.router.stats)

    def fault(self, **fault: Any) -> None:
        assert httpx.post(f"{self.url}/_admin/faults", json=fault).status_code == 201

    def raw_lease(self, queue: str, count: int = 1) -> list[dict[str, Any]]:
        key = self.emulator.create_api_key()
        response = httpx.post(
            f"{self.url}/v1/ns/default/queues/{queue}/lease",
            json={"workerId": "raw", "count": count, "leaseSeconds": 60},
            headers={"X-API-Key": key},
        )
        tasks: list[dict[str, Any]] = response.json()["tasks"]
        return tasks


def make_env(running: RunningEmulator) -> Env:
    env = Env(emulator=running.emulator, server=running.server, client=httpx.Client(timeout=5))

    def record(request: httpx.Request) -> None:
        body = json.loads(request.content) if request.content else None
        env.sent.append(Sent(request.method, request.url.path, body, dict(request.headers)))

    env.client.event_hooks["request"] = [record]
    return env


def close_env(env: Env) -> None:
    env.client.close()  # the fixture that started the emulator stops it


@pytest.fixture
def env(workerless_emulator: EmulatorFactory) -> Iterator[Env]:
    e = make_env(workerless_emulator("nodeflow"))
    yield e
    close_env(e)


@pytest.fixture
def sa_env(workerless_emulator: EmulatorFactory) -> Iterator[Env]:
    e = make_env(workerless_emulator("nodeflow", auth="service_account"))
    yield e
    close_env(e)


def one(env: Env, engine: NodeFlowEngine, demand: Demand, lease_seconds: int = 60) -> ActivatedJob:
    jobs = engine.activate([demand], lease_seconds)
    assert len(jobs) == 1
    return jobs[0]


# ---------------------------------------------------------------- activate


def test_activate_maps_a_task_to_a_job(env: Env) -> None:
    traceparent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    task_id = env.emulator.create_job(
        "charge", {"amount": 100}, workflow_id="wf-1", ref_name="charge_card", traceparent=traceparent
    )
    engine = env.engine()
    job = one(env, engine, Demand("charge", 5), lease_seconds=90)
    assert job.ref == JobRef(
        "nodeflow",
        task_id,
        "charge",
        attempt="",
        handle={"queueName": "charge", "leaseToken": job.ref.handle["leaseToken"], "workflowId": "wf-1"},
    )
    assert job.key == f"nodeflow#{task_id}"
    assert job.variables == {"amount": 100}
    assert job.instance_id == "wf-1"
    assert job.element_id == "charge_card"
    assert job.traceparent == traceparent
    assert job.retries is None
    assert 89 <= job.lease_expires_at - env.emulator.now() <= 90
    # What went over the wire: a short poll asking for exactly the capacity.
    (lease,) = env.paths("/lease")
    assert lease.path == "/v1/ns/default/queues/charge/lease"
    assert lease.body == {"workerId": "test-worker", "count": 5, "waitSeconds": 0, "leaseSeconds": 90}
    assert lease.headers["x-api-key"] == env.emulator.api_key
    # The job survives the trip through SQS with its handle.
    assert ActivatedJob.from_message(job.to_message()) == job
    assert workflow_key(job) == "wf-1:charge_card"


def test_activate_never_asks_for_more_than_capacity(env: Env) -> None:
    for _ in range(5):
        env.emulator.create_job("charge", {})
    env.emulator.create_job("ship", {})
    engine = env.engine()
    jobs = engine.activate([Demand("charge", 2), Demand("ship", 0), Demand("refund", 3)], 60)
    assert len(jobs) == 2
    assert [s.path.split("/")[-2] for s in env.paths("/lease")] == ["charge", "refund"]  # none for capacity 0
    assert [s.body["count"] for s in env.paths("/lease")] == [2, 3]
    assert [j["state"] for j in env.emulator.jobs()].count("ready") == 4


def test_element_id_falls_back_to_the_emulator_ref_name(env: Env) -> None:
    env.emulator.create_job("charge", {})
    job = one(env, env.engine(), Demand("charge", 1))
    assert job.element_id == "charge"  # the emulator answers refName = taskDefName when none was set
    assert job.traceparent is None


def test_domain_route_leases_only_its_domain(env: Env) -> None:
    plain = env.emulator.create_job("charge", {})
    eu = env.emulator.create_job("charge", {}, domain="eu-west")
    engine = env.engine()
    jobs = engine.activate([Demand("charge", 5, queue="charge:eu-west")], 60)
    assert [j.ref.job_id for j in jobs] == [eu]
    assert jobs[0].ref.job_type == "charge"
    assert jobs[0].ref.handle["queueName"] == "charge:eu-west"
    assert env.paths("/lease")[0].path == "/v1/ns/default/queues/charge:eu-west/lease"
    assert env.emulator.job_state(plain)["state"] == "ready"
    engine.report(jobs[0].ref, Outcome.complete({"ok": 1}))
    assert env.emulator.job_state(eu)["state"] == "completed"


def test_nf_domain_is_the_default_domain(env: Env) -> None:
    env.emulator.create_job("charge", {})
    canary = env.emulator.create_job("charge", {}, domain="canary")
    engine = env.engine(NF_DOMAIN="canary")
    assert [j.ref.job_id for j in engine.activate([Demand("charge", 5)], 60)] == [canary]


def test_namespace_is_in_every_path(workerless_emulator: EmulatorFactory) -> None:
    e = make_env(workerless_emulator("nodeflow", namespace="prod"))
    try:
        task_id = e.emulator.create_job("charge", {})
        engine = e.engine()
        job = one(e, engine, Demand("charge", 1))
        engine.extend(job.ref, 60)
        engine.report(job.ref, Outcome.complete({}))
        assert all(s.path.startswith("/v1/ns/prod/") for s in e.sent)
        assert e.emulator.job_state(task_id)["state"] == "completed"
    finally:
        close_env(e)


# ---------------------------------------------------------------- malformed tasks


def test_malformed_task_with_usable_token_is_reported_failed(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    good_id = env.emulator.create_job("charge", {"ok": True})
    bad_id = env.emulator.create_job("charge", {"ok": False})
    good, bad = env.raw_lease("charge", count=2)
    env.fault(
        method="POST",
        path=LEASE_ROUTE,
        status=200,
        body={"tasks": [good, {**bad, "input": "not an object"}]},
    )
    with caplog.at_level(logging.ERROR, logger="workerless.engines.nodeflow"):
        jobs = env.engine().activate([Demand("charge", 2)], 60)
    assert [j.ref.job_id for j in jobs] == [good_id]
    state = env.emulator.task_state(bad_id)
    assert state["state"] == "retried"  # FAILED with attempts left: a fresh attempt, at once
    assert "'input'" in state["error_message"]
    assert bad_id in caplog.text
    assert bad["leaseToken"] not in caplog.text


def test_malformed_task_without_token_is_left_to_expiry_and_logged(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    task_id = env.emulator.create_job("charge", {})
    (task,) = env.raw_lease("charge")
    broken = {k: v for k, v in task.items() if k != "leaseToken"}
    env.fault(method="POST", path=LEASE_ROUTE, status=200, body={"tasks": [broken, "junk"]})
    with caplog.at_level(logging.ERROR, logger="workerless.engines.nodeflow"):
        assert env.engine().activate([Demand("charge", 2)], 60) == []
    assert caplog.text.count("cannot read") == 2
    assert "'leaseToken'" in caplog.text
    assert env.paths("/report") == []
    assert env.emulator.job_state(task_id)["state"] == "leased"  # until the lease lapses
    env.emulator.advance(60)
    assert env.emulator.job_state(task_id)["state"] == "ready"


def test_task_of_another_type_and_surplus_tasks_are_handed_back(env: Env) -> None:
    ids = [env.emulator.create_job("charge", {}) for _ in range(4)]
    tasks = env.raw_lease("charge", count=4)
    tasks[1] = {**tasks[1], "taskDefName": "refund"}
    env.fault(method="POST", path=LEASE_ROUTE, status=200, body={"tasks": tasks})
    jobs = env.engine().activate([Demand("charge", 2)], 60)
    assert [j.ref.job_id for j in jobs] == [ids[0], ids[2]]
    assert "taskDefName" in env.emulator.job_state(ids[1])["error_message"]
    assert "beyond the requested count" in env.emulator.job_state(ids[3])["error_message"]


def test_lease_answer_without_tasks_list_is_a_shape_error(env: Env) -> None:
    env.fault(method="POST", path=LEASE_ROUTE, status=200, body={"items": []})
    with pytest.raises(ResponseShapeError) as caught:
        env.engine().activate([Demand("charge", 1)], 60)
    assert caught.value.field == "tasks"


# ---------------------------------------------------------------- errors


def test_403_names_the_lease_scope(env: Env) -> None:
    key = env.emulator.create_api_key(["queues:lease:charge", "tasks:report"])
    engine = env.engine(NF_API_KEY=key)
    assert engine.activate([Demand("charge", 1)], 60) == []
    with pytest.raises(ConfigurationError) as caught:
        engine.activate([Demand("charge", 1, queue="charge:eu-west")], 60)
    assert "queues:lease:charge:eu-west" in str(caught.value)
    assert caught.value.key == "NF_API_KEY"


def test_403_names_the_report_scope(env: Env) -> None:
    env.emulator.create_job("charge", {})
    key = env.emulator.create_api_key(["queues:lease:charge"])
    engine = env.engine(NF_API_KEY=key)
    job = one(env, engine, Demand("charge", 1))
    for call in (lambda: engine.extend(job.ref, 60), lambda: engine.report(job.ref, Outcome.complete({}))):
        with pytest.raises(ConfigurationError, match="tasks:report"):
            call()


def test_one_failing_queue_does_not_strand_leased_tasks(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    task_id = env.emulator.create_job("charge", {})
    key = env.emulator.create_api_key(["queues:lease:charge", "tasks:report"])
    with caplog.at_level(logging.ERROR, logger="workerless.engines.nodeflow"):
        jobs = env.engine(NF_API_KEY=key).activate([Demand("charge", 1), Demand("refund", 1)], 60)
    assert [j.ref.job_id for j in jobs] == [task_id]
    assert "queues:lease:refund" in caplog.text


def test_refused_api_key_is_a_configuration_error(env: Env) -> None:
    with pytest.raises(ConfigurationError) as caught:
        env.engine(NF_API_KEY="nf_unknown").activate([Demand("charge", 1)], 60)
    assert caught.value.key == "NF_API_KEY"
    assert "nf_unknown" not in str(caught.value)


@pytest.mark.parametrize(
    ("status", "headers", "kind", "retry_after"),
    [
        (429, {"Retry-After": "3"}, RateLimitedError, 3.0),
        (503, {"Retry-After": "2"}, RateLimitedError, 2.0),
        (502, {}, EngineUnavailableError, None),
        (400, {}, RejectedError, None),
    ],
)
def test_http_errors_are_translated(
    env: Env, status: int, headers: dict[str, str], kind: type[Exception], retry_after: float | None
) -> None:
    env.fault(method="POST", path=LEASE_ROUTE, status=status, headers=headers)
    with pytest.raises(kind) as caught:
        env.engine().activate([Demand("charge", 1)], 60)
    error = caught.value
    assert getattr(error, "status", None) == status
    assert getattr(error, "retryable", None) is (status >= 429 and status != 400)
    if retry_after is not None:
        assert getattr(error, "retry_after", None) == retry_after


def test_dropped_connection_is_retryable(env: Env) -> None:
    env.fault(method="POST", path=LEASE_ROUTE, drop=True)
    with pytest.raises(EngineUnavailableError) as caught:
        env.engine().activate([Demand("charge", 1)], 60)
    assert caught.value.retryable


# ---------------------------------------------------------------- extend


def test_extend_returns_the_granted_expiry(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1), lease_seconds=30)
    env.emulator.advance(20)
    expires = engine.extend(job.ref, 100_000)  # the engine clamps what we ask for
    assert 599 <= expires - env.emulator.now() <= 600
    (beat,) = env.paths("/heartbeat")
    assert beat.body == {"queueName": "charge", "leaseToken": job.ref.handle["leaseToken"], "leaseSeconds": 100_000}
    env.emulator.advance(60)  # past the first lease: still held thanks to the heartbeat
    assert env.emulator.job_state(task_id)["state"] == "leased"


def test_extend_after_lapse_is_lease_lost(env: Env) -> None:
    env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1), lease_seconds=30)
    env.emulator.advance(31)
    with pytest.raises(LeaseLostError) as caught:
        engine.extend(job.ref, 30)
    assert caught.value.status == 409
    assert caught.value.problem["code"] == "LEASE_EXPIRED"
    assert "LEASE_EXPIRED" in str(caught.value)
    assert job.ref.handle["leaseToken"] not in str(caught.value)


# ---------------------------------------------------------------- report


def test_complete_reports_output(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    engine.report(job.ref, Outcome.complete({"txnId": "t-1"}))
    state = env.emulator.job_state(task_id)
    assert (state["state"], state["output"]) == ("completed", {"txnId": "t-1"})
    (report,) = env.paths("/report")
    assert report.body == {
        "queueName": "charge",
        "workflowId": job.instance_id,
        "leaseToken": job.ref.handle["leaseToken"],
        "status": "COMPLETED",
        "output": {"txnId": "t-1"},
    }


def test_complete_without_output_sends_empty_object(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    engine.report(job.ref, Outcome(kind="complete", variables=None))
    assert env.paths("/report")[0].body["output"] == {}
    assert env.emulator.job_state(task_id)["output"] == {}


def test_fail_is_retried_as_a_new_task(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {}, retries=3)
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    engine.report(job.ref, Outcome.fail("gateway timeout", retries=None, backoff_seconds=30))
    state = env.emulator.task_state(task_id)
    assert (state["state"], state["error_message"]) == ("retried", "gateway timeout")
    assert env.paths("/report")[0].body["status"] == "FAILED"
    retry = one(env, engine, Demand("charge", 1))
    assert retry.ref.job_id == state["next_task_id"] != task_id
    assert retry.ref.key != job.ref.key  # a retry is a new job record
    assert retry.instance_id == job.instance_id


def test_terminal_fail_skips_retries(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {}, retries=3)
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    engine.report(job.ref, Outcome.fail("amount must be positive", retries=0, terminal=True))
    assert env.paths("/report")[0].body["status"] == "FAILED_WITH_TERMINAL_ERROR"
    state = env.emulator.job_state(task_id)
    assert (state["state"], state["error_message"]) == ("failed", "amount must be positive")
    assert "next_task_id" not in state


def test_throw_is_a_terminal_failure_with_the_code(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {}, retries=3)
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    engine.report(job.ref, Outcome.throw("CARD_DECLINED", "card declined", {"declineCode": "05"}))
    body = env.paths("/report")[0].body
    assert body["status"] == "FAILED_WITH_TERMINAL_ERROR"
    assert body["reason"] == "CARD_DECLINED: card declined"
    assert body["output"] == {"declineCode": "05"}
    state = env.emulator.job_state(task_id)
    assert (state["state"], state["error_message"]) == ("failed", "CARD_DECLINED: card declined")


def test_stack_goes_to_the_task_log_before_the_report(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    stack = "Traceback (most recent call last):\n  ...\nValueError: boom"
    engine.report(job.ref, Outcome.fail("boom", retries=None, stack=stack))
    actions = [s.path.rsplit("/", 1)[-1] for s in env.sent if "/tasks/" in s.path]
    assert actions == ["logs", "report"]
    logs = env.paths("/logs")[0].body
    assert logs["workflowId"] == job.instance_id
    assert logs["logs"] == [{"message": stack, "level": "error"}]
    assert env.emulator.job_state(task_id)["logs"] == [stack]


def test_long_reason_is_capped(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    engine.report(job.ref, Outcome.fail("x" * 10_000, retries=None, terminal=True))
    assert len(env.emulator.job_state(task_id)["error_message"]) == 4096


def test_report_after_lapse_is_lease_lost(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1), lease_seconds=30)
    env.emulator.advance(30)
    other = one(env, engine, Demand("charge", 1))
    with pytest.raises(LeaseLostError):
        engine.report(job.ref, Outcome.complete({"from": "late"}))
    engine.report(other.ref, Outcome.complete({"from": "holder"}))
    assert env.emulator.job_state(task_id)["output"] == {"from": "holder"}
    with pytest.raises(LeaseLostError):  # a second report of the same attempt: already done
        engine.report(other.ref, Outcome.complete({"from": "holder"}))


def test_output_over_the_cap_is_payload_too_large(workerless_emulator: EmulatorFactory) -> None:
    e = make_env(workerless_emulator("nodeflow", output_cap_bytes=64))
    try:
        e.emulator.create_job("charge", {})
        engine = e.engine()
        job = one(e, engine, Demand("charge", 1))
        with pytest.raises(PayloadTooLargeError) as caught:
            engine.report(job.ref, Outcome.complete({"blob": "x" * 100}))
        assert caught.value.cap == 64
        assert not caught.value.retryable
    finally:
        close_env(e)


def test_handle_without_lease_token_is_a_message_error(env: Env) -> None:
    from workerless.errors import MessageFormatError

    ref = JobRef("nodeflow", "t-1", "charge", handle={"queueName": "charge", "workflowId": "wf"})
    with pytest.raises(MessageFormatError) as caught:
        env.engine().extend(ref, 60)
    assert caught.value.field == "leaseToken"


# ---------------------------------------------------------------- release, logs, no-ops


def test_release_keeps_the_task_its_place_and_its_retries(env: Env) -> None:
    """GIVEN a leased task handed back (the poller could not queue it) and a task created after it
    THEN it is not failed (no attempt spent, no new task id at the back of the queue): its lease is
    shortened to node-flow's minimum, after which the same task is leased again, before the later
    one (issue 26, 2.12: a released task used to wait behind the whole backlog)."""
    task_id = env.emulator.create_job("charge", {}, retries=3)
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1), lease_seconds=60)
    later = env.emulator.create_job("charge", {})
    engine.release(job, "SQS SendMessageBatch failed")
    state = env.emulator.task_state(task_id)
    assert state["state"] == "leased"  # until the shortened lease lapses
    assert state.get("next_task_id") is None
    (heartbeat,) = env.paths("/heartbeat")
    assert heartbeat.body["leaseSeconds"] == 1  # clamped up to the emulator's minimum (5 s)
    env.emulator.advance(env.emulator.lease_min_seconds)
    again = one(env, engine, Demand("charge", 1))
    assert again.ref.job_id == task_id, "the released task comes back first, under the same id"
    assert again.ref.job_id != later
    assert env.emulator.task_state(task_id)["attempts"] == 2
    engine.release(job, "again")  # the old lease is gone: nothing left to release, no error


def test_send_logs_batches_in_order(env: Env) -> None:
    task_id = env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    lines = [{"message": f"line {i}", "level": "warning" if i == 0 else "info"} for i in range(250)]
    engine.send_logs(job.ref, lines)
    engine.send_logs(job.ref, [])
    assert [len(s.body["logs"]) for s in env.paths("/logs")] == [100, 100, 50]
    state = env.emulator.job_state(task_id)
    assert state["logs"] == [f"line {i}" for i in range(250)]
    assert state["log_entries"][0]["level"] == "warn"


def test_send_logs_failure_is_logged_and_dropped(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1), lease_seconds=30)
    env.emulator.advance(31)
    with caplog.at_level(logging.WARNING, logger="workerless.engines.nodeflow"):
        engine.send_logs(job.ref, [{"message": "late line"}])
    assert "dropped 1 log line" in caplog.text
    assert job.ref.handle["leaseToken"] not in caplog.text
    env.fault(method="POST", path="/v1/ns/{ns}/tasks/{task_id}/logs", drop=True)
    engine.send_logs(job.ref, [{"message": "x"}])  # a dropped connection does not raise either


def test_task_logs_is_its_only_optional_capability_and_close_needs_no_request(env: Env) -> None:
    """node-flow leases at activation (no lease acquire) and records pollers itself (no liveness
    report); its task log is the one capability it has."""
    env.emulator.create_job("charge", {})
    engine = env.engine()
    one(env, engine, Demand("charge", 1))
    before = len(env.sent)
    assert (engine.lease_acquire, engine.liveness) == (None, None)
    assert engine.task_logs is engine
    engine.close()
    assert len(env.sent) == before


# ---------------------------------------------------------------- service accounts


def test_service_account_token_is_minted_once_and_used_as_bearer(sa_env: Env) -> None:
    sa_env.emulator.create_job("charge", {})
    engine = sa_env.engine()
    job = one(sa_env, engine, Demand("charge", 1))
    engine.extend(job.ref, 60)
    engine.report(job.ref, Outcome.complete({}))
    assert sa_env.stats()[TOKEN_ROUTE] == 1
    token_call = sa_env.paths("/v1/auth/token")[0]
    assert token_call.body == {"keyId": sa_env.emulator.key_id, "secret": sa_env.emulator.key_secret}
    for sent in sa_env.sent[1:]:
        assert sent.headers["authorization"].startswith("Bearer nfat_")
        assert "x-api-key" not in sent.headers


def test_concurrent_callers_share_one_token_refresh(sa_env: Env) -> None:
    engine = sa_env.engine()
    # A slow token endpoint makes every thread arrive while the first mint is still in flight.
    sa_env.fault(method="POST", path="/v1/auth/token", delay=0.3, status=None)
    barrier = threading.Barrier(12)
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            barrier.wait(timeout=5)
            engine.activate([Demand("charge", 1)], 60)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=poll) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert errors == []
    assert sa_env.stats()[TOKEN_ROUTE] == 1
    assert sa_env.stats()["POST " + LEASE_ROUTE] == 12


def test_token_is_refreshed_60_seconds_before_expiry(sa_env: Env) -> None:
    now = [1_000_000.0]
    values = sa_env.emulator.engine_values(sa_env.url)
    engine = NodeFlowEngine(
        sa_env.client,
        base_url=values["NF_URL"],
        key_id=values["NF_KEY_ID"],
        key_secret=values["NF_KEY_SECRET"],
        worker_id="w",
        clock=lambda: now[0],
    )
    engine.activate([Demand("charge", 1)], 60)
    now[0] += 3600 - 61
    engine.activate([Demand("charge", 1)], 60)
    assert sa_env.stats()[TOKEN_ROUTE] == 1
    now[0] += 2  # 59 s before expiry: inside the margin
    engine.activate([Demand("charge", 1)], 60)
    assert sa_env.stats()[TOKEN_ROUTE] == 2


def test_token_refused_by_the_server_is_minted_again_once(sa_env: Env) -> None:
    engine = sa_env.engine()
    engine.activate([Demand("charge", 1)], 60)
    sa_env.emulator.advance(3600)  # the server's clock says the token expired; ours does not
    sa_env.emulator.create_job("charge", {})
    assert len(engine.activate([Demand("charge", 1)], 60)) == 1
    assert sa_env.stats()[TOKEN_ROUTE] == 2


def test_wrong_secret_is_a_configuration_error(sa_env: Env) -> None:
    with pytest.raises(ConfigurationError) as caught:
        sa_env.engine(NF_KEY_SECRET="wrong-secret").activate([Demand("charge", 1)], 60)
    assert caught.value.key == "NF_KEY_SECRET"
    assert "wrong-secret" not in str(caught.value)


def test_token_endpoint_outage_is_retryable(sa_env: Env) -> None:
    sa_env.fault(method="POST", path="/v1/auth/token", status=503)
    with pytest.raises(EngineUnavailableError):
        sa_env.engine().activate([Demand("charge", 1)], 60)


# ---------------------------------------------------------------- secrets never leak


def test_no_secret_in_any_exception_or_log(sa_env: Env, caplog: pytest.LogCaptureFixture) -> None:
    emulator = sa_env.emulator
    emulator.create_job("charge", {})
    engine = sa_env.engine()
    job = one(sa_env, engine, Demand("charge", 1), lease_seconds=30)
    access_token = sa_env.paths("/lease")[0].headers["authorization"].removeprefix("Bearer ")
    api_key = emulator.create_api_key(["queues:lease:charge"])
    secrets_seen = [emulator.key_secret, access_token, job.ref.handle["leaseToken"], api_key]
    emulator.advance(31)
    failures: list[Callable[[], object]] = [
        lambda: engine.extend(job.ref, 60),
        lambda: engine.report(job.ref, Outcome.complete({})),
        lambda: sa_env.engine(NF_KEY_SECRET="bad" + str(emulator.key_secret)).activate([Demand("charge", 1)], 60),
        lambda: sa_env.engine(NF_KEY_ID=None, NF_KEY_SECRET=None, NF_API_KEY=api_key).activate(
            [Demand("charge", 1, queue="charge:x")], 60
        ),
        lambda: sa_env.engine(NF_KEY_ID=None, NF_KEY_SECRET=None, NF_API_KEY=api_key + "x").activate(
            [Demand("charge", 1)], 60
        ),
    ]
    texts: list[str] = []
    with caplog.at_level(logging.DEBUG):
        for failure in failures:
            with pytest.raises(Exception) as caught:  # noqa: PT011 - each path raises its own class
                failure()
            texts += [str(caught.value), repr(caught.value), repr(getattr(caught.value, "problem", ""))]
        engine.send_logs(job.ref, [{"message": "dropped"}])
        engine.release(job, "gone")
    texts.append(caplog.text)
    for secret in secrets_seen:
        assert secret
        for text in texts:
            assert secret not in text


# ---------------------------------------------------------------- riding out refusals (issue 26, 2.9)

LOGS_ROUTE = "/v1/ns/{ns}/tasks/{task_id}/logs"


@pytest.mark.parametrize(
    ("status", "headers"),
    [(429, {"Retry-After": "1"}), (503, {}), (502, {})],
)
def test_a_log_batch_refused_once_is_sent_again(env: Env, status: int, headers: dict[str, str]) -> None:
    task_id = env.emulator.create_job("charge", {})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    env.fault(method="POST", path=LOGS_ROUTE, status=status, headers=headers, times=1)
    engine.send_logs(job.ref, [{"message": "charging 12.50"}, {"message": "charged"}])
    assert env.emulator.job_state(task_id)["logs"] == ["charging 12.50", "charged"]
    assert len(env.paths("/logs")) == 2


def test_a_refused_input_is_explained_in_the_task_log_before_it_is_reported(env: Env) -> None:
    """A typed handler's refused input has no stack: its reason is the line explaining it."""
    task_id = env.emulator.create_job("charge", {"amount": "twelve"})
    engine = env.engine()
    job = one(env, engine, Demand("charge", 1))
    reason = "job input is invalid: amount: Input should be a valid number"
    engine.report(job.ref, Outcome.fail(reason, retries=0, terminal=True))
    actions = [s.path.rsplit("/", 1)[-1] for s in env.sent if "/tasks/" in s.path]
    assert actions == ["logs", "report"]
    state = env.emulator.job_state(task_id)
    assert state["logs"] == [reason]
    assert state["state"] == "failed"


def test_retry_after_on_a_lease_holds_every_lease_until_it_passes(env: Env) -> None:
    env.emulator.create_job("charge", {})
    env.emulator.create_job("refund", {})
    now = [1000.0]
    values = env.emulator.engine_values(env.url)
    engine = NodeFlowEngine(env.client, base_url=values["NF_URL"], api_key=values["NF_API_KEY"], clock=lambda: now[0])
    env.fault(method="POST", path=LEASE_ROUTE, status=429, headers={"Retry-After": "5"}, times=1)
    with pytest.raises(RateLimitedError):
        engine.activate([Demand("charge", 1), Demand("refund", 1)], 60)
    assert len(env.paths("/lease")) == 1  # the refund queue is not leased 0.1 s after the 429
    now[0] += 4
    with pytest.raises(RateLimitedError) as caught:
        engine.activate([Demand("charge", 1), Demand("refund", 1)], 60)
    assert caught.value.retry_after == pytest.approx(1.0)
    assert len(env.paths("/lease")) == 1  # nor the next poll, inside the Retry-After
    now[0] += 1.5
    jobs = engine.activate([Demand("charge", 1), Demand("refund", 1)], 60)
    assert sorted(j.ref.job_type for j in jobs) == ["charge", "refund"]
