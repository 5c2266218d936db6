"""The Sheptra emulator over real HTTP on 127.0.0.1, checked against seed 000 with raw httpx."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from workerless._core.settings import parse_env_text
from workerless_devkit.emulators import sheptra
from workerless_devkit.emulators.sheptra import MAX_VARIABLES_BYTES, SheptraEmulator, variables_size
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.waits import EVENT_SECONDS, eventually, record_waits


class Worker:
    """A raw worker against one served emulator: mints, remembers its token, posts engine calls."""

    def __init__(self, emulator: SheptraEmulator, base_url: str) -> None:
        self.emulator = emulator
        self.base_url = base_url
        self.values = emulator.engine_values(base_url)
        self.http = httpx.Client(timeout=10.0)
        self.token: str | None = None

    def mint(self, **form: str) -> httpx.Response:
        data = {
            "grant_type": "client_credentials",
            "client_id": self.values["SHEPTRA_CLIENT_ID"],
            "client_secret": self.values["SHEPTRA_CLIENT_SECRET"],
            **form,
        }
        response = self.http.post(self.values["SHEPTRA_TOKEN_ENDPOINT"], data=data)
        if response.status_code == 200:
            self.token = response.json()["access_token"]
        return response

    def headers(self) -> dict[str, str]:
        if self.token is None and self.emulator.auth:
            assert self.mint().status_code == 200
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def post(self, path: str, body: Any = None, *, api_url: str | None = None) -> httpx.Response:
        url = (api_url or self.emulator.api_url(self.base_url)) + path
        return self.http.post(url, json=body if body is not None else {}, headers=self.headers())

    def activate(self, **body: Any) -> httpx.Response:
        if "type" not in body:
            body.setdefault("types", ["charge-payment"])
        return self.post("/v1/jobs/activate", body)

    def jobs(self, **body: Any) -> list[dict[str, Any]]:
        response = self.activate(**body)
        assert response.status_code == 200, response.text
        jobs: list[dict[str, Any]] = response.json()["jobs"]
        return jobs


#: lockExpiresAt carries milliseconds.
MS = 0.001


def epoch(iso: str) -> float:
    assert iso.endswith("Z")
    return datetime.fromisoformat(iso).timestamp()


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["title"]
    return body


@pytest.fixture
def served(workerless_emulator: EmulatorFactory) -> tuple[SheptraEmulator, str]:
    running = workerless_emulator("sheptra", long_poll_cap=0.4)
    return running.emulator, running.url


@pytest.fixture
def worker(served: tuple[SheptraEmulator, str]) -> Iterator[Worker]:
    w = Worker(*served)
    yield w
    w.http.close()


@pytest.fixture
def emu(served: tuple[SheptraEmulator, str]) -> SheptraEmulator:
    return served[0]


# ---------------------------------------------------------------- tokens


def test_mint_returns_rs256_jwt_with_the_seed_claims(worker: Worker, emu: SheptraEmulator) -> None:
    response = worker.mint()
    assert response.status_code == 200
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    token = body["access_token"]
    assert jwt.get_unverified_header(token)["alg"] == "RS256"

    auth = worker.http.get(worker.base_url + "/v1/discovery/auth").json()
    keys = worker.http.get(auth["jwksUri"]).json()["keys"]
    key = jwt.PyJWK(keys[0]).key
    claims = jwt.decode(token, key, algorithms=["RS256"], audience=auth["audience"], issuer=auth["issuer"])
    assert claims["sub"] == "client_demo"
    assert claims["org_id"] == "org_demo"
    assert claims["aud"] == auth["audience"]
    assert claims["exp"] - claims["iat"] == 3600
    assert auth["tokenEndpoint"] == worker.values["SHEPTRA_TOKEN_ENDPOINT"]
    assert emu.tokens_minted == 1


def test_bad_credentials_and_grant_are_refused(worker: Worker) -> None:
    body = assert_problem(worker.mint(client_secret="not-the-secret-4711"), 401)
    assert body["error"] == "invalid_client"
    assert "4711" not in json.dumps(body)
    assert worker.values["SHEPTRA_CLIENT_SECRET"] not in json.dumps(body)
    assert_problem(worker.mint(client_id="client_other"), 401)
    assert_problem(worker.mint(client_secret="sécret"), 401)  # non-ASCII is a refusal, not a 500
    assert_problem(worker.mint(grant_type="password"), 400)


def test_engine_calls_need_a_valid_unexpired_token(worker: Worker, emu: SheptraEmulator) -> None:
    url = emu.api_url(worker.base_url) + "/v1/jobs/activate"
    assert_problem(worker.http.post(url, json={"type": "a"}), 401)
    assert_problem(worker.http.post(url, json={"type": "a"}, headers={"Authorization": "Bearer nope"}), 401)
    assert worker.activate().status_code == 200

    emu.advance(3600)  # the one-hour token is now expired by the emulator clock
    body = assert_problem(worker.activate(), 401)
    assert "expired" in body["detail"]
    assert worker.mint().status_code == 200
    assert worker.activate().status_code == 200


def test_revoked_client_cannot_mint_but_its_token_works_until_expiry(worker: Worker, emu: SheptraEmulator) -> None:
    assert worker.mint().status_code == 200
    emu.revoke_client()
    assert_problem(worker.mint(), 401)
    assert worker.activate().status_code == 200  # the held token keeps working...
    emu.advance(3601)
    assert_problem(worker.activate(), 401)  # ...until it expires


def test_invalidated_tokens_are_refused_and_new_mints_work(worker: Worker, emu: SheptraEmulator) -> None:
    assert worker.activate().status_code == 200
    worker.http.post(worker.base_url + "/_admin/tokens/invalidate").raise_for_status()
    assert_problem(worker.activate(), 401)
    assert worker.mint().status_code == 200
    assert worker.activate().status_code == 200


def test_auth_off_needs_no_token_and_ignores_one(workerless_emulator: EmulatorFactory) -> None:
    running = workerless_emulator("sheptra", auth=False)
    emulator, url = running.emulator, running.url
    with httpx.Client() as http:
        values = emulator.engine_values(url)
        assert values["SHEPTRA_TOKEN_ENDPOINT"] == ""
        assert http.post(url + "/oauth2/token", data={"grant_type": "client_credentials"}).status_code == 404
        assert http.get(url + "/v1/discovery/auth").json()["enabled"] is False
        emulator.create_job("a", {"x": 1})
        url = values["SHEPTRA_API_URL"] + "/v1/jobs/activate"
        jobs = http.post(url, json={"type": "a"}, headers={"Authorization": "Bearer garbage"}).json()["jobs"]
        assert [job["variables"] for job in jobs] == [{"x": 1}]
        assert http.post(f"{values['SHEPTRA_API_URL']}/v1/jobs/{jobs[0]['id']}/complete", json={}).status_code == 204
        found = http.get(values["SHEPTRA_DISCOVERY_URL"], params={"cluster": "cell-a-env"}).json()
        assert found["baseUrl"] == values["SHEPTRA_API_URL"]


# ---------------------------------------------------------------- the environment block


def test_env_block_variants_are_valid_dotenv_in_drive_order(emu: SheptraEmulator) -> None:
    base = "http://127.0.0.1:9"
    keys = [
        "SHEPTRA_TOKEN_ENDPOINT",
        "SHEPTRA_CLIENT_ID",
        "SHEPTRA_CLIENT_SECRET",
        "SHEPTRA_API_URL",
        "SHEPTRA_DISCOVERY_URL",
        "SHEPTRA_ENVIRONMENT",
    ]
    normal = emu.env_block(base, "normal")
    assert [line.split("=", 1)[0] for line in normal.splitlines()] == keys
    assert parse_env_text(normal) == emu.engine_values(base)

    auth_off = emu.env_block(base, "auth_off").splitlines()
    assert auth_off[:2] == [
        "# authentication is off on this deployment — nothing to mint from; leave blank",
        "SHEPTRA_TOKEN_ENDPOINT=",
    ]
    assert parse_env_text("\n".join(auth_off))["SHEPTRA_API_URL"] == base + "/cells/cell-a"

    placeholder = emu.env_block(base, "placeholder").splitlines()
    assert placeholder[0].startswith("# ")
    assert placeholder[1] == "SHEPTRA_TOKEN_ENDPOINT=https://<your-authkit-domain>/oauth2/token"
    assert parse_env_text("\n".join(placeholder))["SHEPTRA_CLIENT_ID"] == "client_demo"
    assert sheptra.create(auth=False).env_block(base).startswith("# authentication is off")


# ---------------------------------------------------------------- activation


def test_activate_rejects_both_or_neither_type_and_bad_fields(worker: Worker) -> None:
    assert_problem(worker.post("/v1/jobs/activate", {"type": "a", "types": ["a"]}), 400)
    assert_problem(worker.post("/v1/jobs/activate", {"maxJobs": 1}), 400)
    assert_problem(worker.activate(maxJobs=0), 400)
    assert_problem(worker.activate(leaseSeconds=0), 400)
    assert_problem(worker.activate(waitSeconds=-1), 400)
    assert_problem(worker.activate(types=[]), 400)


def test_short_poll_returns_at_once(worker: Worker, emu: SheptraEmulator) -> None:
    """waitSeconds 0 (or absent) never parks the request: the emulator waited on nothing."""
    parked = record_waits(emu, "_changed")
    assert worker.jobs(waitSeconds=0) == []
    assert worker.jobs() == []
    assert parked.waits == []


def test_long_poll_is_released_by_a_job_created_mid_wait(workerless_emulator: EmulatorFactory) -> None:
    """GIVEN a long poll held open WHEN another thread queues a job THEN the poll answers with it.

    The job is created once the poll is parked, and the window (60 s) is far longer than that takes:
    a poll that answers with the job was released by it, not by its deadline (which answers [])."""
    running = workerless_emulator("sheptra", long_poll_cap=60.0)
    emulator, url = running.emulator, running.url
    parked = record_waits(emulator, "_changed")
    w = Worker(emulator, url)
    w.mint()
    answer: dict[str, Any] = {}
    poll = threading.Thread(target=lambda: answer.update(jobs=w.jobs(waitSeconds=60)))
    poll.start()
    eventually("the long poll parked", lambda: bool(parked.waits))
    emulator.create_job("charge-payment", {"n": 1})
    poll.join(timeout=EVENT_SECONDS)
    assert not poll.is_alive(), "the long poll was not released by the new job"
    w.http.close()
    assert [job["variables"] for job in answer["jobs"]] == [{"n": 1}]


def test_long_poll_is_capped_by_the_server(worker: Worker, emu: SheptraEmulator) -> None:
    """waitSeconds 30 against the fixture's 0.4 s cap: the request parks, never for longer than the cap
    (a lower bound on the time is safe on a busy machine; the upper one is what the server waited for)."""
    parked = record_waits(emu, "_changed")
    started = time.monotonic()
    assert worker.jobs(waitSeconds=30) == []
    assert time.monotonic() - started >= 0.4
    assert parked.waits
    assert all(timeout is not None and timeout <= 0.4 for timeout in parked.waits)


def test_long_poll_wakes_when_a_backoff_ends(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment")
    (job,) = worker.jobs()
    assert worker.post(f"/v1/jobs/{job_id}/fail", {"retries": 2, "retryBackoffSeconds": 0.2}).status_code == 204
    assert [j["id"] for j in worker.jobs(waitSeconds=5)] == [job["id"]]


def test_jobs_arrive_oldest_first_across_types_up_to_max_jobs(worker: Worker, emu: SheptraEmulator) -> None:
    ids = [emu.create_job(t, {"i": i}) for i, t in enumerate(["b", "a", "c", "b", "a"])]
    first = worker.jobs(types=["a", "b"], maxJobs=3)
    assert [job["id"] for job in first] == [ids[0], ids[1], ids[3]]
    assert [job["type"] for job in first] == ["b", "a", "b"]
    assert [job["id"] for job in worker.jobs(types=["a", "b"])] == [ids[4]]
    assert [job["id"] for job in worker.jobs(type="c")] == [ids[2]]


def test_activated_job_has_the_seed_shape(worker: Worker, emu: SheptraEmulator) -> None:
    emu.create_job("charge-payment", {"orderId": "2481", "amount": 4200}, instance_id="inst-1")
    before = emu.now()
    (job,) = worker.jobs()
    after = emu.now()
    assert set(job) == {"id", "instanceId", "elementId", "type", "retries", "lockExpiresAt", "variables", "traceparent"}
    assert job["instanceId"] == "inst-1"
    assert job["elementId"] == "ChargePayment"
    assert job["retries"] == 3
    assert job["traceparent"].startswith("00-")
    assert before + 60 - MS <= epoch(job["lockExpiresAt"]) <= after + 60 + MS  # default lease, from activation
    state = emu.job_state(job["id"])
    assert state["state"] == "leased"
    assert state["holder"] == "client_demo"
    assert state["attempts"] == 1


def test_tenant_filter(worker: Worker, emu: SheptraEmulator) -> None:
    default = emu.create_job("charge-payment")
    acme = emu.create_job("charge-payment", tenant_id="acme")
    assert [job["id"] for job in worker.jobs(tenantIds=["acme"])] == [acme]
    assert [job["id"] for job in worker.jobs()] == [default]


def test_lease_is_clamped_to_the_maximum(worker: Worker, emu: SheptraEmulator) -> None:
    emu.create_job("charge-payment")
    before = emu.now()
    (job,) = worker.jobs(leaseSeconds=100_000)
    after = emu.now()
    assert before + emu.max_lease_seconds - MS <= epoch(job["lockExpiresAt"]) <= after + emu.max_lease_seconds + MS


# ---------------------------------------------------------------- leases


def test_lapsed_lease_goes_to_the_next_activation_and_costs_a_retry(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment")
    worker.jobs(leaseSeconds=10, workerId="first")
    assert worker.jobs(workerId="second") == []  # until lockExpiresAt nobody else is handed it
    emu.advance(11)
    (again,) = worker.jobs(workerId="second")
    assert again["id"] == job_id
    assert again["retries"] == 2
    state = emu.job_state(job_id)
    assert (state["attempts"], state["holder"]) == (2, "client_demo/second")
    # The first worker lost it: every report is a 409.
    assert_problem(worker.post(f"/v1/jobs/{job_id}/extend-lease", {"workerId": "first"}), 409)
    assert_problem(worker.post(f"/v1/jobs/{job_id}/complete", {"workerId": "first"}), 409)
    assert worker.post(f"/v1/jobs/{job_id}/complete", {"workerId": "second"}).status_code == 204


def test_lapsed_lease_nobody_took_over_is_still_yours(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment")
    worker.jobs(leaseSeconds=5)
    emu.advance(30)
    assert emu.job_state(job_id)["lapsed"] is True
    assert worker.post(f"/v1/jobs/{job_id}/extend-lease", {"leaseSeconds": 5}).status_code == 200
    assert worker.post(f"/v1/jobs/{job_id}/complete", {"variables": {"ok": True}}).status_code == 204
    assert emu.job_state(job_id)["output"] == {"ok": True}


def test_lapse_with_the_last_retry_is_an_incident(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment", retries=1)
    worker.jobs(leaseSeconds=5)
    emu.advance(6)
    assert worker.jobs() == []
    state = emu.job_state(job_id)
    assert (state["state"], state["retries"]) == ("failed", 0)
    assert [event["event"] for event in state["history"]][-2:] == ["lease-lapsed", "incident"]


def test_extend_reanchors_at_now_and_refuses_non_holders(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment")
    (job,) = worker.jobs(leaseSeconds=60)
    emu.advance(30)
    before = emu.now()
    response = worker.post(f"/v1/jobs/{job_id}/extend-lease", {"leaseSeconds": 60})
    after = emu.now()
    assert response.status_code == 200
    new_expiry = epoch(response.json()["lockExpiresAt"])
    assert before + 60 - MS <= new_expiry <= after + 60 + MS  # from the call...
    assert new_expiry < epoch(job["lockExpiresAt"]) + 60  # ...not old expiry + 60 (that is 30 s later)
    assert emu.job_state(job_id)["lock_expires_at"] == pytest.approx(new_expiry, abs=0.01)
    assert_problem(worker.post(f"/v1/jobs/{job_id}/extend-lease", {"leaseSeconds": 0}), 400)
    assert_problem(worker.post(f"/v1/jobs/{job_id}/extend-lease", {"workerId": "other"}), 409)
    assert_problem(worker.post("/v1/jobs/no-such-job/extend-lease", {}), 404)


def test_reports_on_jobs_not_held_are_409(worker: Worker, emu: SheptraEmulator) -> None:
    ready = emu.create_job("other")
    assert_problem(worker.post(f"/v1/jobs/{ready}/complete", {}), 409)  # never activated
    done = emu.create_job("charge-payment")
    worker.jobs()
    assert worker.post(f"/v1/jobs/{done}/complete", {}).status_code == 204
    for action in ("complete", "extend-lease", "fail"):
        assert_problem(worker.post(f"/v1/jobs/{done}/{action}", {}), 409)
    assert_problem(worker.post(f"/v1/jobs/{done}/throw-error", {"errorCode": "X"}), 409)
    assert_problem(worker.post("/v1/jobs/no-such-job/complete", {}), 404)


# ---------------------------------------------------------------- fail and throw


def test_fail_with_retries_and_backoff_requeues_after_the_backoff(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment")
    worker.jobs()
    body = {"errorMessage": "card declined", "retries": 2, "retryBackoffSeconds": 30}
    assert worker.post(f"/v1/jobs/{job_id}/fail", body).status_code == 204
    state = emu.job_state(job_id)
    assert (state["state"], state["retries"], state["error_message"]) == ("ready", 2, "card declined")
    assert worker.jobs() == []  # still backing off
    emu.advance(31)
    (job,) = worker.jobs()
    assert (job["id"], job["retries"]) == (job_id, 2)
    # No retries given: one attempt is used up (the seed's minimal worker fails this way).
    assert worker.post(f"/v1/jobs/{job_id}/fail", {"errorMessage": "again"}).status_code == 204
    assert emu.job_state(job_id)["retries"] == 1
    assert [j["id"] for j in worker.jobs()] == [job_id]  # no backoff: available at once


def test_fail_with_no_retries_left_is_an_incident(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment")
    worker.jobs()
    assert worker.post(f"/v1/jobs/{job_id}/fail", {"errorMessage": "boom", "retries": 0}).status_code == 204
    state = emu.job_state(job_id)
    assert (state["state"], state["retries"], state["error_message"]) == ("failed", 0, "boom")
    assert worker.jobs() == []
    assert_problem(worker.post(f"/v1/jobs/{job_id}/fail", {"retries": -1}), 400)


def test_throw_error(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment")
    worker.jobs()
    assert_problem(worker.post(f"/v1/jobs/{job_id}/throw-error", {"errorMessage": "no code"}), 400)
    body = {"errorCode": "CARD_DECLINED", "errorMessage": "declined", "variables": {"reason": "funds"}}
    assert worker.post(f"/v1/jobs/{job_id}/throw-error", body).status_code == 204
    state = emu.job_state(job_id)
    assert state["state"] == "thrown"
    assert (state["error_code"], state["error_message"], state["output"]) == (
        "CARD_DECLINED",
        "declined",
        {"reason": "funds"},
    )


def test_variables_over_one_megabyte_are_413(worker: Worker, emu: SheptraEmulator) -> None:
    job_id = emu.create_job("charge-payment")
    worker.jobs()
    # name "v" (1 byte) + a JSON string of n characters (n + 2 quotes): exactly at the cap is fine.
    at_cap = {"v": "x" * (MAX_VARIABLES_BYTES - 3)}
    over = {"v": "x" * (MAX_VARIABLES_BYTES - 2)}
    assert variables_size(at_cap) == MAX_VARIABLES_BYTES
    assert_problem(worker.post(f"/v1/jobs/{job_id}/complete", {"variables": over}), 413)
    assert_problem(worker.post(f"/v1/jobs/{job_id}/throw-error", {"errorCode": "E", "variables": over}), 413)
    assert emu.job_state(job_id)["state"] == "leased"
    assert worker.post(f"/v1/jobs/{job_id}/complete", {"variables": at_cap}).status_code == 204


# ---------------------------------------------------------------- cells and discovery


def test_move_cell_answers_421_and_discovery_follows(worker: Worker, emu: SheptraEmulator) -> None:
    discovery = worker.values["SHEPTRA_DISCOVERY_URL"]
    cluster = worker.values["SHEPTRA_ENVIRONMENT"]
    assert_problem(worker.http.get(discovery, params={"cluster": cluster}), 401)  # needs the bearer token
    found = worker.http.get(discovery, params={"cluster": cluster}, headers=worker.headers())
    assert found.status_code == 200
    assert found.json()["baseUrl"] == worker.values["SHEPTRA_API_URL"]
    assert {"baseUrl", "cluster", "name", "environment", "status"} <= set(found.json())
    assert_problem(worker.http.get(discovery, params={"cluster": "nope"}, headers=worker.headers()), 404)

    job_id = emu.create_job("charge-payment")
    old = worker.values["SHEPTRA_API_URL"]
    worker.jobs()
    emu.move_cell()
    assert_problem(worker.post("/v1/jobs/activate", {"type": "charge-payment"}, api_url=old), 421)
    assert_problem(worker.post(f"/v1/jobs/{job_id}/complete", {}, api_url=old), 421)
    moved = worker.http.get(discovery, params={"cluster": cluster}, headers=worker.headers()).json()["baseUrl"]
    assert moved != old
    assert moved.endswith("/cells/cell-b")
    assert worker.post(f"/v1/jobs/{job_id}/complete", {}, api_url=moved).status_code == 204


# ---------------------------------------------------------------- admin API, faults, rate limit


def test_admin_api(worker: Worker, emu: SheptraEmulator) -> None:
    admin = worker.base_url + "/_admin"
    http = worker.http
    one = http.post(admin + "/jobs", json={"type": "charge-payment", "variables": {"n": 1}, "retries": 2})
    assert one.status_code == 201
    assert (one.json()["retries"], one.json()["state"]) == (2, "ready")
    many = http.post(admin + "/jobs", json=[{"type": "a"}, {"type": "b", "tenantId": "acme"}])
    assert [job["type"] for job in many.json()["jobs"]] == ["a", "b"]
    assert_problem(http.post(admin + "/jobs", json={"variables": {}}), 400)
    listed = http.get(admin + "/jobs").json()["jobs"]
    assert [job["type"] for job in listed] == ["charge-payment", "a", "b"]
    assert http.get(admin + "/jobs", params={"type": "a"}).json()["jobs"][0]["id"] == many.json()["jobs"][0]["id"]
    assert http.get(f"{admin}/jobs/{one.json()['id']}").json()["variables"] == {"n": 1}
    assert_problem(http.get(admin + "/jobs/nope"), 404)

    (job,) = worker.jobs(leaseSeconds=10)
    before = emu.now()
    clock = http.post(admin + "/clock", json={"advance": 11}).json()
    assert clock["now"] >= before + 11
    assert emu.job_state(job["id"])["lapsed"] is True

    cell = http.post(admin + "/cell/move").json()
    assert cell["cell"] == "cell-b"
    assert cell["baseUrl"] == emu.api_url(worker.base_url)

    assert http.post(admin + "/client/revoke").status_code == 204
    assert_problem(worker.mint(), 401)
    assert http.post(admin + "/tokens/invalidate").status_code == 204
    assert_problem(worker.activate(), 401)

    stats = http.get(admin + "/stats").json()["requests"]
    assert stats["POST /cells/{cell}/v1/jobs/activate"] >= 2


def test_injected_fault_answers_with_retry_after(worker: Worker) -> None:
    fault = {"path": "/cells/{cell}/v1/jobs/activate", "status": 503, "headers": {"Retry-After": "2"}}
    worker.http.post(worker.base_url + "/_admin/faults", json=fault).raise_for_status()
    response = worker.activate()
    assert_problem(response, 503)
    assert response.headers["Retry-After"] == "2"
    assert worker.activate().status_code == 200


def test_rate_limit_answers_429_with_retry_after(workerless_emulator: EmulatorFactory) -> None:
    running = workerless_emulator("sheptra", rate_limit=2)
    emulator, url = running.emulator, running.url
    w = Worker(emulator, url)
    statuses = [w.activate().status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    response = w.activate()
    assert_problem(response, 429)
    assert int(response.headers["Retry-After"]) >= 1
    emulator.advance(1)
    assert w.activate().status_code == 200
    w.http.close()


def test_load_jobs(tmp_path: Path, emu: SheptraEmulator) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([{"type": "a", "variables": {"x": 1}, "retries": 5}, {"type": "b"}]))
    ids = emu.load_jobs(path)
    assert [(j["id"], j["type"], j["retries"]) for j in emu.jobs()] == [(ids[0], "a", 5), (ids[1], "b", 3)]


def test_concurrent_activations_hand_each_job_out_once(served: tuple[SheptraEmulator, str]) -> None:
    emulator, url = served
    ids = {emulator.create_job("charge-payment", {"i": i}) for i in range(60)}
    taken: list[str] = []
    lock = threading.Lock()

    def poll() -> None:
        w = Worker(emulator, url)
        try:
            for _ in range(30):  # bounded: 60 jobs, 6 pollers of 5 jobs a call
                jobs = w.jobs(maxJobs=5)
                if not jobs:
                    return
                with lock:
                    taken.extend(job["id"] for job in jobs)
        finally:
            w.http.close()

    threads = [threading.Thread(target=poll) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(taken) == sorted(ids)


def test_serve_works_as_a_context_manager() -> None:
    emulator = sheptra.create(auth=False)
    with emulator.serve() as server:  # serve() already started it; __enter__ must not start it twice
        assert httpx.get(server.url + "/_admin/jobs").json() == {"jobs": []}
    # __exit__ stopped it (a hang there is caught by the test timeout, not by a guess at a duration).
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url + "/_admin/jobs", timeout=EVENT_SECONDS)
