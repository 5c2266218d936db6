"""Finding the Sheptra environment to poll: the configured ``SHEPTRA_API_URL``, or in discovery
mode the ``baseUrl`` that ``GET {SHEPTRA_DISCOVERY_URL}?cluster={SHEPTRA_ENVIRONMENT}`` answers.

The answer is cached and resolved again only on a 421 or after
:data:`~workerless.engines.sheptra.config.TRANSPORT_FAILURES_BEFORE_RERESOLVE` consecutive
connection failures — never per request, and a management-plane outage never stops a worker that
already has a ``baseUrl``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx

from workerless.engines.kit.answers import json_object
from workerless.engines.kit.resend import send_recovering
from workerless.engines.kit.translate import Translator
from workerless.engines.sheptra.auth import configured
from workerless.engines.sheptra.config import (
    ENGINE,
    TRANSPORT_FAILURES_BEFORE_RERESOLVE,
    SheptraConfig,
    check_discovered_base_url,
)
from workerless.errors import ConfigurationError, RetryableEngineError

__all__ = ["Locator"]

logger = logging.getLogger("workerless.engines.sheptra")


class Locator:
    """The engine's base URL, resolved through discovery when the mode asks for it."""

    def __init__(
        self,
        config: SheptraConfig,
        client: httpx.Client,
        translate: Translator,
        *,
        auth_headers: Callable[[], dict[str, str]],
        drop_token: Callable[[str | None], None],
        lock: threading.RLock,
    ) -> None:
        self._config = config
        self._client = client
        self._translate = translate
        self._auth_headers = auth_headers
        self._drop_token = drop_token
        self._lock = lock
        self.base_url: str | None = config.api_url
        # Discovery mode: set when the cached baseUrl is suspect (persistent transport failures);
        # the next call asks discovery again but keeps the old baseUrl if discovery is down.
        self._reresolve = False
        self._transport_failures = 0

    def base(self) -> str:
        """The base URL to send to (resolving it when there is none or it is suspect)."""
        if self._config.mode == "config":
            return configured(self._config.api_url, "SHEPTRA_API_URL")
        with self._lock:
            if self.base_url is not None and not self._reresolve:
                return self.base_url
            try:
                self.base_url = self._resolve()
            except RetryableEngineError:
                if self.base_url is None:
                    raise
                # A management-plane outage must never stop a worker that is already configured:
                # keep polling the baseUrl we have and ask discovery again only after the next
                # run of consecutive failures, never on every call.
                logger.warning("sheptra discovery failed; keeping the cached baseUrl %s", self.base_url)
            self._reresolve = False
            self._transport_failures = 0
            return self.base_url

    def forget(self) -> None:
        """A 421: the environment moved cells; the next :meth:`base` resolves it again."""
        with self._lock:
            self.base_url = None

    def answered(self) -> None:
        """The engine answered: the run of connection failures is over."""
        self._transport_failures = 0

    def transport_failed(self) -> None:
        """A connection failure against the cached baseUrl; a run of them makes it suspect."""
        if self._config.mode != "discovery":
            return
        with self._lock:
            self._transport_failures += 1
            if self._transport_failures >= TRANSPORT_FAILURES_BEFORE_RERESOLVE:
                logger.warning(
                    "sheptra: %d consecutive connection failures at %s; resolving again on the next call",
                    self._transport_failures,
                    self.base_url,
                )
                self._reresolve = True

    def _resolve(self) -> str:
        """GET {SHEPTRA_DISCOVERY_URL}?cluster={SHEPTRA_ENVIRONMENT} with the engine's bearer token
        (one that expired early is minted again, once)."""
        config = self._config
        discovery_url = configured(config.discovery_url, "SHEPTRA_DISCOVERY_URL")
        environment = configured(config.environment, "SHEPTRA_ENVIRONMENT")
        sent: dict[str, str] = {}

        def send() -> httpx.Response:
            sent.clear()
            sent.update(self._auth_headers())
            try:
                return self._client.get(
                    discovery_url, params={"cluster": environment}, headers={"Accept": "application/json", **sent}
                )
            except httpx.HTTPError as exc:
                raise self._translate.transport(exc, what="discovery") from exc

        def recover(response: httpx.Response) -> tuple[str, Callable[[], None]] | None:
            if response.status_code == 401 and config.auth:
                return "reauthenticate", lambda: self._drop_token(_bearer_of(sent))
            return None

        response = send_recovering(send, recover)
        if response.status_code == 404:
            raise ConfigurationError(
                f"discovery answered 404 for cluster {environment!r}: the cluster id is unknown or the "
                "organization has no environments; check SHEPTRA_ENVIRONMENT",
                key="SHEPTRA_ENVIRONMENT",
            )
        if not response.is_success:
            raise self._translate.response(response, what="discovery")
        body = json_object(response, engine=ENGINE, what="discovery")
        wrapped = body.get("environment")
        if "baseUrl" not in body and isinstance(wrapped, dict):
            body = wrapped  # tolerate {"environment": {...}} around the documented object
        base = check_discovered_base_url(body.get("baseUrl"))
        logger.info("sheptra discovery resolved cluster %s to %s", environment, base)
        return base


def _bearer_of(headers: dict[str, str]) -> str | None:
    value = headers.get("Authorization", "")
    return value.removeprefix("Bearer ") if value.startswith("Bearer ") else None
