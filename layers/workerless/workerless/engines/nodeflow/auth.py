"""node-flow credentials: a fixed X-API-Key, or a Bearer token minted from a service account
(``POST /v1/auth/token`` with keyId + secret), cached by the kit's
:class:`~workerless.engines.kit.tokens.TokenCache` and refreshed 60 s before expiry, one refresh
shared by every concurrent caller."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import httpx

from workerless.engines.kit.tokens import TokenCache
from workerless.engines.kit.translate import Translator, parse_problem
from workerless.engines.nodeflow.config import ENGINE
from workerless.errors import ConfigurationError, ResponseShapeError

__all__ = ["REFRESH_MARGIN_SECONDS", "Credentials"]

#: Refresh a service-account token this long before it expires (the SDK's rule).
REFRESH_MARGIN_SECONDS = 60.0


class Credentials:
    """Builds the auth header of every request."""

    def __init__(
        self,
        client: httpx.Client,
        token_url: str,
        *,
        api_key: str | None,
        key_id: str | None,
        key_secret: str | None,
        clock: Callable[[], float],
        translate: Translator,
    ) -> None:
        self._client = client
        self._token_url = token_url
        self._api_key = api_key
        self._key_id = key_id
        self._key_secret = key_secret
        self._translate = translate
        self._tokens = TokenCache(self._mint, early=REFRESH_MARGIN_SECONDS, clock=clock)

    @property
    def service_account(self) -> bool:
        return self._api_key is None

    @property
    def key_name(self) -> str:
        """The configuration key a refused credential should be looked for under."""
        return "NF_API_KEY" if self._api_key is not None else "NF_KEY_ID"

    def secrets(self) -> tuple[str, ...]:
        """What must never appear in an error: the API key, the secret, the tokens held."""
        return tuple(s for s in (self._api_key, self._key_secret, *self._tokens.held()) if s)

    def headers(self) -> dict[str, str]:
        if self._api_key is not None:
            return {"X-API-Key": self._api_key}
        return {"Authorization": f"Bearer {self._tokens.get()}"}

    def invalidate(self, headers: Mapping[str, str]) -> bool:
        """Forget the token used for ``headers`` (a 401). False if there is nothing to re-mint."""
        if self._api_key is not None:
            return False
        # Only dropped if nobody has refreshed it since this request was sent.
        self._tokens.invalidate(headers.get("Authorization", "").removeprefix("Bearer ") or None)
        return True

    def _mint(self) -> tuple[str, float]:
        what = "service-account token exchange"
        try:
            response = self._client.post(self._token_url, json={"keyId": self._key_id, "secret": self._key_secret})
        except httpx.HTTPError as exc:
            raise self._translate.transport(exc, what=what) from exc
        if response.status_code in (400, 401, 403):
            problem = parse_problem(response)
            raise ConfigurationError(
                f"node-flow refused the service account in NF_KEY_ID / NF_KEY_SECRET ({response.status_code}"
                f"{', ' + str(problem['code']) if problem.get('code') else ''}): check both values",
                key="NF_KEY_SECRET",
            )
        if response.status_code >= 300:
            raise self._translate.response(response, what=what)
        try:
            body = response.json()
            token = body["accessToken"]
            expires_in = float(body["expiresIn"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ResponseShapeError(
                f"{what} answered without accessToken/expiresIn", engine=ENGINE, field="accessToken"
            ) from exc
        if not isinstance(token, str) or not token:
            raise ResponseShapeError(f"{what} answered an empty accessToken", engine=ENGINE, field="accessToken")
        return token, expires_in
