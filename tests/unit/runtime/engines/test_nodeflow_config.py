"""node-flow connection values → adapter (pure: no request is ever sent)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from workerless._core.lease import ACTIVATION_LEASE
from workerless._core.model import ActivatedJob, Demand, JobRef
from workerless.engines import build_engine
from workerless.engines.base import Engine
from workerless.engines.nodeflow import NodeFlowEngine, from_values, parse_timestamp, workflow_key
from workerless.errors import ConfigurationError

KEY = "nf_abcdefghijklmnop"


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request expected, got {request.method} {request.url}")

    with httpx.Client(transport=httpx.MockTransport(refuse)) as c:
        yield c


def build(client: httpx.Client, **values: str) -> NodeFlowEngine:
    return from_values(values, client)


def test_api_key_config(client: httpx.Client) -> None:
    engine = build(client, NF_URL="https://nf.example.com/", NF_API_KEY=KEY)
    assert engine.base_url == "https://nf.example.com"
    assert engine.namespace == "default"
    assert engine.domain is None
    assert engine.name == "nodeflow"
    assert engine.lease is ACTIVATION_LEASE
    assert isinstance(engine, Engine)


def test_build_engine_finds_the_module(client: httpx.Client) -> None:
    engine = build_engine("nodeflow", {"NF_URL": "http://127.0.0.1:3000", "NF_API_KEY": KEY}, client, worker_id="w-7")
    assert isinstance(engine, NodeFlowEngine)
    assert engine.worker_id == "w-7"


def test_default_worker_id_names_the_host(client: httpx.Client) -> None:
    assert build(client, NF_URL="http://127.0.0.1", NF_API_KEY=KEY).worker_id.startswith("workerless-")


def test_service_account_config(client: httpx.Client) -> None:
    engine = build(
        client, NF_URL="https://nf.example.com", NF_KEY_ID="sa_1", NF_KEY_SECRET="s3cret", NF_NAMESPACE="prod"
    )
    assert engine.namespace == "prod"


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"NF_API_KEY": KEY}, "NF_URL"),
        ({"NF_URL": "  ", "NF_API_KEY": KEY}, "NF_URL"),
        ({"NF_URL": "ftp://nf.example.com", "NF_API_KEY": KEY}, "NF_URL"),
        ({"NF_URL": "nf.example.com", "NF_API_KEY": KEY}, "NF_URL"),
        ({"NF_URL": "http://nf.example.com", "NF_API_KEY": KEY}, "NF_URL"),  # https unless loopback
        ({"NF_URL": "https://nf.example.com/v1", "NF_API_KEY": KEY}, "NF_URL"),  # the origin, not /v1
        ({"NF_URL": "https://nf.example.com?x=1", "NF_API_KEY": KEY}, "NF_URL"),
        ({"NF_URL": "https://u:p@nf.example.com", "NF_API_KEY": KEY}, "NF_URL"),
        ({"NF_URL": "https://nf.example.com"}, "NF_API_KEY"),
        ({"NF_URL": "https://nf.example.com", "NF_API_KEY": "has space"}, "NF_API_KEY"),
        ({"NF_URL": "https://nf.example.com", "NF_API_KEY": "nf_é"}, "NF_API_KEY"),
        ({"NF_URL": "https://nf.example.com", "NF_API_KEY": KEY, "NF_KEY_ID": "sa_1"}, "NF_API_KEY"),
        ({"NF_URL": "https://nf.example.com", "NF_KEY_SECRET": "s"}, "NF_KEY_ID"),
        ({"NF_URL": "https://nf.example.com", "NF_KEY_ID": "sa_1"}, "NF_KEY_SECRET"),
        ({"NF_URL": "https://nf.example.com", "NF_KEY_ID": "sa_1", "NF_KEY_SECRET": "a\tb"}, "NF_KEY_SECRET"),
        ({"NF_URL": "https://nf.example.com", "NF_API_KEY": KEY, "NF_NAMESPACE": "a/b"}, "NF_NAMESPACE"),
        ({"NF_URL": "https://nf.example.com", "NF_API_KEY": KEY, "NF_DOMAIN": "eu:west"}, "NF_DOMAIN"),
    ],
)
def test_bad_values_name_the_key(client: httpx.Client, values: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        from_values(values, client)
    assert caught.value.key == key
    assert key in str(caught.value)


def test_malformed_secret_is_not_echoed(client: httpx.Client) -> None:
    with pytest.raises(ConfigurationError) as caught:
        build(client, NF_URL="https://nf.example.com", NF_KEY_ID="sa_1", NF_KEY_SECRET="very secret value")
    assert "very secret value" not in str(caught.value)
    assert "secret value" not in str(caught.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:3000", "http://localhost:3000", "http://[::1]:3000", "http://127.9.9.9"]
)
def test_plain_http_is_allowed_on_loopback(client: httpx.Client, url: str) -> None:
    assert build(client, NF_URL=url, NF_API_KEY=KEY).base_url == url


def test_surrounding_whitespace_is_trimmed(client: httpx.Client) -> None:
    engine = build(client, NF_URL=" https://nf.example.com \n", NF_API_KEY=f"{KEY}\n")
    assert engine.base_url == "https://nf.example.com"


def test_queue_routing(client: httpx.Client) -> None:
    plain = build(client, NF_URL="https://nf.example.com", NF_API_KEY=KEY)
    assert plain.queue_for(Demand("charge", 1)) == "charge"
    assert plain.queue_for(Demand("charge", 1, queue="charge:eu-west")) == "charge:eu-west"
    domained = build(client, NF_URL="https://nf.example.com", NF_API_KEY=KEY, NF_DOMAIN="canary")
    assert domained.queue_for(Demand("charge", 1)) == "charge:canary"
    # An explicit engine queue on the route wins over the deployment-wide domain.
    assert domained.queue_for(Demand("charge", 1, queue="charge:eu-west")) == "charge:eu-west"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T00:00:00.000Z", 1767225600.0),
        ("2026-01-01T01:00:00+01:00", 1767225600.0),
        (1767225600, 1767225600.0),
        (1767225600500, 1767225600.5),
    ],
)
def test_parse_timestamp(value: str | int, expected: float) -> None:
    assert parse_timestamp(value) == expected


@pytest.mark.parametrize("value", [None, "", "soon", "2026-01-01T00:00:00", True])
def test_parse_timestamp_rejects(value: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies with the input
        parse_timestamp(value)


def test_workflow_key() -> None:
    ref = JobRef("nodeflow", "task-1", "charge", handle={})
    job = ActivatedJob(ref=ref, variables={}, lease_expires_at=0, activated_at=0, instance_id="wf-1", element_id="pay")
    assert workflow_key(job) == "wf-1:pay"
    no_ref = ActivatedJob(ref=ref, variables={}, lease_expires_at=0, activated_at=0, instance_id="wf-1")
    assert workflow_key(no_ref) == "wf-1:charge"
