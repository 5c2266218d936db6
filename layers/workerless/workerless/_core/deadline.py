"""When a Lambda invocation must be done by: its remaining time, less a margin to finish cleanly."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workerless._core.ports import LambdaContext

#: Kept back from the Lambda's remaining time so the entry point can finish cleanly.
MARGIN_SECONDS = 3.0


def invocation_deadline(context: LambdaContext, clock: Callable[[], float] = time.monotonic) -> float:
    """When the invocation must be done by, on ``clock`` (the Lambda's remaining time less the margin;
    60 s when the context does not say, and never less than a second from now).

    >>> class Context:
    ...     def get_remaining_time_in_millis(self) -> int:
    ...         return 10_000
    >>> invocation_deadline(Context(), clock=lambda: 100.0)
    107.0
    """
    getter = getattr(context, "get_remaining_time_in_millis", None)
    remaining = float(getter()) / 1000.0 if getter else 60.0
    return clock() + max(1.0, remaining - MARGIN_SECONDS)
