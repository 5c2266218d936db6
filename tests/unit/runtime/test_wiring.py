"""The composition root: a Wiring builds each piece once, uses what it is given, closes what it
holds; the container's wiring is replaced through runtime.reset; the engine decorators (the
observer's, chaos's) are typed Engines that delegate every call."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from workerless import runtime
from workerless._core.lease import ACTIVATION_LEASE
from workerless._core.model import JobRef
from workerless._core.observer import ObservedEngine, Observer
from workerless.engines.base import Engine
from workerless.errors import LeaseLostError
from workerless.testing import FakeEngine
from workerless.wiring import Wiring
from workerless_devkit.chaos.inject import ChaosEngine, ChaosState
from workerless_devkit.chaos.ledger import Ledger
from workerless_devkit.chaos.plan import FaultPlan, Recorder


class ClosingEngine(FakeEngine):
    closed = 0

    def close(self) -> None:
        ClosingEngine.closed += 1


def test_given_pieces_are_used_as_given() -> None:
    engine, queues, store, state = FakeEngine(), object(), object(), object()
    wiring = Wiring(engine=engine, queues=queues, store=store, state=state)  # type: ignore[arg-type]
    assert wiring.engine is engine
    assert wiring.queues is queues
    assert wiring.store is store
    assert wiring.state is state


def test_each_piece_is_built_once_even_from_several_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []

    class CountingQueues:
        def __init__(self, clients: object) -> None:
            built.append(self)

    monkeypatch.setattr("workerless.aws.sqs.Queues", CountingQueues)
    wiring = Wiring()
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(wiring.queues)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 1
    assert all(queues is built[0] for queues in seen)


def test_the_observed_engine_wraps_the_engine_once_and_close_closes_it() -> None:
    ClosingEngine.closed = 0
    engine = ClosingEngine()
    wiring = Wiring(engine=engine)
    observed = wiring.observed_engine
    assert isinstance(observed, ObservedEngine)
    assert observed.inner is engine
    assert wiring.observed_engine is observed
    wiring.close()
    assert ClosingEngine.closed == 1
    wiring.close()
    assert ClosingEngine.closed == 1, "closed once: the wiring forgets what it closed"


def test_set_engine_replaces_the_observed_engine_too() -> None:
    wiring = Wiring(engine=FakeEngine())
    first = wiring.observed_engine
    replacement = FakeEngine()
    wiring.set_engine(replacement)
    assert wiring.engine is replacement
    second = wiring.observed_engine
    assert second is not first
    assert isinstance(second, ObservedEngine) and second.inner is replacement


def test_an_explicit_observer_wraps_the_engine() -> None:
    wrapped: list[Engine] = []

    class CountingObserver(Observer):
        def engine(self, engine: Engine) -> Engine:
            wrapped.append(engine)
            return engine

    engine = FakeEngine()
    wiring = Wiring(engine=engine, observer=CountingObserver())
    assert wiring.observed_engine is engine
    assert wrapped == [engine]


def test_reset_installs_a_wiring_and_closes_the_one_it_replaces(container: None) -> None:
    ClosingEngine.closed = 0
    first = Wiring(engine=ClosingEngine())
    runtime.reset(first)
    assert runtime.current() is first
    assert runtime.get_engine() is first.engine
    second = Wiring(engine=FakeEngine())
    runtime.reset(second)
    assert runtime.current() is second
    assert ClosingEngine.closed == 1
    runtime.reset()
    assert runtime.current() is not second, "a fresh default wiring after a plain reset"


def test_the_engine_decorator_wraps_the_built_engine_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built = FakeEngine()
    monkeypatch.setattr("workerless.engines.build_engine", lambda *args, **kwargs: built)
    monkeypatch.setenv("WORKERLESS_ENGINE", "sheptra")
    decorated: list[Engine] = []

    def decorate(engine: Engine) -> Engine:
        decorated.append(engine)
        return ObservedEngine(engine)

    wiring = Wiring(engine_decorator=decorate, state=object())  # type: ignore[arg-type]
    try:
        engine = wiring.engine
        assert isinstance(engine, ObservedEngine) and engine.inner is built
        assert wiring.engine is engine
        assert decorated == [built]
    finally:
        wiring.close()


def test_the_observed_engine_counts_failures_and_forwards_everything() -> None:
    class Refusing(FakeEngine):
        def extend(self, ref: JobRef, lease_seconds: int) -> float:
            raise LeaseLostError("gone", engine="fake", status=409)

    engine = Refusing()
    observed = ObservedEngine(engine)
    assert isinstance(observed, Engine)
    assert (observed.name, observed.lease) == ("fake", ACTIVATION_LEASE)
    job_id = engine.add_job("charge", {})
    (job,) = observed.activate([_demand("charge")], 30)
    assert job.ref.job_id == job_id
    with pytest.raises(LeaseLostError):
        observed.extend(job.ref, 30)


def test_the_chaos_engine_is_a_typed_engine_that_delegates() -> None:
    engine = FakeEngine()
    state = ChaosState(plan=FaultPlan(seed=1), recorder=Recorder(), ledger=Ledger(), lease_seconds=30)
    chaos = ChaosEngine(engine, state)
    assert isinstance(chaos, Engine)
    assert (chaos.name, chaos.lease, chaos.inner) == ("fake", ACTIVATION_LEASE, engine)
    job_id = engine.add_job("charge", {})
    (job,) = chaos.activate([_demand("charge")], 30)
    assert chaos.state.activations == {job_id: [job.ref.key]}


def _demand(job_type: str) -> Any:
    from workerless._core.model import Demand

    return Demand(job_type, 1)


def test_each_wiring_s_lifecycle_listeners_hear_only_its_own_invocations() -> None:
    """The hooks' lifecycle listeners are the wiring's (no process-wide list): an invocation opened
    by a wiring's observer (as every entry point opens one) is heard by that wiring's listeners only,
    on the threads the pipeline starts for it too, and by none once it ends."""
    from workerless._core.threads import map_in_threads
    from workerless.observability import Lifecycle, emit
    from workerless.wiring import Hooks

    heard: dict[str, list[tuple[str, str]]] = {"a": [], "b": []}

    def listener(name: str) -> Any:
        return lambda job_type, event, fields: heard[name].append((job_type, str(event)))

    def failing(job_type: str, event: str, fields: dict[str, Any]) -> None:
        raise RuntimeError("a listener's own bug")

    a = Wiring(engine=FakeEngine(), hooks=Hooks(lifecycle_listeners=(failing, listener("a"))))
    b = Wiring(engine=FakeEngine(), hooks=Hooks(lifecycle_listeners=(listener("b"),)))
    emit("outside", Lifecycle.STARTED)
    with a.observer.invocation():
        emit("charge", Lifecycle.STARTED)
        map_in_threads(lambda n: emit(f"thread-{n}", Lifecycle.COMPLETED), [1, 2], max_workers=2)
        with b.observer.invocation():
            emit("receipt", Lifecycle.ACTIVATED)
        emit("charge", Lifecycle.FAILED)
    emit("after", Lifecycle.STARTED)

    assert sorted(heard["a"]) == [
        ("charge", "failed"),
        ("charge", "started"),
        ("thread-1", "completed"),
        ("thread-2", "completed"),
    ]
    assert heard["b"] == [("receipt", "activated")]


def test_the_hooks_engine_part_guards_and_watches_the_engine_client() -> None:
    from workerless.wiring import Hooks

    def guard() -> None:
        raise RuntimeError("refused")

    hooks = Hooks(request_guards=(guard,), response_watchers=(print,), lifecycle_listeners=())
    engine_hooks = hooks.engine()
    assert engine_hooks.request_guards == (guard,) and engine_hooks.response_watchers == (print,)
    with pytest.raises(RuntimeError, match="refused"):
        engine_hooks.before_request(None)  # type: ignore[arg-type]
