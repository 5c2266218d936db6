"""The routes as SSM parameters: the Parameter Store adapter (pages, retries, errors), the settings
they become, the one read per container, the heartbeat's queue without the routes, and local mode's
Parameter Store rules and IAM resource for the call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from workerless._core.record import JobRecord, Status
from workerless._core.settings import Settings, get_settings
from workerless._heartbeat import heartbeat
from workerless._poller import routes
from workerless._poller.routes import RouteReader
from workerless.aws.parameters import MAX_PAGES, ParameterStoreError, read_path
from workerless.aws.sqs import queue_url_of_arn
from workerless.errors import ConfigurationError
from workerless_devkit.local.iam.calls import needs
from workerless_devkit.local.template import TemplateError, check_parameter_name, resolve_template

from tests.fakes import Clock

PATH = "/workerless/orders/routes"
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-chargepaymentQueue-X1"


def _route(job_type: str, **extra: Any) -> str:
    return json.dumps({"type": job_type, "queue": f"{QUEUE}-{job_type}", "max": 10, "engineQueue": "", **extra})


def _error(code: str, status: int = 400) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "GetParametersByPath")


class ScriptedSsm:
    """GetParametersByPath answering from a script: an exception to raise or an answer to return."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.calls: list[dict[str, Any]] = []

    def get_parameters_by_path(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        step = self.script.pop(0) if self.script else {"Parameters": []}
        if isinstance(step, Exception):
            raise step
        return step


@pytest.fixture
def ssm() -> Iterator[Any]:
    with mock_aws():
        yield boto3.session.Session(region_name="us-east-1").client("ssm")


# -- the adapter ---------------------------------------------------------------------------------------


def test_every_page_of_the_path_is_read_and_nothing_below_it(ssm: Any) -> None:
    """GIVEN 23 routes under the path (three pages of 10) and a parameter one level deeper WHEN the
    path is read THEN every route and nothing else comes back, in name order."""
    names = [f"{PATH}/type-{i:02d}" for i in range(23)]
    for name in names:
        ssm.put_parameter(Name=name, Value=_route(name.rsplit("/", 1)[-1]), Type="String")
    ssm.put_parameter(Name=f"{PATH}/deeper/other", Value="x", Type="String")
    found = read_path(PATH, deadline=1e12, client=ssm)
    assert list(found) == names
    assert json.loads(found[names[0]])["type"] == "type-00"


def test_a_throttled_read_is_retried_on_the_policy_within_the_deadline() -> None:
    clock = Clock(0.0)
    page = {"Parameters": [{"Name": f"{PATH}/a", "Value": _route("a")}]}
    ssm = ScriptedSsm(_error("ThrottlingException"), _error("InternalServerError", 500), page)
    found = read_path(PATH, deadline=60.0, client=ssm, sleep=clock.sleep, clock=clock)
    assert list(found) == [f"{PATH}/a"]
    assert len(ssm.calls) == 3 and len(clock.slept) == 2
    assert all(call == {"Path": PATH, "Recursive": False, "MaxResults": 10} for call in ssm.calls)


def test_a_throttle_past_the_retries_or_the_deadline_is_raised_retryable() -> None:
    clock = Clock(0.0)
    ssm = ScriptedSsm(*[_error("ThrottlingException")] * 10)
    with pytest.raises(ParameterStoreError) as caught:
        read_path(PATH, deadline=60.0, client=ssm, sleep=clock.sleep, clock=clock)
    assert caught.value.retryable and caught.value.code == "ThrottlingException"
    assert len(ssm.calls) == 3  # workerless._core.retry.PARAMETERS: three attempts
    clock = Clock(0.0)
    ssm = ScriptedSsm(*[_error("ThrottlingException")] * 10)
    with pytest.raises(ParameterStoreError):
        read_path(PATH, deadline=0.1, client=ssm, sleep=clock.sleep, clock=clock)
    assert len(ssm.calls) == 1 and clock.slept == []  # no wait would end before the deadline


@pytest.mark.parametrize("code", ["AccessDeniedException", "ValidationException"])
def test_a_refusal_that_will_not_change_is_a_configuration_error_naming_the_path(code: str) -> None:
    ssm = ScriptedSsm(_error(code))
    with pytest.raises(ConfigurationError) as caught:
        read_path(PATH, deadline=1e12, client=ssm)
    assert caught.value.key == "WORKERLESS_ROUTES_PATH"
    assert PATH in str(caught.value) and code in str(caught.value)
    assert len(ssm.calls) == 1


def test_the_page_loop_is_bounded() -> None:
    """A NextToken that never ends is a fault, not more routes: the loop stops after MAX_PAGES."""
    endless = [{"Parameters": [], "NextToken": "more"} for _ in range(MAX_PAGES + 5)]
    ssm = ScriptedSsm(*endless)
    with pytest.raises(ConfigurationError, match="pages"):
        read_path(PATH, deadline=1e12, client=ssm)
    assert len(ssm.calls) == MAX_PAGES
    assert all(call.get("NextToken") == "more" for call in ssm.calls[1:])


# -- the settings they become --------------------------------------------------------------------------


def _settings(**env: str) -> Settings:
    return Settings.from_env({"WORKERLESS_ROUTES_PATH": PATH, **env})


def test_route_parameters_become_the_routes() -> None:
    parameters = {f"{PATH}/a": _route("a", max="4"), f"{PATH}/b": _route("b", engineQueue="b:eu-west")}
    settings = routes.with_route_parameters(_settings(WORKERLESS_LEASE_SECONDS="30"), parameters)
    a, b = settings.route("a"), settings.route("b")
    assert a is not None and (a.max_in_flight, a.engine_queue) == (4, None)  # "" is no engine queue
    assert b is not None and b.engine_queue == "b:eu-west"
    assert settings.lease_seconds == 30 and settings.routes_path == PATH


@pytest.mark.parametrize(
    ("parameters", "key", "words"),
    [
        ({}, "WORKERLESS_ROUTES_PATH", "holds no parameter"),
        ({f"{PATH}/a": "{not json"}, f"{PATH}/a", "is not JSON"),
        ({f"{PATH}/a": json.dumps({"type": "a"})}, f"{PATH}/a", "is not a route at queue"),
        ({f"{PATH}/a": _route("a", max=0)}, f"{PATH}/a", "is not a route at max"),
        # Parameters are named for their routes, not their types: two routes of one type are refused.
        ({f"{PATH}/a": _route("a"), f"{PATH}/b": _route("a")}, "WORKERLESS_ROUTES_PATH", "routed twice"),
    ],
)
def test_a_missing_or_malformed_route_is_a_clear_configuration_error(
    parameters: dict[str, str], key: str, words: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        routes.with_route_parameters(_settings(), parameters)
    assert caught.value.key == key
    assert words in str(caught.value) and key in str(caught.value)


def _scripted_reads(monkeypatch: pytest.MonkeyPatch, answers: list[Any], **env: str) -> list[str]:
    """read_path answering ``answers`` in turn (a dict, or an exception to raise); the paths read."""
    import workerless.aws.parameters as parameters

    reads: list[str] = []

    def scripted(path: str, *, deadline: float, client: Any = None) -> dict[str, str]:
        reads.append(path)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    monkeypatch.setattr(parameters, "read_path", scripted)
    monkeypatch.setenv("WORKERLESS_ROUTES_PATH", PATH)
    monkeypatch.delenv("WORKERLESS_ROUTES", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return reads


@pytest.fixture
def reader() -> RouteReader:
    """A wiring's route reader (nothing read yet): each test starts cold, as a new container."""
    return RouteReader()


def test_the_path_is_read_at_the_first_poll_and_kept(ssm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call reads (the real adapter, on moto); later calls within the refresh interval do not."""
    ssm.put_parameter(Name=f"{PATH}/a", Value=_route("a"), Type="String")
    import workerless.aws.parameters as parameters

    reads: list[str] = []

    def counted(path: str, *, deadline: float, client: Any = None) -> dict[str, str]:
        reads.append(path)
        return read_path(path, deadline=deadline, client=ssm)

    monkeypatch.setattr(parameters, "read_path", counted)
    monkeypatch.setenv("WORKERLESS_ROUTES_PATH", PATH)
    monkeypatch.delenv("WORKERLESS_ROUTES", raising=False)
    reader = RouteReader()
    clock = Clock(0.0)
    first = reader.routed(get_settings(), deadline=1e12, clock=clock)
    clock.now += 299
    assert reader.routed(get_settings(), deadline=1e12, clock=clock) is first
    assert [r.type for r in first.routes] == ["a"] and reads == [PATH]


def test_an_explicit_list_wins_and_the_path_is_not_read(monkeypatch: pytest.MonkeyPatch, reader: RouteReader) -> None:
    reads = _scripted_reads(monkeypatch, [], WORKERLESS_ROUTES=json.dumps([{"type": "z", "queue": "https://q/z"}]))
    assert [r.type for r in reader.routed(get_settings(), deadline=1e12).routes] == ["z"]
    assert reads == []


def test_routes_are_read_again_after_the_refresh_interval(monkeypatch: pytest.MonkeyPatch, reader: RouteReader) -> None:
    """A stack update that adds a route (or changes its max) changes its parameter, not the poller's
    configuration: a warm container reads the path again once the interval has passed."""
    answers: list[Any] = [{f"{PATH}/a": _route("a")}, {f"{PATH}/a": _route("a", max=3), f"{PATH}/b": _route("b")}]
    reads = _scripted_reads(monkeypatch, answers)
    clock = Clock(0.0)
    assert [r.type for r in reader.routed(get_settings(), deadline=1e12, clock=clock).routes] == ["a"]
    clock.now += 300
    again = reader.routed(get_settings(), deadline=1e12, clock=clock)
    assert [(r.type, r.max_in_flight) for r in again.routes] == [("a", 3), ("b", 10)]
    assert reads == [PATH, PATH]


def test_a_failed_refresh_keeps_the_routes_read_before(monkeypatch: pytest.MonkeyPatch, reader: RouteReader) -> None:
    answers: list[Any] = [{f"{PATH}/a": _route("a")}, ParameterStoreError("throttled"), {f"{PATH}/b": _route("b")}]
    reads = _scripted_reads(monkeypatch, answers)
    clock = Clock(0.0)
    reader.routed(get_settings(), deadline=1e12, clock=clock)
    clock.now += 300
    assert [r.type for r in reader.routed(get_settings(), deadline=1e12, clock=clock).routes] == ["a"]
    clock.now += 1  # tried again only after another interval
    assert [r.type for r in reader.routed(get_settings(), deadline=1e12, clock=clock).routes] == ["a"]
    clock.now += 300
    assert [r.type for r in reader.routed(get_settings(), deadline=1e12, clock=clock).routes] == ["b"]
    assert len(reads) == 3


def test_with_a_refresh_of_0_the_routes_are_read_at_cold_start_only(
    monkeypatch: pytest.MonkeyPatch, reader: RouteReader
) -> None:
    reads = _scripted_reads(monkeypatch, [{f"{PATH}/a": _route("a")}], WORKERLESS_ROUTES_REFRESH_SECONDS="0")
    clock = Clock(0.0)
    reader.routed(get_settings(), deadline=1e12, clock=clock)
    clock.now += 86_400
    reader.routed(get_settings(), deadline=1e12, clock=clock)
    assert reads == [PATH]


def test_a_failed_first_read_is_raised_and_not_kept(monkeypatch: pytest.MonkeyPatch, reader: RouteReader) -> None:
    reads = _scripted_reads(monkeypatch, [ParameterStoreError("throttled"), {f"{PATH}/a": _route("a")}])
    with pytest.raises(ParameterStoreError):
        reader.routed(get_settings(), deadline=1e12)
    assert [r.type for r in reader.routed(get_settings(), deadline=1e12).routes] == ["a"]
    assert len(reads) == 2


def test_a_bad_routes_path_names_the_variable() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"WORKERLESS_ROUTES_PATH": "workerless routes"})
    assert caught.value.key == "WORKERLESS_ROUTES_PATH"


# -- the heartbeat needs no routes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arn", "url"),
    [
        ("arn:aws:sqs:eu-central-1:123456789012:s-q-X1", "https://sqs.eu-central-1.amazonaws.com/123456789012/s-q-X1"),
        ("arn:aws-cn:sqs:cn-north-1:123456789012:q", "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q"),
        ("arn:aws:sqs:us-east-1:123456789012", None),
        ("arn:aws:s3:::bucket", None),
        (None, None),
    ],
)
def test_a_queue_url_is_derived_from_an_event_source_arn(arn: str | None, url: str | None) -> None:
    assert queue_url_of_arn(arn) == url


class DeletingQueues:
    def __init__(self) -> None:
        self.deleted: list[tuple[str, str]] = []

    def delete(self, queue_url: str, receipt: str) -> None:
        self.deleted.append((queue_url, receipt))


def _record(receipt: str | None, receipt_queue: str | None) -> JobRecord:
    return JobRecord(key="k", status=Status.REPORTED, receipt=receipt, receipt_queue=receipt_queue)


def test_the_heartbeat_deletes_in_the_queue_the_handler_noted_without_the_routes() -> None:
    settings = Settings.from_env({"WORKERLESS_ROUTES_PATH": PATH})  # no routes read
    queues = DeletingQueues()
    heartbeat._delete_message("a", _record("r1", QUEUE), settings=settings, queues=queues, job_id="1")
    # A record noted before the queue was: the route of WORKERLESS_ROUTES when that is set, else left
    # to the visibility timeout (its delivery finds the job reported).
    heartbeat._delete_message("a", _record("r2", None), settings=settings, queues=queues, job_id="2")
    explicit = Settings.from_env({"WORKERLESS_ROUTES": json.dumps([{"type": "a", "queue": "https://q/a"}])})
    heartbeat._delete_message("a", _record("r3", None), settings=explicit, queues=queues, job_id="3")
    heartbeat._delete_message("a", _record(None, QUEUE), settings=settings, queues=queues, job_id="4")
    assert queues.deleted == [(QUEUE, "r1"), ("https://q/a", "r3")]


# -- local mode: Parameter Store's rules, and the path as the call's resource --------------------------


@pytest.mark.parametrize(
    "name",
    [
        "workerless/orders/routes/a",  # a hierarchy begins with /
        "/workerless/orders/routes/a b",
        "/workerless/orders//a",
        "/aws/orders/a",
        "/SSM-things/a",
        "/" + "/".join(["l"] * 16),
        "/" + "x" * 1011,
    ],
)
def test_a_parameter_name_parameter_store_refuses_is_refused(name: str) -> None:
    with pytest.raises(TemplateError, match="is not valid"):
        check_parameter_name(name, where="R.Name")


def test_names_parameter_store_takes_pass() -> None:
    check_parameter_name("/workerless/orders-prod/routes/charge-payment", where="R.Name")
    check_parameter_name("plain_name.v1", where="R.Name")


def _template(value: str, tier: str = "Standard") -> dict[str, Any]:
    return {
        "Resources": {
            "Route": {
                "Type": "AWS::SSM::Parameter",
                "Properties": {"Name": "/workerless/x/routes/a", "Type": "String", "Tier": tier, "Value": value},
            }
        }
    }


def test_a_value_over_the_standard_tiers_4_kb_is_refused(tmp_path: Any) -> None:
    assert resolve_template(_template("v" * 4096), base_dir=tmp_path).ssm_parameters[0].value == "v" * 4096
    with pytest.raises(TemplateError, match="4097 bytes deployed"):
        resolve_template(_template("v" * 4097), base_dir=tmp_path)
    assert resolve_template(_template("v" * 4097, tier="Advanced"), base_dir=tmp_path).ssm_parameters
    # A generated name in the value (a queue's URL) counts with the suffix CloudFormation adds.
    assert resolve_template(_template("workerless-local-" + "v" * 4066), base_dir=tmp_path).ssm_parameters
    with pytest.raises(TemplateError, match="4097 bytes deployed"):
        resolve_template(_template("workerless-local-" + "v" * 4067), base_dir=tmp_path)


def test_get_parameters_by_path_is_authorised_against_the_path() -> None:
    (need,) = needs("ssm", "GetParametersByPath", {"Path": PATH, "Recursive": False})
    assert (need.action, need.resource) == (
        "ssm:GetParametersByPath",
        f"arn:aws:ssm:us-east-1:123456789012:parameter{PATH}",
    )
    (need,) = needs("ssm", "GetParametersByPath", {"Path": PATH + "/"})
    assert need.resource.endswith(PATH)
    (need,) = needs("ssm", "GetParameter", {"Name": f"{PATH}/a"})
    assert need.resource == f"arn:aws:ssm:us-east-1:123456789012:parameter{PATH}/a"
