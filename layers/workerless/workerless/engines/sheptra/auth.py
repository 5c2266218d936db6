"""Sheptra credentials: OAuth2 client credentials minted against ``SHEPTRA_TOKEN_ENDPOINT``
(form-encoded, client_secret_post, as the seed shows), cached by the kit's
:class:`~workerless.engines.kit.tokens.TokenCache` and renewed a minute early."""

from __future__ import annotations

import re

import httpx

from workerless.engines.kit.answers import json_object
from workerless.engines.kit.translate import Translator
from workerless.engines.sheptra.config import DEFAULT_TOKEN_TTL_SECONDS, ENGINE, SheptraConfig
from workerless.errors import ConfigurationError, ResponseShapeError

__all__ = ["TokenEndpoint", "configured"]


def configured(value: str | None, key: str) -> str:
    """A value the config's mode/auth validation guarantees (a ConfigurationError if it did not)."""
    if value is None:
        raise ConfigurationError(f"{key} is not configured", key=key)
    return value


class TokenEndpoint:
    """Mints one access token per call of :meth:`mint` (the adapter's cache decides when)."""

    def __init__(self, config: SheptraConfig, client: httpx.Client, translate: Translator) -> None:
        self._config = config
        self._client = client
        self._translate = translate

    def secret(self) -> str | None:
        """The client secret (for redaction), None when authentication is off."""
        secret = self._config.client_secret
        return secret.get_secret_value() if secret is not None else None

    def mint(self) -> tuple[str, float]:
        """A new access token and its lifetime in seconds."""
        config = self._config
        endpoint = configured(config.token_endpoint, "SHEPTRA_TOKEN_ENDPOINT")
        form = {
            "grant_type": "client_credentials",
            "client_id": configured(config.client_id, "SHEPTRA_CLIENT_ID"),
            "client_secret": configured(self.secret(), "SHEPTRA_CLIENT_SECRET"),
        }
        try:
            response = self._client.post(endpoint, data=form, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise self._translate.transport(exc, what="token mint") from exc
        status = response.status_code
        oauth_error = _oauth_error(response)
        if status in (401, 403) or (status == 400 and oauth_error in ("invalid_client", "unauthorized_client")):
            raise ConfigurationError(
                f"the token endpoint refused the client credentials ({status}"
                f"{' ' + oauth_error if oauth_error else ''}): check SHEPTRA_CLIENT_ID and SHEPTRA_CLIENT_SECRET "
                "(a client revoked in Drive is refused at once)",
                key="SHEPTRA_CLIENT_ID",
            )
        if status in (404, 405):
            raise ConfigurationError(
                f"SHEPTRA_TOKEN_ENDPOINT answered {status}: it is not a token endpoint ({endpoint})",
                key="SHEPTRA_TOKEN_ENDPOINT",
            )
        if not response.is_success:
            raise self._translate.response(response, what="token mint")
        body = json_object(response, engine=ENGINE, what="token mint")
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise ResponseShapeError("token mint answered without an access_token", engine=ENGINE, field="access_token")
        token_type = body.get("token_type")
        if token_type is not None and (not isinstance(token_type, str) or token_type.lower() != "bearer"):
            raise ResponseShapeError(
                f"token mint answered token_type {token_type!r}, expected Bearer", engine=ENGINE, field="token_type"
            )
        expires_in = body.get("expires_in", DEFAULT_TOKEN_TTL_SECONDS)
        if isinstance(expires_in, str) and expires_in.isdigit():
            expires_in = int(expires_in)  # some identity providers send it as a string
        if isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or expires_in <= 0:
            raise ResponseShapeError(
                "token mint answered an expires_in that is not a positive number", engine=ENGINE, field="expires_in"
            )
        return token, float(expires_in)


def _oauth_error(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, str) and re.fullmatch(r"[a-z_]{1,40}", error) else ""
