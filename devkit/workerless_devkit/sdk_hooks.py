"""The devkit's handlers on every botocore client of this process: the one place that installs them.

Local mode (AWS's IAM, limits, lagging queue counts, the stopped-topology guard) and the chaos
suite (AWS's faults) act on AWS calls by botocore event handlers. They go into botocore's
process-wide ``BUILTIN_HANDLERS``, which every session created afterwards copies, and not onto the
runtime's clients alone (:class:`workerless.aws.clients.Clients` takes per-client handlers through
``on_client``): a handler's own code builds boto3 clients of its own, which no wiring owns, and AWS
holds those calls to the function's role and quotas as it holds the runtime's. Each part's handlers
do nothing until that part is activated (a local run, a chaos run), so installing them once for the
life of the process changes no other code's calls.

Clients built before a part installs lack its handlers: local mode installs before it clears the
library's client cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

#: A botocore event name ("before-call.sqs", "after-call.sqs.GetQueueAttributes", ...) and its handler.
Handler = tuple[str, Callable[..., Any]]


class _Installed:
    """Which parts have installed their handlers (each once: botocore would run a twice-added one twice)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parts: set[str] = set()


_installed = _Installed()


def install(part: str, handlers: Iterable[Handler]) -> bool:
    """Add ``handlers`` to every botocore session created from now on, once per ``part`` (e.g.
    "chaos", "local.limits"); False if ``part`` had installed them already."""
    with _installed.lock:
        if part in _installed.parts:
            return False
        from botocore.handlers import BUILTIN_HANDLERS

        BUILTIN_HANDLERS.extend(handlers)
        _installed.parts.add(part)
        return True
