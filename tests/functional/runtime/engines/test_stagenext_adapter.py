"""The StageNext adapter against the StageNext emulator, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from workerless._core.lease import BEGIN_LEASE
from workerless._core.model import ActivatedJob, Demand, Outcome
from workerless.engines import build_engine
from workerless.engines.base import Engine, MemoryState
from workerless.engines.stagenext import RESULT_BODY_CAP, RESULT_STRING_CAP, StageNextEngine, from_values
from workerless.errors import (
    ConfigurationError,
    EngineUnavailableError,
    LeaseLostError,
    PayloadTooLargeError,
    RateLimitedError,
)
from workerless_devkit.emulators.http import EmulatorServer
from workerless_devkit.emulators.stagenext import StageNextEmulator
from workerless_devkit.pytest_plugin import EmulatorFactory

MakeEngine = Callable[..., StageNextEngine]


@pytest.fixture(scope="module")
def served(workerless_module_emulator: EmulatorFactory) -> tuple[StageNextEmulator, EmulatorServer]:
    running = workerless_module_emulator("stagenext")
    return running.emulator, running.server


@pytest.fixture
def emu(served: tuple[StageNextEmulator, EmulatorServer]) -> StageNextEmulator:
    emulator, _ = served
    emulator.reset(handler_patterns=("billing-*",))
    emulator.router.stats.clear()
    return emulator


@pytest.fixture
def admin(served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[1].url, timeout=5) as client:
        client.delete("/_admin/faults")
        yield client


@pytest.fixture
def make_engine(served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator) -> Iterator[MakeEngine]:
    clients: list[httpx.Client] = []

    def make(*, state: MemoryState | None = None, timeout: float = 5.0, **values: str) -> StageNextEngine:
        client = httpx.Client(timeout=timeout)
        clients.append(client)
        all_values = {**emu.engine_values(served[1].url), **values}
        return from_values(all_values, client, state=state, clock=emu.now)

    yield make
    for client in clients:
        client.close()


def pull_one(engine: StageNextEngine, job_type: str = "billing-charge") -> ActivatedJob:
    jobs = engine.activate([Demand(job_type, 1)], lease_seconds=60)
    assert len(jobs) == 1
    return jobs[0]


def fault(admin: httpx.Client, path: str, **spec: Any) -> None:
    assert admin.post("/_admin/faults", json={"method": "POST", "path": path, **spec}).status_code == 201


# ------------------------------------------------------------------------------------- activate


def test_build_engine_returns_a_stagenext_engine(
    served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator
) -> None:
    with httpx.Client(timeout=5) as client:
        engine = build_engine("stagenext", emu.engine_values(served[1].url), client)
        assert isinstance(engine, Engine)
        assert engine.name == "stagenext"
        assert engine.lease == BEGIN_LEASE.granting(engine.lease_seconds).returning_after(60.0)


def test_activate_pulls_up_to_capacity_and_stops_at_204(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    assert engine.activate([Demand("billing-charge", 3)], lease_seconds=60) == []
    ids = [emu.create_job("billing-charge", {"n": n}, retries=2) for n in range(5)]
    before = emu.now()
    jobs = engine.activate([Demand("billing-charge", 3), Demand("billing-refund", 0)], lease_seconds=60)
    assert [j.ref.job_id for j in jobs] == ids[:3]
    job = jobs[0]
    assert job.variables == {"n": 0}
    assert job.retries == 2
    assert job.ref.engine == "stagenext"
    assert job.ref.attempt == job.ref.handle["executionId"]
    assert job.ref.key == f"stagenext#{ids[0]}#{job.ref.handle['executionId']}"
    assert job.ref.handle["ackToken"].startswith("ack_")
    assert job.ref.handle["cookies"]["gw_replica"] in ("r0", "r1")
    # Lease of a delivery = the gateway visibility timeout, from the pull.
    assert before + 59 <= job.lease_expires_at <= emu.now() + 60
    # 2 left: a capacity-5 demand takes them and stops at the first 204 (3 pulls, not 5).
    emu.router.stats.clear()
    assert len(engine.activate([Demand("billing-charge", 5)], lease_seconds=60)) == 2
    assert emu.router.stats["POST /jobs/pull"] == 3
    # The JobRef survives the SQS message round trip.
    assert ActivatedJob.from_message(job.to_message()) == job


def test_activate_403_is_configuration_error_naming_the_queue(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    emu.create_job("billing-charge", {})
    with pytest.raises(ConfigurationError, match="'payroll'"):
        engine.activate([Demand("billing-charge", 1), Demand("payroll", 1)], lease_seconds=60)
    # The delivery already pulled this cycle was handed back, not left to the visibility timeout.
    assert emu.inflight() == [0, 0]
    assert len(engine.activate([Demand("billing-charge", 1)], lease_seconds=60)) == 1


def test_activate_429_keeps_what_was_pulled_then_raises_rate_limited(
    emu: StageNextEmulator, make_engine: MakeEngine
) -> None:
    emu.reset(handler_patterns=("billing-*",), max_inflight=2, replicas=1)
    for _ in range(4):
        emu.create_job("billing-charge", {})
    engine = make_engine()
    assert len(engine.activate([Demand("billing-charge", 5)], lease_seconds=60)) == 2
    with pytest.raises(RateLimitedError) as info:
        engine.activate([Demand("billing-charge", 5)], lease_seconds=60)
    assert info.value.retry_after == 1.0


def test_bad_api_key_is_configuration_error(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine(STAGENEXT_API_KEY="wrong-key")
    with pytest.raises(ConfigurationError) as info:
        engine.activate([Demand("billing-charge", 1)], lease_seconds=60)
    assert info.value.key == "STAGENEXT_API_KEY"


# --------------------------------------------------------------------------- begin / report / ack


def test_happy_path_result_then_ack_with_the_pull_cookie(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    """GIVEN two deliveries pulled from two gateway replicas WHEN each is begun and reported THEN each
    result is applied and each ack reaches the replica that holds its token (its cookie)."""
    engine = make_engine()
    ids = [emu.create_job("billing-charge", {"n": n}) for n in range(2)]
    jobs = engine.activate([Demand("billing-charge", 2)], lease_seconds=60)
    assert {j.ref.handle["cookies"]["gw_replica"] for j in jobs} == {"r0", "r1"}
    for job in jobs:
        assert engine.begin(job) is True
        engine.report(job.ref, Outcome.complete({"done": job.variables["n"]}))
    for n, stage_id in enumerate(ids):
        state = emu.job_state(stage_id)
        assert state["state"] == "completed"
        assert state["output"] == {"done": n}
        assert state["attempts"] == 1
        assert [(a["status"], a["requeue"], a["pinned"]) for a in state["acks"]] == [(200, False, True)]
    assert emu.inflight() == [0, 0]
    assert len(emu.workers()) == 1


def test_fail_and_throw_outcomes_become_failed_results(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    retried = emu.create_job("billing-charge", {}, retries=2)
    job = pull_one(engine)
    assert engine.begin(job)
    engine.report(job.ref, Outcome.fail("card declined", retries=1, backoff_seconds=0))
    state = emu.job_state(retried)
    assert (state["state"], state["retries"], state["error_message"]) == ("ready", 1, "card declined")
    assert state["results"][0]["retryable"] is True
    # Terminal: no retry even with retries left.
    job = pull_one(engine)
    assert engine.begin(job)
    engine.report(job.ref, Outcome.fail("bad input", retries=0, terminal=True))
    assert emu.job_state(retried)["state"] == "failed"
    thrown = emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job)
    engine.report(job.ref, Outcome.throw("CARD_DECLINED", "declined", {"reason": "expired"}))
    state = emu.job_state(thrown)
    assert state["state"] == "failed"
    assert state["results"][0]["errorCode"] == "CARD_DECLINED"
    assert state["results"][0]["result"] == '{"errorCode":"CARD_DECLINED","variables":{"reason":"expired"}}'


def test_redelivery_of_a_running_job_is_refused_at_acquire_and_skipped(
    emu: StageNextEmulator, make_engine: MakeEngine
) -> None:
    """GIVEN a job whose handler has begun (lease renewed) WHEN the gateway visibility sweep requeues
    its delivery and it is pulled again THEN acquire answers false, skip acks it without running, and
    the original handler's result is applied once (its own ack is a tolerated 404)."""
    engine = make_engine()
    stage_id = emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job) is True
    emu.advance(40)
    engine.extend(job.ref, 60)
    emu.advance(21)  # visibility (60 s) passed, lease (renewed to +100 s) still held
    redelivered = pull_one(engine)
    assert redelivered.ref.key == job.ref.key
    assert engine.begin(redelivered) is False
    engine.skip(redelivered.ref)
    engine.report(job.ref, Outcome.complete({"ok": True}))
    state = emu.job_state(stage_id)
    assert state["state"] == "completed"
    assert state["attempts"] == 1
    assert [r["applied"] for r in state["results"]] == [True]
    assert [a["status"] for a in state["acks"]] == [200, 404]  # the skip, then the swept token


def test_begin_twice_is_not_reentrant(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job) is True
    assert engine.begin(job) is False


def test_skip_and_ack_404_are_tolerated(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    stage_id = emu.create_job("billing-charge", {})
    job = pull_one(engine)
    engine.skip(job.ref)
    engine.skip(job.ref)  # second ack of the same token: 404, tolerated
    assert [a["status"] for a in emu.job_state(stage_id)["acks"]] == [200, 404]


def test_release_requeues_the_same_execution(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    stage_id = emu.create_job("billing-charge", {})
    job = pull_one(engine)
    engine.release(job, "sqs send failed")
    again = pull_one(engine)
    assert again.ref.key == job.ref.key
    assert emu.job_state(stage_id)["acks"][0]["requeue"] is True
    assert engine.begin(again) is True


# ------------------------------------------------------------------------------------- extend


def test_extend_by_owner_and_refusal_is_lease_lost(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job)
    emu.advance(30)
    expiry = engine.extend(job.ref, 120)
    assert emu.now() + 59 <= expiry <= emu.now() + 61  # fixed 60 s, whatever was asked
    emu.advance(61)
    with pytest.raises(LeaseLostError, match="lease_expired"):
        engine.extend(job.ref, 60)


def test_extend_by_another_worker_record_is_refused(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    """Two adapters WITHOUT shared state are two worker records: one cannot renew the other's lease."""
    handler, stranger = make_engine(), make_engine()
    emu.create_job("billing-charge", {})
    job = pull_one(handler)
    assert handler.begin(job)
    with pytest.raises(LeaseLostError, match="not_lease_owner"):
        stranger.extend(job.ref, 60)


# ------------------------------------------------------------------------------ shared session


def test_shared_session_lets_the_heartbeat_renew_the_handlers_lease(
    emu: StageNextEmulator, make_engine: MakeEngine
) -> None:
    state = MemoryState()
    poller, handler, heartbeat = (make_engine(state=state) for _ in range(3))
    stage_id = emu.create_job("billing-charge", {})
    job = pull_one(poller)
    assert handler.begin(job)
    for _ in range(3):
        emu.advance(45)
        heartbeat.extend(job.ref, 60)
    handler.report(job.ref, Outcome.complete({"ok": 1}))
    assert emu.job_state(stage_id)["state"] == "completed"
    workers = emu.workers()
    assert len(workers) == 1
    assert workers[0]["bootstraps"] == 1
    assert workers[0]["instanceId"] == "workerless"


def test_rotation_before_ttl_keeps_the_lease_in_flight(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    """GIVEN a 10-minute session rotated 2 minutes early, and a lease acquired by the handler
    WHEN the heartbeat keeps renewing past the rotation point THEN exactly one rebootstrap happens,
    the workerId (lease owner) is unchanged, no renewal is refused, and the handler picks the new
    token up from the shared record (no second rebootstrap) to report."""
    emu.reset(handler_patterns=("billing-*",), session_ttl=600)
    state = MemoryState()
    handler = make_engine(state=state, STAGENEXT_SESSION_REFRESH_SECONDS="120")
    heartbeat = make_engine(state=state, STAGENEXT_SESSION_REFRESH_SECONDS="120")
    stage_id = emu.create_job("billing-charge", {})
    job = pull_one(handler)
    assert handler.begin(job)
    worker_id = emu.workers()[0]["workerId"]
    for _ in range(11):  # 550 s: past the 480 s rotation point, short of the 600 s expiry
        emu.advance(50)
        heartbeat.extend(job.ref, 60)
    workers = emu.workers()
    assert len(workers) == 1
    assert workers[0]["workerId"] == worker_id
    assert workers[0]["bootstraps"] == 2
    handler.report(job.ref, Outcome.complete({"ok": True}))
    state_after = emu.job_state(stage_id)
    assert state_after["state"] == "completed"
    assert state_after["attempts"] == 1
    assert emu.workers()[0]["bootstraps"] == 2


def test_a_replaced_token_is_answered_by_rereading_the_shared_record(
    emu: StageNextEmulator, make_engine: MakeEngine
) -> None:
    """GIVEN a handler holding a session token that another container has just replaced WHEN the
    handler renews THEN StageNext answers 401, the handler re-reads the shared record and retries
    once with the new token, and does not rebootstrap (which would break the other container)."""
    state = MemoryState()
    handler, other = make_engine(state=state), make_engine(state=state)
    emu.create_job("billing-charge", {})
    job = pull_one(handler)
    assert handler.begin(job)
    old_token = handler._current_session().token
    other._refresh_session(failed_token=old_token)  # as if `other` had been refused with it
    assert emu.workers()[0]["bootstraps"] == 2
    emu.router.stats.clear()
    handler.extend(job.ref, 60)
    assert emu.router.stats["POST /stages/{stageId}/lease/renew"] == 2
    assert emu.workers()[0]["bootstraps"] == 2
    assert handler._current_session().token == other._current_session().token != old_token


def test_concurrent_containers_rotate_once(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    """GIVEN four containers sharing a session that is due WHEN they all need it at once THEN one
    compare-and-set claim wins and StageNext sees a single rebootstrap."""
    emu.reset(handler_patterns=("billing-*",), session_ttl=600)
    state = MemoryState()
    engines = [make_engine(state=state, STAGENEXT_SESSION_REFRESH_SECONDS="120") for _ in range(4)]
    engines[0].liveness.after_cycle({"polls": 1})
    assert emu.workers()[0]["bootstraps"] == 1
    emu.advance(500)
    barrier = threading.Barrier(len(engines))
    errors: list[BaseException] = []

    def beat(engine: StageNextEngine) -> None:
        barrier.wait(timeout=5)
        try:
            engine._current_session()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=beat, args=(e,)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert emu.workers()[0]["bootstraps"] == 2
    tokens = {e._current_session().token for e in engines}
    assert len(tokens) == 1


def test_process_local_session_rebootstraps_on_401(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    emu.reset(handler_patterns=("billing-*",), session_ttl=100)
    engine = make_engine(STAGENEXT_SESSION_REFRESH_SECONDS="1")
    emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job)
    emu.advance(55)
    engine.extend(job.ref, 60)
    emu.advance(50)  # session (100 s) expired; lease (renewed at 55 s) still held until 115 s
    engine.extend(job.ref, 60)
    assert emu.workers()[0]["bootstraps"] == 2


# ---------------------------------------------------------------------------- result outcomes


def test_result_caps_are_checked_before_sending(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    stage_id = emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job)
    emu.router.stats.clear()
    with pytest.raises(PayloadTooLargeError, match=str(RESULT_STRING_CAP)) as info:
        engine.report(job.ref, Outcome.complete({"blob": "x" * RESULT_STRING_CAP}))
    assert info.value.cap == RESULT_STRING_CAP
    # Quotes are escaped once in the result string and twice in the body: under the string cap,
    # over the body cap.
    with pytest.raises(PayloadTooLargeError, match=str(RESULT_BODY_CAP)) as info:
        engine.report(job.ref, Outcome.complete({"q": '"' * 100_000}))
    assert info.value.cap == RESULT_BODY_CAP
    assert emu.router.stats["POST /stages/{stageId}/result"] == 0
    assert emu.job_state(stage_id)["results"] == []


def test_unknown_result_outcome_is_retried_with_the_same_identity(
    emu: StageNextEmulator, make_engine: MakeEngine, admin: httpx.Client
) -> None:
    """GIVEN a result post that times out after StageNext accepted it WHEN the pipeline reports the
    same stored outcome again THEN both posts carry the same executionId/attempt and the result is
    applied once (the duplicate is discarded by fencing)."""
    engine = make_engine(timeout=0.3)
    stage_id = emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job)
    fault(admin, "/stages/{stageId}/result", delay=0.6)
    outcome = Outcome.complete({"ok": True})
    with pytest.raises(EngineUnavailableError) as info:
        engine.report(job.ref, outcome)
    assert info.value.retryable is True
    for _ in range(50):  # the slow first post lands on the server within ~0.6 s
        if emu.job_state(stage_id)["results"]:
            break
        threading.Event().wait(0.05)
    engine.report(job.ref, outcome)
    results = emu.job_state(stage_id)["results"]
    assert [(r["executionId"], r["attempt"]) for r in results] == [(job.ref.handle["executionId"], 1)] * 2
    assert [(r["applied"], r["reason"]) for r in results] == [(True, None), (False, "duplicate")]
    assert emu.job_state(stage_id)["state"] == "completed"


def test_5xx_on_result_is_retryable_and_the_retry_applies(
    emu: StageNextEmulator, make_engine: MakeEngine, admin: httpx.Client
) -> None:
    engine = make_engine()
    stage_id = emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job)
    fault(admin, "/stages/{stageId}/result", status=503)
    with pytest.raises(EngineUnavailableError):
        engine.report(job.ref, Outcome.complete({"ok": True}))
    engine.report(job.ref, Outcome.complete({"ok": True}))
    state = emu.job_state(stage_id)
    assert state["state"] == "completed"
    assert [a["status"] for a in state["acks"]] == [200]


def test_visibility_sweep_requeues_an_unbegun_delivery(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    engine = make_engine()
    emu.create_job("billing-charge", {})
    job = pull_one(engine)
    emu.advance(61)
    again = pull_one(engine)
    assert again.ref.key == job.ref.key
    assert again.custom_headers == {"deliveryCount": 2}
    assert engine.begin(again) is True


# -------------------------------------------------------------------------- liveness and events


def test_after_cycle_heartbeats_and_flushes_events_in_batches(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    emu.reset(handler_patterns=("billing-*",), events_max_batch=3)
    engine = make_engine(STAGENEXT_EVENTS_MAX_BATCH="3", STAGENEXT_EVENTS_FLUSH_SECONDS="3600")
    for _ in range(2):
        emu.create_job("billing-charge", {})
    for job in engine.activate([Demand("billing-charge", 2)], lease_seconds=60):
        assert engine.begin(job)
        engine.report(job.ref, Outcome.complete({}))
    # 4 events; the batch cap (3) was reached once during the run, the rest flush with the heartbeat.
    engine.liveness.after_cycle({"polls": 3, "activated": 2})
    worker = emu.workers()[0]
    assert worker["heartbeats"] == 1
    assert worker["counters"] == {"polls": 3, "activated": 2}
    assert sorted(e["type"] for e in worker["events"]) == ["job.finished"] * 2 + ["job.started"] * 2
    assert emu.router.stats["POST /workers/events"] == 2


def test_liveness_is_reported_at_most_every_30_seconds_with_summed_counters(
    emu: StageNextEmulator, make_engine: MakeEngine
) -> None:
    """A busy poller runs a cycle per batch: one liveness call per batch would add a request to
    every batch. Counters of the cycles in between are summed into the next report."""
    engine = make_engine()
    engine.liveness.after_cycle({"polls": 1})
    engine.liveness.after_cycle({"polls": 2})
    engine.liveness.after_cycle({"polls": 4})
    assert emu.workers()[0]["heartbeats"] == 1
    emu.advance(31)
    engine.liveness.after_cycle({"polls": 8})
    worker = emu.workers()[0]
    assert worker["heartbeats"] == 2
    assert worker["counters"] == {"polls": 14}


def test_after_cycle_never_raises(emu: StageNextEmulator, make_engine: MakeEngine, admin: httpx.Client) -> None:
    engine = make_engine()
    fault(admin, "/workers/bootstrap", status=500)
    engine.liveness.after_cycle({"polls": 1})
    fault(admin, "/workers/heartbeat", drop=True)
    engine.liveness.after_cycle({"polls": 1})
    engine.liveness.after_cycle({"polls": 1})
    assert emu.workers()[0]["heartbeats"] == 1


def test_close_shuts_down_a_local_session_but_not_a_shared_one(emu: StageNextEmulator, make_engine: MakeEngine) -> None:
    shared = make_engine(state=MemoryState())
    shared.liveness.after_cycle({})
    shared.close()
    local = make_engine()
    local.liveness.after_cycle({})
    local.close()
    stopped = {w["instanceId"]: w["stopped"] for w in emu.workers()}
    assert stopped.pop("workerless") is False
    assert list(stopped.values()) == [True]


# ------------------------------------------------------------------------------------ secrets


def test_no_secret_in_any_exception_or_log(
    emu: StageNextEmulator, make_engine: MakeEngine, admin: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    engine = make_engine()
    emu.create_job("billing-charge", {})
    job = pull_one(engine)
    assert engine.begin(job)
    session_token = engine._current_session().token
    secrets_seen = [emu.api_key, session_token, job.ref.handle["ackToken"]]
    raised: list[BaseException] = []
    attempts: list[Callable[[], object]] = [
        lambda: make_engine(STAGENEXT_API_KEY="sn-wrong-key").activate([Demand("billing-charge", 1)], 60),
        lambda: make_engine(STAGENEXT_API_KEY="sn-wrong-key").begin(job),
        lambda: engine.activate([Demand("payroll", 1)], 60),
        lambda: engine.report(job.ref, Outcome.complete({"blob": "x" * RESULT_STRING_CAP})),
    ]
    for attempt in attempts:
        with pytest.raises(Exception) as info:  # noqa: PT011 - every failure path, each its own class
            attempt()
        raised.append(info.value)
    fault(admin, "/stages/{stageId}/result", drop=True)
    with pytest.raises(EngineUnavailableError) as unavailable:
        engine.report(job.ref, Outcome.complete({}))
    raised.append(unavailable.value)
    emu.advance(61)
    with pytest.raises(LeaseLostError) as lost:
        engine.extend(job.ref, 60)
    raised.append(lost.value)
    engine.report(job.ref, Outcome.complete({}))  # stale result, swept token: logged 404
    texts = [f"{exc!s} {exc!r} {getattr(exc, 'problem', '')}" for exc in raised] + [caplog.text]
    texts += [str(r.__dict__) for r in caplog.records]
    for text in texts:
        for secret in secrets_seen:
            assert secret not in text
    assert repr(engine.config).count(emu.api_key) == 0
