"""Lambda's concurrency as local mode keeps it (workerless_devkit.local.concurrency): the account's
limit, reservations, and the asynchronous retry of a throttled scheduled event (a virtual clock:
hours of Lambda's backoff in no time)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from workerless.errors import ConfigurationError
from workerless_devkit.local.concurrency import (
    ASYNC_MAX_RETRY_SECONDS,
    Concurrency,
    retry_delay,
    run_async,
)
from workerless_devkit.local.runtime import LocalTopology
from workerless_devkit.local.template import load_template

ROOT = Path(__file__).resolve().parents[4]


class VirtualClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.slept.append(seconds)
        self.now += seconds
        return False


def test_a_function_without_a_reservation_is_throttled_when_the_unreserved_pool_is_in_use() -> None:
    limits = Concurrency(account=110, reserved={"Heartbeat": 5, "Poller": 3})
    assert limits.unreserved == 102
    limits.occupy(101)  # a burst of other functions
    assert limits.acquire("Handler") is True
    assert limits.acquire("Handler") is False, "the account's unreserved concurrency is used up"
    assert limits.throttles["Handler"] == 1
    # The reserved functions are not touched by the burst, and are throttled past their own.
    assert all(limits.acquire("Heartbeat") for _ in range(5))
    assert limits.acquire("Heartbeat") is False
    assert limits.throttles["Heartbeat"] == 1
    limits.release("Heartbeat")
    assert limits.acquire("Heartbeat") is True
    limits.release("Handler")
    limits.occupy(0)
    assert limits.acquire("Handler") is True


def test_reservations_that_leave_less_than_100_unreserved_are_refused_as_aws_refuses_them() -> None:
    with pytest.raises(ConfigurationError, match="keeps 100 unreserved"):
        Concurrency(account=10, reserved={"PollerFunction": 3, "HeartbeatFunction": 5})
    assert Concurrency(account=10).unreserved == 10  # a new account without reservations runs


def test_the_template_reservations_reach_local_mode_and_a_new_account_needs_reserve_concurrency_false() -> None:
    template = ROOT / "template.yaml"
    reserved = {f.logical_id: f.reserved_concurrency for f in load_template(template).functions}
    assert reserved["PollerFunction"] == 3 and reserved["HeartbeatFunction"] == 5
    assert reserved["chargepaymentFunction"] is None
    with pytest.raises(ConfigurationError, match="ReserveConcurrency=false"):
        LocalTopology(template, account_concurrency=10)
    topology = LocalTopology(template, account_concurrency=10, parameters={"ReserveConcurrency": "false"})
    assert topology.concurrency.unreserved == 10 and topology.concurrency.reserved == {}


def test_lambda_backs_off_from_one_second_to_five_minutes() -> None:
    assert [retry_delay(n) for n in range(1, 11)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert retry_delay(40) == ASYNC_MAX_RETRY_SECONDS


def test_a_throttled_scheduled_event_runs_once_concurrency_frees_up() -> None:
    clock = VirtualClock()
    answers = iter([False, False, False, True])
    outcome = run_async(lambda: next(answers), 60, clock=clock, sleep=clock.sleep)
    assert outcome.ran and outcome.throttles == 3
    assert outcome.delays == (1.0, 2.0, 4.0)
    assert outcome.age == 7.0


def test_a_scheduled_event_throttled_past_its_maximum_age_is_dropped() -> None:
    """The template's MaximumEventAgeInSeconds (60 s for the poller's watchdog and the drain): Lambda
    retries after 1, 2, 4, 8 and 16 s (31 s old), and the next retry would be at 63 s: dropped."""
    clock = VirtualClock()
    attempts: list[float] = []

    def attempt() -> bool:
        attempts.append(clock.now)
        return False

    outcome = run_async(attempt, 60, clock=clock, sleep=clock.sleep)
    assert not outcome.ran
    assert outcome.delays == (1.0, 2.0, 4.0, 8.0, 16.0)
    assert len(attempts) == 6 and attempts[-1] - attempts[0] == 31.0

    # Lambda's default of 6 hours: capped at 5 minutes a retry, never past the age.
    clock = VirtualClock()
    outcome = run_async(lambda: False, 21600, clock=clock, sleep=clock.sleep)
    assert not outcome.ran
    assert max(outcome.delays) == ASYNC_MAX_RETRY_SECONDS
    assert sum(outcome.delays) <= 21600 < sum(outcome.delays) + ASYNC_MAX_RETRY_SECONDS


def test_schedule_drift_fires_within_the_interval_seeded() -> None:
    """EventBridge runs a rule within its minute, not on the second: each firing is late by a seeded
    amount under a minute (under the interval when the local schedule is faster)."""
    template = ROOT / "template.yaml"
    drifting = LocalTopology(template, schedule_drift=True, seed=3)
    steady = LocalTopology(template)
    spec = drifting.template.function("PollerFunction")
    (schedule,) = spec.schedule_events

    def delays(topology: LocalTopology, interval: float) -> list[float]:
        rng = random.Random("3:PollerFunction:Watchdog")
        return [topology._schedule_delay(spec, schedule, interval, rng) for _ in range(200)]

    minute = delays(drifting, 60.0)
    assert all(0.0 <= d < 60.0 for d in minute) and max(minute) > 30.0 and min(minute) < 30.0
    assert minute == delays(drifting, 60.0), "the same seed drifts the same way"
    assert all(0.0 <= d < 1.0 for d in delays(drifting, 1.0))
    assert set(delays(steady, 60.0)) == {0.0}
