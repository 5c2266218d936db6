"""The one retry policy for engine calls (and the poller's one Parameter Store read).

Adapters never sleep: they raise a :class:`RetryableEngineError` (with ``retry_after`` when the
engine sent Retry-After) or a final error. This module decides whether and when to call again,
bounded both in attempts and by a deadline (the Lambda's remaining time minus a margin), so no
retry can outlive the invocation that made it.

Why these numbers: node-flow's guidance is 1 s after a retryable failure and 5 s after a
non-retryable one when polling; a report or extend is worth a few quick tries (the result is
stored, so giving up only means SQS redelivers and the report is tried again later).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from workerless.errors import RetryableEngineError

T = TypeVar("T")


def _engine_retryable(error: Exception) -> bool:
    return isinstance(error, RetryableEngineError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, capped, honouring Retry-After.

    Example:
        >>> policy = RetryPolicy(attempts=3, base_delay=0.2)
        >>> policy.call(lambda: 42, deadline=time.monotonic() + 5)
        42
    """

    attempts: int = 3
    base_delay: float = 0.25
    max_delay: float = 5.0

    def delay(self, attempt: int, error: Exception) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (attempt counts from 1)."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return float(retry_after)
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)

    def call(
        self,
        fn: Callable[[], T],
        *,
        deadline: float,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        retryable: Callable[[Exception], bool] = _engine_retryable,
    ) -> T:
        """Call ``fn``; on a retryable error wait and call again, at most ``attempts`` times and
        never past ``deadline`` (a ``clock()`` value). Final errors propagate at once; the last
        retryable error propagates when attempts or time run out. ``retryable`` says which errors
        are worth another call (engine calls: a :class:`RetryableEngineError`; an AWS adapter passes
        its own test)."""
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as error:
                if not retryable(error):
                    raise
                wait = self.delay(attempt, error)
                if attempt >= self.attempts or clock() + wait >= deadline:
                    raise
                sleep(wait)
                attempt += 1


#: Reports and extensions: a few quick tries inside one invocation.
CALLS = RetryPolicy(attempts=4, base_delay=0.25, max_delay=4.0)
#: Reading the routes from Parameter Store (once per poller container): botocore already retries a
#: throttle four times; these are a few more, spaced out, within the invocation's deadline.
PARAMETERS = RetryPolicy(attempts=3, base_delay=0.5, max_delay=4.0)
#: After a failed poll: 1 s for a retryable failure (or Retry-After), 5 s for a final one.
POLL_BACKOFF_RETRYABLE = 1.0
POLL_BACKOFF_FINAL = 5.0
