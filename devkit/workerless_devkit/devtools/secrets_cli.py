"""``workerless secrets import --env-file .env [--secret-name N]``: the engine's connection values into
Secrets Manager, validated first, never echoed.

The env file is read with :func:`workerless._core.settings.parse_env_text` (the Sheptra worker block as
Drive prints it, comments and blank values included; node-flow's ``NF_*``; StageNext's
``STAGENEXT_*``). The engine is ``WORKERLESS_ENGINE`` or inferred from the keys, and the values go
through that engine adapter's own ``from_values`` validation (with an HTTP client that refuses every
call, so validation is offline). Only the engine's keys are stored, as a JSON object (what
:func:`workerless.aws.secrets.parse_secret_text` reads); other lines of the file are named and left
out. Output: key names, the secret's ARN, and whether it was created or updated.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workerless._core.settings import ENGINE_KEY_PREFIXES, infer_engine, parse_env_text
from workerless.errors import ConfigurationError, WorkerlessError

DEFAULT_SECRET_NAME = "workerless/engine"  # noqa: S105 - a name, not a secret


class SecretStoreError(WorkerlessError):
    """Secrets Manager refused (or could not be reached); the message names the error code only."""


@dataclass(frozen=True)
class Imported:
    engine: str
    arn: str
    keys: list[str]
    skipped: list[str]
    created: bool


class _NoNetwork:
    """An HTTP client stand-in for offline validation: building an adapter must not call the engine."""

    def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        raise ConfigurationError(f"validation tried to reach the engine ({name}); it must be offline", key="engine")


def engine_keys(engine: str, values: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The values that belong to ``engine`` (by key prefix), and the names of the others."""
    prefixes = ENGINE_KEY_PREFIXES[engine]
    kept = {k: v for k, v in values.items() if k.startswith(prefixes)}
    return kept, sorted(k for k in values if k not in kept)


def validate_values(values: Mapping[str, str]) -> str:
    """Infer the engine and run its adapter's validation on ``values``; return the engine's name.

    A missing or malformed key raises :class:`ConfigurationError` naming the key (the adapters never
    put a secret in the message).
    """
    from workerless.engines import ENGINES

    engine = infer_engine(values)
    kept, _ = engine_keys(engine, values)
    if not kept:
        raise ConfigurationError(f"the env file has no {engine} keys ({', '.join(ENGINE_KEY_PREFIXES[engine])}*)")
    module = importlib.import_module(ENGINES[engine].module)
    adapter = module.from_values(kept, _NoNetwork(), worker_id="workerless-secrets-import")
    close = getattr(adapter, "close", None)
    if callable(close):
        close()
    return engine


def read_env_file(path: str | Path) -> dict[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read env file {str(path)!r}: {exc.strerror}", key="env-file") from None
    values = parse_env_text(text, source=str(path))
    if not values:
        raise ConfigurationError(f"env file {str(path)!r} has no KEY=VALUE lines", key="env-file")
    return values


def import_secret(values: Mapping[str, str], client: Any, *, secret_name: str = DEFAULT_SECRET_NAME) -> Imported:
    """Validate ``values`` and store the engine's keys in secret ``secret_name`` (create, or put a new
    version when it exists). ``client`` is a boto3 Secrets Manager client."""
    from botocore.exceptions import BotoCoreError, ClientError

    engine = validate_values(values)
    kept, skipped = engine_keys(engine, values)
    payload = json.dumps(kept, separators=(",", ":"))
    description = f"workerless - {engine} connection values (workerless secrets import)"
    try:
        try:
            answer = client.create_secret(Name=secret_name, SecretString=payload, Description=description)
            created = True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceExistsException":
                raise
            answer = client.put_secret_value(SecretId=secret_name, SecretString=payload)
            created = False
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "error")
        raise SecretStoreError(f"Secrets Manager refused secret {secret_name!r}: {code}") from None
    except BotoCoreError as exc:
        raise SecretStoreError(f"cannot reach Secrets Manager: {type(exc).__name__}") from None
    return Imported(engine, str(answer["ARN"]), sorted(kept), skipped, created)
