"""Engine connection values from AWS Secrets Manager (one secret holding the block's values).

The secret may hold a JSON object (``{"SHEPTRA_CLIENT_ID": "...", ...}``) or the env block as text,
exactly as Drive prints it. Values are never logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from workerless._core.settings import Settings, check_engine_keys, engine_overrides, parse_env_text
from workerless.errors import ConfigurationError, SecretReadError

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from mypy_boto3_secretsmanager.type_defs import GetSecretValueResponseTypeDef

#: Secrets Manager's answers that say "not now" rather than "never": a throttle, its own failure.
#: Anything else it refuses (AccessDeniedException, ResourceNotFoundException, DecryptionFailure,
#: InvalidRequestException for a secret scheduled for deletion, ...) will not pass on a second try.
_RETRYABLE_CODES = frozenset(
    {"ThrottlingException", "TooManyRequestsException", "InternalServiceError", "InternalFailure", "ServiceUnavailable"}
)
KEY = "WORKERLESS_SECRET_ARN"


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
    """Read and parse the secret.

    A read Secrets Manager refuses for good (access denied, no such secret, one it cannot decrypt)
    or content that does not parse is a :class:`ConfigurationError` naming WORKERLESS_SECRET_ARN
    and the reason (never quoting the content). A throttle, a 5xx or a timeout (after botocore's
    own retries) is tried again under :data:`workerless._core.retry.SECRETS` within the caller's AWS
    deadline, then raised as a retryable :class:`SecretReadError`: an invocation that cannot read
    the secret now fails (its batch comes back), it does not report anything final."""
    from workerless._core.retry import SECRETS, ambient_deadline

    answer = SECRETS.call(
        lambda: _get(secret_id, client),
        deadline=ambient_deadline(),
        retryable=lambda e: isinstance(e, SecretReadError) and e.retryable,
    )
    text = answer.get("SecretString")
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError("the engine secret named by WORKERLESS_SECRET_ARN has no SecretString", key=KEY)
    return parse_secret_text(text)


def _get(secret_id: str, client: SecretsManagerClient) -> GetSecretValueResponseTypeDef:
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as TransportError

    from workerless.aws.clients import DeadlineReachedError

    try:
        return client.get_secret_value(SecretId=secret_id)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", "error"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _RETRYABLE_CODES or status >= 500:
            raise SecretReadError(f"Secrets Manager could not read the engine secret now: {code}", code=code) from None
        raise ConfigurationError(f"cannot read the engine secret named by {KEY}: {code}", key=KEY) from None
    except (HTTPClientError, TransportError) as exc:  # a timeout, a dropped or refused connection
        raise SecretReadError(f"cannot reach Secrets Manager for {KEY}: {type(exc).__name__}") from None
    except BotoCoreError as exc:  # no credentials, a malformed request: the same call fails again
        raise ConfigurationError(
            f"cannot read the engine secret named by {KEY}: {type(exc).__name__}", key=KEY
        ) from None
    except DeadlineReachedError:
        raise SecretReadError(
            f"the engine secret ({KEY}) was not read: the invocation's deadline has passed", retryable=False
        ) from None


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
