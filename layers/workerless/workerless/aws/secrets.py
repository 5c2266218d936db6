"""Engine connection values from AWS Secrets Manager (one secret holding the block's values).

The secret may hold a JSON object (``{"SHEPTRA_CLIENT_ID": "...", ...}``) or the env block as text,
exactly as Drive prints it. Values are never logged.
"""

from __future__ import annotations

import json

from workerless.errors import ConfigurationError


def read_secret_values(secret_id: str, *, endpoint_url: str | None = None) -> dict[str, str]:
    """Read and parse the secret. A missing secret or unparseable content is a ConfigurationError
    naming WORKERLESS_SECRET_ARN (and never quoting the content)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from workerless.aws.clients import client

    try:
        answer = client("secretsmanager").get_secret_value(SecretId=secret_id)
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
    from workerless.settings import parse_env_text

    return parse_env_text(text, source="secret")
