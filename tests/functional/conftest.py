"""Fixtures shared by the functional tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from workerless import observability, runtime
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws, moto_aws
from tests.functional.pipeline import Events


@pytest.fixture
def events() -> Iterator[Events]:
    """Every lifecycle event the pipeline records while the test runs: (job type, event, fields)."""
    seen: Events = []

    def listener(job_type: str, event: str, fields: dict[str, Any]) -> None:
        seen.append((job_type, event, fields))

    observability.add_listener(listener)
    yield seen
    observability.remove_listener(listener)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    """moto's SQS and DynamoDB with the pipeline's queues and table, routes allowing 4 in flight.
    A 5 s lease puts each heartbeat ticket about a second out: tests read it without long waits."""
    monkeypatch.setenv("WORKERLESS_LEASE_SECONDS", "5")
    with moto_aws(monkeypatch, max_in_flight=4) as env:
        yield env


@pytest.fixture
def engine(aws: Aws) -> FakeEngine:
    """An in-memory engine the pipeline's functions use instead of building an adapter: the
    container's wiring is one built around it (store, queues and the rest from the environment)."""
    fake = FakeEngine()
    runtime.reset(Wiring(engine=fake))
    return fake
