"""Local mode: run the template's functions in one process on an embedded SQS and DynamoDB.

``workerless_devkit.local.summary`` is imported by the pipeline in Lambda too, so this package imports
nothing at import time; :class:`LocalTopology` and friends load on first use.

Its parts: ``runtime`` (:class:`LocalTopology`, a facade composing the others), ``provision``
(CloudFormation and IAM on the embedded AWS), ``environment`` (the process environment), ``host``
(loading handlers, invoking them within concurrency, Timeout and memory), ``event_source`` (Lambda's
SQS event source mapping), ``scheduler`` (Schedule events), ``recursion`` and ``loop`` (recursive
loop detection), ``tracker`` (what the botocore hooks report to), ``idle`` (when a run is done),
``library`` (the runtime's listeners and guards); ``template`` reads a SAM template into
``resources``' models through ``intrinsics`` (parameters, conditions, intrinsic functions) and
``builder``; ``rules``, ``limits``, ``iam/`` hold it to AWS's rules; ``stack/`` runs a rehearsal
bundle's stack.
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
