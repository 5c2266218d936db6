"""Engine connection values from Secrets Manager (moto), as the functions read them in Lambda."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from workerless.errors import ConfigurationError
from workerless.settings import Settings
from workerless.wiring import Wiring

BLOCK = """# authentication is off on this deployment — nothing to mint from; leave blank
SHEPTRA_TOKEN_ENDPOINT=
SHEPTRA_CLIENT_ID=client_abc
SHEPTRA_CLIENT_SECRET=s3cret-value
SHEPTRA_API_URL=https://engine.example
SHEPTRA_DISCOVERY_URL=https://mgmt.example/v1/discovery/cell
SHEPTRA_ENVIRONMENT=cell-1
"""


@pytest.fixture
def secrets() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def engine_values(arn: str, **settings: Any) -> dict[str, str]:
    """What a wiring whose settings name ``arn`` reads as the engine's connection values."""
    wiring = Wiring(settings=Settings(secret_arn=arn, **settings))
    try:
        return wiring.engine_values()
    finally:
        wiring.close()


def test_the_block_as_text_is_parsed_like_the_env_file(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    arn = secrets.create_secret(Name="workerless/engine", SecretString=BLOCK)["ARN"]
    values = engine_values(arn)

    assert values["SHEPTRA_TOKEN_ENDPOINT"] == ""
    assert values["SHEPTRA_CLIENT_SECRET"] == "s3cret-value"
    assert values["SHEPTRA_ENVIRONMENT"] == "cell-1"


def test_a_json_object_secret(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = {"NF_URL": "https://nf.example", "NF_API_KEY": "nf_key", "NF_NAMESPACE": None}
    arn = secrets.create_secret(Name="workerless/nf", SecretString=json.dumps(payload))["ARN"]
    assert engine_values(arn) == {"NF_URL": "https://nf.example", "NF_API_KEY": "nf_key", "NF_NAMESPACE": ""}


def test_a_missing_secret_names_the_setting_not_the_value(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError) as caught:
        engine_values("arn:aws:secretsmanager:us-east-1:123456789012:secret:nope-AbCdEf")

    assert caught.value.key == "WORKERLESS_SECRET_ARN"
    assert "ResourceNotFoundException" in str(caught.value)


def test_malformed_json_is_refused_without_quoting_it(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    arn = secrets.create_secret(Name="workerless/bad", SecretString='{"SHEPTRA_CLIENT_SECRET": "leak-me"')["ARN"]
    with pytest.raises(ConfigurationError) as caught:
        engine_values(arn)

    assert "leak-me" not in str(caught.value)
    assert caught.value.key == "WORKERLESS_SECRET_ARN"


def test_a_warm_container_builds_its_engine_anew_from_a_rotated_secret(
    secrets: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a container whose engine was built from the secret, WHEN the secret is rotated
    THEN once the values are older than WORKERLESS_SECRET_MAX_AGE_SECONDS the container reads the
    secret again and builds its engine from the new values (before, a warm container kept the old
    credential until it died); while the secret is unchanged it keeps the engine it has."""
    payload = {"WORKERLESS_ENGINE": "nodeflow", "NF_URL": "https://nf.example", "NF_API_KEY": "nf_old"}
    arn = secrets.create_secret(Name="workerless/rotated", SecretString=json.dumps(payload))["ARN"]
    wiring = Wiring(settings=Settings(secret_arn=arn, secret_max_age_seconds=0), state=object())  # type: ignore[arg-type]
    try:
        first = wiring.observed_engine
        assert wiring.observed_engine is first, "the secret unchanged: the same engine"

        secrets.put_secret_value(SecretId=arn, SecretString=json.dumps({**payload, "NF_API_KEY": "nf_new"}))
        rotated = wiring.observed_engine

        assert rotated is not first
        assert wiring.engine_values()["NF_API_KEY"] == "nf_new"
        assert wiring.observed_engine is rotated
    finally:
        wiring.close()
