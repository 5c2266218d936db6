"""Fuzz every engine response parser and the SQS message decoders (hypothesis).

Each adapter is driven through its real HTTP code path with an in-process ``httpx.MockTransport``
(no sockets) that answers the call under test with generated garbage — truncated JSON, wrong types,
missing fields, huge arrays, invalid UTF-8, problem+json with odd fields — and valid answers
elsewhere. The promise: the adapter either returns well-formed jobs or raises one of the error
hierarchy's :class:`~workerless.errors.EngineError` classes with a message (never a KeyError,
TypeError, ... that would crash the poller loop); a malformed job that has an id is handed back
to the engine, never silently dropped. The SQS decoders raise :class:`MessageFormatError` naming
the field. Example counts are bounded so the module stays fast.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workerless._core.model import ActivatedJob, Demand, JobRef
from workerless._core.settings import Settings
from workerless._heartbeat.ticket import Ticket
from workerless._poller.poller import Poller
from workerless.engines import build_engine
from workerless.engines.base import MemoryState
from workerless.errors import ConfigurationError, EngineError, MessageFormatError, ResponseShapeError

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASE = "http://127.0.0.1:9"

VALUES: dict[str, dict[str, str]] = {
    "sheptra": {"SHEPTRA_TOKEN_ENDPOINT": "", "SHEPTRA_API_URL": BASE},
    "nodeflow": {"NF_URL": BASE, "NF_NAMESPACE": "default", "NF_API_KEY": "nf_fuzz_key"},
    "stagenext": {"STAGENEXT_API_URL": BASE, "STAGENEXT_API_KEY": "sn-fuzz-key"},
}
#: The path suffix of each engine's take-work call (its answer is the one fuzzed).
TAKE = {"sheptra": "/v1/jobs/activate", "nodeflow": "/lease", "stagenext": "/jobs/pull"}

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20,
)
#: Keys the engines' answers use, so generated objects often look almost right.
FIELD_NAMES = st.sampled_from(
    [
        "jobs", "id", "type", "retries", "lockExpiresAt", "variables", "instanceId", "elementId", "traceparent",
        "tasks", "taskId", "leaseToken", "leaseExpiresAt", "input", "workflowId", "queueName", "taskDefName",
        "stageId", "ackToken", "token", "executionId", "attempt", "payload", "job", "message", "body",
    ]
)  # fmt: skip
near_objects = st.dictionaries(FIELD_NAMES, json_values, max_size=8)
bodies = (
    json_values.map(lambda v: json.dumps(v).encode())
    | near_objects.map(lambda v: json.dumps(v).encode())
    | st.dictionaries(st.sampled_from(["jobs", "tasks", "job"]), st.lists(near_objects, max_size=5), min_size=1).map(
        lambda v: json.dumps(v).encode()
    )
    | st.binary(max_size=64)  # invalid UTF-8, truncated anything
    | near_objects.map(lambda v: json.dumps(v).encode()[: max(1, len(json.dumps(v)) // 2)])  # truncated JSON
)
statuses = st.sampled_from([200, 200, 200, 201, 204, 400, 401, 403, 404, 409, 413, 421, 429, 500, 503])
problems = st.dictionaries(
    st.sampled_from(["type", "title", "status", "detail", "code", "instance", "requiredScope", "errors"]),
    json_values,
    max_size=6,
).map(lambda v: json.dumps(v).encode())
headers = st.sampled_from(
    [{}, {"Content-Type": "application/json"}, {"Content-Type": "application/problem+json"}, {"Retry-After": "x"}]
)


def adapter(engine: str, answer: Callable[[httpx.Request], httpx.Response]) -> Any:
    """The real adapter, answering every request with ``answer`` (valid defaults elsewhere)."""
    handed_back: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith(TAKE[engine]):
            return answer(request)
        if path.endswith("/workers/bootstrap"):
            return httpx.Response(201, json={"workerId": "wrk_1", "sessionToken": "tok", "expiresInSeconds": 1000})
        handed_back.append(path)
        return httpx.Response(204)

    client = httpx.Client(transport=httpx.MockTransport(handle))
    built = build_engine(engine, VALUES[engine], client, state=MemoryState())
    built.handed_back = handed_back  # type: ignore[attr-defined]
    return built


def take(built: Any) -> list[ActivatedJob]:
    return list(built.activate([Demand("charge-payment", 5)], 60))


def attempt(fn: Callable[[], Any], *errors: type[Exception]) -> tuple[Any, Exception | None]:
    """``fn()``'s value, or the expected error it raised (anything else propagates: a test failure)."""
    try:
        return fn(), None
    except errors as exc:
        return None, exc


def assert_clean(built: Any) -> None:
    """Either well-formed jobs, or an EngineError with a message; nothing else escapes."""
    jobs, error = attempt(lambda: take(built), EngineError, ConfigurationError)
    if isinstance(error, EngineError):
        assert str(error), "an error must say what was wrong"
        assert not isinstance(error, ResponseShapeError) or error.field
        return
    if isinstance(error, ConfigurationError):
        # Only the auth answers mean "the worker is configured wrong" (a 401 with auth off, a 403
        # scope): the poller stops on these on purpose, naming the setting.
        assert error.key, str(error)
        return
    for job in jobs:
        assert isinstance(job, ActivatedJob)
        assert job.ref.job_id and job.ref.job_type == "charge-payment"
        ActivatedJob.from_message(job.to_message())  # it survives the SQS hop


@pytest.mark.parametrize("engine", list(TAKE))
@FUZZ
@given(body=bodies, status=statuses, extra=headers)
def test_take_work_answers_never_escape_the_error_hierarchy(engine: str, body: bytes, status: int, extra: Any) -> None:
    built = adapter(engine, lambda request: httpx.Response(status, content=body, headers=extra))
    assert_clean(built)


@pytest.mark.parametrize("engine", list(TAKE))
@FUZZ
@given(body=problems, status=st.sampled_from([400, 401, 403, 404, 409, 413, 421, 429, 500, 502, 503]))
def test_problem_json_with_odd_fields_becomes_a_named_error(engine: str, body: bytes, status: int) -> None:
    built = adapter(
        engine,
        lambda request: httpx.Response(
            status, content=body, headers={"Content-Type": "application/problem+json", "Retry-After": "1"}
        ),
    )
    with pytest.raises((EngineError, ConfigurationError)) as caught:
        take(built)
    assert str(status) in str(caught.value), "the error names the status"


@pytest.mark.parametrize("engine", list(TAKE))
def test_a_ten_megabyte_answer_is_handled_without_crashing(engine: str) -> None:
    huge = json.dumps({"jobs": [{"id": "j1", "variables": {"blob": "x" * (10 * 1024 * 1024)}}]}).encode()
    built = adapter(engine, lambda request: httpx.Response(200, content=huge))
    assert_clean(built)


@pytest.mark.parametrize("engine", list(TAKE))
def test_a_huge_array_is_handled_without_crashing(engine: str) -> None:
    items = [{"id": f"j{i}", "type": "charge-payment"} for i in range(2_000)]
    body = json.dumps({"jobs": items, "tasks": items}).encode()
    built = adapter(engine, lambda request: httpx.Response(200, content=body))
    assert_clean(built)


def test_sheptra_hands_back_a_malformed_job_instead_of_dropping_it() -> None:
    """A job with an id but a wrong field is failed back to the engine (retries unchanged) at once."""
    body = {"jobs": [{"id": "j1", "type": "charge-payment", "retries": "three", "variables": {}}]}
    built = adapter("sheptra", lambda request: httpx.Response(200, json=body))
    assert take(built) == []
    assert built.handed_back == ["/v1/jobs/j1/fail"]


def test_nodeflow_reports_a_malformed_task_failed_instead_of_dropping_it() -> None:
    """A leased task it cannot read, but can address (id, workflow, lease token), is reported FAILED
    with the reason at once, rather than held until its lease lapses."""
    task = {"taskId": "t1", "workflowId": "w1", "leaseToken": "lt_fuzz", "input": "not an object"}
    built = adapter("nodeflow", lambda request: httpx.Response(200, json={"tasks": [task]}))
    assert take(built) == []
    assert [p for p in built.handed_back if p.endswith("/report")] == ["/v1/ns/default/tasks/t1/report"]


def test_the_poller_loop_survives_any_engine_answer() -> None:
    """GIVEN an engine whose answers are garbage THEN a poller invocation backs off and returns."""

    class Queues:
        def in_flight(self, url: str) -> int:
            return 0

        def send_batch(self, url: str, bodies: list[str]) -> list[Any]:
            return []

        def send(self, *args: Any, **kwargs: Any) -> None:
            return None

    routes = json.dumps([{"type": "charge-payment", "queue": "q", "max": 5}])
    config = Settings.from_env({"WORKERLESS_ROUTES": routes, "WORKERLESS_POLL_BUDGET_SECONDS": "0"})
    for engine in TAKE:
        built = adapter(engine, lambda request: httpx.Response(200, content=b'{"jobs": [{"id": 1}'))
        report = Poller(config, built, Queues(), sleep=lambda s: None).run(deadline=0.0)
        assert report.errors == 1 and report.dispatched == 0


# ------------------------------------------------------------------------------------------------
# SQS message decoders


def valid_message() -> dict[str, Any]:
    job = ActivatedJob(JobRef("sheptra", "j1", "charge-payment", "r3"), {"a": 1}, 2.0, 1.0, retries=3)
    parsed: dict[str, Any] = json.loads(job.to_message())
    return parsed


@FUZZ
@given(body=st.text(max_size=200) | bodies.map(lambda b: b.decode("utf-8", "replace")))
def test_the_job_message_decoder_names_what_is_wrong(body: str) -> None:
    _, error = attempt(lambda: ActivatedJob.from_message(body), MessageFormatError)
    assert error is None or getattr(error, "field", None), "the error names the field"


@FUZZ
@given(field=st.sampled_from(sorted(valid_message())), value=json_values, drop=st.booleans())
def test_a_job_message_with_one_wrong_field_is_refused_by_name_or_read(field: str, value: Any, drop: bool) -> None:
    message = valid_message()
    if drop:
        message.pop(field)
    else:
        message[field] = value
    job, error = attempt(lambda: ActivatedJob.from_message(json.dumps(message)), MessageFormatError)
    if error is not None:
        assert getattr(error, "field", None)
    else:
        assert isinstance(job.ref, JobRef)


@FUZZ
@given(body=json_values.map(json.dumps) | st.text(max_size=100))
def test_the_ticket_decoder_names_what_is_wrong(body: str) -> None:
    _, error = attempt(lambda: Ticket.from_json(body), MessageFormatError)
    assert error is None or getattr(error, "field", None)
