"""Every retry loop of the runtime, as a policy with a deadline.

Adapters never sleep: they raise an error whose ``retryable`` flag says whether the same call may
succeed later (:class:`~workerless.errors.WorkerlessError.retryable`, the one way it is said), with
``retry_after`` when the engine sent Retry-After. The policies here decide whether and when to call
again, bounded in attempts and by a deadline (the Lambda's remaining time minus a margin), so no
retry can outlive the invocation that made it.

=====================  ==========================================================================
policy                 what it retries
=====================  ==========================================================================
:data:`CALLS`          engine calls (report, extend, begin, skip, release): the adapters' resends
:data:`HELD`           settling a delivery the engine takes back on its own (StageNext: lease
                       acquire, skip ack, requeue): through an outage, until the engine takes it back
:data:`PARAMETERS`     the poller's Parameter Store read
:data:`SECRETS`        the engine secret's read (a throttle, a 5xx, a timeout)
:data:`STORE_WRITES`   a job-record write (claim, store, mark), on a retryable StoreError
:data:`UNPROCESSED`    BatchGetItem's UnprocessedKeys
:data:`SESSION_WAIT`   StageNext: waiting while another container rotates the worker session
:data:`COMPARE_AND_SET`  the poller lock / intent log item: a write refused by a concurrent one
:data:`LOG_SENDS`        node-flow: a batch of task-log lines refused once (429/502/503)
=====================  ==========================================================================

How they stack with botocore: every AWS client makes up to 4 attempts per call itself (standard
mode, :mod:`workerless.aws.clients`), with its own backoff, for throttles, 5xx and transport errors.
A policy here runs only after botocore gave up, so one logical call may be tried ``attempts x 4``
times — which is why the AWS policies are few and spaced out, and why the deadline binds both:
:func:`workerless.aws.clients.call_deadline` refuses any botocore attempt past it and the policies
stop there too. The engine calls (httpx) have no retries below these. The re-authenticate-once
resend of an adapter (:mod:`workerless.engines.kit.resend`) is not a retry: it waits for nothing,
sends at most once more per recovery, and runs inside one attempt of :data:`CALLS`.

Why these numbers: node-flow's guidance is 1 s after a retryable failure and 5 s after a
non-retryable one when polling; a report or extend is worth a few quick tries (the result is
stored, so giving up only means SQS redelivers and the report is tried again later).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

from workerless.errors import EngineError, StoreError

__all__ = [
    "CALLS",
    "COMPARE_AND_SET",
    "HELD",
    "LOG_SENDS",
    "LOG_SEND_SECONDS",
    "PARAMETERS",
    "POLL_BACKOFF_FINAL",
    "POLL_BACKOFF_MAX",
    "POLL_BACKOFF_RETRYABLE",
    "SECRETS",
    "SESSION_WAIT",
    "STORE_WRITES",
    "UNPROCESSED",
    "RetryPolicy",
    "ambient_deadline",
    "poll_backoff",
    "retryable_engine_error",
    "retryable_store_error",
]

T = TypeVar("T")


def retryable_engine_error(error: Exception) -> bool:
    """An engine call worth making again: an :class:`~workerless.errors.EngineError` flagged
    retryable (anything else — a StoreError from shared state, a bug — propagates at once)."""
    return isinstance(error, EngineError) and error.retryable


def retryable_store_error(error: Exception) -> bool:
    """A job-table call worth making again: a :class:`~workerless.errors.StoreError` flagged
    retryable (a throttle, a 5xx, a dropped connection; not a refusal, a too-large outcome or a
    passed deadline)."""
    return isinstance(error, StoreError) and error.retryable


def ambient_deadline() -> float:
    """The deadline of the AWS calls of the code running (its
    :func:`~workerless.aws.clients.call_deadline`, a ``time.monotonic()`` value; infinity outside
    one): the deadline of a loop over AWS calls that is not handed one."""
    from workerless.aws.clients import current_deadline

    deadline = current_deadline()
    return math.inf if deadline is None else deadline


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff between attempts, bounded by ``attempts`` (None: only by the deadline) and by a
    deadline; honours Retry-After.

    ``backoff``: "exponential" (``base_delay x 2^(attempt-1)``) or "linear" (``base_delay x
    attempt``), capped at ``max_delay``; with ``jitter``, a uniform draw from the upper half of it
    (full jitter halved: spread out, never immediate).

    Example:
        >>> policy = RetryPolicy(attempts=3, base_delay=0.2)
        >>> policy.call(lambda: 42, deadline=time.monotonic() + 5)
        42
        >>> [round(RetryPolicy(attempts=None, base_delay=0.2, max_delay=0.5, backoff="linear",
        ...     jitter=False).delay(n, Exception()), 2) for n in (1, 2, 3)]
        [0.2, 0.4, 0.5]
    """

    attempts: int | None = 3
    base_delay: float = 0.25
    max_delay: float = 5.0
    backoff: Literal["exponential", "linear"] = "exponential"
    jitter: bool = True

    def delay(self, attempt: int, error: Exception | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (attempt counts from 1)."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return float(retry_after)
        grown = attempt if self.backoff == "linear" else 2 ** (attempt - 1)
        ceiling = min(self.max_delay, self.base_delay * grown)
        return random.uniform(ceiling / 2, ceiling) if self.jitter else ceiling

    def call(
        self,
        fn: Callable[[], T],
        *,
        deadline: float,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] | None = None,
        retryable: Callable[[Exception], bool] = retryable_engine_error,
        on_retry: Callable[[int, Exception], None] | None = None,
    ) -> T:
        """Call ``fn``; on a retryable error wait and call again, at most ``attempts`` times and
        never past ``deadline`` (a ``clock()`` value). Final errors propagate at once; the last
        retryable error propagates when attempts or time run out. ``retryable`` says which errors
        are worth another call (default: an engine error flagged retryable); ``on_retry(attempt,
        error)`` is told before each wait (a log line). ``sleep`` and ``clock`` default to
        ``time.sleep`` and ``time.monotonic``, looked up at the call (a benchmark's virtual time is
        seen)."""
        sleep = sleep or time.sleep
        clock = clock or time.monotonic
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as error:
                if not retryable(error):
                    raise
                wait = self.delay(attempt, error)
                if (self.attempts is not None and attempt >= self.attempts) or clock() + wait >= deadline:
                    raise
                if on_retry is not None:
                    on_retry(attempt, error)
                sleep(wait)
                attempt += 1

    def tries(
        self,
        *,
        deadline: float = math.inf,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> Iterator[int]:
        """The attempt numbers (from 1) of a loop whose outcome is not an exception (a partial
        answer, a refused compare-and-set, a claim still held): the loop body breaks or returns
        when done; between attempts this waits :meth:`delay`, and it stops at ``attempts`` or when
        the wait would pass ``deadline``.

        Example:
            >>> list(RetryPolicy(attempts=3, base_delay=0).tries())
            [1, 2, 3]
        """
        sleep = sleep or time.sleep
        clock = clock or time.monotonic
        attempt = 1
        while True:
            yield attempt
            if self.attempts is not None and attempt >= self.attempts:
                return
            wait = self.delay(attempt)
            if clock() + wait >= deadline:
                return
            if wait > 0:
                sleep(wait)
            attempt += 1


#: Reports and extensions: a few quick tries inside one invocation.
CALLS = RetryPolicy(attempts=4, base_delay=0.25, max_delay=4.0)
#: A delivery held until it is acknowledged or handed back (StageNext's: lease acquire, the ack of
#: one acquire refused, its requeue): not dropped after a few quick tries, which left it to the
#: gateway's requeue a minute later and ended a local run early, but tried through an outage, 0.5 s
#: doubling to 4 s (or Retry-After), until the engine takes the delivery back on its own
#: (:meth:`workerless._core.lease.LeasePolicy.returned_at`: StageNext's 60 s visibility timeout) or the
#: invocation's deadline (:mod:`workerless._core.settlement`).
HELD = RetryPolicy(attempts=None, base_delay=0.5, max_delay=4.0)
#: Reading the routes from Parameter Store (once per poller container): botocore already retries a
#: throttle four times; these are a few more, spaced out, within the invocation's deadline.
PARAMETERS = RetryPolicy(attempts=3, base_delay=0.5, max_delay=4.0)
#: A job-record write after botocore gave up: tried again until the invocation's AWS deadline, not
#: a fixed number of times (a lost store costs a second run of the job), 0.2 s more per attempt up
#: to 2 s.
STORE_WRITES = RetryPolicy(attempts=None, base_delay=0.2, max_delay=2.0, backoff="linear", jitter=False)
#: Reading the engine secret (once per container, again on rotation): botocore already retried a
#: throttle or a 5xx four times; two more, spaced out, within the invocation's AWS deadline, before
#: the read fails as retryable (the batch comes back; nothing is reported final).
SECRETS = RetryPolicy(attempts=3, base_delay=0.5, max_delay=2.0)
#: BatchGetItem's UnprocessedKeys (DynamoDB's answer under throttling): five tries, 50 ms doubling
#: to at most 1 s, within the AWS deadline.
UNPROCESSED = RetryPolicy(attempts=5, base_delay=0.05, max_delay=1.0, jitter=False)
#: StageNext: while another container rotates the shared worker session, re-read it every 0.25 s,
#: 12 times (~3 s), then raise a retryable AuthExpiredError for :data:`CALLS` to try again.
SESSION_WAIT = RetryPolicy(attempts=12, base_delay=0.25, max_delay=0.25, backoff="linear", jitter=False)
#: The poller lock item's compare-and-set: a write refused by a concurrent one is made again on
#: what that one wrote, at once (the other writer is done, there is nothing to wait for), 5 times.
COMPARE_AND_SET = RetryPolicy(attempts=5, base_delay=0.0, max_delay=0.0, jitter=False)
#: A batch of task-log lines (node-flow): a retryable refusal (429/502/503 once, a dropped
#: connection) is not a reason to lose the lines explaining a task, so three tries, 0.5 s doubling
#: (or Retry-After), all of one send_logs call within LOG_SEND_SECONDS and the invocation's deadline;
#: then the lines are dropped (a log line must never fail the task it describes).
LOG_SENDS = RetryPolicy(attempts=3, base_delay=0.5, max_delay=2.0)
LOG_SEND_SECONDS = 6.0
#: After a failed poll: 1 s for a retryable failure (or Retry-After), 5 s for a final one; each
#: further failure in a row in one invocation doubles the wait, up to POLL_BACKOFF_MAX (an engine
#: that is down is not asked every second until the invocation's budget runs out).
POLL_BACKOFF_RETRYABLE = 1.0
POLL_BACKOFF_FINAL = 5.0
POLL_BACKOFF_MAX = 8.0


def poll_backoff(wait: float, failures_in_a_row: int) -> float:
    """The wait after the ``failures_in_a_row``-th failed poll in a row (1-based), whose own wait
    (its kind's, or the engine's Retry-After) is ``wait``: doubled per earlier failure, capped at
    :data:`POLL_BACKOFF_MAX`, never under ``wait`` (a longer Retry-After is honoured)."""
    grown: float = POLL_BACKOFF_RETRYABLE * 2.0 ** max(0, failures_in_a_row - 1)
    return max(wait, min(POLL_BACKOFF_MAX, grown))
