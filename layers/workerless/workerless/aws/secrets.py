"""Engine connection values from AWS Secrets Manager (one secret holding the block's values).

The secret may hold a JSON object (``{"SHEPTRA_CLIENT_ID": "...", ...}``) or the env block as text,
exactly as Drive prints it. Values are never logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from workerless.errors import ConfigurationError
from workerless.settings import Settings, check_engine_keys, engine_overrides, parse_env_text

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient


def load_engine_values(
    settings: Settings, client: SecretsManagerClient | None, *, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The engine's connection values for ``settings``: the secret's (WORKERLESS_SECRET_ARN, read
    with ``client``), then the env file's (WORKERLESS_ENV_FILE), then the engine keys ``env`` sets
    (the process environment unless given), each over the one before. Refuses a misspelt engine key."""
    values: dict[str, str] = {}
    if settings.secret_arn:
        if client is None:
            raise ConfigurationError("WORKERLESS_SECRET_ARN is set and no Secrets Manager client was given")
        values.update(read_secret_values(settings.secret_arn, client=client))
    if settings.env_file:
        try:
            with open(settings.env_file, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigurationError(
                f"WORKERLESS_ENV_FILE {settings.env_file!r} cannot be read: {exc.strerror}",
                key="WORKERLESS_ENV_FILE",
            ) from None
        values.update(parse_env_text(text, source=settings.env_file))
    values.update(engine_overrides(env))
    check_engine_keys(values)
    if settings.engine:
        values.setdefault("WORKERLESS_ENGINE", settings.engine)
    return values


def read_secret_values(secret_id: str, *, client: SecretsManagerClient) -> dict[str, str]:
    """Read and parse the secret. A missing secret or unparseable content is a ConfigurationError
    naming WORKERLESS_SECRET_ARN (and never quoting the content)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        answer = client.get_secret_value(SecretId=secret_id)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        raise ConfigurationError(
            f"cannot read the engine secret named by WORKERLESS_SECRET_ARN: {code}", key="WORKERLESS_SECRET_ARN"
        ) from None
    except BotoCoreError as exc:
        raise ConfigurationError(
            f"cannot reach Secrets Manager for WORKERLESS_SECRET_ARN: {type(exc).__name__}",
            key="WORKERLESS_SECRET_ARN",
        ) from None
    text = answer.get("SecretString")
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError("the engine secret has no SecretString", key="WORKERLESS_SECRET_ARN")
    return parse_secret_text(text)


def parse_secret_text(text: str) -> dict[str, str]:
    """A JSON object of strings, or dotenv text."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            raise ConfigurationError(
                "the engine secret looks like JSON but does not parse", key="WORKERLESS_SECRET_ARN"
            ) from None
        if not isinstance(data, dict):
            raise ConfigurationError("the engine secret must be a JSON object", key="WORKERLESS_SECRET_ARN")
        return {str(k): "" if v is None else str(v) for k, v in data.items()}
    return parse_env_text(text, source="secret")
