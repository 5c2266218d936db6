"""A completion's variables are JSON-encoded once (issue 29): the handler wrapper's check makes the
bytes, and the job store and Sheptra's report reuse them. What is stored and what the engine is sent
must be what encoding each time gave (the same JSON), and what was refused is still refused."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from workerless._core.model import JobRef, Outcome
from workerless._handler.execution import _completion
from workerless.engines import build_engine
from workerless.engines.base import MemoryState
from workerless.errors import PayloadTooLargeError

VARIABLES: list[dict[str, Any]] = [
    {"ok": True},
    {},
    {"city": "Zürich", "emoji": "☃", "nested": {"list": [1, 2.5, None, "x"]}},
    {"big": [f"widget {i}" for i in range(2000)]},
]


@pytest.mark.parametrize("variables", VARIABLES)
def test_a_completion_is_encoded_once_and_stored_as_before(variables: dict[str, Any]) -> None:
    outcome = _completion(variables, retries_after_failure=3, backoff_seconds=0)
    assert outcome.kind == "complete" and outcome.encoded_variables is not None
    # As an engine is sent them (httpx's own json= encoding: compact, UTF-8, no NaN).
    expected = json.dumps(variables, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    assert outcome.encoded_variables == expected
    # The stored outcome decodes to what the record held before (json.dumps of to_dict).
    assert json.loads(outcome.to_json()) == json.loads(json.dumps(outcome.to_dict())) == outcome.to_dict()
    assert Outcome.from_dict(json.loads(outcome.to_json())) == outcome


@pytest.mark.parametrize(
    "result",
    [{"x": math.nan}, {"x": math.inf}, {"x": {1, 2}}, {"x": object()}, {"x": "\ud800"}],
    ids=["nan", "inf", "set", "object", "lone-surrogate"],
)
def test_what_is_not_json_still_fails_the_job(result: dict[str, Any]) -> None:
    outcome = _completion(result, retries_after_failure=2, backoff_seconds=5)
    assert outcome.kind == "fail" and outcome.retries == 2 and outcome.backoff_seconds == 5
    assert "not JSON-serialisable" in (outcome.message or "")


def test_an_outcome_never_encoded_is_stored_exactly_as_before() -> None:
    for outcome in (
        Outcome.complete({"city": "Zürich"}),
        Outcome.fail("boom ☃", retries=1, stack="trace"),
        Outcome.throw("E1", "no", {"a": 1}),
    ):
        assert outcome.to_json() == json.dumps(outcome.to_dict(), separators=(",", ":")).encode()


def test_replace_never_carries_the_old_bytes() -> None:
    import dataclasses

    outcome = Outcome.complete({"a": 1})
    outcome.encode_variables()
    other = dataclasses.replace(outcome, variables={"b": 2})
    assert other.encoded_variables is None and other.encode_variables() == b'{"b":2}'


def _sheptra(sent: list[httpx.Request], worker_id: str | None = None) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(204)

    client = httpx.Client(transport=httpx.MockTransport(answer))
    values = {"SHEPTRA_TOKEN_ENDPOINT": "", "SHEPTRA_API_URL": "http://127.0.0.1:9"}
    return build_engine("sheptra", values, client, worker_id=worker_id, state=MemoryState())


@pytest.mark.parametrize("variables", VARIABLES)
@pytest.mark.parametrize(
    ("handle", "worker_id"),
    [({}, None), ({}, "fixed-worker"), ({"workerId": "wrk-ü"}, None)],
    ids=["no-label", "fixed-label", "activation-label"],
)
def test_sheptra_sends_the_encoded_bytes_as_the_same_request(
    variables: dict[str, Any], handle: dict[str, Any], worker_id: str | None
) -> None:
    """Whether the wrapper encoded the variables or a stored result is re-reported (never encoded),
    the completion is the request httpx's ``json=`` makes of the same body, byte for byte."""
    ref = JobRef("sheptra", "2251799813685249", "charge-payment", handle=handle)
    label = handle.get("workerId", worker_id)
    body = {"variables": variables, **({"workerId": label} if label else {})}
    for outcome in (
        _completion(variables, retries_after_failure=3, backoff_seconds=0),
        Outcome.complete(variables),  # never encoded: a stored result re-reported
    ):
        sent: list[httpx.Request] = []
        _sheptra(sent, worker_id).report(ref, outcome)
        (a,) = sent
        b = httpx.Request("POST", a.url, json=body)  # httpx's own encoding of the same body
        assert a.method == "POST" and str(a.url).endswith("/jobs/2251799813685249/complete")
        assert a.content == b.content  # byte for byte: the compact UTF-8 JSON httpx makes
        assert (a.headers["Content-Type"], a.headers["Content-Length"]) == (
            b.headers["Content-Type"],
            b.headers["Content-Length"],
        )


def test_sheptra_caps_the_encoded_bytes_as_before() -> None:
    from workerless.engines.sheptra.config import PAYLOAD_CAP

    ref = JobRef("sheptra", "1", "charge-payment")
    too_big = {"x": "é" * (PAYLOAD_CAP // 2)}  # 2 bytes a character in UTF-8: over the cap
    for outcome in (_completion(too_big, retries_after_failure=0, backoff_seconds=0), Outcome.complete(too_big)):
        sent: list[httpx.Request] = []
        with pytest.raises(PayloadTooLargeError):
            _sheptra(sent).report(ref, outcome)
        assert sent == []
