"""Lambda's concurrency, as local mode holds functions to it: the account's limit, each function's
reserved concurrency, and what a throttled invocation becomes.

AWS (docs/assumptions.md cites the pages):

- An account has a Regional concurrency limit, 1,000 by default (new accounts start lower, 10).
  Every function without reserved concurrency draws on what is left unreserved; at least 100 must
  stay unreserved (PutFunctionConcurrency refuses a reservation that leaves less, so a stack that
  asks for one does not deploy).
- A function with ReservedConcurrentExecutions has that many for itself, and no more: it is never
  throttled by other functions, and is throttled past its reservation.
- An SQS event source runs at most its ScalingConfig.MaximumConcurrency batches at once
  (:class:`~workerless_devkit.local.event_source.SqsEventSourceMapping`'s pump holds that bound); an invocation
  the function's concurrency refuses is throttled, and its batch stays in flight until the queue's
  visibility timeout (the reason AWS asks for a visibility of six times the function's timeout).
- An asynchronous invocation (an EventBridge schedule's) that is throttled goes back to Lambda's
  event queue and is retried with a backoff that grows from 1 s to at most 5 minutes, until the
  event is older than the function's MaximumEventAgeInSeconds (6 hours by default): then it is
  dropped. MaximumRetryAttempts counts function errors, not throttles.

:class:`Concurrency` is the bookkeeping (one per topology); :func:`run_async` the retry policy,
with the clock and the sleep passed in so a test can run six hours of it in no time.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from workerless.errors import ConfigurationError

#: The account's Regional concurrency limit by default (Lambda quotas).
ACCOUNT_CONCURRENCY = 1000
#: What Lambda keeps unreserved for functions without a reservation.
MINIMUM_UNRESERVED = 100
#: Lambda's asynchronous retry interval after a throttle: from 1 s, doubling, to at most 5 minutes.
ASYNC_FIRST_RETRY_SECONDS = 1.0
ASYNC_MAX_RETRY_SECONDS = 300.0
#: MaximumEventAgeInSeconds when EventInvokeConfig does not set it.
DEFAULT_MAXIMUM_EVENT_AGE = 21600


class Throttled(Exception):
    """Lambda refused the invocation: no concurrency left for the function (TooManyRequestsException,
    "Rate Exceeded", HTTP 429). The function's code never ran."""

    def __init__(self, function_id: str, why: str) -> None:
        super().__init__(f"{function_id}: Rate Exceeded (TooManyRequestsException: {why})")
        self.function_id = function_id
        self.why = why


class Concurrency:
    """The account's concurrency and each function's reservation, and what is in use now.

    Args:
        account: the account's concurrency limit in this Region.
        reserved: function logical id → ReservedConcurrentExecutions (functions without one draw
            on the unreserved pool).

    Raises:
        ConfigurationError: the reservations leave less than 100 unreserved (AWS refuses them).

    Example:
        >>> limits = Concurrency(account=110, reserved={"Heartbeat": 5})
        >>> limits.unreserved
        105
        >>> limits.occupy(105)            # a burst of other functions holds the unreserved pool
        >>> limits.acquire("Handler"), limits.acquire("Heartbeat")
        (False, True)
    """

    def __init__(self, account: int = ACCOUNT_CONCURRENCY, reserved: Mapping[str, int] | None = None) -> None:
        if account < 1:
            raise ConfigurationError(
                f"account concurrency must be at least 1, got {account}", key="account_concurrency"
            )
        self.account = account
        self.reserved = {k: int(v) for k, v in (reserved or {}).items()}
        total = sum(self.reserved.values())
        if self.reserved and account - total < MINIMUM_UNRESERVED:
            listed = ", ".join(f"{k} {v}" for k, v in sorted(self.reserved.items()))
            raise ConfigurationError(
                f"the template reserves {total} concurrent executions ({listed}) of an account limit of {account}: "
                f"Lambda keeps {MINIMUM_UNRESERVED} unreserved, so it refuses these reservations (deploy with "
                "ReserveConcurrency=false, or raise the account's quota)",
                key="account_concurrency",
            )
        self.unreserved = account - total
        self._lock = threading.Lock()
        self._running: Counter[str] = Counter()
        self._unreserved_in_use = 0
        self._occupied = 0
        self.throttles: Counter[str] = Counter()

    def occupy(self, count: int) -> None:
        """Let other functions of the account (a burst) hold ``count`` of the unreserved pool (0: none)."""
        with self._lock:
            self._occupied = max(0, min(count, self.unreserved))

    def acquire(self, function_id: str) -> bool:
        """Take one concurrent execution for ``function_id``; False (counted as a throttle) when
        none is left for it."""
        with self._lock:
            reserved = self.reserved.get(function_id)
            if reserved is not None:
                ok = self._running[function_id] < reserved
            else:
                ok = self._unreserved_in_use + self._occupied < self.unreserved
                if ok:
                    self._unreserved_in_use += 1
            if ok:
                self._running[function_id] += 1
            else:
                self.throttles[function_id] += 1
            return ok

    def release(self, function_id: str) -> None:
        with self._lock:
            if self._running[function_id] <= 0:
                return
            self._running[function_id] -= 1
            if function_id not in self.reserved:
                self._unreserved_in_use -= 1

    def throttled(self, function_id: str) -> None:
        """Count a throttle decided elsewhere (an injected one)."""
        with self._lock:
            self.throttles[function_id] += 1

    def running(self, function_id: str) -> int:
        with self._lock:
            return self._running[function_id]


@dataclass(frozen=True, slots=True)
class AsyncOutcome:
    """What became of an asynchronous event: ``ran`` (its invocation ran, whatever it returned)
    or dropped when older than its maximum age; ``throttles`` times it was throttled first, and the
    ``delays`` Lambda waited before each retry."""

    ran: bool
    throttles: int
    delays: tuple[float, ...]
    age: float
    #: Neither ran nor dropped for its age: the topology stopped while it waited.
    stopped: bool = False


def retry_delay(retry: int) -> float:
    """Lambda's wait before the ``retry``-th retry (1-based) of a throttled asynchronous event."""
    return float(min(ASYNC_MAX_RETRY_SECONDS, ASYNC_FIRST_RETRY_SECONDS * 2 ** (retry - 1)))


def run_async(
    attempt: Callable[[], bool],
    maximum_event_age: float,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], bool],
) -> AsyncOutcome:
    """Deliver one asynchronous event as Lambda does: ``attempt()`` invokes it (False: throttled);
    a throttled event is retried after :func:`retry_delay` until it would be older than
    ``maximum_event_age``, then dropped. ``sleep(seconds)`` returns True to stop early (the
    topology stopping: the event is then dropped)."""
    received = clock()
    delays: list[float] = []
    throttles = 0
    while True:
        if attempt():
            return AsyncOutcome(True, throttles, tuple(delays), clock() - received)
        throttles += 1
        delay = retry_delay(throttles)
        if clock() - received + delay > maximum_event_age:
            return AsyncOutcome(False, throttles, tuple(delays), clock() - received)
        delays.append(delay)
        if sleep(delay):
            return AsyncOutcome(False, throttles, tuple(delays), clock() - received, stopped=True)
