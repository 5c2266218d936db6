"""The observer in the wiring: the engine as the pipeline calls it (failed calls counted) and an
invocation's metrics.

:class:`ObservedEngine` is a typed decorator: it implements :class:`~workerless.engines.base.Engine`
and delegates each call explicitly, so mypy checks what it forwards and a call the Protocol lacks
fails at type-check time instead of being forwarded blindly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from workerless import observability
from workerless.errors import EngineError

if TYPE_CHECKING:
    from workerless.engines.base import Engine
    from workerless.lease import LeaseModel
    from workerless.model import ActivatedJob, Demand, JobRef, Outcome
    from workerless.poller import PollReport

T = TypeVar("T")


class ObservedEngine:
    """An engine whose failing calls are counted in ``EngineErrors`` by status.

    Calls that raise an :class:`~workerless.errors.EngineError` are counted and the error re-raised
    unchanged; everything else is the adapter's own answer.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def wrapped(self) -> Engine:
        """The engine this one observes."""
        return self._engine

    @property
    def name(self) -> str:
        return self._engine.name

    @property
    def lease(self) -> LeaseModel:
        return self._engine.lease

    def _counted(self, operation: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except EngineError as exc:
            observability.engine_error(exc, operation=operation)
            raise

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        return self._counted("activate", lambda: self._engine.activate(demands, lease_seconds))

    def begin(self, job: ActivatedJob) -> bool:
        return self._counted("begin", lambda: self._engine.begin(job))

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        return self._counted("extend", lambda: self._engine.extend(ref, lease_seconds))

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        self._counted("report", lambda: self._engine.report(ref, outcome))

    def release(self, job: ActivatedJob, reason: str) -> None:
        self._counted("release", lambda: self._engine.release(job, reason))

    def skip(self, ref: JobRef) -> None:
        self._counted("skip", lambda: self._engine.skip(ref))

    def send_logs(self, ref: JobRef, lines: Sequence[Mapping[str, Any]]) -> None:
        self._counted("send_logs", lambda: self._engine.send_logs(ref, lines))

    def after_cycle(self, counters: Mapping[str, int]) -> None:
        self._counted("after_cycle", lambda: self._engine.after_cycle(counters))

    def close(self) -> None:
        self._counted("close", self._engine.close)


class Observer:
    """What the wiring's entry points observe through: the engine they call, one invocation's
    metrics, a poller invocation's counts. The lifecycle steps themselves go through
    :func:`workerless.observability.record` wherever they happen."""

    def engine(self, engine: Engine) -> Engine:
        """``engine`` as the pipeline calls it (:class:`ObservedEngine`, once)."""
        return observability.observe_engine(engine)

    def invocation(self) -> AbstractContextManager[observability.MetricsBuffer | None]:
        """Collect one invocation's metrics; written as EMF lines when it ends."""
        return observability.invocation_metrics()

    def poll_report(self, report: PollReport) -> None:
        """Count one poller invocation's report (nothing for an idle one)."""
        observability.poll_report(report)
