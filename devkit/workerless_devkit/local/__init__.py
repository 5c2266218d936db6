"""Local mode: run the template's functions in one process on an embedded SQS and DynamoDB.

``workerless_devkit.local.summary`` is imported by the pipeline in Lambda too, so this package imports
nothing at import time; :class:`LocalTopology` and friends load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workerless_devkit.local.runtime import IdleTimeout, LocalTopology, QueueDepth, StoppedLoop
    from workerless_devkit.local.template import LocalTemplate, TemplateError, load_template

__all__ = [
    "IdleTimeout",
    "LocalTemplate",
    "LocalTopology",
    "QueueDepth",
    "StoppedLoop",
    "TemplateError",
    "load_template",
]

_LAZY = {
    "IdleTimeout": "workerless_devkit.local.runtime",
    "LocalTopology": "workerless_devkit.local.runtime",
    "QueueDepth": "workerless_devkit.local.runtime",
    "StoppedLoop": "workerless_devkit.local.runtime",
    "LocalTemplate": "workerless_devkit.local.template",
    "TemplateError": "workerless_devkit.local.template",
    "load_template": "workerless_devkit.local.template",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workerless_devkit.local' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
