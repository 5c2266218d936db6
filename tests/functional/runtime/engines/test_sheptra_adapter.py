"""The Sheptra adapter against the served Sheptra emulator, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from workerless._core.lease import ACTIVATION_LEASE
from workerless._core.model import Demand, Outcome
from workerless._core.settings import parse_env_text
from workerless.engines.sheptra import PAYLOAD_CAP, SheptraEngine, from_values
from workerless.errors import (
    AuthExpiredError,
    ConfigurationError,
    EngineError,
    EngineUnavailableError,
    LeaseLostError,
    PayloadTooLargeError,
    RateLimitedError,
    RejectedError,
    ResponseShapeError,
)
from workerless_devkit.emulators.http import EmulatorServer
from workerless_devkit.emulators.sheptra import SheptraEmulator
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.fakes import Clock

ACTIVATE = "POST /cells/{cell}/v1/jobs/activate"
ACTIVATE_PATTERN = "/cells/{cell}/v1/jobs/activate"
COMPLETE = "POST /cells/{cell}/v1/jobs/{id}/complete"
FAIL = "POST /cells/{cell}/v1/jobs/{id}/fail"
MINT = "POST /oauth2/token"
DISCOVER = "GET /v1/discovery/cell"


@dataclass
class Rig:
    """One served emulator, an HTTP client that records what the adapter sends, and helpers."""

    emu: SheptraEmulator
    server: EmulatorServer
    client: httpx.Client
    sent: list[httpx.Request] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def values(self, **overrides: str) -> dict[str, str]:
        return {**self.emu.engine_values(self.url), **overrides}

    def engine(
        self, *, worker_id: str | None = "w1", clock: Callable[[], float] | None = None, **overrides: str
    ) -> SheptraEngine:
        kwargs: dict[str, Any] = {"worker_id": worker_id}
        if clock is not None:
            kwargs["clock"] = clock
        return from_values(self.values(**overrides), self.client, **kwargs)

    def stats(self) -> dict[str, int]:
        requests: dict[str, int] = httpx.get(self.url + "/_admin/stats", timeout=5).json()["requests"]
        return requests

    def count(self, key: str) -> int:
        return self.stats().get(key, 0)

    def fault(self, **fault: Any) -> None:
        response = httpx.post(self.url + "/_admin/faults", json=fault, timeout=5)
        assert response.status_code == 201

    def clear_faults(self) -> None:
        httpx.delete(self.url + "/_admin/faults", timeout=5)

    def bodies(self, suffix: str) -> list[dict[str, Any]]:
        """JSON bodies the adapter sent to paths ending in ``suffix``."""
        return [json.loads(r.content) for r in self.sent if r.url.path.endswith(suffix)]


def _serve(workerless_emulator: EmulatorFactory, **options: Any) -> Iterator[Rig]:
    running = workerless_emulator("sheptra", **options)
    sent: list[httpx.Request] = []
    client = httpx.Client(timeout=5, event_hooks={"request": [sent.append]})
    try:
        yield Rig(running.emulator, running.server, client, sent)
    finally:
        client.close()


@pytest.fixture
def rig(workerless_emulator: EmulatorFactory) -> Iterator[Rig]:
    yield from _serve(workerless_emulator)


@pytest.fixture
def small_cap_rig(workerless_emulator: EmulatorFactory) -> Iterator[Rig]:
    yield from _serve(workerless_emulator, max_variables_bytes=100)


@pytest.fixture
def open_rig(workerless_emulator: EmulatorFactory) -> Iterator[Rig]:
    yield from _serve(workerless_emulator, auth=False)


def assert_no_secret(rig: Rig, exc: BaseException) -> None:
    text = f"{exc!s} {exc!r} {getattr(exc, 'problem', '')}"
    assert rig.emu.client_secret not in text
    for request in rig.sent:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            assert header[7:] not in text


# ---- credentials ------------------------------------------------------------------------------


def test_token_is_minted_once_and_cached(rig: Rig) -> None:
    """GIVEN an adapter WHEN it makes several calls THEN one token is minted and sent on each call."""
    engine = rig.engine()
    for _ in range(3):
        assert engine.activate([Demand("a", 1)], 30) == []
    assert rig.count(MINT) == 1
    assert rig.count(ACTIVATE) == 3
    activations = [r for r in rig.sent if r.url.path.endswith("/activate")]
    assert all(r.headers["Authorization"].startswith("Bearer ey") for r in activations)
    mint = next(r for r in rig.sent if r.url.path == "/oauth2/token")
    assert mint.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert b"grant_type=client_credentials" in mint.content


def test_token_is_renewed_a_minute_before_it_expires(rig: Rig) -> None:
    """GIVEN a 3600 s token WHEN the clock reaches 3540 s minus a second THEN it is reused; a second
    later (59 s before expiry) a new one is minted."""
    clock = Clock()
    engine = rig.engine(clock=clock)
    engine.activate([Demand("a", 1)], 30)
    assert rig.count(MINT) == 1
    clock.now += 3600 - 60 - 1
    engine.activate([Demand("a", 1)], 30)
    assert rig.count(MINT) == 1
    clock.now += 2
    engine.activate([Demand("a", 1)], 30)
    assert rig.count(MINT) == 2


def test_refused_token_is_minted_again_and_the_call_retried_once(rig: Rig) -> None:
    """GIVEN a cached token the engine no longer accepts WHEN activating THEN the adapter mints a
    new one and retries that call once, and the job comes back."""
    engine = rig.engine()
    engine.activate([Demand("a", 1)], 30)
    rig.emu.invalidate_tokens()
    job_id = rig.emu.create_job("a", {"n": 1})
    jobs = engine.activate([Demand("a", 1)], 30)
    assert [j.ref.job_id for j in jobs] == [job_id]
    assert rig.count(MINT) == 2
    assert rig.count(ACTIVATE) == 3


def test_second_401_raises_auth_expired(rig: Rig) -> None:
    engine = rig.engine()
    rig.fault(method="POST", path=ACTIVATE_PATTERN, status=401, times=2)
    with pytest.raises(AuthExpiredError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert info.value.status == 401
    assert rig.count(MINT) == 2
    assert rig.count(ACTIVATE) == 2
    assert_no_secret(rig, info.value)


def test_auth_off_sends_no_authorization(open_rig: Rig) -> None:
    """GIVEN the auth-off block (empty SHEPTRA_TOKEN_ENDPOINT) THEN nothing is minted and no
    Authorization header is sent at all."""
    assert open_rig.values()["SHEPTRA_TOKEN_ENDPOINT"] == ""
    engine = open_rig.engine()
    job_id = open_rig.emu.create_job("a", {})
    [job] = engine.activate([Demand("a", 1)], 30)
    engine.report(job.ref, Outcome.complete({"ok": True}))
    assert open_rig.emu.job_state(job_id)["state"] == "completed"
    assert open_rig.sent
    assert all("Authorization" not in r.headers for r in open_rig.sent)
    assert all(r.url.path != "/oauth2/token" for r in open_rig.sent)


def test_auth_off_but_engine_wants_a_token_is_a_config_error(rig: Rig) -> None:
    engine = rig.engine(SHEPTRA_TOKEN_ENDPOINT="")
    with pytest.raises(ConfigurationError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert info.value.key == "SHEPTRA_TOKEN_ENDPOINT"


def test_revoked_client_is_a_config_error_without_the_secret(rig: Rig) -> None:
    rig.emu.revoke_client()
    engine = rig.engine()
    with pytest.raises(ConfigurationError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert "SHEPTRA_CLIENT_ID" in str(info.value)
    assert "SHEPTRA_CLIENT_SECRET" in str(info.value)
    assert_no_secret(rig, info.value)


def test_wrong_secret_is_a_config_error_without_the_secret(rig: Rig) -> None:
    wrong = "secret_wrong-one-do-not-print"
    engine = rig.engine(SHEPTRA_CLIENT_SECRET=wrong)
    with pytest.raises(ConfigurationError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert wrong not in str(info.value)
    assert "SHEPTRA_CLIENT_SECRET" in str(info.value)


def test_token_endpoint_outage_is_retryable(rig: Rig) -> None:
    rig.fault(method="POST", path="/oauth2/token", status=503, headers={"Retry-After": "4"})
    with pytest.raises(RateLimitedError) as info:
        rig.engine().activate([Demand("a", 1)], 30)
    assert info.value.retry_after == 4


def test_secret_and_token_echoed_by_the_engine_are_redacted(rig: Rig) -> None:
    """GIVEN an engine whose error body echoes the secret and the token WHEN it is raised THEN
    neither appears in the exception text or its parsed problem."""
    engine = rig.engine()
    engine.activate([Demand("a", 1)], 30)
    token = next(r for r in rig.sent if "Authorization" in r.headers).headers["Authorization"][7:]
    echo = f"bad request from {rig.emu.client_secret} with {token}"
    rig.fault(
        method="POST",
        path=ACTIVATE_PATTERN,
        status=400,
        body={"type": "about:blank", "title": "Bad Request", "status": 400, "detail": echo},
    )
    with pytest.raises(RejectedError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert "***" in str(info.value)
    assert_no_secret(rig, info.value)


# ---- finding the engine -------------------------------------------------------------------------


def test_discovery_is_resolved_once_and_cached(rig: Rig) -> None:
    engine = rig.engine(SHEPTRA_MODE="discovery", SHEPTRA_API_URL="")
    job_id = rig.emu.create_job("a", {})
    for _ in range(3):
        engine.activate([Demand("a", 1)], 30)
    assert rig.count(DISCOVER) == 1
    discovery = next(r for r in rig.sent if r.url.path == "/v1/discovery/cell")
    assert discovery.url.params["cluster"] == rig.emu.cluster
    assert discovery.headers["Authorization"].startswith("Bearer ")
    assert rig.emu.job_state(job_id)["state"] == "leased"


def test_421_after_a_cell_move_re_resolves_and_retries(rig: Rig) -> None:
    """GIVEN a discovery-mode adapter WHEN the environment moves cell THEN the old prefix's 421
    makes it resolve again and retry the same call once, which returns the job."""
    engine = rig.engine(SHEPTRA_MODE="discovery")
    engine.activate([Demand("a", 1)], 30)
    rig.emu.move_cell()
    job_id = rig.emu.create_job("a", {})
    [job] = engine.activate([Demand("a", 1)], 30)
    assert job.ref.job_id == job_id
    assert rig.count(DISCOVER) == 2
    paths = [r.url.path for r in rig.sent if r.url.path.endswith("/activate")]
    assert paths[-2].startswith("/cells/cell-a/")
    assert paths[-1].startswith("/cells/cell-b/")
    engine.report(job.ref, Outcome.complete({}))
    assert rig.emu.job_state(job_id)["state"] == "completed"


def test_421_in_config_mode_says_the_api_url_is_wrong(rig: Rig) -> None:
    engine = rig.engine()
    rig.emu.move_cell()
    with pytest.raises(ConfigurationError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert info.value.key == "SHEPTRA_API_URL"
    assert "SHEPTRA_API_URL" in str(info.value)
    assert rig.count(ACTIVATE) == 1


def test_unknown_cluster_is_a_config_error(rig: Rig) -> None:
    engine = rig.engine(SHEPTRA_MODE="discovery", SHEPTRA_ENVIRONMENT="no-such-cluster")
    with pytest.raises(ConfigurationError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert info.value.key == "SHEPTRA_ENVIRONMENT"
    assert "no-such-cluster" in str(info.value)


def test_management_outage_never_stops_a_configured_worker(rig: Rig) -> None:
    """GIVEN a resolved baseUrl WHEN discovery goes down THEN activation goes on; after three
    consecutive connection failures the adapter asks discovery again, finds it down, and keeps
    polling the cached baseUrl."""
    engine = rig.engine(SHEPTRA_MODE="discovery")
    engine.activate([Demand("a", 1)], 30)
    rig.fault(method="GET", path="/v1/discovery/cell", status=503, times=100)
    engine.activate([Demand("a", 1)], 30)
    assert rig.count(DISCOVER) == 1

    rig.fault(method="POST", path=ACTIVATE_PATTERN, drop=True, times=3)
    for _ in range(3):
        with pytest.raises(EngineUnavailableError):
            engine.activate([Demand("a", 1)], 30)
    job_id = rig.emu.create_job("a", {})
    [job] = engine.activate([Demand("a", 1)], 30)
    assert job.ref.job_id == job_id
    assert rig.count(DISCOVER) == 2  # asked once after the failures, not on every call
    engine.activate([Demand("a", 1)], 30)
    assert rig.count(DISCOVER) == 2


def test_discovery_down_at_startup_is_retryable(rig: Rig) -> None:
    rig.fault(method="GET", path="/v1/discovery/cell", status=503)
    with pytest.raises(EngineUnavailableError):
        rig.engine(SHEPTRA_MODE="discovery").activate([Demand("a", 1)], 30)


def test_discovery_answer_pointing_at_metadata_is_refused(rig: Rig) -> None:
    rig.fault(method="GET", path="/v1/discovery/cell", status=200, body={"baseUrl": "https://169.254.169.254/latest"})
    with pytest.raises(ResponseShapeError) as info:
        rig.engine(SHEPTRA_MODE="discovery").activate([Demand("a", 1)], 30)
    assert info.value.field == "baseUrl"
    assert all(r.url.host != "169.254.169.254" for r in rig.sent)


# ---- activate ---------------------------------------------------------------------------------


def test_activate_sends_one_request_for_every_type_with_capacity(rig: Rig) -> None:
    """GIVEN demands of capacities 5, 2 and 0 WHEN activating THEN one request with the two types
    that have room, maxJobs 2 (the smallest), waitSeconds 0 and the workerId label."""
    ids = [rig.emu.create_job("a", {"i": i}) for i in range(4)]
    engine = rig.engine()
    jobs = engine.activate([Demand("a", 5), Demand("b", 2), Demand("c", 0)], 45)
    assert rig.count(ACTIVATE) == 1
    [body] = rig.bodies("/activate")
    assert body == {"types": ["a", "b"], "maxJobs": 2, "leaseSeconds": 45, "waitSeconds": 0, "workerId": "w1"}
    assert "type" not in body
    assert [j.ref.job_id for j in jobs] == ids[:2]


def test_activated_job_is_mapped(rig: Rig) -> None:
    job_id = rig.emu.create_job(
        "a", {"orderId": "2481", "amount": 4200}, retries=5, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    )
    clock = Clock(rig.emu.now())
    [job] = rig.engine(clock=clock).activate([Demand("a", 3)], 30)
    state = rig.emu.job_state(job_id)
    assert job.ref.engine == "sheptra"
    assert job.ref.job_id == job_id
    assert job.ref.job_type == "a"
    assert job.ref.attempt == "r5"
    assert job.retries == 5
    assert job.variables == {"orderId": "2481", "amount": 4200}
    assert job.lease_expires_at == pytest.approx(state["lock_expires_at"], abs=0.01)
    assert job.activated_at == clock.now
    assert job.instance_id == state["instance_id"]
    assert job.element_id == "A"
    assert job.traceparent == "00-" + "1" * 32 + "-" + "2" * 16 + "-01"


def test_granted_lease_is_what_the_engine_clamped(rig: Rig) -> None:
    """The emulator clamps leases to 600 s: lease_expires_at is what was granted, not asked."""
    rig.emu.create_job("a", {})
    before = rig.emu.now()
    [job] = rig.engine().activate([Demand("a", 1)], 3000)
    assert before + 599 < job.lease_expires_at < rig.emu.now() + 601


def test_no_capacity_sends_nothing(rig: Rig) -> None:
    rig.emu.create_job("a", {})
    engine = rig.engine()
    assert engine.activate([Demand("a", 0), Demand("b", 0)], 30) == []
    assert engine.activate([], 30) == []
    assert rig.sent == []


def test_tenant_ids_are_sent_when_configured(rig: Rig) -> None:
    job_id = rig.emu.create_job("a", {}, tenant_id="eu")
    engine = rig.engine(SHEPTRA_TENANT_IDS="eu,us")
    [job] = engine.activate([Demand("a", 1)], 30)
    assert job.ref.job_id == job_id
    assert rig.bodies("/activate")[0]["tenantIds"] == ["eu", "us"]


def _lease_then_fake_answer(
    rig: Rig, engine: SheptraEngine, job_type: str, mutate: Callable[[dict[str, Any]], None]
) -> tuple[str, dict[str, Any]]:
    """Lease a real job, then make the next activation answer a mutated copy of it (plus a good one)."""
    job_id = rig.emu.create_job(job_type, {"k": 1})
    [leased] = engine.activate([Demand(job_type, 1)], 30)
    good_id = rig.emu.create_job(job_type, {"k": 2})
    bad = {
        "id": job_id,
        "instanceId": leased.instance_id,
        "elementId": leased.element_id,
        "type": job_type,
        "retries": leased.retries,
        "lockExpiresAt": "2099-01-01T00:00:00Z",
        "variables": {"k": 1},
    }
    good = {**bad, "id": good_id, "type": "a", "variables": {"k": 2}}
    mutate(bad)
    rig.fault(method="POST", path=ACTIVATE_PATTERN, status=200, body={"jobs": [bad, good]})
    return job_id, good


@pytest.mark.parametrize(
    ("field_name", "mutate"),
    [
        ("lockExpiresAt", lambda job: job.update(lockExpiresAt="soon")),
        ("variables", lambda job: job.update(variables=[1, 2])),
        ("retries", lambda job: job.update(retries="3")),
        ("type", lambda job: job.pop("type")),
        ("elementId", lambda job: job.update(elementId=7)),
    ],
)
def test_malformed_job_is_handed_back_and_the_rest_kept(
    rig: Rig, caplog: pytest.LogCaptureFixture, field_name: str, mutate: Callable[[dict[str, Any]], None]
) -> None:
    """GIVEN an activation answer with one malformed job WHEN parsed THEN that job is failed back
    at once (retries unchanged where known, no backoff, the field named) and logged; the good job
    is returned."""
    engine = rig.engine()
    job_id, good = _lease_then_fake_answer(rig, engine, "a", mutate)
    with caplog.at_level(logging.WARNING, logger="workerless.engines.sheptra"):
        jobs = engine.activate([Demand("a", 5)], 30)
    assert [j.ref.job_id for j in jobs] == [good["id"]]
    [fail] = rig.bodies("/fail")
    assert fail["retryBackoffSeconds"] == 0
    assert field_name in fail["errorMessage"]
    state = rig.emu.job_state(job_id)
    assert state["state"] == "ready"
    if field_name != "retries":
        assert fail["retries"] == 3
        assert state["retries"] == 3
    assert field_name in state["error_message"]
    assert job_id in caplog.text
    assert field_name in caplog.text


def test_malformed_job_without_id_is_left_to_its_lease(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    engine = rig.engine()
    rig.fault(
        method="POST",
        path=ACTIVATE_PATTERN,
        status=200,
        body={"jobs": [{"type": "a", "retries": 3}, "junk"]},
    )
    with caplog.at_level(logging.ERROR, logger="workerless.engines.sheptra"):
        assert engine.activate([Demand("a", 5)], 30) == []
    assert rig.bodies("/fail") == []
    assert "without a usable id" in caplog.text


def test_job_of_an_undemanded_type_is_handed_back(rig: Rig) -> None:
    engine = rig.engine()
    job_id, good = _lease_then_fake_answer(rig, engine, "a", lambda job: job.update(type="zzz"))
    jobs = engine.activate([Demand("a", 5)], 30)
    assert [j.ref.job_id for j in jobs] == [good["id"]]
    [fail] = rig.bodies("/fail")
    assert "zzz" in fail["errorMessage"]
    assert fail == {**fail, "retries": 3, "retryBackoffSeconds": 0}
    assert rig.emu.job_state(job_id)["state"] == "ready"
    assert rig.emu.job_state(job_id)["retries"] == 3


@pytest.mark.parametrize("body", [{"items": []}, {"jobs": {"id": "x"}}, [1, 2], "nope"])
def test_malformed_envelope_names_the_jobs_field(rig: Rig, body: Any) -> None:
    rig.fault(method="POST", path=ACTIVATE_PATTERN, status=200, body=body)
    with pytest.raises(ResponseShapeError) as info:
        rig.engine().activate([Demand("a", 1)], 30)
    assert info.value.field == "jobs"
    assert "jobs" in str(info.value)


# ---- report, extend, release --------------------------------------------------------------------


def _one(rig: Rig, engine: SheptraEngine, *, retries: int = 3, job_type: str = "a") -> tuple[str, Any]:
    job_id = rig.emu.create_job(job_type, {"in": 1}, retries=retries)
    [job] = engine.activate([Demand(job_type, 1)], 30)
    return job_id, job


def test_complete(rig: Rig) -> None:
    engine = rig.engine()
    job_id, job = _one(rig, engine)
    engine.report(job.ref, Outcome.complete({"paymentOk": True}))
    state = rig.emu.job_state(job_id)
    assert state["state"] == "completed"
    assert state["output"] == {"paymentOk": True}
    assert rig.bodies("/complete") == [{"variables": {"paymentOk": True}, "workerId": "w1"}]


def test_fail_with_retries_left_and_backoff(rig: Rig) -> None:
    engine = rig.engine()
    job_id, job = _one(rig, engine)
    engine.report(job.ref, Outcome.fail("boom", retries=2, backoff_seconds=30))
    state = rig.emu.job_state(job_id)
    assert state["state"] == "ready"
    assert state["retries"] == 2
    assert state["error_message"] == "boom"
    assert rig.bodies("/fail") == [{"errorMessage": "boom", "retries": 2, "retryBackoffSeconds": 30, "workerId": "w1"}]
    assert engine.activate([Demand("a", 1)], 30) == []  # backing off
    rig.emu.advance(31)
    [again] = engine.activate([Demand("a", 1)], 30)
    assert again.ref.job_id == job_id
    assert again.ref.attempt == "r2"
    assert again.ref.key != job.ref.key


def test_terminal_fail_sends_zero_retries(rig: Rig) -> None:
    engine = rig.engine()
    job_id, job = _one(rig, engine)
    engine.report(job.ref, Outcome.fail("bad input", retries=2, terminal=True))
    assert rig.emu.job_state(job_id)["state"] == "failed"
    assert rig.bodies("/fail")[0]["retries"] == 0


def test_throw_error(rig: Rig) -> None:
    engine = rig.engine()
    job_id, job = _one(rig, engine)
    engine.report(job.ref, Outcome.throw("CARD_DECLINED", "card declined", {"reason": "expired"}))
    state = rig.emu.job_state(job_id)
    assert state["state"] == "thrown"
    assert state["error_code"] == "CARD_DECLINED"
    assert state["error_message"] == "card declined"
    assert state["output"] == {"reason": "expired"}
    assert rig.bodies("/throw-error") == [
        {
            "errorCode": "CARD_DECLINED",
            "errorMessage": "card declined",
            "variables": {"reason": "expired"},
            "workerId": "w1",
        }
    ]


def test_complete_twice_is_lease_lost(rig: Rig) -> None:
    """A 409 on complete means someone else finished this: LeaseLostError, never a retry."""
    engine = rig.engine()
    _, job = _one(rig, engine)
    engine.report(job.ref, Outcome.complete({}))
    with pytest.raises(LeaseLostError) as info:
        engine.report(job.ref, Outcome.complete({}))
    assert info.value.status == 409
    assert "someone else finished" in str(info.value)
    assert rig.count(COMPLETE) == 2


def test_extend_re_anchors_the_lease(rig: Rig) -> None:
    engine = rig.engine()
    job_id, job = _one(rig, engine)
    rig.emu.advance(20)
    expires = engine.extend(job.ref, 60)
    assert expires == pytest.approx(rig.emu.job_state(job_id)["lock_expires_at"], abs=0.01)
    assert expires > job.lease_expires_at + 40
    assert rig.bodies("/extend-lease") == [{"leaseSeconds": 60, "workerId": "w1"}]


def test_extend_after_completion_is_lease_lost(rig: Rig) -> None:
    engine = rig.engine()
    _, job = _one(rig, engine)
    engine.report(job.ref, Outcome.complete({}))
    with pytest.raises(LeaseLostError):
        engine.extend(job.ref, 60)


def test_release_hands_back_with_retries_unchanged(rig: Rig) -> None:
    engine = rig.engine()
    job_id, job = _one(rig, engine, retries=4)
    engine.release(job, "SQS send failed")
    state = rig.emu.job_state(job_id)
    assert state["state"] == "ready"
    assert state["retries"] == 4
    assert "SQS send failed" in state["error_message"]
    [again] = engine.activate([Demand("a", 1)], 30)
    assert again.ref.job_id == job_id


def test_over_the_cap_is_refused_before_sending(rig: Rig) -> None:
    engine = rig.engine()
    _, job = _one(rig, engine)
    big = {"blob": "x" * PAYLOAD_CAP}
    with pytest.raises(PayloadTooLargeError) as info:
        engine.report(job.ref, Outcome.complete(big))
    assert info.value.cap == 1_048_576
    with pytest.raises(PayloadTooLargeError):
        engine.report(job.ref, Outcome.throw("E", "too big", big))
    assert rig.count(COMPLETE) == 0
    assert rig.count("POST /cells/{cell}/v1/jobs/{id}/throw-error") == 0


def test_413_from_the_engine_is_payload_too_large(small_cap_rig: Rig) -> None:
    rig = small_cap_rig
    engine = rig.engine()
    _, job = _one(rig, engine)
    with pytest.raises(PayloadTooLargeError) as info:
        engine.report(job.ref, Outcome.complete({"blob": "x" * 500}))
    assert info.value.status == 413
    assert info.value.cap == PAYLOAD_CAP


# ---- throttling and transport --------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_throttled_answer_carries_retry_after_and_is_not_retried(rig: Rig, status: int) -> None:
    engine = rig.engine()
    engine.activate([Demand("a", 1)], 30)
    rig.fault(method="POST", path=ACTIVATE_PATTERN, status=status, headers={"Retry-After": "7"})
    with pytest.raises(RateLimitedError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert info.value.retry_after == 7
    assert info.value.status == status
    assert rig.count(ACTIVATE) == 2  # raised, not slept on and retried


def test_throttled_report_carries_retry_after(rig: Rig) -> None:
    engine = rig.engine()
    job_id, job = _one(rig, engine)
    rig.fault(method="POST", path="/cells/{cell}/v1/jobs/{id}/complete", status=429, headers={"Retry-After": "2"})
    with pytest.raises(RateLimitedError) as info:
        engine.report(job.ref, Outcome.complete({}))
    assert info.value.retry_after == 2
    assert info.value.job_id == job_id
    engine.report(job.ref, Outcome.complete({}))
    assert rig.emu.job_state(job_id)["state"] == "completed"


def test_dropped_connection_is_unavailable(rig: Rig) -> None:
    engine = rig.engine()
    engine.activate([Demand("a", 1)], 30)
    rig.fault(method="POST", path=ACTIVATE_PATTERN, drop=True)
    with pytest.raises(EngineUnavailableError) as info:
        engine.activate([Demand("a", 1)], 30)
    assert info.value.retryable
    assert_no_secret(rig, info.value)


def test_engine_errors_never_carry_secrets(rig: Rig) -> None:
    """Every error raised across a sweep of failure modes is free of the secret and the token."""
    engine = rig.engine()
    _, job = _one(rig, engine)
    raised: list[BaseException] = []
    for status in (400, 401, 403, 404, 409, 413, 429, 500, 503):
        rig.fault(method="POST", path="/cells/{cell}/v1/jobs/{id}/extend-lease", status=status, times=2)
        with pytest.raises((EngineError, ConfigurationError)) as info:
            engine.extend(job.ref, 30)
        raised.append(info.value)
        rig.clear_faults()
    for exc in raised:
        assert_no_secret(rig, exc)


def test_close_and_no_optional_capabilities(rig: Rig) -> None:
    """Sheptra leases at activation, keeps no task logs and wants no liveness report: it has none of
    the optional capabilities, and close sends nothing."""
    engine = rig.engine()
    _one(rig, engine)
    before = len(rig.sent)
    assert (engine.lease_acquire, engine.task_logs, engine.liveness) == (None, None, None)
    engine.close()
    assert len(rig.sent) == before
    assert engine.lease is ACTIVATION_LEASE
    assert engine.name == "sheptra"


# ---- the block exactly as the emulator prints it ------------------------------------------------


def test_printed_blocks_parse_into_working_adapters(rig: Rig, open_rig: Rig) -> None:
    """The three variants of the block, as printed, through parse_env_text: normal and auth-off
    work end to end, the placeholder is refused naming SHEPTRA_TOKEN_ENDPOINT."""
    for served, variant in ((rig, "normal"), (open_rig, "auth_off")):
        engine = from_values(parse_env_text(served.emu.env_block(served.url, variant)), served.client)
        job_id = served.emu.create_job("a", {"v": variant})
        [job] = engine.activate([Demand("a", 1)], 30)
        engine.report(job.ref, Outcome.complete({}))
        assert served.emu.job_state(job_id)["state"] == "completed"
    with pytest.raises(ConfigurationError) as info:
        from_values(parse_env_text(rig.emu.env_block(rig.url, "placeholder")), rig.client)
    assert info.value.key == "SHEPTRA_TOKEN_ENDPOINT"


def test_discovery_re_mints_when_its_token_is_refused(rig: Rig) -> None:
    """GIVEN a resolved adapter whose token was invalidated WHEN the cell moves THEN the 421 leads
    to discovery, whose 401 leads to one re-mint, and the call is retried at the new cell."""
    engine = rig.engine(SHEPTRA_MODE="discovery")
    engine.activate([Demand("a", 1)], 30)
    rig.emu.invalidate_tokens()
    rig.emu.move_cell()
    job_id = rig.emu.create_job("a", {})
    [job] = engine.activate([Demand("a", 1)], 30)
    assert job.ref.job_id == job_id
    assert rig.count(MINT) == 2
    assert rig.count(DISCOVER) == 3
