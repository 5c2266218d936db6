"""The node-flow adapter (seed 002): :mod:`.config` (connection values), :mod:`.auth` (API key or
service-account token), :mod:`.adapter` (the :class:`~workerless.engines.base.Engine` itself), all
on :mod:`workerless.engines.kit`."""

from __future__ import annotations

from workerless.engines.nodeflow.adapter import NodeFlowEngine, from_values, parse_timestamp, workflow_key
from workerless.engines.nodeflow.config import ENGINE, NodeFlowConfig

__all__ = ["ENGINE", "NodeFlowConfig", "NodeFlowEngine", "from_values", "parse_timestamp", "workflow_key"]
