"""workerless._core.retry: every retry loop of the runtime as a policy with a deadline (virtual clocks,
no sleeping)."""

from __future__ import annotations

import pytest
from workerless._core.retry import (
    CALLS,
    COMPARE_AND_SET,
    SESSION_WAIT,
    STORE_WRITES,
    UNPROCESSED,
    RetryPolicy,
    retryable_store_error,
)
from workerless.errors import EngineUnavailableError, RejectedError, StoreError


class VirtualTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_store_writes_are_tried_again_until_the_deadline_not_a_fixed_count() -> None:
    time = VirtualTime()
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        raise StoreError("throttled")

    with pytest.raises(StoreError):
        STORE_WRITES.call(write, deadline=30.0, sleep=time.sleep, clock=time.clock, retryable=retryable_store_error)
    assert time.sleeps[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert max(time.sleeps) == 2.0
    assert time.now < 30.0 and len(calls) == len(time.sleeps) + 1


def test_a_final_store_error_is_not_retried() -> None:
    time = VirtualTime()
    with pytest.raises(StoreError):
        STORE_WRITES.call(
            lambda: (_ for _ in ()).throw(StoreError("denied", retryable=False)),
            deadline=10.0,
            sleep=time.sleep,
            clock=time.clock,
            retryable=retryable_store_error,
        )
    assert time.sleeps == []


def test_engine_calls_stop_at_their_attempts_or_the_deadline() -> None:
    time = VirtualTime()
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise EngineUnavailableError("down", engine="e")

    with pytest.raises(EngineUnavailableError):
        CALLS.call(call, deadline=1000.0, sleep=time.sleep, clock=time.clock)
    assert len(calls) == CALLS.attempts
    calls.clear()
    with pytest.raises(EngineUnavailableError):
        CALLS.call(call, deadline=0.1, sleep=time.sleep, clock=time.clock)
    assert len(calls) == 1, "no wait may pass the deadline"
    with pytest.raises(RejectedError):
        CALLS.call(lambda: (_ for _ in ()).throw(RejectedError("no", engine="e")), deadline=1000.0)


def test_tries_bounds_loops_that_do_not_raise() -> None:
    time = VirtualTime()
    assert list(UNPROCESSED.tries(sleep=time.sleep, clock=time.clock)) == [1, 2, 3, 4, 5]
    assert time.sleeps == pytest.approx([0.05, 0.1, 0.2, 0.4])
    time = VirtualTime()
    assert len(list(SESSION_WAIT.tries(sleep=time.sleep, clock=time.clock))) == 12
    assert set(time.sleeps) == {0.25}
    time = VirtualTime()
    assert list(COMPARE_AND_SET.tries(sleep=time.sleep, clock=time.clock)) == [1, 2, 3, 4, 5]
    assert time.sleeps == [], "a refused compare-and-set is made again at once"
    time = VirtualTime()
    assert list(UNPROCESSED.tries(deadline=0.2, sleep=time.sleep, clock=time.clock)) == [1, 2, 3]


def test_retry_after_wins_over_the_backoff() -> None:
    error = EngineUnavailableError("x", engine="e", retry_after=7.0)
    assert RetryPolicy(attempts=3).delay(1, error) == 7.0
