"""The process environment of a local run: what Lambda would set in each function's.

Lambda gives each function its own environment; one process needs one, so a running
:class:`~workerless_devkit.local.runtime.LocalTopology` sets the union of the functions' environments
(:func:`function_environment`), the embedded AWS's fake credentials and place (:func:`fake_aws_env`),
and removes what would send its calls elsewhere (:data:`REMOVED_ENV`); :class:`ProcessEnvironment`
puts back what was there at stop.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from workerless._core.settings import check_engine_keys, infer_engine, parse_env_text
from workerless.errors import ConfigurationError

from workerless_devkit.local.template import LOCAL_PLACE, LocalTemplate, Place

log = logging.getLogger("workerless_devkit.local")


def fake_aws_env(place: Place) -> dict[str, str]:
    """Fake credentials for the embedded AWS, and where it is: the region Lambda sets in a
    function's environment (AWS_REGION, AWS_DEFAULT_REGION) and the account moto answers as
    (MOTO_ACCOUNT_ID). Set only while a topology runs."""
    return {
        "AWS_DEFAULT_REGION": place.region,
        "AWS_REGION": place.region,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "MOTO_ACCOUNT_ID": place.account_id,
    }


#: :func:`fake_aws_env` of template.yaml's place (us-east-1).
FAKE_AWS_ENV: Mapping[str, str] = fake_aws_env(LOCAL_PLACE)
#: Removed while a topology runs: they would send the embedded AWS calls elsewhere, or (the secret
#: ARN) make the library read engine values from Secrets Manager instead of the env file.
REMOVED_ENV: tuple[str, ...] = (
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_S3",
    "WORKERLESS_AWS_ENDPOINT_URL",
    "WORKERLESS_SECRET_ARN",
)


def function_environment(template: LocalTemplate, env_file: Path | None, *, engine_secret: bool) -> dict[str, str]:
    """The union of the template's function environments, with the engine values' file
    (``WORKERLESS_ENV_FILE``, unless ``engine_secret``: then the functions read the embedded
    secret) and its engine (``WORKERLESS_ENGINE``); the env file is read and checked here, so that
    a bad one is a configuration error before anything starts."""
    env = template.environment()
    env.pop("WORKERLESS_SECRET_ARN", None)  # local mode reads the engine values from the env file
    if template.unset_parameters:
        log.info("template parameters without a value (empty locally): %s", ", ".join(template.unset_parameters))
    if env_file is not None:
        try:
            text = env_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"env file {str(env_file)!r} cannot be read: {exc.strerror}", key="WORKERLESS_ENV_FILE"
            ) from None
        values = parse_env_text(text, source=str(env_file))
        check_engine_keys(values, source=str(env_file))
        if not engine_secret:  # else the functions read the values from the embedded secret
            env["WORKERLESS_ENV_FILE"] = str(env_file)
        env["WORKERLESS_ENGINE"] = infer_engine(values)
    return env


class ProcessEnvironment:
    """Changes to ``os.environ`` that :meth:`restore` undoes (each key's first value is kept)."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def apply(self, changes: Mapping[str, str | None]) -> None:
        """Set each key to its value (None: remove it), remembering what was there."""
        for key, value in changes.items():
            self._saved.setdefault(key, os.environ.get(key))
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def apply_topology(self, place: Place, environment: Mapping[str, str]) -> None:
        """The functions' environment, the embedded AWS's, and without :data:`REMOVED_ENV`."""
        changes: dict[str, str | None] = {**fake_aws_env(place), **environment}
        for key in REMOVED_ENV:
            changes.setdefault(key, None)
        self.apply(changes)

    def restore(self) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()
