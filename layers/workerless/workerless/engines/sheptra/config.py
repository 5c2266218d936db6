"""Sheptra's connection values: the six-key *Worker environment block* Drive prints (seed 000).

Config mode (``SHEPTRA_API_URL``) is the default; discovery mode (``SHEPTRA_DISCOVERY_URL`` +
``SHEPTRA_ENVIRONMENT``) is chosen with ``SHEPTRA_MODE=discovery`` — the block itself has no
selector key. An empty ``SHEPTRA_TOKEN_ENDPOINT`` means authentication is off.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from workerless.engines.kit import values as kv
from workerless.engines.kit.urls import check_base_url, refused_answered_url
from workerless.errors import ConfigurationError, ResponseShapeError

__all__ = [
    "DEFAULT_TOKEN_TTL_SECONDS",
    "ENGINE",
    "PAYLOAD_CAP",
    "RENEW_EARLY_SECONDS",
    "TRANSPORT_FAILURES_BEFORE_RERESOLVE",
    "Mode",
    "SheptraConfig",
    "check_discovered_base_url",
]

ENGINE = "sheptra"
#: "Every variables-bearing request is capped at 1 MB of names plus JSON values; past it the answer
#: is 413." Checked before sending so a too-large result fails fast with a clear error.
PAYLOAD_CAP = 1_048_576
#: The dev scripts renew a minute early; so do we, so a token never expires in flight.
RENEW_EARLY_SECONDS = 60
#: "Re-resolve ... on persistent connection failure": this many consecutive transport failures
#: against the cached ``baseUrl`` make the next call ask discovery again.
TRANSPORT_FAILURES_BEFORE_RERESOLVE = 3
#: OAuth2 makes ``expires_in`` optional; Sheptra's tokens are one-hour JWTs.
DEFAULT_TOKEN_TTL_SECONDS = 3600

Mode = Literal["config", "discovery"]

#: Drive prints ``<your-…>`` placeholders (and the docs an ellipsis) where it could not fill a value.
_PLACEHOLDER = re.compile(r"<[^>]*>|…")


class SheptraConfig(BaseModel):
    """The Sheptra connection values, validated (see :meth:`from_values`).

    ``token_endpoint`` is None when authentication is off on the deployment. URLs carry no
    trailing slash. ``client_secret`` is a :class:`SecretStr`, so a repr never shows it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = "config"
    token_endpoint: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    api_url: str | None = None
    discovery_url: str | None = None
    environment: str | None = None
    tenant_ids: tuple[str, ...] = ()

    @property
    def auth(self) -> bool:
        """Whether tokens are minted (False: authentication is off on the deployment)."""
        return self.token_endpoint is not None

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> SheptraConfig:
        """Validate the environment block; a missing or malformed key raises
        :class:`ConfigurationError` naming it (never echoing a secret).

        Example:
            >>> SheptraConfig.from_values({"SHEPTRA_TOKEN_ENDPOINT": "", "SHEPTRA_API_URL": "http://127.0.0.1:9"}).auth
            False
        """
        mode_text = kv.text(values, "SHEPTRA_MODE").lower()
        if mode_text not in ("", "config", "discovery"):
            raise ConfigurationError(
                f"SHEPTRA_MODE must be 'config' (the default) or 'discovery', got {mode_text!r}", key="SHEPTRA_MODE"
            )
        mode: Mode = "discovery" if mode_text == "discovery" else "config"

        if "SHEPTRA_TOKEN_ENDPOINT" not in values:
            raise ConfigurationError(
                "SHEPTRA_TOKEN_ENDPOINT is missing: paste the whole worker environment block from Drive "
                "(it is present but empty when authentication is off on the deployment)",
                key="SHEPTRA_TOKEN_ENDPOINT",
            )
        token_endpoint: str | None = None
        client_id: str | None = None
        client_secret: SecretStr | None = None
        endpoint_text = kv.text(values, "SHEPTRA_TOKEN_ENDPOINT")
        if endpoint_text:
            if _PLACEHOLDER.search(endpoint_text):
                raise ConfigurationError(
                    f"SHEPTRA_TOKEN_ENDPOINT is still Drive's placeholder ({endpoint_text}): the management host did "
                    "not answer the auth discovery when the block was printed; fill in your identity provider's "
                    "token endpoint (https://<your-authkit-domain>/oauth2/token)",
                    key="SHEPTRA_TOKEN_ENDPOINT",
                )
            token_endpoint = check_base_url("SHEPTRA_TOKEN_ENDPOINT", endpoint_text)
            client_id = _required(values, "SHEPTRA_CLIENT_ID", "the API client's id from Drive (client_…)")
            secret_text = kv.text(values, "SHEPTRA_CLIENT_SECRET")
            if not secret_text:
                raise ConfigurationError(
                    "SHEPTRA_CLIENT_SECRET is missing or empty: it is shown once, when the API client is created "
                    "in Drive (create a new client if it was lost)",
                    key="SHEPTRA_CLIENT_SECRET",
                )
            if _PLACEHOLDER.fullmatch(secret_text):
                raise ConfigurationError(
                    "SHEPTRA_CLIENT_SECRET is still a placeholder: paste the secret Drive showed when the API client "
                    "was created",
                    key="SHEPTRA_CLIENT_SECRET",
                )
            client_secret = SecretStr(secret_text)

        api_url = discovery_url = environment = None
        if mode == "config":
            api_url = check_base_url(
                "SHEPTRA_API_URL",
                _required(values, "SHEPTRA_API_URL", "the environment host to poll (or set SHEPTRA_MODE=discovery)"),
            )
        else:
            discovery_url = check_base_url(
                "SHEPTRA_DISCOVERY_URL",
                _required(values, "SHEPTRA_DISCOVERY_URL", "the management host's /v1/discovery/cell URL"),
            )
            environment = _required(values, "SHEPTRA_ENVIRONMENT", "the cluster id of the environment to poll")

        tenant_ids = tuple(part.strip() for part in kv.text(values, "SHEPTRA_TENANT_IDS").split(",") if part.strip())
        return cls(
            mode=mode,
            token_endpoint=token_endpoint,
            client_id=client_id,
            client_secret=client_secret,
            api_url=api_url,
            discovery_url=discovery_url,
            environment=environment,
            tenant_ids=tenant_ids,
        )


def _required(values: Mapping[str, str], key: str, what: str) -> str:
    value = kv.required(values, key, what)
    if _PLACEHOLDER.search(value):
        raise ConfigurationError(f"{key} is still a placeholder ({value}): fill in {what}", key=key)
    return value


def check_discovered_base_url(value: object) -> str:
    """Validate a ``baseUrl`` from a discovery answer before any token is sent to it.

    The bearer token goes to whatever address discovery names, so the answer is checked like a
    user-supplied URL (https unless loopback) and refused outright when it points at a link-local
    or cloud metadata address (the kit's SSRF guard,
    :func:`~workerless.engines.kit.urls.refused_answered_url`).

    Raises :class:`ResponseShapeError` (``field="baseUrl"``) saying why.
    """
    url, why = refused_answered_url(value)
    if why is not None:
        raise ResponseShapeError(f"discovery answered a baseUrl that is refused: {why}", engine=ENGINE, field="baseUrl")
    return url
