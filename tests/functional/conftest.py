"""Fixtures shared by the functional tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from workerless import runtime
from workerless.testing import FakeEngine
from workerless.wiring import Hooks, Wiring

from tests.functional.aws import Aws, moto_aws
from tests.functional.pipeline import Events


@pytest.fixture
def events(container: None) -> Events:
    """The lifecycle events of the runs it is given to as a listener (a local topology's
    ``listeners``), and of the container's wiring, installed here with it as its listener (closed
    after the test, by ``container``): (job type, event, fields)."""
    seen = Events()
    runtime.reset(Wiring(hooks=Hooks(lifecycle_listeners=(seen,))))
    return seen


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    """moto's SQS and DynamoDB with the pipeline's queues and table, routes allowing 4 in flight.
    A 5 s lease puts each heartbeat ticket about a second out: tests read it without long waits."""
    monkeypatch.setenv("WORKERLESS_LEASE_SECONDS", "5")
    with moto_aws(monkeypatch, max_in_flight=4) as env:
        yield env


@pytest.fixture
def engine(aws: Aws, events: Events) -> FakeEngine:
    """An in-memory engine the pipeline's functions use instead of building an adapter: the
    container's wiring is one built around it (store, queues and the rest from the environment), with
    :func:`events`' listener."""
    fake = FakeEngine()
    runtime.reset(Wiring(engine=fake, hooks=Hooks(lifecycle_listeners=(events,))))
    return fake
