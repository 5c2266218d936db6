"""The engine contract: what the poller, handler wrapper and heartbeat rely on from EVERY adapter.

Written only against the :class:`~workerless.engines.base.Engine` Protocol and the common emulator
shape (started by the ``workerless_emulator`` fixture; ``engine_values()``, ``create_job()``, ``job_state()``,
``advance()``, the ``/_admin/stats`` surface), so a new engine joins by adding its name to
:data:`CONTRACT_ENGINES` — its adapter is ``workerless.engines.<name>`` and its emulator
``workerless_devkit.emulators.<name>``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from workerless._core.lease import LeasePolicy
from workerless._core.model import ActivatedJob, Demand, Outcome
from workerless.engines import ENGINE_NAMES, build_engine
from workerless.engines.base import Engine, MemoryState
from workerless.errors import LeaseLostError, PayloadTooLargeError
from workerless_devkit.pytest_plugin import EmulatorFactory

#: Engines held to this contract. The node-flow and StageNext engineers extend this list.
CONTRACT_ENGINES: list[str] = list(ENGINE_NAMES)

LEASE = 30
#: Over every engine's documented cap on a completion (Sheptra 1 MiB of variables, StageNext a
#: 256 KiB result; node-flow documents none) and under the emulators' 16 MiB request limit.
OVER_CAP_BYTES = 4 * 1024 * 1024
#: Bound on "poll again while work keeps coming" loops.
MAX_POLLS = 20


@dataclass
class Served:
    """One engine's emulator on loopback, and the adapters built against it."""

    name: str
    emu: Any
    server: Any
    clients: list[httpx.Client] = field(default_factory=list)
    engines: list[Engine] = field(default_factory=list)

    def engine(self, worker_id: str = "w1") -> Engine:
        client = httpx.Client(timeout=5)
        self.clients.append(client)
        engine = build_engine(
            self.name, self.emu.engine_values(self.server.url), client, worker_id=worker_id, state=MemoryState()
        )
        self.engines.append(engine)
        return engine

    def requests_served(self) -> int:
        stats = httpx.get(self.server.url + "/_admin/stats", timeout=5).json()["requests"]
        return sum(int(n) for n in stats.values())


@pytest.fixture(params=CONTRACT_ENGINES)
def served(request: pytest.FixtureRequest, workerless_emulator: EmulatorFactory) -> Iterator[Served]:
    name: str = request.param
    running = workerless_emulator(name)
    served = Served(name, running.emulator, running.server)
    try:
        yield served
    finally:
        for engine in served.engines:
            engine.close()
        for client in served.clients:
            client.close()


def activate_until(engine: Engine, demands: Sequence[Demand], count: int) -> list[ActivatedJob]:
    """Activate as the poller does — again while work keeps coming — until ``count`` jobs came or
    a poll came back empty (bounded by MAX_POLLS)."""
    jobs: list[ActivatedJob] = []
    for _ in range(MAX_POLLS):
        batch = engine.activate(demands, LEASE)
        jobs.extend(batch)
        if not batch or len(jobs) >= count:
            break
    return jobs


def one_job(served: Served, engine: Engine, variables: dict[str, Any] | None = None) -> tuple[str, ActivatedJob]:
    job_id = served.emu.create_job("contract-a", variables or {"n": 1}, retries=3)
    [job] = activate_until(engine, [Demand("contract-a", 1)], 1)
    assert began(engine, job) is True
    return job_id, job


def began(engine: Engine, job: ActivatedJob) -> bool:
    """Whether ``job``'s delivery may run, as a handler asks: lease acquire where the engine has
    it; granted at activation otherwise."""
    acquire = engine.lease_acquire
    return acquire is None or acquire.begin(job)


def retries_left(job: ActivatedJob) -> int:
    return job.retries - 1 if job.retries is not None else 2


# ---- activation -------------------------------------------------------------------------------


def test_engine_satisfies_the_protocol(served: Served) -> None:
    engine = served.engine()
    assert isinstance(engine, Engine)
    assert engine.name == served.name
    assert isinstance(engine.lease, LeasePolicy)


def test_capabilities_match_the_lease_policy(served: Served) -> None:
    """GIVEN each engine WHEN the pipeline asks for its optional capabilities THEN each is None or
    has its calls, and an engine whose lease is not held until acquired has lease acquire (the
    delivery, the dead-letter function and the poller call it there)."""
    engine = served.engine()
    acquire, logs, liveness = engine.lease_acquire, engine.task_logs, engine.liveness
    assert acquire is None or (callable(acquire.begin) and callable(acquire.skip))
    assert logs is None or callable(logs.send_logs)
    assert liveness is None or callable(liveness.after_cycle)
    assert engine.lease.held(None) is (acquire is None)


def test_activate_respects_capacity_and_types(served: Served) -> None:
    """GIVEN 4 jobs of A, 3 of B and 2 of an unrouted type C WHEN the poller asks for A (room for
    2) and B (room for 1) THEN no poll hands a type more than its capacity, and C never comes."""
    engine = served.engine()
    for i in range(4):
        served.emu.create_job("contract-a", {"i": i})
    for i in range(3):
        served.emu.create_job("contract-b", {"i": i})
    unrouted = [served.emu.create_job("contract-c", {"i": i}) for i in range(2)]
    demands = [Demand("contract-a", 2), Demand("contract-b", 1)]
    seen: list[ActivatedJob] = []
    for _ in range(MAX_POLLS):
        batch = engine.activate(demands, LEASE)
        if not batch:
            break
        per_type = {t: sum(1 for j in batch if j.ref.job_type == t) for t in ("contract-a", "contract-b")}
        assert per_type["contract-a"] <= 2
        assert per_type["contract-b"] <= 1
        seen.extend(batch)
    assert {j.ref.job_type for j in seen} == {"contract-a", "contract-b"}
    assert len(seen) == 7
    assert len({j.ref.key for j in seen}) == 7
    for job_id in unrouted:
        assert served.emu.job_state(job_id)["state"] == "ready"


def test_activated_job_is_intact_and_leased_into_the_future(served: Served) -> None:
    variables = {"orderId": "2481", "amount": 4200, "nested": {"list": [1, 2.5, None, True]}, "text": "ünïcødé ✓"}
    job_id = served.emu.create_job("contract-a", variables, retries=3)
    [job] = activate_until(served.engine(), [Demand("contract-a", 5)], 1)
    assert job.ref.engine == served.name
    assert job.ref.job_id == job_id
    assert job.ref.job_type == "contract-a"
    assert job.variables == variables
    assert job.lease_expires_at > time.time()
    assert job.activated_at <= time.time() + 1
    assert served.emu.job_state(job_id)["state"] == "leased"


def test_no_capacity_sends_nothing(served: Served) -> None:
    engine = served.engine()
    served.emu.create_job("contract-a", {})
    before = served.requests_served()
    assert engine.activate([Demand("contract-a", 0), Demand("contract-b", 0)], LEASE) == []
    assert engine.activate([], LEASE) == []
    assert served.requests_served() == before


# ---- reporting ----------------------------------------------------------------------------------


def test_complete(served: Served) -> None:
    engine = served.engine()
    job_id, job = one_job(served, engine)
    engine.report(job.ref, Outcome.complete({"paymentOk": True, "receipt": "R-1"}))
    state = served.emu.job_state(job_id)
    assert state["state"] == "completed"
    assert state["output"] == {"paymentOk": True, "receipt": "R-1"}


def test_fail_with_retries_left_comes_back(served: Served) -> None:
    engine = served.engine()
    job_id, job = one_job(served, engine)
    engine.report(job.ref, Outcome.fail("transient", retries=retries_left(job), backoff_seconds=0))
    [again] = activate_until(engine, [Demand("contract-a", 1)], 1)
    assert again.variables == job.variables
    assert again.ref.key != job.ref.key  # a new attempt gets its own job record
    assert served.emu.job_state(job_id)["attempts"] == 2


def test_terminal_fail_is_failed_for_good(served: Served) -> None:
    engine = served.engine()
    job_id, job = one_job(served, engine)
    engine.report(job.ref, Outcome.fail("bad input", retries=0, terminal=True))
    assert served.emu.job_state(job_id)["state"] == "failed"
    assert engine.activate([Demand("contract-a", 1)], LEASE) == []


def test_complete_over_the_cap_is_refused(served: Served) -> None:
    """Sheptra (1 MB of variables) and StageNext (a 256 KiB result) refuse a 4 MiB completion as too
    large; node-flow's seed names no cap on a report's output, and its emulator takes it."""
    engine = served.engine()
    job_id, job = one_job(served, engine)
    if served.name == "nodeflow":
        engine.report(job.ref, Outcome.complete({"blob": "x" * OVER_CAP_BYTES}))
        assert served.emu.job_state(job_id)["state"] == "completed"
        return
    with pytest.raises(PayloadTooLargeError) as info:
        engine.report(job.ref, Outcome.complete({"blob": "x" * OVER_CAP_BYTES}))
    assert 0 < info.value.cap < OVER_CAP_BYTES
    assert served.emu.job_state(job_id)["state"] != "completed"


# ---- leases -------------------------------------------------------------------------------------


def test_extend_moves_the_expiry(served: Served) -> None:
    engine = served.engine()
    _, job = one_job(served, engine)
    served.emu.advance(10)
    expires = engine.extend(job.ref, LEASE)
    assert expires > job.lease_expires_at
    assert expires > time.time()


def test_lost_lease_after_another_worker_takes_over(served: Served) -> None:
    """GIVEN a job whose lease lapsed and that a second worker activated WHEN the first worker
    extends or reports THEN LeaseLostError on extend, the stale report is never applied, and the
    second worker's result is the one that stands."""
    first = served.engine("w1")
    job_id, job = one_job(served, first)
    # StageNext's execution lease and the gateway's redelivery timer are fixed at 60 s; the
    # others lapse at the lease the worker asked for.
    served.emu.advance(LEASE + 5 if first.lease.held(None) else 65)
    second = served.engine("w2")
    taken = take_over(second)
    assert taken.ref.job_id == job.ref.job_id or taken.variables == job.variables
    with pytest.raises(LeaseLostError):
        first.extend(job.ref, LEASE)
    if first.lease.held(None):  # leased at activation
        with pytest.raises(LeaseLostError):
            first.report(job.ref, Outcome.complete({"by": "first"}))
    else:
        # StageNext accepts any result with 202 and fences stale executions out afterwards.
        first.report(job.ref, Outcome.complete({"by": "first"}))
    second.report(taken.ref, Outcome.complete({"by": "second"}))
    state = served.emu.job_state(job_id)
    assert state["state"] == "completed"
    assert state["output"] == {"by": "second"}


def take_over(engine: Engine) -> ActivatedJob:
    """Activate and begin as a handler would: a delivery whose begin is refused (a stale StageNext
    delivery) is acknowledged without running, and the next one is tried."""
    for _ in range(MAX_POLLS):
        [candidate] = activate_until(engine, [Demand("contract-a", 1)], 1)
        if began(engine, candidate):
            return candidate
        acquire = engine.lease_acquire
        assert acquire is not None, "only lease acquire refuses a delivery"
        acquire.skip(candidate.ref)
    raise AssertionError("no delivery could begin")


def test_release_makes_the_job_activatable_at_once(served: Served) -> None:
    """The poller releases a job it could not queue, before any handler began it (node-flow, which
    has no release call: once its shortened lease, node-flow's minimum, has run out)."""
    engine = served.engine()
    job_id = served.emu.create_job("contract-a", {"n": 1}, retries=3)
    [job] = activate_until(engine, [Demand("contract-a", 1)], 1)
    engine.release(job, "could not dispatch")
    if served.name == "nodeflow":
        served.emu.advance(served.emu.lease_min_seconds)
    assert served.emu.job_state(job_id)["state"] == "ready"
    [again] = activate_until(engine, [Demand("contract-a", 1)], 1)
    assert again.variables == job.variables
