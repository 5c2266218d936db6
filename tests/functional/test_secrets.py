"""Engine connection values from Secrets Manager (moto), as the functions read them in Lambda."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from workerless.errors import ConfigurationError
from workerless.settings import clear_settings, engine_values

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


def use_secret(monkeypatch: pytest.MonkeyPatch, arn: str) -> None:
    monkeypatch.setenv("WORKERLESS_SECRET_ARN", arn)
    clear_settings()


def test_the_block_as_text_is_parsed_like_the_env_file(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    arn = secrets.create_secret(Name="workerless/engine", SecretString=BLOCK)["ARN"]
    use_secret(monkeypatch, arn)

    values = engine_values()

    assert values["SHEPTRA_TOKEN_ENDPOINT"] == ""
    assert values["SHEPTRA_CLIENT_SECRET"] == "s3cret-value"
    assert values["SHEPTRA_ENVIRONMENT"] == "cell-1"


def test_a_json_object_secret(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = {"NF_URL": "https://nf.example", "NF_API_KEY": "nf_key", "NF_NAMESPACE": None}
    arn = secrets.create_secret(Name="workerless/nf", SecretString=json.dumps(payload))["ARN"]
    use_secret(monkeypatch, arn)

    assert engine_values() == {"NF_URL": "https://nf.example", "NF_API_KEY": "nf_key", "NF_NAMESPACE": ""}


def test_a_missing_secret_names_the_setting_not_the_value(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    use_secret(monkeypatch, "arn:aws:secretsmanager:us-east-1:123456789012:secret:nope-AbCdEf")

    with pytest.raises(ConfigurationError) as caught:
        engine_values()

    assert caught.value.key == "WORKERLESS_SECRET_ARN"
    assert "ResourceNotFoundException" in str(caught.value)


def test_malformed_json_is_refused_without_quoting_it(secrets: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    arn = secrets.create_secret(Name="workerless/bad", SecretString='{"SHEPTRA_CLIENT_SECRET": "leak-me"')["ARN"]
    use_secret(monkeypatch, arn)

    with pytest.raises(ConfigurationError) as caught:
        engine_values()

    assert "leak-me" not in str(caught.value)
    assert caught.value.key == "WORKERLESS_SECRET_ARN"
