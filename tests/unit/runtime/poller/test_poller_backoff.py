"""With nothing listening at the engine URL (issue 27, 5): the poller's back-off grows while polls
keep failing (1, 2, 4, 8 s, capped), so an invocation asks a dead engine a handful of times, not
once a second until its budget runs out; a success resets it; a longer Retry-After is honoured."""

from __future__ import annotations

from typing import Any

import pytest
from workerless._core.retry import POLL_BACKOFF_MAX, poll_backoff
from workerless._poller.poller import Poller
from workerless.errors import RetryableEngineError
from workerless.testing import FakeEngine

from tests.fakes import Clock
from tests.unit.runtime.poller.test_poller_linger import Queues, settings


class DownEngine(FakeEngine):
    """Refuses the first ``failures`` activations as a connection error would (retryable)."""

    def __init__(self, failures: int, retry_after: float | None = None) -> None:
        super().__init__()
        self.failures = failures
        self.retry_after = retry_after
        self.calls = 0

    def activate(self, demands: Any, lease_seconds: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise RetryableEngineError("activate failed: ConnectError", engine="fake", retry_after=self.retry_after)
        return super().activate(demands, lease_seconds)


def test_the_backoff_doubles_while_polls_keep_failing_and_is_capped() -> None:
    engine, clock = DownEngine(failures=100), Clock(0.0)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.sleep(seconds)

    report = Poller(settings(budget=60.0), engine, Queues(), clock=clock, sleep=sleep).run(deadline=1000.0)

    assert slept[:5] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert max(slept) == POLL_BACKOFF_MAX
    # One invocation of a 60 s budget asks a dead engine about 9 times, not about 60.
    assert report.errors == engine.calls == len(slept) + 1
    assert engine.calls <= 10


def test_a_successful_poll_resets_the_backoff() -> None:
    engine, clock = DownEngine(failures=3), Clock(0.0)
    engine.add_job("charge-payment", {"n": 1})
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.sleep(seconds)

    report = Poller(settings(budget=60.0), engine, Queues(), clock=clock, sleep=sleep).run(deadline=1000.0)

    assert slept == [1.0, 2.0, 4.0]
    assert report.dispatched == 1


@pytest.mark.parametrize(
    ("wait", "n", "expected"), [(1.0, 1, 1.0), (1.0, 3, 4.0), (1.0, 9, 8.0), (30.0, 1, 30.0), (5.0, 2, 5.0)]
)
def test_poll_backoff(wait: float, n: int, expected: float) -> None:
    assert poll_backoff(wait, n) == expected
