"""The Sheptra adapter (seed 000): :mod:`.config` (the Worker environment block), :mod:`.auth`
(OAuth2 client credentials), :mod:`.discovery` (the engine's address), :mod:`.adapter` (the
:class:`~workerless.engines.base.Engine` itself), all on :mod:`workerless.engines.kit`."""

from __future__ import annotations

from workerless.engines.sheptra.adapter import SheptraEngine, from_values
from workerless.engines.sheptra.config import (
    DEFAULT_TOKEN_TTL_SECONDS,
    ENGINE,
    PAYLOAD_CAP,
    RENEW_EARLY_SECONDS,
    TRANSPORT_FAILURES_BEFORE_RERESOLVE,
    SheptraConfig,
    check_discovered_base_url,
)

__all__ = [
    "DEFAULT_TOKEN_TTL_SECONDS",
    "ENGINE",
    "PAYLOAD_CAP",
    "RENEW_EARLY_SECONDS",
    "TRANSPORT_FAILURES_BEFORE_RERESOLVE",
    "SheptraConfig",
    "SheptraEngine",
    "check_discovered_base_url",
    "from_values",
]
