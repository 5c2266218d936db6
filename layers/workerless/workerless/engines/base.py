"""The engine seam: a core Protocol every engine adapter implements, the optional capabilities an
engine may have besides (each None where it has not), and the shared state some adapters keep
across containers. The pieces the adapters share (URL rules, timestamps, the
translation of HTTP answers into the error hierarchy, tokens, redaction) are in
:mod:`workerless.engines.kit`.

The poller, handler wrapper and heartbeat only talk to :class:`Engine`; they never branch on which
engine it is. What only some engines have, they ask for by capability: :attr:`Engine.lease_acquire`
(:class:`LeaseAcquire`: StageNext), :attr:`Engine.task_logs` (:class:`TaskLogs`: node-flow) and
:attr:`Engine.liveness` (:class:`Liveness`: StageNext), each None on an engine without it, so no
engine carries no-op methods for another engine's needs. Each adapter takes an injected
``httpx.Client`` whose timeouts are shorter than the Lambda's, so a hung engine call can never
outlive the invocation that made it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from workerless._core.lease import LeasePolicy
from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome

# The shared translation and checks live in the engine kit; re-exported here, where the adapters
# and tests have always found them.
from workerless.engines.kit import (
    describe,
    error_for_response,
    error_for_transport,
    is_loopback,
    json_size,
    parse_problem,
    parse_retry_after,
)
from workerless.errors import ConfigurationError

__all__ = [
    "Engine",
    "LeaseAcquire",
    "Liveness",
    "MemoryState",
    "SharedState",
    "TaskLogs",
    "describe",
    "error_for_response",
    "error_for_transport",
    "is_loopback",
    "json_size",
    "parse_problem",
    "parse_retry_after",
    "require_lease_acquire",
]


class LeaseAcquire(Protocol):
    """An engine whose lease starts when a handler acquires it, not at activation (StageNext lease
    acquire): what a :class:`~workerless._core.lease.BeginLease` needs."""

    def begin(self, job: ActivatedJob) -> bool:
        """Called by the handler before running user code. False: this delivery must not run
        (StageNext lease acquire answered acquired=false / lease_held); acknowledge it with
        :meth:`skip`."""
        ...

    def skip(self, ref: JobRef) -> None:
        """Acknowledge a delivery that must not run (StageNext ack): only a delivery whose lease
        acquire was refused — acknowledged otherwise, without a result StageNext applies, its stage
        would never be dispatched again (hand it back with :meth:`Engine.release` instead)."""
        ...


class TaskLogs(Protocol):
    """An engine that keeps a log per task (node-flow): the handler's log lines go there too."""

    def send_logs(self, ref: JobRef, lines: Sequence[Mapping[str, Any]]) -> None:
        """Send handler log lines to the engine. Must never raise for a failed send: losing a log
        line must not fail the job."""
        ...


class Liveness(Protocol):
    """An engine that wants to hear from its workers after each poll cycle (StageNext's worker
    liveness and lifecycle events)."""

    def after_cycle(self, counters: Mapping[str, int]) -> None:
        """Called by the poller after each cycle with its counters (polls, activated, capacity).
        Must not raise."""
        ...


def require_lease_acquire(engine: Engine) -> LeaseAcquire:
    """``engine``'s lease acquire, where its lease policy needs one (the lease is not held until
    acquired). An engine whose policy needs it and that has none is a wiring fault, named here
    rather than met as an AttributeError mid-delivery."""
    acquire = engine.lease_acquire
    if acquire is None:
        raise ConfigurationError(
            f"engine {engine.name!r} leases at begin ({type(engine.lease).__name__}) and has no lease_acquire",
            key="WORKERLESS_ENGINE",
        )
    return acquire


@runtime_checkable
class Engine(Protocol):
    """What the pipeline needs from a workflow engine.

    Example:
        >>> from workerless._core.model import Demand, Outcome
        >>> from workerless.testing import FakeEngine
        >>> engine: Engine = FakeEngine()  # or build_engine("sheptra", values, client)
        >>> job_id = engine.add_job("charge-payment", {"amount": 5})
        >>> jobs = engine.activate([Demand("charge-payment", 10)], lease_seconds=60)
        >>> engine.report(jobs[0].ref, Outcome.complete({"paymentOk": True}))
        >>> engine.reports[job_id][-1].kind
        'complete'
    """

    # Read-only properties, not ClassVars: an adapter declares them on its class, and a decorator
    # (workerless._core.observer.ObservedEngine, the devkit's ChaosEngine) answers with its inner engine's.
    @property
    def name(self) -> str:
        """The engine's name (``WORKERLESS_ENGINE``)."""
        ...

    @property
    def lease(self) -> LeasePolicy:
        """How this engine's lease works (:mod:`workerless._core.lease`): leased at activation (Sheptra,
        node-flow: the heartbeat extends jobs still waiting in SQS) or at :attr:`lease_acquire` (StageNext:
        lease acquire in the handler; the heartbeat renews only jobs whose handler has begun), and
        the lease length where the engine sets it."""
        ...

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        """Take at most ``demand.capacity`` jobs for each demand, with a short poll (never wait).

        Returns only jobs of the demanded types. Where the engine takes several types in one call
        (Sheptra ``types``) it makes one call; otherwise one per demand with capacity > 0.
        """
        ...

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        """Extend the lease; return the new expiry (epoch seconds). LeaseLostError if it is gone."""
        ...

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        """Report the stored outcome. LeaseLostError means someone else finished the job."""
        ...

    def release(self, job: ActivatedJob, reason: str) -> None:
        """Hand a job back at once (dispatch failed): fail with retries unchanged and no backoff,
        or the engine's own release, so the job does not wait out a whole lease."""
        ...

    # The optional capabilities: None where the engine has not got one. The pipeline asks for one
    # where it needs it, never for the engine's name.
    @property
    def lease_acquire(self) -> LeaseAcquire | None:
        """Lease acquire before the run, where the lease starts then (StageNext; its lease policy is a
        :class:`~workerless._core.lease.BeginLease`); None where the lease starts at activation."""
        ...

    @property
    def task_logs(self) -> TaskLogs | None:
        """Where the handler's log lines go besides CloudWatch (node-flow's task log); None: nowhere."""
        ...

    @property
    def liveness(self) -> Liveness | None:
        """What the poller tells after each cycle (StageNext's worker liveness); None: nothing."""
        ...

    def close(self) -> None:
        """Release anything held (worker sessions: StageNext /workers/shutdown in local mode)."""
        ...


@runtime_checkable
class SharedState(Protocol):
    """A small versioned key-value store shared by every function of a deployment (the DynamoDB
    jobs table in AWS, a dict in tests). Adapters that hold engine-side state across Lambda
    containers (StageNext's worker session) keep it here.

    ``put`` is a compare-and-set: it writes only when the stored item's ``version`` equals
    ``expected_version`` (None: only when no item exists) and returns whether it wrote.
    """

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any], *, expected_version: int | None) -> bool: ...


class MemoryState:
    """In-process :class:`SharedState` (tests, benchmarks, a single local process)."""

    def __init__(self) -> None:
        import threading

        self._items: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            item = self._items.get(key)
            return dict(item) if item is not None else None

    def put(self, key: str, value: dict[str, Any], *, expected_version: int | None) -> bool:
        with self._lock:
            current = self._items.get(key)
            current_version = None if current is None else current.get("version")
            if current_version != expected_version:
                return False
            self._items[key] = {**value, "version": (expected_version or 0) + 1}
            return True
