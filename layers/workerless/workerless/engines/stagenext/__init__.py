"""The StageNext adapter (seed 001): :mod:`.config` (connection values and caps), :mod:`.session`
(the deployment's shared worker session), :mod:`.deliveries` (pull answers and result bodies),
:mod:`.telemetry` (liveness and lifecycle events), :mod:`.adapter` (the
:class:`~workerless.engines.base.Engine` itself), all on :mod:`workerless.engines.kit`."""

from __future__ import annotations

from workerless.engines.stagenext.adapter import StageNextEngine, from_values
from workerless.engines.stagenext.config import (
    CLAIM_SECONDS,
    DEFAULT_API_URL,
    DEFAULT_SESSION_TTL,
    ENGINE,
    ERROR_MESSAGE_CAP,
    LEASE_SECONDS,
    LIVENESS_INTERVAL_SECONDS,
    REMEMBERED_DELIVERIES,
    RESULT_BODY_CAP,
    RESULT_STRING_CAP,
    SESSION_KEY_PREFIX,
    StageNextConfig,
)
from workerless.engines.stagenext.session import WorkerSession

__all__ = [
    "CLAIM_SECONDS",
    "DEFAULT_API_URL",
    "DEFAULT_SESSION_TTL",
    "ENGINE",
    "ERROR_MESSAGE_CAP",
    "LEASE_SECONDS",
    "LIVENESS_INTERVAL_SECONDS",
    "REMEMBERED_DELIVERIES",
    "RESULT_BODY_CAP",
    "RESULT_STRING_CAP",
    "SESSION_KEY_PREFIX",
    "StageNextConfig",
    "StageNextEngine",
    "WorkerSession",
    "from_values",
]
