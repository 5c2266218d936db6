"""Engine connection values from Secrets Manager (moto), as the functions read them in Lambda."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import boto3
import pytest
from moto import mock_aws
from workerless._core.settings import Settings
from workerless.errors import ConfigurationError
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


class _FailingSecrets:
    """A Secrets Manager client whose GetSecretValue fails with ``errors`` in turn (an exception
    each: a ClientError as botocore raises it once its own retries are spent), then answers."""

    def __init__(self, errors: list[Exception], text: str = '{"NF_URL": "https://nf.example", "NF_API_KEY": "k"}'):
        self.errors = errors
        self.text = text
        self.calls = 0

    def get_secret_value(self, SecretId: str) -> dict[str, Any]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return {"SecretString": self.text}


def _client_error(code: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetSecretValue"
    )


def _read(monkeypatch: pytest.MonkeyPatch, fake: _FailingSecrets) -> dict[str, str]:
    """The engine values a wiring reads through ``fake`` (no sleeping between the retries)."""
    from workerless.aws.secrets import load_engine_values

    monkeypatch.setattr("time.sleep", lambda seconds: None)
    settings = Settings(secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:engine-AbCdEf")
    return load_engine_values(settings, cast(Any, fake), env={})


@pytest.mark.parametrize(
    "error",
    [
        _client_error("ThrottlingException", 400),
        _client_error("InternalServiceError", 500),
        _client_error("ServiceUnavailable", 503),
    ],
    ids=["throttled", "internal-error", "unavailable"],
)
def test_a_throttle_or_5xx_is_read_again_not_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """GIVEN Secrets Manager refusing the read once with a throttle or its own failure (botocore's
    retries spent) THEN the read is made again and the values come back (issue 26: not a final
    ConfigurationError)."""
    fake = _FailingSecrets([error])

    assert _read(monkeypatch, fake)["NF_URL"] == "https://nf.example"
    assert fake.calls == 2


def test_secrets_manager_failing_throughout_is_a_retryable_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN every read answered InternalServiceError, or timing out THEN the read fails as a
    retryable SecretReadError naming the setting and the code (the invocation's batch comes back;
    nothing is reported final), after a bounded number of reads."""
    from botocore.exceptions import ReadTimeoutError
    from workerless.errors import SecretReadError

    fake = _FailingSecrets([_client_error("InternalServiceError", 500) for _ in range(10)])
    with pytest.raises(SecretReadError) as caught:
        _read(monkeypatch, fake)
    assert caught.value.retryable
    assert not isinstance(caught.value, ConfigurationError)
    assert "InternalServiceError" in str(caught.value)
    assert fake.calls == 3

    timeouts = _FailingSecrets([ReadTimeoutError(endpoint_url="https://secretsmanager") for _ in range(10)])
    with pytest.raises(SecretReadError) as caught:
        _read(monkeypatch, timeouts)
    assert caught.value.retryable
    assert "WORKERLESS_SECRET_ARN" in str(caught.value) and "ReadTimeoutError" in str(caught.value)


@pytest.mark.parametrize(
    ("code", "status"),
    [("AccessDeniedException", 400), ("ResourceNotFoundException", 400), ("DecryptionFailure", 400)],
)
def test_a_refusal_for_good_is_final_at_once_and_names_the_reason(
    monkeypatch: pytest.MonkeyPatch, code: str, status: int
) -> None:
    """GIVEN a read refused for good (no access, no such secret, a key it cannot decrypt with)
    THEN a ConfigurationError at once, naming WORKERLESS_SECRET_ARN and the reason; not read again."""
    fake = _FailingSecrets([_client_error(code, status) for _ in range(5)])
    with pytest.raises(ConfigurationError) as caught:
        _read(monkeypatch, fake)
    assert caught.value.key == "WORKERLESS_SECRET_ARN"
    assert code in str(caught.value)
    assert fake.calls == 1


def test_no_credentials_is_final_not_a_transport_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A BotoCoreError that is not a timeout or a connection failure (no credentials) fails the
    same way every time: a ConfigurationError naming it, read once."""
    from botocore.exceptions import NoCredentialsError

    fake = _FailingSecrets([NoCredentialsError() for _ in range(5)])
    with pytest.raises(ConfigurationError, match="NoCredentialsError"):
        _read(monkeypatch, fake)
    assert fake.calls == 1
