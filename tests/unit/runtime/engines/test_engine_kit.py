"""The engine kit (workerless.engines.kit) and the rules the three adapters now share.

Each disagreement the adapters had before the kit (issue 11, section 4) has a test here that the
three now follow one rule: the base-URL rule, the timestamp rule and the workflow key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import httpx
import pytest
from workerless import errors
from workerless._core.job import Job
from workerless._core.model import ActivatedJob, Demand, JobRef
from workerless.engines import build_engine
from workerless.engines.base import MemoryState
from workerless.engines.kit import (
    TokenCache,
    Translator,
    check_base_url,
    parse_timestamp,
    redact,
    refused_answered_url,
    renew_at,
    send_recovering,
)
from workerless.engines.nodeflow import workflow_key as nodeflow_workflow_key
from workerless.engines.stagenext.session import _session_ttl
from workerless.errors import (
    ConfigurationError,
    EngineUnavailableError,
    LeaseLostError,
    RateLimitedError,
    StoreError,
)

#: Each engine's connection values, and the key that holds its base URL.
VALUES: dict[str, tuple[dict[str, str], str]] = {
    "sheptra": ({"SHEPTRA_TOKEN_ENDPOINT": ""}, "SHEPTRA_API_URL"),
    "nodeflow": ({"NF_API_KEY": "nf_key"}, "NF_URL"),
    "stagenext": ({"STAGENEXT_API_KEY": "sn-key"}, "STAGENEXT_API_URL"),
}


def build(engine: str, url: str, handler: Callable[[httpx.Request], httpx.Response] | None = None) -> object:
    values, key = VALUES[engine]
    client = httpx.Client(transport=httpx.MockTransport(handler or (lambda r: httpx.Response(204))))
    return build_engine(engine, {**values, key: url}, client, state=MemoryState())


# -- disagreement 1: the base-URL rule ---------------------------------------------------------------
@pytest.mark.parametrize("engine", list(VALUES))
@pytest.mark.parametrize(
    "url",
    [
        "https://user:pw@host.example/?x=1",  # StageNext accepted this; node-flow refused it
        "https://user:pw@host.example",
        "https://host.example/?x=1",
        "https://host.example/#frag",
        "http://host.example",
        "ftp://host.example",
        "host.example",
    ],
)
def test_every_engine_refuses_the_same_base_urls(engine: str, url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        build(engine, url)
    assert info.value.key == VALUES[engine][1]
    assert "pw" not in str(info.value), "a credential in the URL is never echoed"


@pytest.mark.parametrize("engine", list(VALUES))
@pytest.mark.parametrize(
    "url", ["https://host.example", "http://127.0.0.1:8080", "http://localhost:9", "http://[::1]:7"]
)
def test_every_engine_accepts_https_or_loopback(engine: str, url: str) -> None:
    build(engine, url)


def test_the_ssrf_guard_refuses_metadata_addresses_and_keeps_the_rest() -> None:
    for refused in (
        "http://169.254.169.254/",
        "https://169.254.169.254/",
        "https://[::ffff:169.254.169.254]/",
        "https://metadata.google.internal/",
        "https://2852039166/",
        "https://u:p@env.example/",
        "https://0.0.0.0/",
        None,
    ):
        assert refused_answered_url(refused)[1] is not None, refused
    assert refused_answered_url("https://env.example/") == ("https://env.example", None)
    assert check_base_url("K", "https://env.example/a/") == "https://env.example/a"


# -- disagreement 2: the timestamp rule ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-09-10T12:01:00Z", 1789041660.0),
        ("2026-09-10T14:01:00+02:00", 1789041660.0),
        ("2026-09-10T12:01:00.000Z", 1789041660.0),
        (1789041660, 1789041660.0),
        (1789041660000, 1789041660.0),
    ],
)
def test_one_timestamp_rule(value: object, expected: float) -> None:
    assert parse_timestamp(value) == expected


@pytest.mark.parametrize("value", ["2026-09-10T12:01:00", "", "soon", True, None, [1]])
def test_a_zone_less_or_malformed_timestamp_is_refused(value: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies with the input
        parse_timestamp(value)


def _sheptra_activation(lock_expires_at: object) -> tuple[list[ActivatedJob], list[str]]:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path.endswith("/activate"):
            job = {"id": "1", "type": "charge", "retries": 3, "lockExpiresAt": lock_expires_at, "variables": {}}
            return httpx.Response(200, json={"jobs": [job]})
        return httpx.Response(204)

    engine = build("sheptra", "http://127.0.0.1:9", handle)
    jobs = engine.activate([Demand("charge", 5)], 60)  # type: ignore[attr-defined]
    return jobs, calls


def test_sheptra_reads_lock_expiry_by_the_shared_rule() -> None:
    # Sheptra used to take a zone-less lockExpiresAt as UTC, node-flow refused one; both refuse now
    # (the job is handed back at once, naming the field), and both accept epoch numbers.
    jobs, calls = _sheptra_activation("2026-09-10T12:01:00")
    assert jobs == [] and calls[-1] == "/v1/jobs/1/fail"
    jobs, _ = _sheptra_activation(1789041660)
    assert [job.lease_expires_at for job in jobs] == [1789041660.0]
    jobs, _ = _sheptra_activation("2026-09-10T12:01:00Z")
    assert [job.lease_expires_at for job in jobs] == [1789041660.0]


def test_stagenext_session_expiry_is_read_by_the_shared_rule() -> None:
    # StageNext used to read a zone-less expiresAt in the machine's local time zone.
    assert _session_ttl({"expiresAt": "1970-01-01T01:00:00Z"}, 0.0) == 3600.0
    assert _session_ttl({"expiresAt": "1970-01-01T01:00:00"}, 0.0) == 24 * 3600, "refused: the seed's default"
    assert _session_ttl({"expiresInSeconds": 60, "expiresAt": "1970-01-01T01:00:00Z"}, 0.0) == 60.0


# -- disagreement 3: the workflow key -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("instance_id", "element_id", "expected"),
    [("wf-1", "pay", "wf-1:pay"), ("wf-1", None, "wf-1:charge"), (None, None, "task-1:charge")],
)
def test_one_workflow_key_for_the_same_job(instance_id: str | None, element_id: str | None, expected: str) -> None:
    ref = JobRef("nodeflow", "task-1", "charge", handle={})
    job = ActivatedJob(
        ref=ref, variables={}, lease_expires_at=0, activated_at=0, instance_id=instance_id, element_id=element_id
    )
    # node-flow's helper gave ":charge" without an instance, Job.workflow_key "task-1:charge".
    assert nodeflow_workflow_key(job) == Job(job).workflow_key == job.workflow_key == expected


# -- tokens, resends, translation, redaction ----------------------------------------------------------
def test_token_cache_renews_early_and_drops_only_the_refused_token() -> None:
    now = [0.0]
    minted: list[str] = []

    def mint() -> tuple[str, float]:
        minted.append(f"t{len(minted) + 1}")
        return minted[-1], 3600.0

    cache = TokenCache(mint, early=60, clock=lambda: now[0])
    assert cache.get() == "t1"
    now[0] = 3539.0
    assert cache.get() == "t1"
    now[0] = 3540.0
    assert cache.get() == "t2", "renewed a minute early"
    cache.invalidate("t1")  # a refusal of a token already replaced drops nothing
    assert cache.get() == "t2"
    cache.invalidate("t2")
    assert cache.get() == "t3"
    assert set(cache.held()) == {"t3", "t2"}, "the dropped token is still redacted"
    assert renew_at(0, 60, 60) == 30.0, "a short-lived token renews at half its life"


def test_each_recovery_is_used_at_most_once_per_call() -> None:
    answers = iter([401, 421, 401, 200])
    done: list[str] = []

    def recover(status: int) -> tuple[str, Callable[[], None]] | None:
        name = {401: "reauthenticate", 421: "resolve"}.get(status)
        return (name, lambda: done.append(name)) if name else None

    assert send_recovering(lambda: next(answers), recover) == 401
    assert done == ["reauthenticate", "resolve"]


def _response(status: int, body: Mapping[str, object] | None = None, **headers: str) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(body or {}).encode(), headers=headers)


def test_translation_refines_once_then_falls_back_and_redacts() -> None:
    def refine(response: httpx.Response, problem: dict[str, object], what: str, job_id: str | None) -> None:
        return None

    translate = Translator("nodeflow", refine=refine, secrets=lambda: ["s3cret"])
    limited = translate.response(_response(429, {"title": "slow down s3cret"}, **{"Retry-After": "3"}), what="lease")
    assert isinstance(limited, RateLimitedError) and limited.retry_after == 3.0
    assert "s3cret" not in str(limited) and "s3cret" not in json.dumps(limited.problem)
    assert isinstance(translate.response(_response(409), what="report"), LeaseLostError)
    assert isinstance(translate.transport(httpx.ConnectError("x"), what="lease"), EngineUnavailableError)
    error = errors.RejectedError("token abc in body", engine="x", problem={"detail": ["abc"]})
    assert redact(error, ["abc", ""]).problem == {"detail": ["***"]}


# -- the one error tree -------------------------------------------------------------------------------
def test_errors_declared_elsewhere_are_in_the_one_tree() -> None:
    from workerless.aws import payloads, sqs

    for name in ("QueueError", "OutcomeTooLargeError", "ReportOwedError", "ClaimHeldError", "ClaimStillLiveError"):
        assert issubclass(getattr(errors, name), errors.PipelineError), name
        assert name in errors.__all__
    assert sqs.QueueError is errors.QueueError and payloads.PayloadError is errors.PayloadError


def test_retryable_is_one_flag() -> None:
    assert errors.RetryableEngineError("x", engine="e").retryable is True
    assert errors.LeaseLostError("x", engine="e").retryable is False
    assert errors.ConfigurationError("x").retryable is False
    assert StoreError("x").retryable is True and StoreError("x", retryable=False).retryable is False
    assert errors.OutcomeTooLargeError(2, 1, "kept").retryable is False


# ---- engine_url: a request's URL joined to a parsed base, equal to httpx's own parse --------


@pytest.mark.parametrize(
    "base",
    [
        "http://127.0.0.1:8080/v1",
        "https://engine.example.com",
        "https://engine.example.com:8443/api/v2",
        "http://[::1]:9",
    ],
)
@pytest.mark.parametrize(
    "path",
    [
        "/jobs/2251799813685249/complete",
        "/v1/ns/default/tasks/3f2b-9c1d_x.~y/complete",
        "/jobs/./complete",  # a dot segment: httpx normalises it, so httpx parses the string
        "/jobs/../complete",
        "/jobs/..",
        "/jobs/a b",  # percent-encoded by httpx
        "/jobs/%41",
        "/jobs/ü",
        "/jobs/1?x=1",  # a query
        "/jobs/1#f",
        "",
        "/",
        "/a//b",
        "/jobs/.hidden/..x",
    ],
)
def test_engine_url_is_the_url_httpx_parses_from_the_string(base: str, path: str) -> None:
    from workerless.engines.kit.joinurl import engine_url

    url = engine_url(base, path)
    expected = httpx.URL(base + path)
    built = httpx.URL(url)
    assert str(built) == str(expected)
    assert built.raw_path == expected.raw_path and built.host == expected.host and built.port == expected.port
    # What goes on the wire: the request httpx builds from either is the same.
    client = httpx.Client()
    one = client.build_request("POST", url, json={"a": 1})
    other = client.build_request("POST", base + path, json={"a": 1})
    assert (str(one.url), one.url.raw_path, one.headers.raw, one.content) == (
        str(other.url),
        other.url.raw_path,
        other.headers.raw,
        other.content,
    )
    client.close()


def test_engine_url_joins_plain_paths_without_a_parse_and_hands_the_rest_to_httpx() -> None:
    from workerless.engines.kit import joinurl

    assert isinstance(joinurl.engine_url("http://127.0.0.1:8080/v1", "/jobs/42/complete"), httpx.URL)
    for path in ("/jobs/a b", "/jobs/./x", "/jobs/%41"):
        url = joinurl.engine_url("http://127.0.0.1:8080/v1", path)
        assert isinstance(url, str) and url == "http://127.0.0.1:8080/v1" + path
    # A base whose join would not match httpx's parse (here: httpx refuses it) is left to httpx.
    refused = "http://engine\texample/v1"  # a control character: httpx.URL raises InvalidURL
    assert joinurl.engine_url(refused, "/jobs/1") == refused + "/jobs/1"
    assert joinurl._base(refused) is None


def test_engine_url_falls_back_when_httpx_internals_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    from workerless.engines.kit import joinurl

    joinurl._base.cache_clear()

    def other_httpx(self: object, path: str) -> httpx.URL:
        return httpx.URL("http://elsewhere.example/" + path)  # what a changed internal might build

    monkeypatch.setattr(joinurl._Base, "join", other_httpx)
    url = joinurl.engine_url("http://127.0.0.1:8080/v1", "/jobs/42")
    assert isinstance(url, str) and url == "http://127.0.0.1:8080/v1/jobs/42"
    joinurl._base.cache_clear()  # the next test's bases: parsed by the real join
