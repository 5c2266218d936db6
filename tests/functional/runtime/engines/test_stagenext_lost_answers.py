"""StageNext answers lost or mangled on the way back (issue 10, item 7), against the emulator over
real HTTP: a garbled 200 is retryable where the seed lets the call be repeated, and an ack lost to a
502 or a dropped connection is acknowledged again, so the gateway does not deliver the stage twice.

The emulator's ``after`` faults let the request take effect and mangle only its answer: the case a
worker cannot tell apart from a request that never arrived."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from workerless._core.model import ActivatedJob, Demand, Outcome
from workerless._core.retry import CALLS
from workerless.engines.stagenext import StageNextEngine, from_values
from workerless.errors import EngineUnavailableError, GarbledResponseError, ResponseShapeError
from workerless_devkit.emulators.http import EmulatorServer
from workerless_devkit.emulators.stagenext import StageNextEmulator
from workerless_devkit.pytest_plugin import EmulatorFactory

HTML = "<html><body><h1>502 Bad Gateway</h1></body></html>"


@pytest.fixture(scope="module")
def served(workerless_module_emulator: EmulatorFactory) -> tuple[StageNextEmulator, EmulatorServer]:
    running = workerless_module_emulator("stagenext")
    return running.emulator, running.server


@pytest.fixture
def emu(served: tuple[StageNextEmulator, EmulatorServer]) -> Iterator[StageNextEmulator]:
    emulator, server = served
    emulator.reset(handler_patterns=("billing-*",))
    httpx.delete(server.url + "/_admin/faults", timeout=5).raise_for_status()
    yield emulator
    httpx.delete(server.url + "/_admin/faults", timeout=5).raise_for_status()


@pytest.fixture
def engine(served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator) -> Iterator[StageNextEngine]:
    with httpx.Client(timeout=5) as client:
        yield from_values(emu.engine_values(served[1].url), client, clock=emu.now)


def fault(served: tuple[StageNextEmulator, EmulatorServer], path: str, **spec: Any) -> None:
    answer = httpx.post(served[1].url + "/_admin/faults", json={"method": "POST", "path": path, **spec}, timeout=5)
    assert answer.status_code == 201, answer.text


def pull(engine: StageNextEngine) -> ActivatedJob:
    [job] = engine.activate([Demand("billing-charge", 1)], lease_seconds=60)
    return job


def within(seconds: float) -> float:
    return time.monotonic() + seconds


@pytest.mark.parametrize("raw", ['{"acquired": tr', ""], ids=["truncated-json", "empty-body"])
def test_a_garbled_acquire_answer_that_took_effect_is_retried_and_the_lease_is_ours(
    served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator, engine: StageNextEngine, raw: str
) -> None:
    """GIVEN lease acquire takes effect but its 200 comes back truncated or empty
    WHEN the handler's retry policy calls begin
    THEN the answer is a retryable GarbledResponseError, not a final ResponseShapeError; the retry's
    lease_held is settled by a renew (only the lease owner's succeeds), so the delivery runs under the
    lease it acquired, on its one execution, instead of waiting for the lease to lapse."""
    stage_id = emu.create_job("billing-charge", {"n": 1})
    job = pull(engine)
    fault(served, "/stages/{stageId}/lease/acquire", status=200, raw=raw, after=True, times=1)

    with pytest.raises(GarbledResponseError) as info:
        engine.begin(job)
    assert info.value.retryable and not isinstance(info.value, ResponseShapeError)
    assert info.value.status == 200

    assert CALLS.call(lambda: engine.begin(job), deadline=within(10)) is True
    engine.report(job.ref, Outcome.complete({"ok": True}))
    state = emu.job_state(stage_id)
    assert state["state"] == "completed"
    assert len(state["executions"]) == 1
    assert [h["event"] for h in state["history"]].count("lease_acquired") == 1
    assert [r["applied"] for r in state["results"]] == [True]


def test_a_garbled_acquire_answer_that_never_arrived_is_simply_acquired_again(
    served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator, engine: StageNextEngine
) -> None:
    """GIVEN a proxy answers the first lease acquire with a 502 HTML page (the request never reached
    StageNext) THEN the retry acquires the lease outright."""
    emu.create_job("billing-charge", {})
    job = pull(engine)
    fault(served, "/stages/{stageId}/lease/acquire", status=502, raw=HTML, content_type="text/html", times=1)
    assert CALLS.call(lambda: engine.begin(job), deadline=within(10)) is True


def test_a_lease_held_by_someone_else_after_a_lost_answer_is_still_refused(
    served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator, engine: StageNextEngine
) -> None:
    """GIVEN another worker record holds the execution's lease and our acquire's answer is dropped
    THEN the retry's lease_held is checked with a renew, which StageNext refuses (not the lease
    owner): the delivery does not run."""
    emu.create_job("billing-charge", {})
    job = pull(engine)
    with httpx.Client(timeout=5) as other_client:
        other = from_values(
            {**emu.engine_values(served[1].url), "STAGENEXT_INSTANCE_ID": "someone-else"}, other_client, clock=emu.now
        )
        assert other.begin(job) is True
    fault(served, "/stages/{stageId}/lease/acquire", drop=True, after=True, times=1)
    assert CALLS.call(lambda: engine.begin(job), deadline=within(10)) is False


def test_a_garbled_pull_or_renew_answer_is_retryable(
    served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator, engine: StageNextEngine
) -> None:
    """A pull or a renew whose 200 is unreadable raises the retryable GarbledResponseError (the
    poller backs off 1 s, not 5; the heartbeat tries again instead of giving the lease up)."""
    emu.create_job("billing-charge", {})
    fault(served, "/jobs/pull", status=200, raw='{"ackToken": "ack_', times=1)
    with pytest.raises(GarbledResponseError):
        engine.activate([Demand("billing-charge", 1)], lease_seconds=60)
    job = pull(engine)
    assert engine.begin(job) is True
    fault(served, "/stages/{stageId}/lease/renew", status=200, raw="", times=1)
    with pytest.raises(GarbledResponseError):
        engine.extend(job.ref, 60)
    assert CALLS.call(lambda: engine.extend(job.ref, 60), deadline=within(10)) > 0


@pytest.mark.parametrize(
    "ack_fault",
    [
        {"status": 502, "raw": HTML, "content_type": "text/html"},
        {"drop": True},
        {"status": 429, "headers": {"Retry-After": "1"}},
    ],
    ids=["502-html", "dropped-before", "429"],
)
def test_an_ack_that_did_not_land_is_retried_and_the_result_posted_once(
    served: tuple[StageNextEmulator, EmulatorServer],
    emu: StageNextEmulator,
    engine: StageNextEngine,
    ack_fault: dict[str, Any],
) -> None:
    """GIVEN the result is accepted (202) and the ack after it fails without reaching the gateway
    WHEN the report is retried by the retry policy
    THEN only the ack is sent again (one result posted), it lands, and the gateway holds nothing:
    the stage will not be delivered a second time after the gateway's visibility timeout."""
    stage_id = emu.create_job("billing-charge", {})
    job = pull(engine)
    assert engine.begin(job) is True
    fault(served, "/jobs/ack", times=1, **ack_fault)

    CALLS.call(lambda: engine.report(job.ref, Outcome.complete({"ok": True})), deadline=within(10))

    state = emu.job_state(stage_id)
    assert state["state"] == "completed"
    assert len(state["results"]) == 1, "the retry posted the result again"
    assert [(a["status"], a["requeue"]) for a in state["acks"]] == [(200, False)]
    assert emu.inflight() == [0, 0]
    emu.advance(61)  # past the gateway's visibility timeout: nothing comes back
    assert engine.activate([Demand("billing-charge", 1)], lease_seconds=60) == []


def test_an_ack_that_landed_but_whose_answer_was_lost_is_settled_by_the_404_of_its_retry(
    served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator, engine: StageNextEngine
) -> None:
    """GIVEN the ack after the result lands but the connection drops before its answer
    THEN the retried ack answers 404 (the token is gone: "not mine to ack"), which ends the report
    without an error: acknowledged once, one result."""
    stage_id = emu.create_job("billing-charge", {})
    job = pull(engine)
    assert engine.begin(job) is True
    fault(served, "/jobs/ack", drop=True, after=True, times=1)

    CALLS.call(lambda: engine.report(job.ref, Outcome.complete({"ok": True})), deadline=within(10))

    state = emu.job_state(stage_id)
    assert [a["status"] for a in state["acks"]] == [200, 404]
    assert len(state["results"]) == 1
    assert emu.inflight() == [0, 0]


def test_a_skip_ack_that_did_not_land_raises_retryable_and_its_retry_lands(
    served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator, engine: StageNextEngine
) -> None:
    """skip (the ack of a delivery refused at acquire) fails retryably on a 502 and is safe to call
    again: the retry lands."""
    stage_id = emu.create_job("billing-charge", {})
    job = pull(engine)
    assert engine.begin(job) is True
    assert engine.begin(job) is False  # not reentrant: this delivery is now refused
    fault(served, "/jobs/ack", status=502, raw=HTML, content_type="text/html", times=1)
    CALLS.call(lambda: engine.skip(job.ref), deadline=within(10))
    assert [a["status"] for a in emu.job_state(stage_id)["acks"]] == [200]


def test_an_ack_that_keeps_failing_is_retried_while_the_gateway_holds_the_delivery(
    served: tuple[StageNextEmulator, EmulatorServer], emu: StageNextEmulator, engine: StageNextEngine
) -> None:
    """GIVEN every ack after the accepted result fails (an outage of the gateway)
    THEN the report keeps raising a retryable error, the result posted once — it is not dropped
    after a few tries (the caller's retries, then the heartbeat, keep acknowledging) — until the
    gateway's visibility timeout has passed (the emulator's clock): then it ends, the gateway has
    requeued the delivery, and its next delivery is refused at acquire and acknowledged."""
    stage_id = emu.create_job("billing-charge", {})
    job = pull(engine)
    assert engine.begin(job) is True
    fault(served, "/jobs/ack", status=503, rate=1.0)

    for _ in range(6):  # more than any fixed number of tries
        with pytest.raises(EngineUnavailableError):
            engine.report(job.ref, Outcome.complete({"ok": True}))
    state = emu.job_state(stage_id)
    assert state["state"] == "completed" and len(state["results"]) == 1
    assert emu.inflight() != [0, 0], "the gateway still holds the delivery"

    emu.advance(61)  # the gateway's visibility timeout passes: it requeues the delivery
    engine.report(job.ref, Outcome.complete({"ok": True}))  # ends: nothing left to acknowledge
    assert len(emu.job_state(stage_id)["results"]) == 1
    httpx.delete(served[1].url + "/_admin/faults", timeout=5).raise_for_status()
    again = pull(engine)
    assert engine.begin(again) is False
    engine.skip(again.ref)
    assert [a["status"] for a in emu.job_state(stage_id)["acks"]] == [200]
