"""StageNext adapter configuration, result body shapes and shared-session rules (no network: an
httpx.MockTransport stands in for StageNext)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from workerless._core.model import JobRef, Outcome
from workerless.engines.base import MemoryState
from workerless.engines.kit.skim import Skimmer
from workerless.engines.stagenext import (
    ERROR_MESSAGE_CAP,
    SESSION_KEY_PREFIX,
    StageNextConfig,
    StageNextEngine,
    WorkerSession,
    from_values,
)
from workerless.engines.stagenext.deliveries import pulled_input, pulled_variables
from workerless.errors import AuthExpiredError, ConfigurationError, MessageFormatError

KEY = {"STAGENEXT_API_KEY": "sn-secret-key"}


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(500))) as c:
        yield c


# ----------------------------------------------------------------------------------- config


def test_defaults() -> None:
    config = StageNextConfig.from_values(KEY)
    assert config.api_url == "http://localhost:8081"
    assert config.instance_id is None
    assert config.visibility_seconds == 60
    assert config.events_max_batch == 100
    assert "sn-secret-key" not in repr(config)


def test_api_key_is_required() -> None:
    with pytest.raises(ConfigurationError, match="STAGENEXT_API_KEY") as info:
        StageNextConfig.from_values({"STAGENEXT_API_URL": "https://sn.example.com"})
    assert info.value.key == "STAGENEXT_API_KEY"


@pytest.mark.parametrize(
    "url", ["https://sn.example.com", "http://127.0.0.1:8081", "http://localhost:8081", "http://[::1]:8081/"]
)
def test_https_or_loopback_is_accepted(url: str) -> None:
    assert StageNextConfig.from_values({**KEY, "STAGENEXT_API_URL": url}).api_url == url.rstrip("/")


@pytest.mark.parametrize("url", ["http://sn.example.com", "http://10.0.0.5:8081", "ftp://sn.example.com", "sn"])
def test_plain_http_off_loopback_or_garbage_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        StageNextConfig.from_values({**KEY, "STAGENEXT_API_URL": url})
    assert info.value.key == "STAGENEXT_API_URL"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("STAGENEXT_VISIBILITY_SECONDS", "soon"),
        ("STAGENEXT_VISIBILITY_SECONDS", "0"),
        ("STAGENEXT_EVENTS_MAX_BATCH", "2.5"),
        ("STAGENEXT_SESSION_REFRESH_SECONDS", "-1"),
    ],
)
def test_malformed_numbers_name_their_key(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=key) as info:
        StageNextConfig.from_values({**KEY, key: value})
    assert info.value.key == key


def test_overrides() -> None:
    config = StageNextConfig.from_values(
        {**KEY, "STAGENEXT_VISIBILITY_SECONDS": "90", "STAGENEXT_INSTANCE_ID": "fleet-a"}
    )
    assert (config.visibility_seconds, config.instance_id) == (90.0, "fleet-a")


def test_instance_id_shared_vs_process_local(client: httpx.Client) -> None:
    """A shared session uses one deployment-wide instance id; a process-local one gets a suffix so
    two processes never fight over one instance id (unless the user pins STAGENEXT_INSTANCE_ID)."""
    shared = from_values(KEY, client, worker_id="orders", state=MemoryState())
    assert shared.instance_id == "orders"
    assert shared.state_key == SESSION_KEY_PREFIX + "orders"
    a, b = from_values(KEY, client, worker_id="orders"), from_values(KEY, client, worker_id="orders")
    assert a.instance_id.startswith("orders-")
    assert a.instance_id != b.instance_id
    pinned = from_values({**KEY, "STAGENEXT_INSTANCE_ID": "pinned"}, client)
    assert pinned.instance_id == "pinned"
    assert from_values(KEY, client, state=MemoryState()).instance_id == "workerless"


# ------------------------------------------------------------------------------ result body


def ref(**handle: Any) -> JobRef:
    base = {"stageId": "stg_1", "executionId": "exe_1", "attempt": 2, "ackToken": "ack_x", "cookies": {}}
    return JobRef(engine="stagenext", job_id="stg_1", job_type="billing", attempt="exe_1", handle={**base, **handle})


def test_result_body_shapes(client: httpx.Client) -> None:
    engine = from_values(KEY, client)
    body, result = engine.result_body(ref(), Outcome.complete({"b": 1, "a": "é"}), "wrk_1")
    assert body == {"executionId": "exe_1", "attempt": 2, "workerId": "wrk_1", "status": "succeeded", "result": result}
    assert json.loads(result) == {"b": 1, "a": "é"}
    body, _ = engine.result_body(ref(), Outcome.fail("boom", retries=2, backoff_seconds=5), "wrk_1")
    assert (body["status"], body["errorMessage"], body["retryable"], body["backoffSeconds"]) == (
        "failed",
        "boom",
        True,
        5,
    )
    body, _ = engine.result_body(ref(), Outcome.fail("no more", retries=0), "wrk_1")
    assert body["retryable"] is False
    body, _ = engine.result_body(ref(), Outcome.fail("bad", retries=3, terminal=True), "wrk_1")
    assert body["retryable"] is False
    body, result = engine.result_body(ref(), Outcome.throw("E1", "msg", {"k": 1}), "wrk_1")
    assert (body["status"], body["errorCode"], body["retryable"]) == ("failed", "E1", False)
    assert json.loads(result) == {"errorCode": "E1", "variables": {"k": 1}}


def test_result_body_is_the_same_on_every_retry(client: httpx.Client) -> None:
    engine = from_values(KEY, client)
    outcome = Outcome.complete({"x": [1, 2, 3]})
    assert engine.result_body(ref(), outcome, "wrk_1") == engine.result_body(ref(), outcome, "wrk_1")


def test_long_failure_message_is_truncated(client: httpx.Client) -> None:
    engine = from_values(KEY, client)
    body, _ = engine.result_body(ref(), Outcome.fail("é" * ERROR_MESSAGE_CAP, retries=1), "wrk_1")
    assert len(body["errorMessage"].encode()) <= ERROR_MESSAGE_CAP
    assert body["errorMessage"].endswith("...")


def test_handle_without_execution_id_is_a_message_format_error(client: httpx.Client) -> None:
    engine = from_values(KEY, client)
    with pytest.raises(MessageFormatError) as info:
        engine.result_body(ref(executionId=None), Outcome.complete({}), "wrk_1")
    assert info.value.field == "handle.executionId"


def test_variables_parsing() -> None:
    assert pulled_variables({"a": 1}) == {"a": 1}
    assert pulled_variables('{"a": 1}') == {"a": 1}
    assert pulled_variables("plain") == {"input": "plain"}
    assert pulled_variables([1]) == {"input": [1]}
    assert pulled_variables(None) == {}


LONG = "x" * (1024 * 1024 + 10)  # past the 1 MiB up to which a cut value is checked (and decoded) here


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2, 3]},
        '{"a": [1, 2, 3]}',
        "plain text",
        [1, 2, 3],
        "[1, 2]",
        {"a": LONG},
        json.dumps({"a": LONG}),
        LONG,
        [LONG],
        json.dumps([LONG]),
    ],
    ids=["object", "object-text", "string", "list", "list-text", *(f"long-{i}" for i in range(5))],
)
def test_a_cut_input_means_what_the_decoded_one_does(value: Any) -> None:
    """GIVEN a pull whose ``input`` the skimmer cuts out (anything past 4 bytes here) THEN the job's
    variables, read from the JSON text passed on, are what decoding the whole answer gave."""
    skim = Skimmer("input", 1, engine="stagenext", limit=4 * 1024 * 1024, budget=8 * 1024 * 1024, inline=4)
    skim.feed(json.dumps({"stageId": "s", "ackToken": "a", "input": value}).encode())
    variables, raw, unread = pulled_input(skim, json.loads(skim.skeleton())["input"])

    assert unread is None and skim.values, "the input was cut out"
    assert (json.loads(raw) if raw is not None else variables) == pulled_variables(value)


def test_a_cut_input_over_the_limit_is_not_read() -> None:
    """GIVEN an input over the limit THEN only its size comes out (the poller fails the job with it)."""
    skim = Skimmer("input", 1, engine="stagenext", limit=1000, budget=1000, inline=4)
    value = {"a": "x" * 5000}
    skim.feed(json.dumps({"stageId": "s", "ackToken": "a", "input": value}).encode())
    assert pulled_input(skim, json.loads(skim.skeleton())["input"]) == ({}, None, len(json.dumps(value)))


# -------------------------------------------------------------------------- shared session


def session_record(token: str, *, refresh_at: float, expires_at: float, claim: Any = None) -> dict[str, Any]:
    record = WorkerSession("wrk_1", token, "workerless", 0, expires_at, refresh_at).to_record()
    record["claim"] = claim
    return record


class Bootstraps:
    """A fake StageNext that only answers /workers/bootstrap, counting calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/workers/bootstrap"
        assert json.loads(request.content)["instanceId"] == "workerless"
        self.calls += 1
        return httpx.Response(
            201, json={"workerId": "wrk_1", "sessionToken": f"tok-{self.calls}", "expiresInSeconds": 1000}
        )


def test_session_record_round_trip() -> None:
    session = WorkerSession("wrk_1", "tok", "inst", 10.0, 1010.0, 900.0)
    assert WorkerSession.from_record(session.to_record()) == session
    assert WorkerSession.from_record({"workerId": "w"}) is None
    assert WorkerSession.from_record(None) is None
    assert "tok" not in repr(session)


def test_due_session_with_a_live_claim_elsewhere_keeps_the_old_token() -> None:
    fake = Bootstraps()
    state = MemoryState()
    key = SESSION_KEY_PREFIX + "workerless"
    claim = {"owner": "other", "nonce": "n", "until": 130}
    assert state.put(key, session_record("old", refresh_at=50, expires_at=200, claim=claim), expected_version=None)
    with httpx.Client(transport=httpx.MockTransport(fake)) as client:
        engine = from_values(KEY, client, state=state, clock=lambda: 100.0)
        assert engine._current_session().token == "old"
    assert fake.calls == 0


def test_refused_token_while_another_rotates_waits_then_asks_to_retry() -> None:
    fake = Bootstraps()
    state = MemoryState()
    key = SESSION_KEY_PREFIX + "workerless"
    claim = {"owner": "other", "nonce": "n", "until": 130}
    assert state.put(key, session_record("old", refresh_at=50, expires_at=200, claim=claim), expected_version=None)
    sleeps: list[float] = []
    with httpx.Client(transport=httpx.MockTransport(fake)) as client:
        engine = StageNextEngine(
            StageNextConfig.from_values(KEY), client, state=state, clock=lambda: 100.0, sleep=sleeps.append
        )
        with pytest.raises(AuthExpiredError, match="being rotated"):
            engine._refresh_session(failed_token="old")
    assert fake.calls == 0
    assert 0 < sum(sleeps) <= 5


def test_lapsed_claim_is_taken_over_and_the_record_published() -> None:
    fake = Bootstraps()
    state = MemoryState()
    key = SESSION_KEY_PREFIX + "workerless"
    stale_claim = {"owner": "dead-container", "nonce": "n", "until": 90}
    assert state.put(
        key, session_record("old", refresh_at=50, expires_at=200, claim=stale_claim), expected_version=None
    )
    with httpx.Client(transport=httpx.MockTransport(fake)) as client:
        engine = from_values(KEY, client, state=state, clock=lambda: 100.0)
        session = engine._current_session()
    assert (session.token, fake.calls) == ("tok-1", 1)
    record = state.get(key)
    assert record is not None
    assert (record["token"], record["claim"], record["refreshAt"]) == ("tok-1", None, 100 + 1000 - 500)


def test_failed_bootstrap_releases_the_claim() -> None:
    state = MemoryState()
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503))) as client:
        engine = from_values(KEY, client, state=state, clock=lambda: 100.0)
        with pytest.raises(Exception, match="503"):
            engine._current_session()
    record = state.get(SESSION_KEY_PREFIX + "workerless")
    assert record is not None
    assert record["claim"] is None
