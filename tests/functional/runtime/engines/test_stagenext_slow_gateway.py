"""A slow StageNext gateway (issue 26, 2.8): every call answered late, on the emulator's virtual
clock (each pull moves it on 1.5 s), so nothing here waits on the wall clock."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from workerless._core.model import Demand
from workerless.engines.stagenext import StageNextEngine, from_values
from workerless.engines.stagenext.config import PULL_BUDGET_SECONDS
from workerless_devkit.emulators.stagenext import StageNextEmulator
from workerless_devkit.pytest_plugin import EmulatorFactory

PULL_SECONDS = 1.5


@pytest.fixture
def emu_and_engine(workerless_emulator: EmulatorFactory) -> Iterator[tuple[StageNextEmulator, StageNextEngine]]:
    running = workerless_emulator("stagenext")
    emulator = running.emulator
    emulator.reset(handler_patterns=("billing-*",))

    def slow_pull(request: httpx.Request) -> None:
        if request.url.path.endswith("/jobs/pull"):
            emulator.advance(PULL_SECONDS)  # the gateway answers this pull 1.5 s late

    with httpx.Client(timeout=5, event_hooks={"request": [slow_pull]}) as client:
        yield emulator, from_values(emulator.engine_values(running.server.url), client, clock=emulator.now)


def test_a_slow_gateway_does_not_hold_pulled_deliveries_back_from_dispatch(
    emu_and_engine: tuple[StageNextEmulator, StageNextEngine],
) -> None:
    """GIVEN 10 stages and capacity for 10, every pull answered 1.5 s late
    THEN one activate returns after the pull budget with what it pulled (dispatched now), and the
    rest stay at the engine for the next poll, not pulled one by one for 15 s before any runs."""
    emu, engine = emu_and_engine
    for _ in range(10):
        emu.create_job("billing-charge", {})
    first = engine.activate([Demand("billing-charge", 10)], lease_seconds=60)
    expected = int(PULL_BUDGET_SECONDS // PULL_SECONDS) + 1
    assert len(first) == expected
    assert first[-1].activated_at - first[0].activated_at < PULL_BUDGET_SECONDS
    rest: list[str] = []
    for _ in range(10):  # the next polls take the rest, a budget's worth each
        got = engine.activate([Demand("billing-charge", 10)], lease_seconds=60)
        if not got:
            break
        assert len(got) <= expected
        rest.extend(job.ref.job_id for job in got)
    assert len({job.ref.job_id for job in first} | set(rest)) == 10
